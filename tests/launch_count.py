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
    c.names            # Counter: kernel name (the @ti.kernel function's) -> launches in the block

Names come from wrapping ``Kernel.ensure_compiled`` (Python kernel -> its C++ kernel) and
``Program.compile_kernel`` (C++ kernel -> the compiled data that ``launch_kernel`` receives);
a launch of compiled data that was never seen there counts as "?".
"""
import collections
import contextlib

TOTAL = collections.Counter()
NAMES = collections.Counter()  # kernel name -> launches (all so far)
_KERNEL_NAME: dict = {}  # id(C++ kernel) -> name
_DATA_NAME: dict = {}    # id(compiled kernel data) -> (name, the object: kept alive so its id stays unique)
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

    from taichi.lang import kernel_impl
    ensure, compile_ = kernel_impl.Kernel.ensure_compiled, prog_type.compile_kernel

    def ensure_compiled(self, *a):
        key = ensure(self, *a)
        tk = self.compiled_kernels.get(key)
        if tk is not None:
            f = self.func
            mod = (getattr(f, "__module__", None) or "?").rsplit(".", 1)[-1]
            name = f"{mod}:{(getattr(f, '__qualname__', None) or '?').replace('.<locals>', '')}"
            _KERNEL_NAME[id(tk)] = (name, tk)
        return key

    def compile_kernel(self, cfg, caps, tk, *a):
        ckd = compile_(self, cfg, caps, tk, *a)
        _DATA_NAME[id(ckd)] = (_KERNEL_NAME.get(id(tk), ("?",))[0], ckd)
        return ckd

    def _name(a):
        return _DATA_NAME.get(id(a[0]), ("?",))[0] if a else "?"

    def launch_kernel(self, *a):
        if not _state["inside"]:
            TOTAL["launch"] += 1
            NAMES[_name(a)] += 1
        return launch(self, *a)

    raw = getattr(launch, "sciml_raw", None)   # sciml's lock wrapper (runtime._install_lock) keeps the raw launch
    if raw is not None:                        # for callers that hold the lock: count those launches too

        def counted_raw(self, *a):
            if not _state["inside"]:
                TOTAL["launch"] += 1
                NAMES[_name(a)] += 1
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
    kernel_impl.Kernel.ensure_compiled = ensure_compiled
    prog_type.compile_kernel = compile_kernel
    Ndarray._ndarray_to_numpy = transfer("read", to_np)
    Ndarray._ndarray_from_numpy = transfer("upload", from_np)
    ti.ndarray = transfer("alloc", nd)
    _state["installed"] = True


class Counts(collections.Counter):
    """What a ``counting()`` block did; ``.names``: launches per kernel name."""
    names: collections.Counter


@contextlib.contextmanager
def counting():
    """Yield a Counter that holds, after the block, what the block did (launch, read, upload, alloc);
    its ``names`` attribute counts the launches per kernel name."""
    install()
    out = Counts()
    out.names = collections.Counter()
    before, names_before = collections.Counter(TOTAL), collections.Counter(NAMES)
    try:
        yield out
    finally:
        for k in ("launch", "read", "upload", "alloc"):
            out[k] = TOTAL[k] - before[k]
        out.names = collections.Counter({k: v for k, v in (NAMES - names_before).items() if v})
