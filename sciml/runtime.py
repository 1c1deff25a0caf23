"""The one place that calls ``ti.init``: arch, default float dtype and seeding.

sciml initialises Taichi lazily on first use with defaults from the environment
(``SCIML_ARCH`` = cpu | vulkan | cuda | auto, ``SCIML_DTYPE`` = float32 | float64), or
explicitly through :func:`init`. Taichi can be initialised once per process: calling
``init`` again with different settings after tensors exist is an error.
"""
from __future__ import annotations

import atexit
import contextlib
import io
import os
import threading

import numpy as np

ARCHS = ("cpu", "vulkan", "cuda", "auto")
DTYPES = ("float32", "float64")

_lock = threading.Lock()
_state = {"arch": None, "dtype": None, "seed": None, "ti": None, "closed": False}

# Taichi's Python front end (compilation, a kernel's first call) and its launches share one
# program state that is not thread-safe (two threads compiling at once die with "Kernels cannot
# call other kernels"; two CPU launches share one thread pool): every kernel call and launch holds
# this lock. Reentrant: a Taichi kernel call launches inside it. Cost: see docs/CORE.md (threads).
LAUNCH_LOCK = threading.RLock()
_shutdown_hooks: list = []  # callables that drop sciml's references to Taichi objects at exit


class ArchUnavailableError(RuntimeError):
    """Raised when the requested Taichi arch cannot be started on this machine."""


def _check(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"sciml.init({name}=...): got {value!r}; expected one of {', '.join(map(repr, allowed))}.")


def init(arch: str | None = None, dtype: str | None = None, seed: int | None = None, **taichi_kwargs):
    """Start the Taichi runtime.

    Args:
        arch: "cpu", "vulkan", "cuda" or "auto" (cuda, then vulkan, then cpu). Default: env
            ``SCIML_ARCH`` or "cpu".
        dtype: default float dtype, "float32" or "float64". Default: env ``SCIML_DTYPE`` or "float32".
        seed: seed for sciml's default random stream (``sciml.rand``/``randn`` without a seed).
        **taichi_kwargs: passed to ``ti.init`` (e.g. ``debug=True``).

    Returns:
        The arch actually in use, as a string.

    Example:
        >>> import sciml as sm
        >>> sm.init(arch="cpu", dtype="float64", seed=0)
        'cpu'
    """
    if _state["arch"] is not None:  # already running: unspecified settings mean "as now"
        arch, dtype = arch or _state["arch"], dtype or _state["dtype"]
    arch = arch or os.environ.get("SCIML_ARCH", "cpu")
    dtype = dtype or os.environ.get("SCIML_DTYPE", "float32")
    _check("arch", arch, ARCHS)
    _check("dtype", dtype, DTYPES)
    with _lock:
        if _state["arch"] is not None:
            if (arch not in ("auto", _state["arch"])) or dtype != _state["dtype"]:
                raise RuntimeError(
                    f"sciml is already running on arch={_state['arch']!r}, dtype={_state['dtype']!r}; "
                    f"got init(arch={arch!r}, dtype={dtype!r}). Taichi starts once per process: "
                    "call sciml.init(...) before any tensor is made, or start a new process.")
            if seed is not None:
                manual_seed(seed)
            return _state["arch"]
        os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "0")  # importing sciml prints nothing
        import taichi as ti

        debug = os.environ.get("SCIML_DEBUG", "0") not in ("", "0")
        # Taichi's compile-time warnings ("Loading variable ... before anything is stored", "Atomic add
        # may lose precision") are about code sciml generated, not the user's: shown only with SCIML_DEBUG.
        kw = dict(default_fp=ti.f64 if dtype == "float64" else ti.f32, default_ip=ti.i32,
                  log_level=ti.WARN if debug else ti.ERROR, offline_cache=True)
        if os.environ.get("SCIML_CACHE_DIR"):  # e.g. a fresh dir to measure cold-cache compile times
            kw["offline_cache_file_path"] = os.environ["SCIML_CACHE_DIR"]
        kw.update(taichi_kwargs)
        from . import _taichi_front; _taichi_front.install()  # noqa: E702 - the front end's error text, memoized
        candidates = ["cuda", "vulkan", "cpu"] if arch == "auto" else [arch]
        used = None
        for cand in candidates:
            ti_arch = {"cpu": ti.cpu, "vulkan": ti.vulkan, "cuda": ti.cuda}[cand]
            with contextlib.redirect_stdout(io.StringIO()):  # Taichi prints "Starting on arch=..."
                ti.init(arch=ti_arch, **kw)
            actual = ti.lang.impl.current_cfg().arch
            if actual == ti_arch:
                used = cand
                break
            ti.reset()
        if used is None:
            raise ArchUnavailableError(
                f"sciml.init(arch={arch!r}): Taichi could not start this backend here and fell back to "
                f"another one. For vulkan install a Vulkan driver (Debian: apt-get install "
                f"mesa-vulkan-drivers); for cuda an NVIDIA GPU and driver are needed. Use arch='cpu' or 'auto'.")
        if used == "vulkan" and dtype == "float64":
            ti.reset()
            raise ArchUnavailableError(
                "sciml.init(arch='vulkan', dtype='float64'): float64 is not supported by sciml on Vulkan "
                "(many Vulkan devices lack shaderFloat64). Use dtype='float32' or arch='cpu'.")
        _install_lock()
        # Taichi's LLVM context must build the (empty) field tree on the thread that called ti.init:
        # a first kernel compiled on another thread fails ("Assertion failure: std::this_thread::get_id()
        # == main_thread_id_"). Build it now, so later kernels compile on any thread.
        with contextlib.suppress(Exception):
            ti.lang.impl.get_runtime().materialize()
        _state.update(arch=used, dtype=dtype, ti=ti)
        atexit.register(_shutdown)
    if seed is not None or _state["seed"] is None:  # keep a stream the user seeded before the first tensor
        manual_seed(seed)
    return used


def _install_lock():
    """Route every Taichi kernel call (``Kernel.__call__``: compile + launch) and every launch of a
    compiled kernel (``Program.launch_kernel``, which sciml's fast paths call) through LAUNCH_LOCK."""
    from taichi.lang import impl
    from taichi.lang.kernel_impl import Kernel
    P = type(impl.get_runtime().prog)
    if getattr(P.launch_kernel, "sciml_raw", None) is None:
        raw = P.launch_kernel

        def launch_kernel(self, *args, _raw=raw, _lock=LAUNCH_LOCK):
            with _lock:
                return _raw(self, *args)
        launch_kernel.sciml_raw = raw
        P.launch_kernel = launch_kernel
    if getattr(Kernel.__call__, "sciml_raw", None) is None:
        raw_call = Kernel.__call__

        def __call__(self, *args, _raw=raw_call, _lock=LAUNCH_LOCK, **kwargs):
            with _lock:
                return _raw(self, *args, **kwargs)
        __call__.sciml_raw = raw_call
        Kernel.__call__ = __call__


class ThreadLocal(threading.local):
    """Per-thread copy of a small state container (a dict or a list), indexable like it: each thread
    starts from a copy of ``initial``. For flags such as "grad enabled" or "reverse depth", which
    must not leak from one thread's ``grad`` into another's."""

    def __init__(self, initial):
        self.d = initial.copy()

    def __getitem__(self, k):
        return self.d[k]

    def __setitem__(self, k, v):
        self.d[k] = v

    def __contains__(self, k):
        return k in self.d

    def get(self, k, default=None):
        return self.d.get(k, default) if isinstance(self.d, dict) else default

    def update(self, *a, **kw):
        self.d.update(*a, **kw)

    def __repr__(self):
        return f"ThreadLocal({self.d!r})"


def unlocked(launch):
    """The raw ``Program.launch_kernel`` bound method behind a locked one (for callers that hold
    LAUNCH_LOCK around many launches, as a jit replay does)."""
    raw = getattr(getattr(launch, "__func__", None), "sciml_raw", None)
    return launch if raw is None else raw.__get__(launch.__self__, type(launch.__self__))


def on_shutdown(fn):
    """Register ``fn()`` to drop references to Taichi objects before the runtime stops at exit."""
    _shutdown_hooks.append(fn)
    return fn


_EXIT_LOCK_TIMEOUT = 30.0  # seconds _shutdown waits for another thread's kernel call before giving up


def _shutdown():
    """At interpreter exit, stop Taichi while Python is still whole: drop sciml's references to
    compiled kernels and launch contexts (hooks), finish pending work, then ``ti.reset()``.

    Without this, Taichi's Program is destroyed during interpreter finalisation, in whatever order
    module dicts and reference cycles are torn down, while sciml's kernel caches and jit plans
    (pybind objects: compiled kernel data, launch contexts) may still be alive or freed after it.

    LAUNCH_LOCK is taken and never given back. Python runs atexit handlers while daemon threads
    still run; a daemon thread replaying a jit plan once the lock was free again, after
    ``ti.reset()``, jumped into freed kernel code (SIGSEGV at exit in 10 of 10 runs of such a
    script, and 8 of 8 of tests/test_robustness.py's exit script; docs/CORE.md, "Exit-time crash
    investigation"). Now such a thread blocks on the lock until the process ends. The main thread
    owns the lock, so atexit handlers registered before sciml started (they run after this one)
    are not blocked: entry points that start the runtime refuse there (``ensure_init``).
    """
    if _state["arch"] is None or _state["closed"]:
        return
    if not LAUNCH_LOCK.acquire(timeout=_EXIT_LOCK_TIMEOUT):  # pragma: no cover - a kernel running > 30 s
        _state["closed"] = True  # leave the Program to Python's own teardown rather than reset it under a launch
        return
    if _state["closed"]:  # pragma: no cover - called twice
        return
    ti = _state["ti"]
    for fn in reversed(_shutdown_hooks):
        with contextlib.suppress(Exception):
            fn()
    import gc
    gc.collect()
    with contextlib.suppress(Exception):
        ti.sync()
    with contextlib.suppress(Exception):
        ti.reset()
    _state["closed"] = True


def ensure_init():
    """Initialise with defaults if nobody has yet; return the Taichi module."""
    if _state["arch"] is None:
        init()
    elif _state["closed"]:
        raise RuntimeError("sciml: the Taichi runtime was stopped at interpreter exit; sciml cannot run inside "
                           "atexit handlers registered before sciml started.")
    return _state["ti"]


def is_initialized() -> bool:
    return _state["arch"] is not None


def arch() -> str:
    """The arch in use ("cpu", "vulkan" or "cuda"), initialising with defaults if needed."""
    ensure_init()
    return _state["arch"]


def default_dtype() -> str:
    """The default float dtype ("float32" or "float64")."""
    ensure_init()
    return _state["dtype"]


# --- seeding -----------------------------------------------------------------------------
_rng = {"gen": np.random.default_rng(0)}


def manual_seed(seed: int | None):
    """Reseed sciml's default random stream (used when ``rand``/``randn`` get no seed)."""
    _state["seed"] = seed
    _rng["gen"] = np.random.default_rng(seed)


def default_rng() -> np.random.Generator:
    return _rng["gen"]


def num_threads() -> int:
    """Threads Taichi's CPU backend uses (the CPU count unless ``cpu_max_num_threads`` was set)."""
    ensure_init()
    ti = _state["ti"]
    try:
        n = ti.lang.impl.current_cfg().cpu_max_num_threads
        if n:
            return int(n)
    except Exception:  # pragma: no cover - older/newer Taichi
        pass
    return os.cpu_count() or 1
