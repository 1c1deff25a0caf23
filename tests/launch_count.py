"""Count kernel launches, host reads and uploads at Taichi's entry points (test harness).

``install()`` (once per process, right after ``sciml.init`` and before the first kernel runs)
wraps:
  - ``Program.launch_kernel``: every compiled-kernel launch, whatever called it (sciml's
    FastLaunch / VecLaunch fast paths capture this bound method when a kernel is first built,
    Taichi's own ``Kernel.__call__``, ``sciml.jit`` replay);
  - ``Ndarray._ndarray_to_numpy``: a host read (on a device: a copy kernel + ``runtime.sync()``);
  - ``Ndarray._ndarray_from_numpy``: an upload (a copy kernel, a sync on CUDA);
  - ``ti.ndarray``: device allocations.
The copy kernels inside a read or an upload are not counted as launches.

    with counting() as c:
        step()
    c["launch"], c["read"], c["upload"], c["alloc"]
"""
import collections
import contextlib

TOTAL = collections.Counter()
_state = {"installed": False, "inside": 0}


def install():
    if _state["installed"]:
        return
    import taichi as ti
    from taichi.lang import impl
    from taichi.lang._ndarray import Ndarray

    import sciml  # noqa: F401 - the caller has run sciml.init
    from sciml import runtime
    runtime.ensure_init()
    prog_type = type(impl.get_runtime().prog)
    launch, to_np, from_np, nd = (prog_type.launch_kernel, Ndarray._ndarray_to_numpy,
                                  Ndarray._ndarray_from_numpy, ti.ndarray)

    def launch_kernel(self, *a):
        if not _state["inside"]:
            TOTAL["launch"] += 1
        return launch(self, *a)

    raw = getattr(launch, "sciml_raw", None)   # sciml's lock wrapper (runtime._install_lock) keeps the raw launch
    if raw is not None:                        # for callers that hold the lock: count those launches too

        def counted_raw(self, *a):
            if not _state["inside"]:
                TOTAL["launch"] += 1
            return raw(self, *a)
        launch_kernel.sciml_raw = counted_raw

    def transfer(kind, f):
        def wrapped(*a, **k):
            if not _state["inside"]:
                TOTAL[kind] += 1
            _state["inside"] += 1
            try:
                return f(*a, **k)
            finally:
                _state["inside"] -= 1
        return wrapped

    prog_type.launch_kernel = launch_kernel
    Ndarray._ndarray_to_numpy = transfer("read", to_np)
    Ndarray._ndarray_from_numpy = transfer("upload", from_np)
    ti.ndarray = transfer("alloc", nd)
    _state["installed"] = True


@contextlib.contextmanager
def counting():
    """Yield a Counter that holds, after the block, what the block did (launch, read, upload, alloc)."""
    install()
    out = collections.Counter()
    before = collections.Counter(TOTAL)
    try:
        yield out
    finally:
        for k in ("launch", "read", "upload", "alloc"):
            out[k] = TOTAL[k] - before[k]
