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

import warnings

import numpy as np

from .. import backend
from ..kernels import _common as C
from .pytree import flatten, unflatten
from .tensor import Tensor

TRACE = backend.TRACE


class JitError(RuntimeError):
    """A function cannot be traced by :func:`jit` (the message says why and what to do)."""


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

    def _untraced(self, fn, *args):
        TRACE[0] = None
        try:
            return fn(*args)
        finally:
            TRACE[0] = self

    def launch(self, fl, args):
        r = self._untraced(fl, *args)
        self.steps.append(("k", fl, args))
        return r

    def vec_launch(self, vl, arrays, ptrs, counts, scalars):
        r = self._untraced(vl, arrays, ptrs, counts, scalars)
        self.steps.append(("v", vl, (list(arrays), list(ptrs), list(counts), list(scalars))))
        return r

    def host(self, fn, args):
        r = self._untraced(fn, *args)
        self.steps.append(("h", fn, args))
        return r

    def created(self, buf, kind, snap=None):
        root = _root(buf)
        if kind == "const" and snap is None:
            snap = np.array(root).reshape(-1)
        self.made[id(root)] = [root, kind, len(self.steps), snap]
        if kind == "empty":
            self.dynamic.add(id(root))

    def host_read(self, buf):
        if id(_root(buf)) in self.dynamic:
            self.fail("reads a value computed from the inputs on the host (float(t), t.item(), t.numpy(), "
                      "bool(t), or a Python `if` on a Tensor); the trace would freeze it. Keep such reads outside "
                      "the jitted function, or compute with sciml ops (sm.where instead of `if`).")

    def fail(self, msg):
        if self.error is None:
            self.error = msg
        raise JitError(msg)


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
        inits = self._inits(rec, slot_of)
        for idx, (kind, fn, args) in enumerate(rec.steps):
            for init in inits.get(idx, ()):
                prog.append(init[0])
                binds.extend(init[1])
            if kind == "v":  # a 16-byte vector kernel (kernels/_vec.py): raw aligned addresses
                arrays, ptrs, counts, scalars = args
                keep.append(args)
                if fn.spec is None:
                    raise JitError("a vector kernel launched without its fast path (SCIML_SAFE_LAUNCH) cannot be "
                                   "replayed.")
                context, launch, ckd, aidx, unit = fn.spec
                ctx = context(ptrs, counts, scalars)
                prog.append((launch, (ckd, ctx)))
                for i, a in enumerate(arrays):
                    r = _root(a)
                    if id(r) in slot_of:
                        binds.append(("vec", ctx, aidx[i], (counts[i] * unit[i], counts[i]), slot_of[id(r)],
                                      ptrs[i] - C.address(r), None))
                continue
            dyn = [(i, a) for i, a in enumerate(args) if _is_buf(a) and id(_root(a)) in slot_of]
            keep.append(args)
            if kind == "k" and fn.spec is not None:
                ctx = fn.context(args)
                prog.append((fn.spec[1], (fn.spec[2], ctx)))
                for i, a in dyn:
                    off, n = _offset(a, _root(a))
                    binds.append(("ctx", ctx, i, fn.spec[3][i], slot_of[id(_root(a))], off, n))
            else:
                call = fn.kernel if kind == "k" else fn
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
        slots = list(in_bufs)
        for root, n, dt in self.fresh:
            slots.append(backend.empty(n, dt) if not self.on_host else np.empty(n, root.dtype))
        views = {}
        for kind, target, i, argkind, slot, off, n in self.binds:
            if kind == "vec":  # byte offset into the slot; vector loads need 16-byte alignment
                p = C.address(slots[slot]) + off
                if p & 15:
                    slots[slot] = base = np.array(slots[slot])  # an aligned copy (numpy aligns new arrays)
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


class Jitted:
    """The callable returned by :func:`jit`. ``stats`` counts traces, replays and eager calls;
    ``plans`` maps each input signature to its replay record (or to the reason it runs eagerly)."""

    def __init__(self, fn, verify=True, fallback=True):
        self.fn, self.verify, self.fallback = fn, verify, fallback
        self.plans = {}
        self.stats = {"traces": 0, "replays": 0, "eager": 0}
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self):
        return f"sciml.jit({getattr(self.fn, '__name__', self.fn)!r}, {len(self.plans)} signature(s))"

    def __call__(self, *args):
        leaves, tdef = flatten(list(args))
        tleaves, key = [], []
        for i, x in enumerate(leaves):
            if isinstance(x, np.ndarray):
                from .tensor import tensor
                x = leaves[i] = tensor(x)
            if isinstance(x, Tensor):
                if x._node is not None or x._tangents:
                    self.stats["eager"] += 1  # inside a transform: derivatives must flow, run eagerly
                    return self.fn(*args)
                tleaves.append(i)
                key.append((x.shape, x.dtype))
            else:
                try:
                    hash(x)
                except TypeError:
                    raise TypeError(f"sciml.jit: argument leaf {i} is a {type(x).__name__}; expected Tensors, numpy "
                                    "arrays, or hashable Python values (which are fixed per trace).") from None
                key.append(("static", type(x).__name__, x))
        key = (repr(tdef), tuple(key))
        plan = self.plans.get(key)
        if plan is None:
            return self._trace(key, leaves, tdef, tleaves, args)
        if isinstance(plan, str):
            self.stats["eager"] += 1
            return self.fn(*args)
        self.stats["replays"] += 1
        return plan.run([_contig(leaves[i]) for i in tleaves])

    def _trace(self, key, leaves, tdef, tleaves, args):
        self.stats["traces"] += 1
        if TRACE[0] is not None:  # a jitted function inside another's trace: its launches join the outer one
            return self.fn(*args)
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
            out = self.fn(*unflatten(tdef, copies))
        except JitError as e:
            TRACE[0] = None
            undo()
            return self._give_up(key, str(e), args)
        finally:
            TRACE[0] = None
            undo()
        if rec.error:
            return self._give_up(key, rec.error, args)
        out_leaves, out_def = flatten(out)
        try:
            plan = _Plan(rec, roots, out_leaves, out_def)
            if self.verify:
                _verify(self.fn, plan, leaves, tdef, tleaves)
        except JitError as e:
            return self._give_up(key, str(e), args)
        self.plans[key] = plan
        return out

    def _give_up(self, key, why, args):
        name = getattr(self.fn, "__name__", repr(self.fn))
        msg = f"sciml.jit({name}): {why}"
        if not self.fallback:
            raise JitError(msg)
        warnings.warn(msg + " Running it eagerly for this input signature.", RuntimeWarning, stacklevel=3)
        self.plans[key] = why
        self.stats["eager"] += 1
        return self.fn(*args)


def _contig(x):
    buf = x._buf
    if isinstance(buf, np.ndarray) and not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    return buf


def _verify(fn, plan, leaves, tdef, tleaves):
    """Run ``fn`` eagerly and the replay on the same perturbed inputs; they must agree."""
    rng = np.random.default_rng(12345)
    pert = list(leaves)
    for i in tleaves:
        x = leaves[i]
        a = x.numpy()
        if x.dtype in ("float32", "float64") and a.size:
            a = a * (1 + 2.0 ** -7 * rng.uniform(-1, 1, a.shape)).astype(a.dtype)
        pert[i] = Tensor._make(backend.from_numpy(a, x.dtype), x.shape, x.dtype)
    want = flatten(fn(*unflatten(tdef, pert)))[0]
    got = flatten(plan.run([_contig(pert[i]) for i in tleaves]))[0]
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


def jit(fn=None, *, verify: bool = True, fallback: bool = True):
    """Compile ``fn`` (a function of Tensors / pytrees of Tensors) into a replay of its kernels.

    Args:
        fn: the function; ``sm.jit`` also works as a decorator, with or without arguments.
        verify: after each trace, check the replay against an eager call on perturbed inputs
            (one extra eager call and replay per signature).
        fallback: when a function cannot be traced (see the module doc), warn and run it eagerly for
            that input signature (True), or raise :class:`JitError` (False).

    Example:
        >>> step = sm.jit(sm.value_and_grad(loss))     # loss(params, x, y)
        >>> for x, y in batches: l, g = step(params, x, y); opt.step(g)
    """
    if fn is None:
        return lambda f: Jitted(f, verify, fallback)
    return Jitted(fn, verify, fallback)
