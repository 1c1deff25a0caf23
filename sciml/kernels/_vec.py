"""Vector kernels on CPU: flat numpy buffers passed as ndarrays of ``ti.Vector(lanes)``.

Taichi's LLVM here does not vectorise loops over ndarrays: every iteration reloads the ndarray data
pointers from Taichi's argument buffer (a store might overwrite them), so the loop vectoriser gives up
(docs/perf.md, "CPU code generation"). A kernel whose ndarray arguments have a vector dtype
(``ti.types.ndarray(dtype=ti.types.vector(L, T), ndim=1)``), compiled with Taichi's
``real_matrix_scalarize`` off, loads, computes and stores whole ``<L x T>`` vectors; the JIT compiles
for every feature of the host, so 8 float32 lanes run in ymm registers on AVX2 and 16 in zmm on AVX-512.

Two widths: LANES (16 bytes: 4 x float32, 2 x float64), which every numpy buffer is aligned for, and
the host's wide lanes (:func:`host_width`: 16 float32 lanes with AVX-512F, 8 with AVX2), whose aligned
vector loads need 64 / 32-byte aligned buffers: sciml's own large host buffers are
(``backend.empty``), and :func:`lanes_for` checks every address per call (wide, else 16-byte, else
None: the scalar kernel). A misaligned vector load would crash the process.

Rules for such kernels (``real_matrix_scalarize=False`` aborts the process on some vector ops):
only + - * /, ``ti.sqrt``, ``ti.min``/``ti.max`` and ``ti.select(comparison, a, b)`` on vectors
(unary minus, ``ti.abs``, ``ti.exp``, ``ti.floor``, ``ti.bit_cast`` and ``ti.cast`` on vectors abort at
compile time or crash: lane-wise scalar code, ``v[u]``, works), and no Python float literal next to a
float32 vector (``ti.max(v, 0.0)`` with float64 as sciml's default dtype makes a f64 vector and a cast
that segfaults): write ``ti.cast(0, T)``. ``VecLaunch(..., exact=True)`` compiles without fast math
(IEEE arithmetic: no reassociation, infinities and NaN kept), which range reductions need.
"""
import os

from . import _common as C

LANES = {"float32": 4, "float64": 2}  # the 16-byte fallback every numpy buffer meets


def host_width() -> int:
    """float32 lanes of the widest vectors the executed code uses on this host: 16 with AVX-512F,
    8 with AVX2, else 4 (the JIT compiles for every host feature, see docs/perf.md). Read once from
    /proc/cpuinfo's flags; ``SCIML_VEC_LANES`` (4, 8 or 16) overrides it (16 on an AVX2 host runs as
    two ymm halves per op)."""
    if _WIDTH:
        return _WIDTH[0]
    env = os.environ.get("SCIML_VEC_LANES", "").strip()
    if env:
        if env not in ("4", "8", "16"):
            raise ValueError(f"SCIML_VEC_LANES: expected 4, 8 or 16, got {env!r}")
        w = int(env)
    else:  # not Linux (no flags): the 16-byte kernels only
        flags = cpu_flags()
        w = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    _WIDTH.append(w)
    return w


_WIDTH: list = []


def cpu_flags() -> frozenset:
    """The host CPU's feature flags (/proc/cpuinfo's first ``flags`` line), read once; empty where it cannot be
    read (not Linux)."""
    if not _FLAGS:
        flags = frozenset()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("flags"):
                        flags = frozenset(line.split(":", 1)[1].split())
                        break
        except OSError:
            pass
        _FLAGS.append(flags)
    return _FLAGS[0]


_FLAGS: list = []


def _or(ptrs) -> int:
    """The bitwise OR of the addresses ``ptrs``: its low bits tell the alignment they all share."""
    acc = 0
    for p in ptrs:
        acc |= p
    return acc


ALIGN = 64  # bytes: backend's own large host buffers start on this boundary (any width's vectors fit)


def wide(dtype) -> int:
    """Lanes of the wide kernels for ``dtype`` on this host (float32: host_width(); float64: half)."""
    w = host_width()
    return w if dtype == "float32" else w // 2 if dtype == "float64" else 0


def lanes_for(ptrs, dtype):
    """The widest lane count whose vectors every address in ``ptrs`` is aligned for: the host's wide
    lanes (32 or 64 bytes), else the 16-byte LANES, else None (a scalar kernel must run). The same under
    sciml.jit: a replay allocates its fresh outputs 64-byte aligned and re-aligns an input whose address does
    not meet what a recorded vector kernel needs (autodiff/jit.py)."""
    acc = _or(ptrs)
    W = wide(dtype)
    if W > LANES[dtype] and not acc & (W * (4 if dtype == "float32" else 8) - 1):
        return W
    return None if acc & 15 else LANES[dtype]


def trans_vectors(dtype) -> int:
    """Host-width vectors per loop iteration of the compute-bound float maps (float32 tanh, exp, sigmoid:
    rational / polynomial forms, ~20-30 dependent vector ops per element, their Horner steps FMAs on x64 hosts,
    kernels/elementwise.py): 4 where the host's vectors are 64 bytes (AVX-512: 32 zmm registers), 2 where they
    are 32 (AVX2: 16 ymm), else 1.
    One wider ``ti.types.vector`` is the same arithmetic lane by lane (the same bits) in independent registers,
    which the core overlaps. Measured here (Xeon, AVX-512, one thread, 16384 float32 in cache, 64 passes in one
    launch, ns per element, 16 / 64 / 128 lanes): tanh 0.74-0.80 / 0.59-0.61 / 0.58, exp 0.75-0.78 / 0.54-0.56 /
    0.48 (compile 0.11 / 0.43 / 1.4 s), sigmoid 1.01-1.06 / 0.70 / 0.67; numpy tanh 0.55-0.57, exp 0.69-0.79.
    The AVX2 factor is not measured (no such host here)."""
    b = wide(dtype) * (4 if dtype == "float32" else 8)
    return 4 if b >= 64 else 2 if b >= 32 else 1


def trans_lanes_for(ptrs, dtype):
    """:func:`lanes_for` for the compute-bound maps: where every address is aligned for the host's wide vectors,
    ``trans_vectors(dtype)`` of them per iteration (their loads need no more alignment than one: a 64-lane float32
    vector is four aligned zmm loads), else what :func:`lanes_for` gives (16-byte vectors or None)."""
    L = lanes_for(ptrs, dtype)
    if L is not None and L == wide(dtype) and L > LANES[dtype]:
        T = L * trans_vectors(dtype)
        # the wider vector's loads may be issued at its own width up to 64 bytes: with SCIML_VEC_LANES=8 on an
        # AVX-512 host, 16 float32 lanes are one zmm load, which faults on a 32-byte-aligned address
        if not _or(ptrs) & (min(ALIGN, T * (4 if dtype == "float32" else 8)) - 1):
            return T
    return L


MEM_BYTES = 64  # bytes per vector of the load/store-bound kernels (mem_lanes_for)


def mem_lanes(dtype) -> int:
    """Lanes of the load/store-bound kernels (add, mul, relu, ...): one 64-byte vector (16 x float32, 8 x
    float64) on every host with vectors of at least 32 bytes (AVX2: two ymm per vector op), else the host's
    width. Taichi reloads every ndarray's data pointer from its argument buffer after each store (docs/perf.md),
    once per vector: wider vectors pay that once per 64 bytes instead of once per 32. Measured here (AVX2,
    1e6 float32 add, one thread, prebuilt launch context, fastest of 15 rounds): 8 lanes 583-620 us, 16 lanes
    531 us, 32 lanes 582 us, numpy 479-537 us (a loaded machine)."""
    W = wide(dtype)
    if W * (4 if dtype == "float32" else 8) >= 32:
        return MEM_BYTES // (4 if dtype == "float32" else 8)
    return W


def mem_lanes_for(ptrs, dtype):
    """:func:`lanes_for` for the load/store-bound kernels: :func:`mem_lanes` where every address is 64-byte
    aligned (a vector's natural alignment: sciml's own large host buffers), else the 16-byte LANES, else None."""
    acc = _or(ptrs)
    if not acc & (MEM_BYTES - 1) and wide(dtype) > LANES[dtype]:
        return mem_lanes(dtype)
    return None if acc & 15 else LANES[dtype]


def pointers(arrays):
    """Data addresses of numpy ``arrays`` if all are 16-byte aligned, else None."""
    ptrs = [C.address(a) for a in arrays]
    return None if any(p & 15 for p in ptrs) else ptrs


class VecLaunch:
    """A vector-dtype kernel: compiled on its first call with ``real_matrix_scalarize`` off, then
    launched directly with the compiled kernel's argument setters (as ``_common.FastLaunch``,
    which only handles scalar-typed ndarrays). Call as ``k(arrays, ptrs, counts, scalars)``:
    array ``i`` is passed as ``counts[i]`` elements of its ndarray type (vectors of ``lanes``, or
    scalars where ``lanes`` is 1: ``lanes`` is one int or one per array) starting at ``ptrs[i]``;
    ``scalars`` (the remaining kernel arguments) follow."""
    __slots__ = ("kernel", "fast", "lanes", "spec", "exact", "ctxs", "dynamic", "rebind")

    def __init__(self, kernel, lanes, exact=False, dynamic=False, rebind=False):
        self.kernel, self.fast, self.lanes, self.spec, self.exact = kernel, None, lanes, None, exact
        self.ctxs = {}  # launch contexts by argument values (see _make_fast)
        self.dynamic = dynamic  # compiled without Taichi's one-block-per-thread split (see DYNAMIC)
        # scalars that change on every call (an optimizer's step-dependent bias corrections): contexts are kept
        # by array arguments only and the scalars set on each launch (see _make_fast)
        self.rebind = rebind

    def _lanes(self, n):
        return [self.lanes] * n if isinstance(self.lanes, int) else list(self.lanes)

    def __call__(self, arrays, ptrs, counts, scalars):
        if C.TRACE[0] is not None:  # sciml.jit is recording
            return C.TRACE[0].vec_launch(self, arrays, ptrs, counts, scalars)
        if self.fast is not None:
            return self.fast(ptrs, counts, scalars)
        views = [a[:c * L].reshape(c, L) if L > 1 else a[:c]
                 for a, c, L in zip(arrays, counts, self._lanes(len(arrays)))]
        with C.LOCK:  # the config flip and the first (compiling) call must not interleave with another thread
            cfg = C.ti().lang.impl.current_cfg()
            prev, prev_fm, prev_mt = cfg.real_matrix_scalarize, cfg.fast_math, cfg.make_cpu_multithreading_loop
            cfg.real_matrix_scalarize = False
            if self.exact:  # IEEE arithmetic: fast math reassociates Cody-Waite range reductions (exp)
                cfg.fast_math = False
            if self.dynamic:  # the outer range-for's iterations become tasks that idle threads take in turn
                cfg.make_cpu_multithreading_loop = False
            try:
                self.kernel(*views, *scalars)
            finally:
                cfg.real_matrix_scalarize, cfg.fast_math, cfg.make_cpu_multithreading_loop = prev, prev_fm, prev_mt
        if not os.environ.get("SCIML_SAFE_LAUNCH"):  # else: Taichi's own call every time (debugging)
            self.fast = self._make_fast(views, scalars)

    def _make_fast(self, views, scalars):
        from taichi.lang import impl
        from taichi.lang.util import cook_dtype
        from taichi.types import primitive_types
        prim = self.kernel._primal
        tk = prim.compiled_kernels[prim.ensure_compiled(*views, *scalars)]
        prog = impl.get_runtime().prog
        mk, launch = tk.make_launch_context, prog.launch_kernel
        ckd = prog.compile_kernel(prog.config(), prog.get_device_caps(), tk)
        na = len(views)
        unit = [L * v.itemsize for L, v in zip(self._lanes(na), views)]
        is_int = [id(cook_dtype(a.annotation)) in primitive_types.integer_type_ids or
                  a.annotation in primitive_types.integer_types for a in prim.arguments[na:]]
        aidx = [(i,) for i in range(na)]
        sidx = [((na + j,), bool(t)) for j, t in enumerate(is_int)]

        def context(ptrs, counts, scalars):
            c = mk()
            for i, p in enumerate(ptrs):
                n = counts[i]
                c.set_arg_external_array_with_shape(aidx[i], p, n * unit[i], (n,), 0)
            for (ix, integer), s in zip(sidx, scalars):
                if integer:
                    c.set_arg_int(ix, int(s))
                else:
                    c.set_arg_float(ix, float(s))
            return c

        # Launch contexts by argument values. Building one costs ~13 us here (a pybind call per argument
        # plus the Python around it) against ~2.5 us for relaunching a built one, and the same arguments
        # come back in every loop (glibc hands a freed output's address to the next output of that size). A
        # context holds addresses and sizes only, so one built for the same values is the same context.
        # Floats equal to 0 are not cached (0.0 == -0.0 but the kernels see different bits); NaN never hits.
        ctxs = self.ctxs
        get = ctxs.get
        fpos = [j for j, t in enumerate(is_int) if not t]
        if self.rebind:
            def fast(ptrs, counts, scalars):
                key = (*ptrs, *counts)
                c = get(key)
                if c is None:
                    c = context(ptrs, counts, scalars)
                    if len(ctxs) >= CTX_CACHE:
                        ctxs.clear()
                    ctxs[key] = c
                else:  # the scalars of this call (every one: +-0.0 and NaN included, bit for bit)
                    for (ix, integer), s in zip(sidx, scalars):
                        if integer:
                            c.set_arg_int(ix, int(s))
                        else:
                            c.set_arg_float(ix, float(s))
                launch(ckd, c)
            self.spec = (context, launch, ckd, aidx, unit)
            return fast

        def fast(ptrs, counts, scalars):
            key = (*ptrs, *counts, *scalars)
            c = get(key)
            if c is None:
                c = context(ptrs, counts, scalars)
                if all(scalars[j] for j in fpos):  # a float argument equal to 0 (+-0): rebuilt every time
                    if len(ctxs) >= CTX_CACHE:
                        ctxs.clear()
                    ctxs[key] = c
            launch(ckd, c)
        # for sciml.jit: a context built once and relaunched; array i rebinds through aidx[i], unit[i]
        self.spec = (context, launch, ckd, aidx, unit)
        return fast


CTX_CACHE = 16  # launch contexts kept per kernel (VecLaunch.fast)


# Parallel CPU loops: Taichi's pass make_cpu_multithreaded_range_for (taichi/transforms/) turns a parallel
# range-for into one static block per thread, and the launching thread waits without working
# (taichi/system/threading.cpp): one descheduled worker (another process on its core) stalls the launch for
# its time slice. Compiled with that pass off (config make_cpu_multithreading_loop), every iteration of the
# outer range-for is a task from a shared counter (``ti.loop_config(block_dim=1)``), so the threads that run
# take the chunks and the launch ends when they are done. The load/store-bound maps use this for their
# parallel launches: an outer loop over chunks of DYN_CHUNK bytes, a serial inner loop (the same vector code).
# Off: not shown faster on an idle machine yet, and a broadcast sigmoid_grad in the chunked kernel differed
# from the scalar kernel in the last bit (82,217 of 300,003 float32 values; tests/test_vec_elementwise.py
# test_binary_same_bits catches it on an idle host): results must not depend on the path.
DYNAMIC = False
DYN_CHUNK = 1 << 16  # bytes of each array per task (16384 float32): ~60 tasks at 1e6 float32


def cached(key, build, lanes, exact=False, dynamic=False, rebind=False):
    """The VecLaunch for ``key`` (built with ``build()`` on first use), in the shared kernel cache;
    ``exact``: compiled without fast math (IEEE semantics, no reassociation); ``dynamic``: without the
    one-block-per-thread split (:data:`DYNAMIC`); ``rebind``: scalar arguments that differ on every call
    (launch contexts kept by array arguments, scalars set per launch)."""
    k = C._cache.get(key)
    if k is None:
        k = C._cache[key] = VecLaunch(build(), lanes, exact, dynamic, rebind)
    return k
