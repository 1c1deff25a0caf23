"""CPU dense GEMM through a CBLAS called with ctypes: Intel oneMKL (the ``mkl`` wheel) or the
OpenBLAS that numpy 2.x wheels bundle (``numpy.libs/libscipy_openblas64_*``: ``scipy_cblas_sgemm64_``,
ILP64 sizes), both with ``beta=1`` accumulation and no Python-side temporaries. Dense GEMM is the
one place sciml may route around Taichi on CPU; everything else stays a kernel.

Measured (2 vCPUs, float32, the 8 GEMMs of the W1 step; `python -m benchmarks.bench_blas`): on an
Intel Xeon with AVX-512, numpy's OpenBLAS 3.8 ms, MKL 2.6 ms (the same library PyTorch links);
on an AMD EPYC (Zen 4), MKL 5.2-5.4 ms, OpenBLAS via ctypes 4.95 ms, numpy's matmul 4.9 ms, torch
5.5-5.7 ms (with ``+=``, the JVP's second GEMM: ctypes 4.4 ms, numpy's matmul + add 4.8-4.95 ms).

Selection: env ``SCIML_BLAS`` = ``auto`` (default: MKL on a CPU whose vendor_id is GenuineIntel
when MKL is found, otherwise numpy's OpenBLAS via ctypes if found, otherwise MKL if found,
otherwise numpy's matmul), ``mkl`` / ``openblas`` (error if missing), ``numpy``.
``SCIML_MKL_LIB`` / ``SCIML_OPENBLAS_LIB`` name a library file explicitly. ``name()`` says which.

OpenBLAS threads are its own (pthreads; the instance numpy uses, so threadpoolctl sees the same
count); ``threads(n)`` / ``set_threads(n)`` set its process-wide count (it has no per-thread one).

MKL threads (``SCIML_GEMM_THREADS``, MKL only): "omp" (default) keeps MKL's OpenMP threads; "split" loads MKL
sequential (no OpenMP runtime) and cuts each GEMM of at least ``SPLIT_MIN`` multiply-adds in two
halves, the second on one worker thread that blocks between calls. Measured here (idle machine,
09:10 UTC, interleaved runs): W1 step 4.62-4.76 ms "omp" vs 5.56 ms "split", W4a HVP 12.3 vs 15.0
ms, W4b Hessian 11.6 vs 13.6 ms; the 8 W1 GEMMs alone 2.63 vs 3.32 ms (torch 2.53). On a loaded
machine (other processes holding a core) "split" was better: W1 8.1-10.3 vs 11.6-15.8 ms, since
MKL's OpenMP threads spin (KMP_BLOCKTIME, 200 ms) and wait for a descheduled partner. Inside a
batched-tangent pass MKL runs single-threaded (``threads(1)``: many small GEMMs).
``threads(n)`` / ``set_threads(n)`` limit the GEMM threads (1: no split).

Other libraries: MKL's runtime makes its symbols global when it loads (at sciml's first CPU GEMM).
A library with its own MKL imported after that (PyTorch's is static) binds its MKL calls to this
one (with "split", ``torch.get_num_threads()`` then reports 1). Import such libraries first, or
set ``SCIML_BLAS=numpy`` or ``openblas``. (Loading MKL in a private namespace with ``dlmopen``
crashed here.)
"""
import ctypes
import glob
import os
import sys

from ._common import address as _address
from ._common import busy as _busy

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_SEQUENTIAL = 1  # MKL_THREADING_SEQUENTIAL
SPLIT_MIN = 1 << 22  # m*n*k from which a GEMM is split in two halves on two threads ("split" mode)
_state = {"lib": None, "checked": False, "error": None, "mode": None, "pool": None, "nosplit": False}


def _candidates():
    env = os.environ.get("SCIML_MKL_LIB")
    if env:
        yield env
    roots = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(sys.executable))}
    for r in roots:
        for pat in ("lib/libmkl_rt.so*", "Library/bin/mkl_rt*.dll", "lib/libmkl_rt*.dylib"):
            yield from sorted(glob.glob(os.path.join(r, pat)), reverse=True)
    import ctypes.util
    found = ctypes.util.find_library("mkl_rt")
    if found:
        yield found


def _mode():
    m = os.environ.get("SCIML_GEMM_THREADS", "omp").strip().lower()
    if m not in ("split", "omp"):
        raise ValueError(f"SCIML_GEMM_THREADS: expected 'split' or 'omp', got {m!r}")
    return m


def _load():
    os.environ.setdefault("KMP_WARNINGS", "0")
    mode = _mode()
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            lib.cblas_sgemm, lib.cblas_dgemm  # noqa: B018  (both symbols must exist)
        except (OSError, AttributeError) as e:
            errors.append(f"{path}: {e}")
            continue
        i, p = ctypes.c_int, ctypes.c_void_p
        lib.cblas_sgemm.argtypes = [i, i, i, i, i, i, ctypes.c_float, p, i, p, i, ctypes.c_float, p, i]
        lib.cblas_dgemm.argtypes = [i, i, i, i, i, i, ctypes.c_double, p, i, p, i, ctypes.c_double, p, i]
        lib.cblas_sgemm.restype = lib.cblas_dgemm.restype = None
        lib.MKL_Set_Num_Threads_Local.argtypes = [i]
        lib.MKL_Set_Num_Threads_Local.restype = i
        lib.MKL_Set_Num_Threads.argtypes = [i]
        lib.MKL_Set_Num_Threads.restype = None
        lib.MKL_Get_Max_Threads.restype = i
        if mode == "split":  # no OpenMP runtime at all: sciml runs the two halves of a large GEMM itself
            lib.MKL_Set_Threading_Layer.argtypes = [i]
            lib.MKL_Set_Threading_Layer.restype = i
            lib.MKL_Set_Threading_Layer(_SEQUENTIAL)
        _state["mode"] = mode
        lib.sciml_path = path
        return lib
    _state["error"] = "; ".join(errors) or "libmkl_rt not found (pip install mkl)"
    return None


def _openblas_candidates():
    env = os.environ.get("SCIML_OPENBLAS_LIB")
    if env:
        yield env
    try:
        import numpy
    except ImportError:  # pragma: no cover
        return
    d = os.path.dirname(os.path.abspath(numpy.__file__))
    for pat in (os.path.join(d, "..", "numpy.libs", "libscipy_openblas*.so*"),  # Linux wheels
                os.path.join(d, "..", "numpy.libs", "libscipy_openblas*.dll"),  # Windows
                os.path.join(d, ".dylibs", "libscipy_openblas*.dylib")):  # macOS
        yield from sorted(glob.glob(pat))


def _load_openblas():
    """numpy's bundled OpenBLAS (the same library instance numpy's matmul uses; its symbols carry
    a ``scipy_`` prefix and, in the ILP64 build of the wheels, a ``64_`` suffix and int64 sizes)."""
    errors = []
    for path in _openblas_candidates():
        path = os.path.realpath(path)
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        for sfx, blasint in (("64_", ctypes.c_int64), ("", ctypes.c_int)):
            try:
                sg, dg = getattr(lib, f"scipy_cblas_sgemm{sfx}"), getattr(lib, f"scipy_cblas_dgemm{sfx}")
                setn, getn = (getattr(lib, f"scipy_openblas_set_num_threads{sfx}"),
                              getattr(lib, f"scipy_openblas_get_num_threads{sfx}"))
            except AttributeError:
                continue
            break
        else:
            errors.append(f"{path}: no scipy_cblas_sgemm64_ / scipy_cblas_sgemm")
            continue
        i, b, p = ctypes.c_int, blasint, ctypes.c_void_p  # order/trans: C enums (int); sizes: blasint
        sg.argtypes = [i, i, i, b, b, b, ctypes.c_float, p, b, p, b, ctypes.c_float, p, b]
        dg.argtypes = [i, i, i, b, b, b, ctypes.c_double, p, b, p, b, ctypes.c_double, p, b]
        sg.restype = dg.restype = None
        setn.argtypes, setn.restype = [i], None
        getn.argtypes, getn.restype = [], i
        lib.sciml_sgemm, lib.sciml_dgemm, lib.sciml_set_threads, lib.sciml_get_threads = sg, dg, setn, getn
        lib.sciml_kind, lib.sciml_path = "openblas", path
        try:
            core = getattr(lib, f"scipy_openblas_get_corename{sfx}")
            core.restype = ctypes.c_char_p
            lib.sciml_core = core().decode()
        except (AttributeError, UnicodeDecodeError):  # pragma: no cover
            lib.sciml_core = ""
        return lib, None
    return None, "; ".join(errors) or "numpy's bundled OpenBLAS (numpy.libs/libscipy_openblas*) not found"


def _load_mkl():
    lib = _load()
    if lib is not None:
        lib.sciml_sgemm, lib.sciml_dgemm, lib.sciml_kind = lib.cblas_sgemm, lib.cblas_dgemm, "mkl"
    return lib, _state["error"]


_LOADERS = {"mkl": _load_mkl, "openblas": _load_openblas}
_loaded: dict = {}  # kind -> (library or None, error): each library is loaded once per process


def load(kind):
    """The library ``kind`` ("mkl" or "openblas"), loaded on first use, or None if not found."""
    if kind not in _loaded:
        _loaded[kind] = _LOADERS[kind]()
    return _loaded[kind][0]


def _cpu_vendor():
    """/proc/cpuinfo's vendor_id ("GenuineIntel", "AuthenticAMD", ...), else a guess, else ""."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    proc = platform.processor()
    return "GenuineIntel" if "GenuineIntel" in proc or proc.startswith("Intel") else proc


def _select(choice):
    """The library for ``SCIML_BLAS=choice`` (None: numpy's matmul)."""
    if choice == "numpy":
        return None
    if choice in ("mkl", "openblas"):
        lib = load(choice)
        if lib is None:
            raise RuntimeError(f"SCIML_BLAS={choice} but {choice} could not be loaded: {_loaded[choice][1]}")
        return lib
    order = ("mkl", "openblas") if _cpu_vendor() == "GenuineIntel" else ("openblas", "mkl")
    for kind in order:
        lib = load(kind)
        if lib is not None:
            return lib
    _state["error"] = "; ".join(str(_loaded[k][1]) for k in order)
    return None


def lib():
    """The ctypes BLAS in use (``.sciml_kind`` "mkl" or "openblas"), or None (numpy's matmul)."""
    if not _state["checked"]:
        choice = os.environ.get("SCIML_BLAS", "auto").strip().lower()
        if choice not in _CHOICES:
            raise ValueError(f"SCIML_BLAS: expected {', '.join(repr(c) for c in _CHOICES)}, got {choice!r}")
        _state["checked"] = True
        try:
            _state["lib"] = _select(choice)
        except Exception:
            _state["checked"] = False
            raise
    return _state["lib"]


_CHOICES = ("auto", "mkl", "openblas", "numpy")


def mkl():
    """The loaded MKL runtime library when it is the BLAS in use, else None."""
    lb = lib()
    return lb if lb is not None and lb.sciml_kind == "mkl" else None


def name():
    lb = lib()
    if lb is None:
        return "numpy"
    if lb.sciml_kind == "openblas":
        return f"openblas ({os.path.basename(lb.sciml_path)}, {lb.sciml_core or 'core ?'}; numpy's, via ctypes)"
    return f"mkl ({os.path.basename(lb.sciml_path)})"


def _split_mode(lb):
    return lb.sciml_kind == "mkl" and _state["mode"] == "split"


class threads:
    """``with blas.threads(1): ...`` — GEMM threads within the block (no-op without a ctypes BLAS):
    MKL "split" mode: 1 turns the two-thread split off; MKL "omp" mode: MKL's count for this
    Python thread; OpenBLAS: its process-wide count (it has no per-thread one), restored on exit."""

    def __init__(self, n):
        self.n = int(n)

    def __enter__(self):
        lb = lib()
        self._prev = self._lib = None
        if lb is not None:
            self._lib = lb
            self._prev = get_threads()
            if _split_mode(lb):
                _state["nosplit"] = self.n <= 1
            elif lb.sciml_kind == "mkl":
                self._prev = lb.MKL_Set_Num_Threads_Local(self.n)
            elif self.n != self._prev:
                lb.sciml_set_threads(self.n)
        return self

    def __exit__(self, *exc):
        lb = self._lib
        if self._prev is not None:
            if _split_mode(lb):
                _state["nosplit"] = self._prev <= 1
            elif lb.sciml_kind == "mkl":
                lb.MKL_Set_Num_Threads_Local(self._prev)
            elif self._prev != self.n:
                lb.sciml_set_threads(self._prev)


def get_threads():
    """Threads a large GEMM uses (None without a ctypes BLAS)."""
    lb = lib()
    if lb is None:
        return None
    if lb.sciml_kind == "openblas":
        return lb.sciml_get_threads()
    if _state["mode"] == "split":
        return 1 if _state["nosplit"] or _CORES < 2 else 2
    return lb.MKL_Get_Max_Threads()


def set_threads(n):
    """Process-wide GEMM thread count (every Python thread); no-op without a ctypes BLAS. In MKL's
    "split" mode only 1 (no split) or more (split large GEMMs in two) matter."""
    lb = lib()
    if lb is not None and n is not None:
        if lb.sciml_kind == "openblas":
            lb.sciml_set_threads(int(n))
            return
        if _state["mode"] == "split":
            _state["nosplit"] = int(n) <= 1
            return
        lb.MKL_Set_Num_Threads(int(n))
        lb.MKL_Set_Num_Threads_Local(0)  # 0: this thread follows the process-wide count again


def _pool():
    if _state["pool"] is None:
        import concurrent.futures

        from .. import runtime
        _state["pool"] = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sciml-gemm")
        runtime.on_shutdown(_stop_pool)
    return _state["pool"]


def _stop_pool():
    pool, _state["pool"] = _state["pool"], None
    if pool is not None:
        pool.shutdown(wait=True)


def gemm(a, b, out, m: int, n: int, k: int, ta: bool, tb: bool, dtype: str, accumulate: bool = False) -> bool:
    """out[:m*n] (m, n) = op(a) @ op(b) (``+=`` with ``accumulate``) on flat contiguous numpy buffers;
    False without a ctypes BLAS (MKL or OpenBLAS; the caller then uses numpy's matmul).

    In MKL's "split" mode MKL is sequential and a GEMM of at least SPLIT_MIN multiply-adds is
    cut in two halves along the larger of m, n, the second run on a worker thread (ctypes releases
    the GIL), which blocks instead of spinning between calls."""
    lb = lib()
    if lb is None or dtype not in ("float32", "float64"):
        return False
    if m * n * k == 0:  # nothing to multiply (and leading dimensions of 0 are invalid to BLAS)
        if m * n and not accumulate:
            out[: m * n] = 0
        return True
    f = lb.sciml_sgemm if dtype == "float32" else lb.sciml_dgemm
    TA, TB = _TRANS if ta else _NO_TRANS, _TRANS if tb else _NO_TRANS
    lda, ldb, beta = m if ta else k, k if tb else n, 1.0 if accumulate else 0.0
    pa, pb, pc = _address(a), _address(b), _address(out)  # 0.6 vs 1.6 us each (``_common.address``)
    if BUSY_SINGLE and _CORES > 1 and _busy() and get_threads() != 1:
        with threads(1):  # every core taken: one thread (see BUSY_SINGLE)
            f(_ROW_MAJOR, TA, TB, m, n, k, 1.0, pa, lda, pb, ldb, beta, pc, n)
        return True
    if not _split_mode(lb) or m * n * k < SPLIT_MIN or _CORES < 2 or _state["nosplit"]:
        f(_ROW_MAJOR, TA, TB, m, n, k, 1.0, pa, lda, pb, ldb, beta, pc, n)
        return True
    isz = out.itemsize
    if m >= n:  # rows of C: rows of op(A)
        h = m // 2
        pa2 = pa + (h if ta else h * k) * isz
        job = _pool().submit(f, _ROW_MAJOR, TA, TB, m - h, n, k, 1.0, pa2, lda, pb, ldb, beta, pc + h * n * isz, n)
        f(_ROW_MAJOR, TA, TB, h, n, k, 1.0, pa, lda, pb, ldb, beta, pc, n)
    else:  # columns of C: columns of op(B)
        h = n // 2
        pb2 = pb + (h * k if tb else h) * isz
        job = _pool().submit(f, _ROW_MAJOR, TA, TB, m, n - h, k, 1.0, pa, lda, pb2, ldb, beta, pc + h * isz, n)
        f(_ROW_MAJOR, TA, TB, m, h, k, 1.0, pa, lda, pb, ldb, beta, pc, n)
    job.result()
    return True


_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
# Opt-in (``SCIML_BUSY_BLAS=1``): when every core is busy (``_common.busy``: 1-minute load average >= cores),
# GEMMs run on ONE thread: a multi-threaded GEMM waits for its slowest thread, and a descheduled one stalls
# it. Not the default: the thread count changes OpenBLAS's float32 rounding (tests/test_blas.py compares
# with numpy's matmul at 1e-5 and saw a 1.3e-5 difference at (130x70)@(70x257)), so results would depend
# on the machine's load. Measured here (AMD EPYC,
# 2 vCPUs, load average 24, float32, 41 interleaved rounds, min / median us): (10000x32)@(32x32)
# OpenBLAS 1 thread 327 / 403, 2 threads 320 / 22680 (numpy's matmul, 2 threads: 405 / 29227); MKL 1
# thread 304 / 400, 2 threads 1101 / 12229; (41600x32)@(32x32) OpenBLAS 1 thread 2040 / 7932, 2 threads
# 15689 / 31984.
BUSY_SINGLE = os.environ.get("SCIML_BUSY_BLAS", "0").strip() == "1"


def numpy_same() -> bool:
    """True when numpy's matmul runs the same GEMM as :func:`gemm` would for a plain (beta = 0) product:
    the ctypes BLAS is numpy's own OpenBLAS (or there is none) and no split / load rule applies
    (``kernels/linalg._host_matmul`` then calls numpy's matmul: less Python per call)."""
    lb = lib()
    c = _state.get("npsame")
    if c is None or c[0] is not lb:  # (tests swap the library in _state)
        c = _state["npsame"] = (lb, (lb is None or lb.sciml_kind == "openblas") and not BUSY_SINGLE)
    return c[1]


def available() -> bool:
    """True when GEMMs go through a ctypes BLAS (MKL or numpy's OpenBLAS), not numpy's matmul."""
    return lib() is not None


# ---------------------------------------------------------------------------------------------------
# Device GEMM (every arch but the CPU; ``kernels/linalg.matmul`` sends non-host GEMMs here)
#
# C[b] = op(A[b]) @ op(B[b]) (``+=`` with ``accumulate``) as ONE Taichi kernel that reads both
# operands through strides (a transposed operand is read in place: no transpose copy) and splits
# k over threads: each thread computes an 8x4 register tile of C over a chunk of k; with one chunk
# it writes C directly (one launch), otherwise every chunk writes its partial tile into a device
# workspace and ``colsum`` sums the partials (one more launch, deterministic). The number of
# chunks is chosen so that tiles x chunks reaches ``DEVICE_TARGET_THREADS`` (the PINN's
# weight-gradient GEMMs, 32x32 outputs with k = 41,600, were 21 launches on 32 threads) with no
# thread looping over more than ``DEVICE_MAX_K`` values of k (lavapipe). A GEMM with one output
# row (``ones @ G``: bias gradients; ``v @ B``) or one output column (``A @ v``) is a weighted
# column sum (``kernels/colsum.py``), not an 8x4-tiled GEMM that wastes 7/8 or 3/4 of its lanes.

DEVICE_TILE_I, DEVICE_TILE_J = 8, 4
DEVICE_TARGET_THREADS = 4096
DEVICE_MIN_K = 64      # k per thread at least when splitting
DEVICE_MAX_K = 2048    # k per thread at most (lavapipe: long loops in one invocation misbehave)
DEVICE_SPLIT_MIN = 1024  # k above which it is split (below, a second launch costs more than it saves)


def device_plan(batch: int, m: int, n: int, k: int):
    """(k per chunk, chunks) of a device GEMM (pure Python, tested on CPU)."""
    tiles = batch * (-(-m // DEVICE_TILE_I)) * (-(-n // DEVICE_TILE_J))
    if k <= DEVICE_SPLIT_MIN or tiles == 0:
        return max(k, 1), 1
    nch = -(-DEVICE_TARGET_THREADS // tiles)
    nch = min(nch, max(1, k // DEVICE_MIN_K))
    nch = max(nch, -(-k // DEVICE_MAX_K))
    kc = -(-k // nch)
    return kc, -(-k // kc)


def device_gemm(a, b, out, batch: int, m: int, n: int, k: int, ta: bool, tb: bool, dtype: str,
                accumulate: bool = False, out_off: int = 0, defer=None, ws_level: int = 0):
    """out[out_off:] (batch, m, n) (+)= op(a) @ op(b) on flat device buffers: a (batch, m, k), or
    (batch, k, m) with ``ta``; b (batch, k, n), or (batch, n, k) with ``tb``. 1 launch, 2 when k is
    split. ``out_off``: C starts there (a region of a larger buffer, written in place). ``defer``: a
    list that receives the column sum(s) still to run (one-row / one-column GEMMs, split-K partial
    sums) instead of launching them, for ``colsum.run`` to pair with others; ``ws_level``: the
    workspace level of this GEMM's partials and column sums (deferred sums need distinct ones)."""
    from . import colsum as _cs
    if batch * m * n == 0:
        return
    if k == 0:
        if not accumulate:
            _cs.colsum(out, out, batch, 0, m * n, dtype, out_off=out_off)  # zero rows summed: writes zeros
        return
    sai, sak = (1, m) if ta else (k, 1)   # A(i, kk) = a[bt*m*k + i*sai + kk*sak]
    sbk, sbj = (1, k) if tb else (n, 1)   # B(kk, j) = b[bt*k*n + kk*sbk + j*sbj]
    if m == 1:  # out[b, j] = sum_kk a[b, kk] B(kk, j): a weighted column sum of B
        _cs.colsum(b, out, batch, k, n, dtype, weights=a, accumulate=accumulate, x_batch=k * n,
                   row_stride=sbk, col_stride=sbj, w_batch=k, out_off=out_off, defer=defer, level=ws_level)
        return
    if n == 1:  # out[b, i] = sum_kk A(i, kk) b[b, kk]: a weighted column sum of A^T
        _cs.colsum(a, out, batch, k, m, dtype, weights=b, accumulate=accumulate, x_batch=m * k,
                   row_stride=sak, col_stride=sai, w_batch=k, out_off=out_off, defer=defer, level=ws_level)
        return
    kc, nch = device_plan(batch, m, n, k)
    from . import _common as C
    kern = C.cached(("gemm_strided", dtype), lambda: _build_device(dtype))
    if nch == 1:
        kern(a, b, out, batch, m, n, k, sai, sak, sbk, sbj, kc, 1, int(accumulate), out_off)
        return
    total = batch * m * n
    ws = _cs.workspace(nch * total, dtype, ws_level)
    kern(a, b, ws, batch, m, n, k, sai, sak, sbk, sbj, kc, nch, 2, 0)
    _cs.colsum(ws, out, 1, nch, total, dtype, accumulate=accumulate, x_batch=0, row_stride=total, out_off=out_off,
               level=ws_level + 1, defer=defer)


def _build_device(dtype):
    from .. import backend
    from . import _common as C
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    TI, TJ = DEVICE_TILE_I, DEVICE_TILE_J

    @ti.kernel
    def gemm_strided(a: A, b: A, c: A, batch: ti.i32, m: ti.i32, n: ti.i32, k: ti.i32, sai: ti.i32,
                     sak: ti.i32, sbk: ti.i32, sbj: ti.i32, kc: ti.i32, nch: ti.i32, mode: ti.i32, co: ti.i32):
        nbi = (m + TI - 1) // TI
        nbj = (n + TJ - 1) // TJ
        for t in range(batch * nbi * nbj * nch):
            ch = t % nch
            rem = t // nch
            bt_ = rem // (nbi * nbj)
            rem = rem % (nbi * nbj)
            i0 = (rem // nbj) * TI
            j0 = (rem % nbj) * TJ
            k0 = ch * kc
            k1 = ti.min(k0 + kc, k)
            acc = ti.Matrix.zero(T, TI, TJ)
            ra = ti.Vector.zero(ti.i32, TI)  # row offsets (edge tiles repeat the last row; not stored)
            rb = ti.Vector.zero(ti.i32, TJ)
            for ii in ti.static(range(TI)):
                ra[ii] = bt_ * m * k + ti.min(i0 + ii, m - 1) * sai
            for jj in ti.static(range(TJ)):
                rb[jj] = bt_ * k * n + ti.min(j0 + jj, n - 1) * sbj
            for kk in range(k0, k1):
                av = ti.Vector.zero(T, TI)
                bv = ti.Vector.zero(T, TJ)
                for ii in ti.static(range(TI)):
                    av[ii] = a[ra[ii] + kk * sak]
                for jj in ti.static(range(TJ)):
                    bv[jj] = b[rb[jj] + kk * sbk]
                for ii in ti.static(range(TI)):
                    for jj in ti.static(range(TJ)):
                        acc[ii, jj] += av[ii] * bv[jj]
            base = ch * batch * m * n if mode == 2 else co  # chunk ch's partials: row ch of the workspace
            for ii in ti.static(range(TI)):
                for jj in ti.static(range(TJ)):
                    if i0 + ii < m and j0 + jj < n:
                        o = base + bt_ * m * n + (i0 + ii) * n + j0 + jj
                        if mode == 1:
                            c[o] += acc[ii, jj]
                        else:
                            c[o] = acc[ii, jj]
    return gemm_strided


__all__ = ["lib", "load", "mkl", "name", "threads", "get_threads", "set_threads", "gemm", "available",
           "device_gemm", "device_plan"]
