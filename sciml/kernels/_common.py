"""Kernel cache and launch policy shared by the kernel modules."""
import ctypes
import os
import threading
from time import monotonic as _monotonic

from .. import backend, runtime

_addressof, _from_buffer = ctypes.addressof, ctypes.c_char.from_buffer

CTX_CACHE = 16  # launch contexts kept per kernel (FastLaunch; kernels/_vec.py has its own)
SERIAL_WORK = 1 << 18  # cost-weighted elements; below this a CPU loop runs serialized
SERIAL_BELOW = SERIAL_WORK // 4  # elements, for the default cost (4: a transcendental or two)
CHEAP = 1  # cost of a load/store-bound op (add, mul, relu, copy, gather)
BLOCK = 64  # elements per parallel iteration on CPU (one wake-up per row, not per element)

_cache: dict = {}
TRACE = backend.TRACE  # [recorder or None]: set while sciml.jit traces a function
LOCK = runtime.LAUNCH_LOCK  # held by every Taichi kernel call and launch (runtime._install_lock)
runtime.on_shutdown(_cache.clear)  # compiled kernels and contexts go before Taichi's program at exit


REDUCE_CHUNK = 4096  # elements per partial of an ordered reduction on the CPU (see scratch)
REDUCE_CHUNK_DEVICE = 256  # on devices: more, shorter partials (one GPU thread per partial)
_scratch: dict = {}
runtime.on_shutdown(_scratch.clear)


def reduce_chunk() -> int:
    """Elements per partial of an ordered reduction: fixed per arch, so that the bits depend on n only."""
    return REDUCE_CHUNK if backend.on_host() else REDUCE_CHUNK_DEVICE


def chunks(n: int) -> int:
    """Partials of an ordered reduction over ``n`` elements: ceil(n / reduce_chunk()), at least 1."""
    return max(1, -(-int(n) // reduce_chunk()))


def scratch(n: int, dtype: str):
    """A buffer of at least ``n`` elements for a reduction's partial sums, kept per thread and dtype
    (launches from one thread run in order, so one buffer serves every reduction of that thread).

    Why partials: a ``+=`` into one location inside a parallel loop compiles to atomic adds, whose
    order (hence the rounding of a float sum) changes from run to run on a GPU and on the CPU's
    thread pool. Ordered form (kernels/lbfgs.py, kernels/optim.py ``sumsq``, kernels/norm.py): each of
    ``chunks(n)`` iterations sums its ``reduce_chunk()`` elements in order into the scratch, then one
    more task adds the partials in order. The same bits on every run, serial or parallel; on the CPU,
    up to REDUCE_CHUNK elements, the same bits as one sequential loop. Allocated outside any sciml.jit trace
    (a persistent buffer, as backend.meta's)."""
    key = (threading.get_ident(), dtype)
    buf = _scratch.get(key)
    if buf is None or buf.shape[0] < n:
        size = 1 << max(6, (int(n) - 1).bit_length())
        saved, TRACE[0] = TRACE[0], None
        try:
            buf = backend.zeros(size, dtype)
        finally:
            TRACE[0] = saved
        _scratch[key] = buf
    return buf


_combine: list = []


def combine_func():
    """The second task of an ordered reduction, as a ``ti.func``: ``combine(part, out, o, nch, w, mx, add)``
    sets (``add``: adds to) out[o + j] the in-order sum over the ``nch`` chunks of part[ch * w + j], for
    j < w (the max for j == mx; mx = -1: none). The first chunk's partial starts the sum, so one chunk
    gives its bits unchanged."""
    if not _combine:
        ti = runtime.ensure_init()

        @ti.func
        def combine(part: ti.template(), out: ti.template(), o, nch, w: ti.template(), mx: ti.template(),
                    add: ti.template()):
            for j in ti.static(range(w)):
                acc = part[j]
                for ch in range(1, nch):
                    if ti.static(j == mx):
                        acc = ti.max(acc, part[ch * w + j])
                    else:
                        acc += part[ch * w + j]
                if ti.static(add):
                    out[o + j] += acc
                else:
                    out[o + j] = acc
        _combine.append(combine)
    return _combine[0]


def host_call(fn, *args):
    """Run ``fn(*args)``, a computation on buffers outside Taichi (the CPU BLAS): while sciml.jit
    traces, the call is recorded so that a replay runs it again."""
    t = TRACE[0]
    if t is not None:
        return t.host(fn, args)
    return fn(*args)


def cached(key, build):
    """Return the kernel for ``key``, building it with ``build()`` on first use.

    The kernel comes wrapped in a :class:`FastLaunch`: after the first (ordinary) call it sets
    the arguments of the compiled kernel directly, skipping Taichi's per-call Python argument
    processing (measured here: 55 -> 18 us for a 3-array launch)."""
    k = _cache.get(key)
    if k is None:
        with LOCK:  # two threads may miss at once: build once
            k = _cache.get(key)
            if k is None:
                k = _cache[key] = FastLaunch(build())
    return k


class FastLaunch:
    """A ``@ti.kernel`` whose launches after the first bypass Taichi's Python argument path.

    Only for kernels whose arguments are 1-D ndarray annotations with a fixed dtype (one compiled
    instance) and scalars, with no return value: anything else keeps Taichi's own call. The
    first call goes through Taichi (compiling and checking the argument types); later calls must
    pass the same kinds of values (sciml's buffers always do: numpy arrays on CPU, ti.ndarrays on
    devices). ``SCIML_SAFE_LAUNCH=1`` disables the fast path (for debugging).
    """
    __slots__ = ("kernel", "fast", "spec", "ctxs", "__weakref__")

    def __init__(self, kernel):
        self.kernel = kernel
        self.fast = None
        self.ctxs = None  # launch contexts by argument values (host buffers only; see _make_fast)
        self.spec = None  # (make_context, launch, compiled kernel, argument kinds) once fast

    def __call__(self, *args):
        if TRACE[0] is not None:  # sciml.jit is recording: it runs the launch and keeps it
            return TRACE[0].launch(self, args)
        f = self.fast
        if f is not None:
            return f(*args)
        with LOCK:  # the first call compiles: Taichi's front end is not thread-safe
            r = self.kernel(*args)
            if self.fast is None:
                self.fast = _make_fast(self, args) or self.kernel
        return r

    def context(self, args):
        """A launch context of the compiled kernel with ``args`` set (``spec`` must exist): launching
        it again with ``spec[1](spec[2], ctx)`` costs ~1.5 us here against ~9 us for a fast call.
        The context keeps raw addresses: the caller keeps the arrays alive."""
        mk, _, _, kinds = self.spec
        c = mk()
        for i, (k, v) in enumerate(zip(kinds, args)):
            set_arg(c, i, k, v)
        return c

    @property
    def grad(self):
        return self.kernel.grad


def set_arg(c, i, kind, v):
    """Set argument ``i`` of launch context ``c``: kind 'e' numpy array, 'n' ti.ndarray, 'f' float, 'i' int."""
    if kind == "e":
        c.set_arg_external_array_with_shape((i,), address(v), v.nbytes, v.shape, 0)
    elif kind == "n":
        c.set_arg_ndarray((i,), v.arr)
    elif kind == "f":
        c.set_arg_float((i,), float(v))
    else:
        c.set_arg_int((i,), int(v))


def _make_fast(fl, args):
    import os

    import numpy as np
    if os.environ.get("SCIML_SAFE_LAUNCH"):
        return None
    try:
        from taichi.lang import impl
        from taichi.lang._ndarray import Ndarray
        from taichi.lang.util import cook_dtype
        from taichi.types import ndarray_type, primitive_types
        from taichi.types.utils import is_signed
        kernel = fl.kernel
        prim = kernel._primal
        if prim.return_type is not None or prim.has_print or len(prim.arguments) != len(args):
            return None
        kinds = []
        lines, checks, env = [], [], {"ndarray": np.ndarray, "Ndarray": Ndarray, "slow": kernel, "address": address}
        keys, ptrs, fzero = [], [], []  # the context cache's key parts, address lines, float arguments
        for i, (a, v) in enumerate(zip(prim.arguments, args)):
            ann = a.annotation
            if isinstance(ann, ndarray_type.NdarrayType):
                if ann.dtype is None or ann.ndim != 1:
                    return None
                if isinstance(v, np.ndarray) and v.ndim == 1 and v.flags.c_contiguous:
                    env[f"d{i}"] = v.dtype
                    checks.append(f"a{i}.__class__ is not ndarray or a{i}.dtype is not d{i} or a{i}.ndim != 1 "
                                  f"or not a{i}.flags.c_contiguous")
                    lines.append(f"    c.set_arg_external_array_with_shape(({i},), p{i}, a{i}.nbytes, "
                                 f"a{i}.shape, 0)")
                    ptrs.append(f"    p{i} = address(a{i})")
                    if keys is not None:
                        keys += [f"p{i}", f"a{i}.size"]
                    kinds.append("e")
                elif isinstance(v, Ndarray) and v.grad is None:
                    env[f"d{i}"] = v.dtype
                    checks.append(f"not isinstance(a{i}, Ndarray) or a{i}.dtype != d{i}")
                    lines.append(f"    c.set_arg_ndarray(({i},), a{i}.arr)")
                    keys = None  # device buffers: a context per call (an id could be reused by a new allocation)
                    kinds.append("n")
                else:
                    return None
            elif id(ann) in primitive_types.real_type_ids:
                lines.append(f"    c.set_arg_float(({i},), float(a{i}))")
                if keys is not None:
                    keys.append(f"a{i}")
                fzero.append(f"a{i}")
                kinds.append("f")
            elif id(ann) in primitive_types.integer_type_ids and is_signed(cook_dtype(ann)):
                lines.append(f"    c.set_arg_int(({i},), int(a{i}))")
                if keys is not None:
                    keys.append(f"a{i}")
                kinds.append("i")
            else:
                return None
        key = prim.ensure_compiled(*args)
        tk = prim.compiled_kernels[key]
        prog = impl.get_runtime().prog
        env.update(mk=tk.make_launch_context, launch=runtime.unlocked(prog.launch_kernel), LOCK=LOCK,
                   ckd=prog.compile_kernel(prog.config(), prog.get_device_caps(), tk))
        names = ", ".join(f"a{i}" for i in range(len(args)))
        guard = " or ".join(checks) or "False"  # anything unexpected: Taichi's own call (and its errors)
        head = f"def fast({names}):\n    if {guard}:\n        return slow({names})\n"
        if keys is None:  # the raw launch, one lock
            src = (head + "    c = mk()\n" + "\n".join(ptrs + lines) + "\n    with LOCK:\n        launch(ckd, c)\n")
        else:
            # host buffers and scalars only: the launch context by argument values (as VecLaunch: ~2 us to
            # relaunch against ~6-10 us to build); a float argument equal to 0 is never kept (0.0 == -0.0)
            keep = " and ".join(fzero) or "True"
            src = "\n".join([head.rstrip("\n")] + ptrs + [
                f"    key = ({', '.join(keys)},)", "    c = get(key)", "    if c is None:", "        c = mk()"]
                + ["    " + ln for ln in lines] + [
                f"        if {keep}:", "            if len(ctxs) >= CTX_CACHE:", "                ctxs.clear()",
                "            ctxs[key] = c", "    with LOCK:", "        launch(ckd, c)"]) + "\n"
            ctxs = {}
            env.update(ctxs=ctxs, get=ctxs.get, CTX_CACHE=CTX_CACHE)
            fl.ctxs = ctxs
        exec(src, env)  # noqa: S102 - generated from the kernel's own annotations
        fl.spec = (tk.make_launch_context, prog.launch_kernel, env["ckd"], tuple(kinds))
        return env["fast"]
    except Exception as e:  # pragma: no cover - another Taichi version: keep Taichi's own call
        import warnings
        warnings.warn(f"sciml: fast kernel launch unavailable ({type(e).__name__}: {e}); using Taichi's call.")
        return None


def address(a) -> int:
    """Data address of a contiguous numpy array: ``ctypes.addressof(c_char.from_buffer(a))`` costs
    0.6 us here against 1.6 us for ``a.ctypes.data`` (paid per array argument of every launch).
    Read-only or empty arrays (no writable buffer of >= 1 byte) take ``a.ctypes.data``."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def launch_mode(n: int, cost: int = 4) -> bool:
    """True if a loop over ``n`` elements should run serialized (CPU and small).

    A parallel loop on CPU wakes Taichi's thread pool: measured here (2-core VM, idle,
    `ti.max(a[i], 0)`) a parallel launch costs ~100 us more than a serial one at any size, and
    a serial loop of that cheap op breaks even at ~300K elements; an op with two
    transcendentals (tanh*exp) breaks even at ~65K. ``cost`` is the per-element work in units
    of the cheap op (``CHEAP`` = 1: add, mul, relu, copy, gather; default 4).
    """
    return backend.on_host() and n * cost < SERIAL_WORK


_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_busy = [0.0, False]  # next check (time.monotonic), last answer


def busy() -> bool:
    """True when the host's cores are all taken (1-minute load average >= the cores this process may
    use; checked at most once a second). Taichi's CPU range-for splits a loop into one static block per
    thread, so a parallel launch waits for its slowest thread: with every core busy, a descheduled
    thread stalls the launch. Measured here (2 vCPUs, load average 14, 8-lane kernels at 1e6 float32,
    medians of 25 interleaved rounds): add 3.4 ms serial vs 6.5 ms parallel, tanh 2.7 vs 6.5 ms. The
    wide vector kernels then run serialized. ``SCIML_BUSY_SERIAL=0`` turns this off.

    The rule (docs/perf.md, "Reproducibility"): the answer may only choose between two paths that give
    the same bits. A choice that changes the order of floating-point operations (chunking, lane counts,
    GEMM threads) depends on sizes, dtype, arch and documented switches only, never on this. A serialized
    and a parallel compilation of one kernel can differ under fast math (LLVM reassociated a sum inside
    the fused Taylor output layer differently in the two): kernels that reduce inside an iteration and
    read this compile without fast math (``exact=True``). tests/test_determinism.py forces the answer
    both ways for every caller (and fails when a new caller has no such test)."""
    now = _monotonic()
    if now >= _busy[0]:
        _busy[0] = now + 1.0
        _busy[1] = _BUSY_ON and os.getloadavg()[0] >= _CORES
    return _busy[1]


_BUSY_ON = os.environ.get("SCIML_BUSY_SERIAL", "1").strip() != "0" and hasattr(os, "getloadavg")


def ti():
    return runtime.ensure_init()


def arr(dtype: str):
    """The Taichi ndarray annotation of a flat buffer of ``dtype``."""
    t = ti()
    return t.types.ndarray(dtype=backend.ti_dtype(dtype), ndim=1)
