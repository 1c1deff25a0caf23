"""``sciml.jit``: trace a function once, then replay its kernels without Python.

An eager sciml call pays Python per primitive (the tape, the rules, shape checks, Tensor objects)
and ~9 us per kernel launch. ``jit(f)`` runs ``f`` once on the given shapes and dtypes and records
what reached the machine: every Taichi kernel launch (with its compiled kernel and arguments) and
every host computation on buffers (the CPU BLAS GEMM), in order. Later calls with inputs of the
same shapes and dtypes replay that record: each kernel from a launch context built once (~1.5 us
a launch here), the BLAS calls directly, and nothing else. Gradients, HVPs, Hessians and whole
optimizer evaluations are functions like any other: jit them and their derivative passes are
replayed too (``jit(value_and_grad(loss))``, ``jit(lambda p, v: hvp(loss, p, v))``).

Contract (as ``jax.jit``): the function is traced once per input signature (tree structure,
shapes, dtypes, and the values of non-Tensor arguments); Python control flow and Python state are
fixed at trace. What is checked at trace, with a clear :class:`JitError` (or, by default, a warning
and eager calls for that signature):

- reading a traced value on the host (``float(t)``, ``t.numpy()``, ``if t > 0``) inside ``f``;
- drawing random numbers inside ``f`` (pass them in as arguments);
- launching a Taichi kernel that did not go through sciml's kernel cache (user Taichi kernels);
- a replay that does not reproduce an eager call: after tracing, ``f`` and its replay both run on
  perturbed inputs and must agree (``verify=True``, the default).

Buffers: intermediates are allocated once and reused by every replay; outputs are new buffers on
each call; inputs are read in place. Tensors closed over by ``f`` (parameters of a Module, data)
are read where they are, so in-place updates of them by an optimizer are seen by the next replay,
as in an eager call. Inputs carrying derivative state (inside ``grad`` or ``jvp``) are not traced:
such calls run eagerly (differentiate the function, then jit the result).
"""
from __future__ import annotations

import inspect
import os
import sys
import threading
import warnings
import weakref
from collections import OrderedDict

import numpy as np

from .. import backend, runtime
from ..kernels import _common as C
from .pytree import flatten, unflatten
from .tensor import Tensor

TRACE = backend.TRACE


class JitError(RuntimeError):
    """A function cannot be traced by :func:`jit` (the message says why and what to do)."""


class ConcretizationError(JitError):
    """A jitted function read the value of a traced Tensor on the host (``float(t)``, ``if t``,
    ``t.numpy()``): its value is not fixed across calls, so a trace cannot depend on it."""


_LOCK = runtime.LAUNCH_LOCK
# eager hook: while set (by sciml.autodiff.vmap while a vmap runs), ``hook(args, kwargs)`` returning True makes a
# jitted function run eagerly for that call (batched Tensors would be traced at their per-example shapes)
EAGER_HOOK: list = [None]


def _thread_local_autodiff_state():
    """The autodiff flags (grad enabled, reverse depth, create_graph, tangent-only sweeps, the last
    batch cost) are per thread, so that two threads taking ``grad``/``hessian`` at once do not see
    each other's flags (measured: a wrong Hessian in one of two threads otherwise). Done here until
    primitive.py, backward.py and transforms.py declare them as ``runtime.ThreadLocal`` themselves."""
    from . import backward as _B
    from . import primitive as _P
    from . import transforms as _T
    for mod, name in ((_P, "_state"), (_B, "_needs"), (_B, "_tangent_only"), (_T, "_last_cost")):
        v = getattr(mod, name, None)
        if isinstance(v, (dict, list)):
            setattr(mod, name, runtime.ThreadLocal(v))


_thread_local_autodiff_state()
_SCIML_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_HOW = {"__float__": "float(t)", "__int__": "int(t)", "__bool__": "bool(t) (an `if`, `and`, `or` or `not` on a "
        "Tensor)", "item": "t.item()", "numpy": "t.numpy()", "__array__": "np.asarray(t)", "tolist": "t.tolist()",
        "__index__": "an index (operator.index(t))", "__len__": "len(t)", "__repr__": "repr(t)", "__str__": "str(t)",
        "__format__": "format(t) / an f-string"}


def _where_read():
    """(how, tensor, 'file:line in fn: source') of the host read in progress: the outermost Tensor
    method that read (``float(t)``, ``t.numpy()``), its Tensor, and the first frame outside sciml."""
    how = tensor = where = None
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if fn.startswith(_SCIML_DIR):
            if fn.endswith("tensor.py") and f.f_code.co_name in _HOW:
                how, tensor = _HOW[f.f_code.co_name], f.f_locals.get("self")
        else:
            import linecache
            line = linecache.getline(fn, f.f_lineno).strip()
            where = f"{fn}:{f.f_lineno} in {f.f_code.co_name}" + (f": `{line}`" if line else "")
            break
        f = f.f_back
    return how or "a host read (t.numpy())", tensor if isinstance(tensor, Tensor) else None, where


def _root(a):
    """The array that owns ``a``'s memory (numpy views walk to their base; device arrays are roots)."""
    if isinstance(a, np.ndarray):
        while isinstance(a.base, np.ndarray):
            a = a.base
    return a


def _is_buf(a) -> bool:
    return isinstance(a, np.ndarray) or (not isinstance(a, (int, float, bool, str, type(None)))
                                         and hasattr(a, "arr") and hasattr(a, "shape"))


class _Recorder:
    """Collects what one eager run of the traced function sends to the machine."""

    def __init__(self, input_roots):
        self.steps = []  # ("k", FastLaunch, args) | ("h", fn, args)
        self.made = {}  # id(root) -> [root, kind, step index, snapshot]
        self.dynamic = {id(_root(r)) for r in input_roots}  # roots whose values depend on the inputs
        self.error = None
        self.thread = threading.get_ident()  # only this thread's calls belong to the trace

    def _other(self):
        return threading.get_ident() != self.thread

    def _untraced(self, fn, *args):
        if self._other():  # another thread: wait for the trace to end (it holds the lock), then run as usual
            with _LOCK:
                return fn(*args)
        TRACE[0] = None
        try:
            return fn(*args)
        finally:
            TRACE[0] = self

    def launch(self, fl, args):
        r = self._untraced(fl, *args)
        if not self._other():
            self.steps.append(("k", fl, args))
        return r

    def vec_launch(self, vl, arrays, ptrs, counts, scalars):
        r = self._untraced(vl, arrays, ptrs, counts, scalars)
        if not self._other():
            self.steps.append(("v", vl, (list(arrays), list(ptrs), list(counts), list(scalars))))
        return r

    def host(self, fn, args):
        r = self._untraced(fn, *args)
        if not self._other():
            self.steps.append(("h", fn, args))
        return r

    def created(self, buf, kind, snap=None):
        if self._other():
            return
        root = _root(buf)
        if kind == "const" and snap is None:
            snap = np.array(root).reshape(-1)
        self.made[id(root)] = [root, kind, len(self.steps), snap]
        if kind == "empty":
            self.dynamic.add(id(root))

    def host_read(self, buf, shape=None, dtype=None):
        if self._other() or id(_root(buf)) not in self.dynamic:
            return
        how, t, where = _where_read()
        if t is not None:
            shape, dtype = t.shape, t.dtype
        what = f"a traced Tensor (shape {tuple(shape)}, {dtype})" if shape is not None else "a traced Tensor"
        self.fail(f"concretization error: {how} reads the value of {what} computed from the inputs" +
                  (f", at {where}" if where else "") + ". It reads a value computed from the inputs on the host; "
                  "while tracing, that value is the one of this call only, and the trace would freeze it. Fix: "
                  "compute with sciml ops instead (sm.where instead of a Python `if`, sm.max instead of max()), "
                  "move the read outside the jitted function, or, if the value is a setting rather than data, "
                  "pass it as a Python number marked static (jit(f, static_argnums=...) or static_argnames=...). "
                  "To run such inputs eagerly instead, use jit(f, fallback='eager').", ConcretizationError)

    def fail(self, msg, cls=None):
        if self._other():
            return
        if self.error is None:
            self.error = msg
        raise (cls or JitError)(msg)


def _guard_untracked():
    """While tracing, a Taichi kernel launched outside sciml's kernel cache (a user's kernel, a
    simulation) cannot be replayed: note it. Returns a function that undoes the patch."""
    try:
        from taichi.lang.kernel_impl import Kernel
    except Exception:  # pragma: no cover
        return lambda: None
    orig = Kernel.__call__

    def call(self, *args, **kwargs):
        rec = TRACE[0]
        if rec is not None and not getattr(self.func, "__module__", "").startswith("taichi"):
            rec.error = rec.error or (f"launches the Taichi kernel {getattr(self.func, '__name__', '?')!r} directly "
                                      "(a user kernel, taichi_function or a simulation), which a replay cannot "
                                      "repeat; call such functions outside the jitted function.")
        return orig(self, *args, **kwargs)
    Kernel.__call__ = call

    def undo():
        Kernel.__call__ = orig
    return undo


class _Plan:
    """The replayable record of one trace: kernel launches with prebuilt contexts, host calls,
    and where the inputs and fresh output buffers go."""

    def __init__(self, rec, in_roots, out_leaves, out_def):
        on_host = backend.on_host()
        in_roots = [_root(r) for r in in_roots]
        slot_of = {id(r): i for i, r in enumerate(in_roots)}
        self.fresh = []  # (n, dtype) of output roots made anew per call
        made = rec.made
        # outputs: views of an input, of a fresh per-call root, or constants returned as they are
        self.outs = []
        for leaf in out_leaves:
            if not isinstance(leaf, Tensor) or leaf._buf is None:
                self.outs.append(("const", leaf))
                continue
            root = _root(leaf._buf)
            if id(root) not in slot_of and id(root) in made:
                slot_of[id(root)] = len(in_roots) + len(self.fresh)
                self.fresh.append((root, _size(root), _dtype_name(root)))
            if id(root) in slot_of:
                off, n = _offset(leaf._buf, root)
                self.outs.append(("slot", slot_of[id(root)], off, n, leaf.shape, leaf.dtype))
            else:
                self.outs.append(("const", leaf))
        self.out_def = out_def
        # the program: steps in order, with the re-initialisations that replays need
        prog, binds, keep = [], [], []
        # A launch context is built once and relaunched with new arguments on the CPU and Vulkan. Taichi's
        # CUDA launcher rewrites a context's ndarray pointers in place (DeviceAllocation -> raw device
        # address), so a CUDA context relaunched segfaults (seen on an H100): a fresh one per launch there.
        reuse_ctx = on_host or runtime.arch() == "vulkan"
        inits = self._inits(rec, slot_of)
        for idx, (kind, fn, args) in enumerate(rec.steps):
            for init in inits.get(idx, ()):
                prog.append(init[0])
                binds.extend(init[1])
            if kind == "v":  # a vector kernel (kernels/_vec.py): raw addresses aligned for its vectors
                arrays, ptrs, counts, scalars = args
                keep.append(args)
                if fn.spec is None:
                    raise JitError("a vector kernel launched without its fast path (SCIML_SAFE_LAUNCH) cannot be "
                                   "replayed.")
                context, launch, ckd, aidx, unit = fn.spec
                ctx = context(ptrs, counts, scalars)
                prog.append((runtime.unlocked(launch), (ckd, ctx)))  # run() holds the lock
                for i, a in enumerate(arrays):
                    r = _root(a)
                    if id(r) in slot_of:
                        # the alignment array i's vectors need: their size (16, 32 or 64 bytes; 4 or 8 for
                        # a scalar-typed argument), at most ALIGN
                        binds.append(("vec", ctx, aidx[i], (counts[i] * unit[i], counts[i]), slot_of[id(r)],
                                      ptrs[i] - C.address(r), min(unit[i], backend.ALIGN)))
                continue
            dyn = [(i, a) for i, a in enumerate(args) if _is_buf(a) and id(_root(a)) in slot_of]
            keep.append(args)
            if kind == "k" and fn.spec is not None and reuse_ctx:
                ctx = fn.context(args)
                prog.append((runtime.unlocked(fn.spec[1]), (fn.spec[2], ctx)))  # run() holds the lock
                for i, a in dyn:
                    off, n = _offset(a, _root(a))
                    binds.append(("ctx", ctx, i, fn.spec[3][i], slot_of[id(_root(a))], off, n))
            else:
                # a kernel with a fast path: its own call (a fresh launch context per launch on CUDA)
                call = (fn if fn.spec is not None else fn.kernel) if kind == "k" else fn
                lst = list(args)
                prog.append((call, lst))
                for i, a in dyn:
                    off, n = _offset(a, _root(a))
                    binds.append(("list", lst, i, None, slot_of[id(_root(a))], off, n))
        for init in inits.get(len(rec.steps), ()):
            prog.append(init[0])
            binds.extend(init[1])
        self.prog, self.binds, self._keep = prog, binds, keep
        self.on_host = on_host
        # host buffers from outside the trace (parameters, data, Dropout's rng_state, BatchNorm's running
        # statistics) that the steps may write in place: _verify restores them around its two checking runs
        ext = {}
        for kind, fn, args in rec.steps:
            for a in (args[0] if kind == "v" else args):
                if isinstance(a, np.ndarray):
                    r = _root(a)
                    if isinstance(r, np.ndarray) and id(r) not in slot_of and id(r) not in made:
                        ext[id(r)] = r
        self.external = list(ext.values())
        self.n_kernels = sum(1 for k, f, _ in rec.steps if k == "v" or (k == "k" and f.spec is not None))
        self.n_calls = len(rec.steps) - self.n_kernels

    @staticmethod
    def _inits(rec, slot_of):
        """Buffers made during the trace with contents (zeros, constants) that the steps change, or
        that are fresh per call: restored at their creation point on every replay."""
        inits = {}
        for root, kind, idx, snap in rec.made.values():
            if kind == "empty":
                continue
            fresh = id(root) in slot_of
            if not fresh:
                now = root.reshape(-1) if isinstance(root, np.ndarray) else root.to_numpy()
                if (not np.any(now)) if kind == "zeros" else np.array_equal(now, snap):
                    continue  # unchanged by the steps: nothing to restore
            lst = [root] if kind == "zeros" else [root, snap]
            binds = [("list", lst, 0, None, slot_of[id(root)], 0, _size(root))] if fresh else []
            inits.setdefault(idx, []).append(((_fill_zero if kind == "zeros" else _copy_in, lst), binds))
        return inits

    def run(self, in_bufs):
        # one replay at a time: Taichi launches are not thread-safe (runtime.LAUNCH_LOCK), and the
        # launch contexts and intermediate buffers of a plan are shared by every call
        with _LOCK:
            return self._run(in_bufs)

    def _run(self, in_bufs):
        slots = list(in_bufs)
        for root, n, dt in self.fresh:  # on the host ALIGN-byte aligned, as every buffer made while tracing
            slots.append(backend.aligned_empty(n, dt) if self.on_host else backend.empty(n, dt))
        views = {}
        for kind, target, i, argkind, slot, off, n in self.binds:
            if kind == "vec":  # byte offset into the slot; n: the alignment the kernel's vectors need
                p = C.address(slots[slot]) + off
                if p & (n - 1):  # an input at another alignment than in the trace: an aligned copy
                    slots[slot] = base = _aligned_copy(slots[slot], off)
                    views.clear()
                    p = C.address(base) + off
                target.set_arg_external_array_with_shape(i, p, argkind[0], (argkind[1],), 0)
                continue
            key = (slot, off, n)
            a = views.get(key)
            if a is None:
                base = slots[slot]
                a = base if off == 0 and n == _size(base) else base[off:off + n]
                views[key] = a
            if kind == "ctx":
                C.set_arg(target, i, argkind, a)
            else:
                target[i] = a
        for f, args in self.prog:
            f(*args)
        outs = []
        for o in self.outs:
            if o[0] == "const":
                outs.append(o[1])
                continue
            _, slot, off, n, shape, dtype = o
            base = slots[slot]
            buf = base if off == 0 and n == _size(base) else base[off:off + n]
            outs.append(Tensor._make(buf, shape, dtype))
        return unflatten(self.out_def, outs)


def _aligned_copy(a, off):
    """A copy of the flat host array ``a`` placed so that its byte ``off`` starts on an ALIGN-byte boundary."""
    raw = np.empty(a.nbytes + backend.ALIGN, np.uint8)
    s = -(C.address(raw) + off) & (backend.ALIGN - 1)
    c = np.frombuffer(memoryview(raw)[s:s + a.nbytes], a.dtype)
    c[...] = a.reshape(-1)
    return c


def _fill_zero(buf):
    buf.fill(0)


def _copy_in(buf, snap):
    if isinstance(buf, np.ndarray):
        np.copyto(buf.reshape(-1)[: snap.size], snap.reshape(-1))
    else:
        buf.from_numpy(snap)


def _size(a) -> int:
    return int(a.size) if isinstance(a, np.ndarray) else int(a.shape[0])


def _dtype_name(a) -> str:
    if isinstance(a, np.ndarray):
        return {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64", np.dtype(np.int32): "int32",
                np.dtype(np.uint8): "bool"}[a.dtype]
    import taichi as ti
    return {ti.f32: "float32", ti.f64: "float64", ti.i32: "int32", ti.u8: "bool"}[a.dtype]


def _offset(a, root):
    """(element offset, element count) of the 1-D contiguous array ``a`` inside ``root``."""
    if not isinstance(a, np.ndarray):
        if a is not root:
            raise JitError("sciml.jit: a device buffer view cannot be rebound.")
        return 0, _size(a)
    if a.ndim != 1 or not a.flags.c_contiguous or a.dtype != root.dtype:
        raise JitError("sciml.jit: a kernel argument is a strided or reinterpreted view of an input or output "
                       f"buffer (shape {a.shape}, dtype {a.dtype}); this cannot be rebound.")
    off = (C.address(a) - C.address(root)) // a.itemsize if a.size else 0
    return int(off), int(a.size)


_ALL: "weakref.WeakSet[Jitted]" = weakref.WeakSet()


@runtime.on_shutdown
def _drop_plans():
    """At exit: free every plan (launch contexts, compiled kernels) before Taichi stops."""
    for j in list(_ALL):
        j.plans.clear()


_FALLBACKS = {"raise": "raise", "eager": "eager", False: "raise", True: "eager", None: "raise"}


class Jitted:
    """The callable returned by :func:`jit`. ``stats`` counts traces, replays and eager calls,
    ``evictions`` the signatures dropped; ``plans`` maps each input signature to its replay record (or to the reason it runs
    eagerly), most recently used last, at most ``max_traces`` of them."""

    def __init__(self, fn, verify=True, fallback="raise", max_traces=32, static_argnums=(), static_argnames=()):
        if fallback not in _FALLBACKS:
            raise ValueError(f"sciml.jit(fallback=...): got {fallback!r}; expected 'raise' or 'eager'.")
        if max_traces is not None and (isinstance(max_traces, bool) or not isinstance(max_traces, int)
                                       or max_traces < 1):
            raise ValueError(f"sciml.jit(max_traces=...): got {max_traces!r}; expected a positive int or None "
                             "(no limit).")
        self.fn, self.verify, self.fallback, self.max_traces = fn, verify, _FALLBACKS[fallback], max_traces
        self.static_argnums, self.static_argnames = _statics(fn, static_argnums, static_argnames)
        self.plans = OrderedDict()
        self.stats = {"traces": 0, "replays": 0, "eager": 0}
        self.evictions = 0  # signatures dropped to keep at most max_traces
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)
        _ALL.add(self)

    def __repr__(self):
        return f"sciml.jit({getattr(self.fn, '__name__', self.fn)!r}, {len(self.plans)} signature(s))"

    def _split(self, args, kwargs):
        """(dynamic pytree, static key, rebuild(tree) -> (args, kwargs))."""
        n = len(args)
        snums = {i + n if i < 0 else i for i in self.static_argnums}
        static_pos = {i: args[i] for i in sorted(snums) if 0 <= i < n}
        static_kw = {k: kwargs[k] for k in sorted(self.static_argnames) if k in kwargs}
        skey = []
        for where, v in [(f"argument {i}", v) for i, v in static_pos.items()] + \
                        [(f"argument {k!r}", v) for k, v in static_kw.items()]:
            if isinstance(v, (Tensor, np.ndarray)):
                raise TypeError(f"sciml.jit: static {where} is a {type(v).__name__}; static arguments must be "
                                "hashable Python values (settings), not arrays. Pass arrays as ordinary arguments.")
            try:
                hash(v)
            except TypeError:
                raise TypeError(f"sciml.jit: static {where} is a {type(v).__name__}, which is not hashable; static "
                                "arguments must be hashable (use a tuple instead of a list, a frozenset instead of "
                                "a set).") from None
            skey.append((where, type(v).__name__, v))
        dyn_args = [a for i, a in enumerate(args) if i not in static_pos]
        dyn_kw = {k: v for k, v in kwargs.items() if k not in static_kw}

        def rebuild(tree):
            a, kw = tree
            it = iter(a)
            full = [static_pos[i] if i in static_pos else next(it) for i in range(n)]
            return full, {**kw, **static_kw}
        return [dyn_args, dyn_kw], tuple(skey), rebuild

    def __call__(self, *args, **kwargs):
        h = EAGER_HOOK[0]
        if h is not None and h(args, kwargs):
            self.stats["eager"] += 1
            return self.fn(*args, **kwargs)
        tree, skey, rebuild = self._split(args, kwargs)
        leaves, tdef = flatten(tree)
        tleaves, key = [], []
        for i, x in enumerate(leaves):
            if isinstance(x, np.ndarray):
                from .tensor import tensor
                x = leaves[i] = tensor(x)
            if isinstance(x, Tensor):
                if x._node is not None or x._tangents:
                    self.stats["eager"] += 1  # inside a transform: derivatives must flow, run eagerly
                    return self.fn(*args, **kwargs)
                tleaves.append(i)
                key.append((x.shape, x.dtype))
            else:
                try:
                    hash(x)
                except TypeError:
                    raise TypeError(f"sciml.jit: argument leaf {i} is a {type(x).__name__}; expected Tensors, numpy "
                                    "arrays, or hashable Python values (which are fixed per trace).") from None
                key.append(("static", type(x).__name__, x))
        key = (repr(tdef), tuple(key), skey)
        plan = self.plans.get(key)
        if plan is None:
            return self._trace(key, leaves, tdef, tleaves, args, kwargs, rebuild)
        self.plans.move_to_end(key)
        if isinstance(plan, str):
            self.stats["eager"] += 1
            return self.fn(*args, **kwargs)
        self.stats["replays"] += 1
        return plan.run([_contig(leaves[i]) for i in tleaves])

    def _store(self, key, plan):
        self.plans[key] = plan
        self.plans.move_to_end(key)
        while self.max_traces is not None and len(self.plans) > self.max_traces:
            self.plans.popitem(last=False)  # the least recently used signature
            self.evictions += 1

    def _trace(self, key, leaves, tdef, tleaves, args, kwargs, rebuild):
        self.stats["traces"] += 1
        if TRACE[0] is not None and not TRACE[0]._other():  # inside another trace: its launches join it
            return self.fn(*args, **kwargs)
        call = _Call(self.fn, tdef, rebuild)
        with _LOCK:  # one trace at a time; other threads' launches wait for it (see _Recorder._other)
            copies = list(leaves)
            roots = []
            for i in tleaves:
                x = leaves[i]
                buf = backend.from_numpy(backend.to_numpy(x._buf, x.shape, x.dtype), x.dtype) if x.size else \
                    backend.empty(0, x.dtype)
                roots.append(buf)
                copies[i] = Tensor._make(buf, x.shape, x.dtype)
            rec = _Recorder(roots)
            undo = _guard_untracked()
            TRACE[0] = rec
            try:
                out = call(copies)
            except JitError as e:
                TRACE[0] = None
                undo()
                return self._give_up(key, e, args, kwargs)
            finally:
                TRACE[0] = None
                undo()
            if rec.error:
                return self._give_up(key, JitError(rec.error), args, kwargs)
            out_leaves, out_def = flatten(out)
            try:
                plan = _Plan(rec, roots, out_leaves, out_def)
                if self.verify:
                    _verify(call, plan, leaves, tleaves)
            except JitError as e:
                return self._give_up(key, e, args, kwargs)
        self._store(key, plan)
        return out

    def _give_up(self, key, err, args, kwargs):
        name = getattr(self.fn, "__name__", repr(self.fn))
        msg = f"sciml.jit({name}): {err}"
        if self.fallback == "raise":
            raise type(err)(msg) from None
        warnings.warn(msg + " Running it eagerly for this input signature.", RuntimeWarning, stacklevel=3)
        self._store(key, str(err))
        self.stats["eager"] += 1
        return self.fn(*args, **kwargs)


class _Call:
    """Calls ``fn`` with a flat list of dynamic leaves put back with the static arguments."""

    def __init__(self, fn, tdef, rebuild):
        self.fn, self.tdef, self.rebuild = fn, tdef, rebuild

    def __call__(self, leaves):
        a, kw = self.rebuild(unflatten(self.tdef, leaves))
        return self.fn(*a, **kw)


def _statics(fn, nums, names):
    """Normalise static_argnums / static_argnames, each completed from the other through ``fn``'s
    signature (as jax.jit does), so ``f(x, n=3)`` and ``f(x, 3)`` are both static in ``n``."""
    if isinstance(nums, int) and not isinstance(nums, bool):
        nums = (nums,)
    if isinstance(names, str):
        names = (names,)
    try:
        nums = tuple(nums)
        names = tuple(names)
    except TypeError:
        raise TypeError("sciml.jit: static_argnums must be an int or a sequence of ints and static_argnames a str "
                        "or a sequence of str.") from None
    for i in nums:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"sciml.jit(static_argnums=...): got {i!r}; expected ints (argument positions).")
    for k in names:
        if not isinstance(k, str):
            raise TypeError(f"sciml.jit(static_argnames=...): got {k!r}; expected argument names (str).")
    nums, names = set(nums), set(names)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return tuple(sorted(nums)), tuple(sorted(names))
    pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    known = {p.name for p in params}
    has_var_kw = any(p.kind == p.VAR_KEYWORD for p in params)
    has_var_pos = any(p.kind == p.VAR_POSITIONAL for p in params)
    for k in list(names):
        if k not in known and not has_var_kw:
            raise ValueError(f"sciml.jit(static_argnames=...): {getattr(fn, '__name__', fn)!r} has no argument "
                             f"{k!r}; its arguments are {', '.join(p.name for p in params) or '(none)'}.")
        if k in pos:
            nums.add(pos.index(k))
    for i in list(nums):
        j = i if i >= 0 else i + len(pos)
        if 0 <= j < len(pos):
            names.add(pos[j])
        elif i >= 0 and not has_var_pos:
            raise ValueError(f"sciml.jit(static_argnums=...): argument {i} is out of range for "
                             f"{getattr(fn, '__name__', fn)!r}, which takes {len(pos)} positional argument(s).")
    return tuple(sorted(nums)), tuple(sorted(names))


def _contig(x):
    buf = x._buf
    if isinstance(buf, np.ndarray) and not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    return buf


def _verify(call, plan, leaves, tleaves):
    """Run the function eagerly and the replay on the same perturbed inputs; they must agree."""
    rng = np.random.default_rng(12345)
    pert = list(leaves)
    for i in tleaves:
        x = leaves[i]
        a = x.numpy()
        if x.dtype in ("float32", "float64") and a.size:
            a = a * (1 + 2.0 ** -7 * rng.uniform(-1, 1, a.shape)).astype(a.dtype)
        pert[i] = Tensor._make(backend.from_numpy(a, x.dtype), x.shape, x.dtype)
    # both checking runs start from the state the traced call left, and leave it so: buffers written in place
    # (a Dropout key counter, running statistics) would otherwise differ between them and advance twice more
    saved = [r.copy() for r in plan.external]

    def restore():
        for r, v in zip(plan.external, saved):
            np.copyto(r, v)
    try:
        want = flatten(call(pert))[0]
        want = [Tensor._make(backend.from_numpy(w.numpy(), w.dtype), w.shape, w.dtype) if isinstance(w, Tensor)
                else w for w in want]  # (a copy: an output may alias a restored buffer)
        restore()
        got = flatten(plan.run([_contig(pert[i]) for i in tleaves]))[0]
    finally:
        restore()
    for j, (w, g) in enumerate(zip(want, got)):
        if not isinstance(w, Tensor):
            continue
        a, b = w.numpy().astype(np.float64), g.numpy().astype(np.float64)
        tol = 1e-4 if w.dtype == "float32" else 1e-10
        scale = max(float(np.nanmax(np.abs(a))) if a.size else 0.0, 1e-30)
        if a.shape != b.shape or not np.allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True):
            err = float(np.nanmax(np.abs(a - b))) if a.shape == b.shape and a.size else float("nan")
            raise JitError(f"the replay of output {j} differs from an eager call on other inputs (max abs. difference "
                           f"{err:.3g}, scale {scale:.3g}): the function computes something outside sciml's kernels "
                           "or depends on Python state; run it without jit.")


def jit(fn=None, *, verify: bool = True, fallback="raise", max_traces: int | None = 32, static_argnums=(),
        static_argnames=()):
    """Compile ``fn`` (a function of Tensors / pytrees of Tensors) into a replay of its kernels.

    Args:
        fn: the function; ``sm.jit`` also works as a decorator, with or without arguments.
        verify: after each trace, check the replay against an eager call on perturbed inputs
            (one extra eager call and replay per signature).
        fallback: what happens when a function cannot be traced (see the module doc): "raise"
            (default) raises :class:`JitError` (:class:`ConcretizationError` for a host read of a
            traced value, naming the read and the line); "eager" warns and runs the function
            eagerly for that input signature. (True / False are accepted for "eager" / "raise".)
        max_traces: at most this many input signatures are kept (least recently used dropped
            first; ``.evictions`` counts them); None keeps all.
        static_argnums, static_argnames: arguments (positions / names, each completed from the
            other through ``fn``'s signature) passed through as they are, not traced: their values
            (hashable, compared with ==) are part of the signature, so each new value traces anew.

    Example:
        >>> step = sm.jit(sm.value_and_grad(loss))     # loss(params, x, y)
        >>> for x, y in batches: l, g = step(params, x, y); opt.step(g)
        >>> f = sm.jit(lambda x, n: x ** n, static_argnums=1)
    """
    kw = dict(verify=verify, fallback=fallback, max_traces=max_traces, static_argnums=static_argnums,
              static_argnames=static_argnames)
    if fn is None:
        return lambda f: Jitted(f, **kw)
    return Jitted(fn, **kw)
