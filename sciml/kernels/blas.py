"""CPU dense GEMM through Intel oneMKL's CBLAS, when it is installed (the ``mkl`` wheel).

Measured here (2 vCPUs, Intel Xeon with AVX-512, float32, the 8 GEMMs of the W1 step; `python -m benchmarks.bench_blas`):
numpy's bundled OpenBLAS 3.8 ms, MKL 2.6 ms (the same library PyTorch links). Dense
GEMM is the one place sciml may route around Taichi on CPU; everything else stays a kernel.

Selection: env ``SCIML_BLAS`` = ``auto`` (default: MKL if found, else numpy), ``mkl`` (error if
missing), ``numpy``. ``SCIML_MKL_LIB`` names the library file explicitly.

Threads (``SCIML_GEMM_THREADS``): "omp" (default) keeps MKL's OpenMP threads; "split" loads MKL
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
set ``SCIML_BLAS=numpy``. (Loading MKL in a private namespace with ``dlmopen`` crashed here.)
"""
import ctypes
import glob
import os
import sys

from ._common import address as _address

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


def mkl():
    """The loaded MKL runtime library, or None (numpy's BLAS is used then)."""
    if not _state["checked"]:
        _state["checked"] = True
        choice = os.environ.get("SCIML_BLAS", "auto").strip().lower()
        if choice not in ("auto", "mkl", "numpy"):
            raise ValueError(f"SCIML_BLAS: expected 'auto', 'mkl' or 'numpy', got {choice!r}")
        if choice != "numpy":
            _state["lib"] = _load()
            if _state["lib"] is None and choice == "mkl":
                raise RuntimeError(f"SCIML_BLAS=mkl but MKL could not be loaded: {_state['error']}")
    return _state["lib"]


def name():
    lib = mkl()
    return f"mkl ({os.path.basename(lib.sciml_path)})" if lib is not None else "numpy"


class threads:
    """``with blas.threads(1): ...`` — GEMM threads within the block (no-op without MKL): in "split"
    mode 1 turns the two-thread split off; in "omp" mode it is MKL's count for this Python thread."""

    def __init__(self, n):
        self.n = int(n)

    def __enter__(self):
        lib = mkl()
        self._prev = None
        if lib is not None:
            self._prev = get_threads()
            if _state["mode"] == "split":
                _state["nosplit"] = self.n <= 1
            else:
                self._prev = lib.MKL_Set_Num_Threads_Local(self.n)
        return self

    def __exit__(self, *exc):
        if self._prev is not None:
            if _state["mode"] == "split":
                _state["nosplit"] = self._prev <= 1
            else:
                mkl().MKL_Set_Num_Threads_Local(self._prev)


def get_threads():
    """Threads a large GEMM uses (None without MKL)."""
    lib = mkl()
    if lib is None:
        return None
    if _state["mode"] == "split":
        return 1 if _state["nosplit"] or _CORES < 2 else 2
    return lib.MKL_Get_Max_Threads()


def set_threads(n):
    """Process-wide GEMM thread count (every Python thread); no-op without MKL. In "split" mode
    only 1 (no split) or more (split large GEMMs in two) matter."""
    lib = mkl()
    if lib is not None and n is not None:
        if _state["mode"] == "split":
            _state["nosplit"] = int(n) <= 1
            return
        lib.MKL_Set_Num_Threads(int(n))
        lib.MKL_Set_Num_Threads_Local(0)  # 0: this thread follows the process-wide count again


def _pool():
    if _state["pool"] is None:
        import concurrent.futures
        _state["pool"] = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sciml-gemm")
    return _state["pool"]


def gemm(a, b, out, m: int, n: int, k: int, ta: bool, tb: bool, dtype: str, accumulate: bool = False) -> bool:
    """out[:m*n] (m, n) = op(a) @ op(b) (``+=`` with ``accumulate``) on flat contiguous numpy buffers;
    False if MKL is absent.

    In "split" mode (default) MKL is sequential and a GEMM of at least SPLIT_MIN multiply-adds is
    cut in two halves along the larger of m, n, the second run on a worker thread (ctypes releases
    the GIL), which blocks instead of spinning between calls."""
    lib = mkl()
    if lib is None or dtype not in ("float32", "float64"):
        return False
    f = lib.cblas_sgemm if dtype == "float32" else lib.cblas_dgemm
    TA, TB = _TRANS if ta else _NO_TRANS, _TRANS if tb else _NO_TRANS
    lda, ldb, beta = m if ta else k, k if tb else n, 1.0 if accumulate else 0.0
    pa, pb, pc = _address(a), _address(b), _address(out)  # 0.6 vs 1.6 us each (``_common.address``)
    if _state["mode"] != "split" or m * n * k < SPLIT_MIN or _CORES < 2 or _state["nosplit"]:
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


def available() -> bool:
    return mkl() is not None


__all__ = ["mkl", "name", "threads", "get_threads", "set_threads", "gemm", "available"]
