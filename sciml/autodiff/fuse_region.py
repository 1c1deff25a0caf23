"""``sciml.fuse_region(fn)``: a whole expression of slices, elementwise ops and sums as ONE kernel.

:func:`sciml.fuse` takes elementwise chains on Tensors of one shape. ``fuse_region`` takes what a
loss is made of: Tensors of any shapes, slices of them (``u[:n]``, ``u[n:]``, ``u[:, 1]``: affine
strided views), elementwise ops with scalar broadcasting, reshapes, and whole-array ``sum`` / ``mean``,
e.g. ``lambda u, ut: ((ut[:n] + u[:n] * u[:n]) ** 2).mean() + (u[n:] ** 2).mean()``. The first call
for a signature runs ``fn`` once and reads the primitives it applied off the tape; the region is then
ONE generated Taichi kernel (``kernels/fused_region.py``) however many slices, ops and sums it holds.

Derivatives: the VJP is the tape's own reverse sweep of ``fn`` (its rules: slices' adjoints, the
mean's broadcast, the cotangent sums), traced the same way, so a first-order gradient of every input
is ONE more kernel, with the same operations in the same order as the unfused sweep (bit-identical
values, sums included where ``kernels/reduce.py`` takes its scalar path). Where a higher derivative is
being recorded (``create_graph``: grad of grad, Hessians) each input's cotangent is a fused region of
its own (differentiable again the same way); JVPs use the composite's rules. A function with an op
outside this set (a GEMM, ``where``, a comparison) runs unfused (``.fallback`` says why), or raises
with ``strict=True``.

Contract (as :func:`sciml.jit`): ``fn`` is pure and applies the same ops for the same input shapes;
Tensors it captures (not arguments) are read where they are at each call, so in-place updates are
seen, but a captured Tensor must not take part in differentiation (pass it as an argument).
"""
from __future__ import annotations

import functools
import math

from .. import backend
from ..kernels import fused_region as KR
from . import backward as B
from . import primitive as P
from .fuse import detached_leaves
from .tensor import Tensor, zeros

_ALIAS = {"identity", "reshape"}


class RegionError(ValueError):
    """``fn`` applies an op that a fused region cannot hold (the message names it)."""


class _Region:
    """One traced signature: the node list, its kernel, and what is bound at each call."""

    def __init__(self, nodes, outputs, out_shapes, n_args, captured, dtype):
        self.nodes, self.outputs, self.out_shapes = nodes, outputs, out_shapes
        self.n_args, self.captured, self.dtype = n_args, captured, dtype
        self.src, self.n_red = KR.source(nodes, [(j, math.prod(s)) for j, s in zip(outputs, out_shapes)],
                                         backend.on_host(), n_args + len(captured))
        self.kernel = None
        self.bwd = {}  # mask -> _Region of all wanted cotangents (first order) or None
        self.grads = {}  # input i -> fuse_region of its cotangent (recorded: higher order)

    def run(self, ts):
        if self.kernel is None:
            self.kernel = KR.build(self.src, self.dtype)
        outs = [backend.empty(math.prod(s), self.dtype) for s in self.out_shapes]
        red = backend.empty(self.n_red, self.dtype)
        self.kernel(*[t._buf for t in ts], *[c._buf for c in self.captured], *outs, red)
        return outs


def _trace(fn, name, ts):
    """Run fn on leaves standing for ``ts``; return (nodes, outputs, out_shapes, captured Tensors).
    Inside a :func:`sciml.jit` trace this eager run is not recorded (only the region's launch is)."""
    rec, backend.TRACE[0] = backend.TRACE[0], None
    try:
        return _trace_eager(fn, name, ts)
    finally:
        backend.TRACE[0] = rec


def _trace_eager(fn, name, ts):
    leaves = detached_leaves(ts)
    with P.enable_grad():
        out = fn(*leaves)
    multi = isinstance(out, (list, tuple))
    outs = list(out) if multi else [out]
    for o in outs:
        if not isinstance(o, Tensor):
            raise RegionError(f"fuse_region({name}): fn returned {type(o).__name__}; expected a Tensor "
                              "(or a list of Tensors).")
        if o.dtype != ts[0].dtype:
            raise RegionError(f"fuse_region({name}): fn returned dtype {o.dtype}; expected {ts[0].dtype}.")
    arg_of = {id(l._node): i for i, l in enumerate(leaves)}
    nodes, captured, seen = [], [], {}

    def add(kind, args, attr, n):
        nodes.append((kind, tuple(args), attr, int(n)))
        return len(nodes) - 1

    def visit(x):
        node = x._node
        if node is None:  # a constant or a captured Tensor: read where it is at each call
            key = ("c", id(x))
            if key not in seen:
                captured.append(x)
                seen[key] = add("x", (), len(ts) + len(captured) - 1, x.size)
            return seen[key]
        key = id(node)
        if key in seen:
            return seen[key]
        if key in arg_of:
            seen[key] = r = add("x", (), arg_of[key], x.size)
            return r
        if node.prim is None:
            raise RegionError(f"fuse_region({name}): fn uses a Tensor that takes part in differentiation but is "
                              "not an argument; pass it as an argument.")
        op, prm, ins = node.prim.name, node.params, node.inputs
        n = math.prod(node.out_shape)
        if op in _ALIAS or (op == "broadcast_to" and ins[0].size in (1, n)):
            r = visit(ins[0])
        elif op == "sum" and n == 1:
            r = add("sum", [visit(ins[0])], (), 1)
        elif op in ("view", "unview") and _affine(prm["meta"]) is not None:
            off, s = _affine(prm["meta"])  # (an unview's input may be a broadcast scalar: m from the meta)
            m = math.prod(prm["meta"][2:2 + prm["meta"][1]])
            r = add(op, [visit(ins[0])], (off, s) if op == "view" else (off, s, m), n)
        elif (op in KR.UNARY or op in KR.BINARY) and not prm and all(
                i.size == 1 or (i.size == n and i.shape == node.out_shape) for i in ins):
            r = add("op", [visit(i) for i in ins], op, n)
        else:
            shapes = ", ".join(str(i.shape) for i in ins)
            raise RegionError(f"fuse_region({name}): op {op!r} on shapes {shapes} -> {node.out_shape} cannot be "
                              "fused (elementwise ops with scalar broadcasting, strided slices, reshapes and "
                              "whole-array sum/mean only).")
        seen[key] = r
        return r
    outputs = [visit(o) for o in outs]
    if len(ts) + len(captured) + len(outs) + 1 > 64:
        raise RegionError(f"fuse_region({name}): {len(ts) + len(captured)} arrays and {len(outs)} outputs exceed "
                          "Taichi's 64 kernel arguments; split the function.")
    return nodes, outputs, [o.shape for o in outs], captured, multi


def _affine(meta):
    """(offset, step) when the view's flat index i reads ``offset + i * step``, else None."""
    off, nd = meta[0], meta[1]
    shape, strides = meta[2:2 + nd], meta[2 + nd:2 + 2 * nd]
    step, inner = None, 1
    for d in range(nd - 1, -1, -1):
        if shape[d] == 1:
            continue
        if step is None:
            step = strides[d] // inner if strides[d] % inner == 0 else -1
        if step < 1 or strides[d] != step * inner:
            return None
        inner *= shape[d]
    return int(off), int(step or 1)


def _check(name, args):
    dtype = next((a.dtype for a in args if isinstance(a, Tensor)), None)
    for i, a in enumerate(args):
        if not isinstance(a, Tensor):
            raise TypeError(f"fuse_region({name}): argument {i} has type {type(a).__name__}; expected a Tensor "
                            "(numbers and settings belong inside fn).")
        if a.dtype != dtype or dtype not in ("float32", "float64"):
            raise TypeError(f"fuse_region({name}): argument {i} has dtype {a.dtype}; expected float32 or float64, "
                            "one dtype for all.")


def fuse_region(fn, strict=False):
    """Fuse a function of Tensors made of slices, elementwise ops and sums into one Taichi kernel.

    Args:
        fn: a pure function of Tensors (any shapes, one float dtype) returning a Tensor or a list of
            Tensors, built from elementwise sciml ops (as :func:`sciml.fuse`), scalars (numbers, 0-d
            Tensors), slices with steps (``u[a:b]``, ``u[:, k]``), reshapes and whole-array ``sum`` /
            ``mean``.
        strict: raise :class:`RegionError` when ``fn`` applies another op (default: run it unfused and
            say why in ``.fallback``).
    Returns:
        A function with ``fn``'s signature: one kernel launch forward, one for a first-order gradient
        of all its inputs; differentiable to any order.
    Example:
        >>> loss = sm.fuse_region(lambda u, ut: ((ut[:8] + u[:8] * u[:8]) ** 2).mean() + (u[8:] ** 2).mean())
        >>> sm.grad(loss, argnums=(0, 1))(u, ut)      # 1 launch forward, 1 for both gradients
    """
    name = getattr(fn, "__name__", "fn")
    regions = {}  # (shapes, dtype, arch) -> _Region | str (why it runs unfused); dropped with `fused`

    @functools.wraps(fn)
    def fused(*args):
        _check(name, args)
        if P.CALL_HOOK[0] is not None or not args:  # inside a vmap: its batching rules apply op by op
            return fn(*args)
        key = (tuple(a.shape for a in args), args[0].dtype, backend.on_host())
        reg = regions.get(key)
        if reg is None:
            try:
                nodes, outputs, shapes, captured, multi = _trace(fn, name, args)
                reg = _Region(nodes, outputs, shapes, len(args), captured, args[0].dtype)
                reg.multi, reg.fn, reg.name = multi, fn, name
            except RegionError as e:
                if strict:
                    raise
                reg = str(e)
            regions[key] = reg
        if isinstance(reg, str):
            if strict:
                raise RegionError(reg)
            fused.fallback = reg
            return fn(*args)
        if reg.multi:  # several outputs: a primitive per output would run the kernel once each
            if any(a._node is not None or a._tangents for a in args):
                return fn(*args)
            return [Tensor._make(b, s, reg.dtype) for b, s in zip(reg.run(args), reg.out_shapes)]
        return _region_prim(*args, region=reg)
    fused.unfused = fn
    fused.fallback = None
    fused.regions = regions
    return fused


def _forward(*ts, region):
    (buf,) = region.run(ts)
    return buf, region.out_shapes[0], region.dtype


_region_prim = P.Primitive("fused_region", _forward)


def _vjp_fn(fn, mask):
    """(g, *ts) -> the cotangents of the inputs in ``mask``, by the tape's own sweep of ``fn``."""
    def vjp(g, *ts):
        from .transforms import _watch
        with P.enable_grad():
            ws = [_watch(t) for t in ts]
            y = fn(*ws)
            res = B.backward_to([y], [g], [w._node for w, m in zip(ws, mask) if m], create_graph=True)
        return [zeros(w.shape, w.dtype) if r is None else r for r, w in zip(res, [w for w, m in zip(ws, mask) if m])]
    vjp.__name__ = f"{getattr(fn, '__name__', 'fn')}_vjp"
    return vjp


@_region_prim.def_vjp
def _region_vjp(g, *ts, out, region):
    mask = tuple(B.needs(i) for i in range(len(ts)))
    if not P.is_grad_enabled() and not any(x._tangents for x in (g, *ts)):  # first order, no tangents to carry:
        # every wanted cotangent from ONE kernel
        key = (mask, g.shape)
        bw = region.bwd.get(key, False)
        if bw is False:
            try:
                nodes, outputs, shapes, captured, _ = _trace(_vjp_fn(region.fn, mask), region.name, [g, *ts])
                bw = _Region(nodes, outputs, shapes, len(ts) + 1, captured, region.dtype)
            except RegionError:
                bw = None
            region.bwd[key] = bw
        if bw is not None:
            it = iter(bw.run([g, *ts]))
            return tuple(Tensor._make(next(it), t.shape, t.dtype) if m else None for t, m in zip(ts, mask))
    res = []
    for i, (t, m) in enumerate(zip(ts, mask)):  # recorded (a higher derivative follows): one region each
        if not m:
            res.append(None)
            continue
        if i not in region.grads:
            f = _vjp_fn(region.fn, tuple(j == i for j in range(len(ts))))
            region.grads[i] = fuse_region(lambda *a, f=f: f(*a)[0])
        res.append(region.grads[i](g, *ts))
    return tuple(res)


@_region_prim.def_jvp
def _region_jvp(tangents, *ts, out, region):
    from .transforms import jvp
    tg = tuple(zeros(t.shape, t.dtype) if d is None else d for t, d in zip(ts, tangents))
    return jvp(region.fn, tuple(ts), tg)[1]


@_region_prim.def_batched_jvp
def _region_bjvp(tangents, *ts, out, region):
    from .transforms import batched_jvp
    return batched_jvp(region.fn, tuple(ts), tuple(tangents))[1]


__all__ = ["fuse_region", "RegionError"]
