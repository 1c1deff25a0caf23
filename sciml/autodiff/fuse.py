"""``sciml.fuse(fn)``: a chain of elementwise ops run as ONE generated Taichi kernel.

The first call for a given signature (shapes, dtype) runs ``fn`` once eagerly on detached
copies of the inputs, reads the primitives it applied off the tape, and generates a kernel
(sciml.kernels.fused). Later calls launch that kernel: one pass over memory instead of one per
op. The fused function is a primitive whose VJP and JVP rules are those of the unfused
composite ``fn`` written in sciml ops, so it differentiates to any order.

Like ``jax.jit``, ``fn`` must be pure and its op sequence must depend only on the signature.
"""
from __future__ import annotations

import functools
import math
import numbers

from .. import backend
from ..kernels import fused as KF
from . import backward as B
from . import primitive as P
from .tensor import Tensor, as_tensor, zeros

NOT_ELEMENTWISE = ("fuse({name}): op {op!r} is not an elementwise op; fuse traces chains of "
                   "{ops} on Tensors of one shape (and scalars). Call it unfused, or fuse the elementwise part.")
_traces: dict = {}


class _Trace:
    __slots__ = ("stmts", "consts", "n_arrays", "scalar_args", "dtype")

    def __init__(self, stmts, consts, n_arrays, scalar_args, dtype):
        self.stmts, self.consts, self.n_arrays = stmts, consts, n_arrays
        self.scalar_args, self.dtype = scalar_args, dtype


def fuse(fn):
    """Fuse an elementwise function of Tensors into one Taichi kernel (differentiable to any order).

    Args:
        fn: a pure function of Tensors (all of one shape) and scalars (Python numbers or 0-d
            Tensors) built from elementwise sciml ops (+ - * / **, neg, exp, log, sin, cos, tanh,
            sigmoid, relu, softplus, sqrt, abs, square, reciprocal, maximum, minimum), returning
            one Tensor of that shape.
    Returns:
        A function with ``fn``'s signature, computing the same values in one kernel launch.
    Example:
        >>> f = sm.fuse(lambda a, b, c: sm.tanh(a * b + c))
        >>> f(x, y, z)              # one pass; sm.grad(lambda a: f(a, y, z).sum())(x) works too
    """
    name = getattr(fn, "__name__", "fn")

    @functools.wraps(fn)
    def fused(*args):
        ts = _inputs(name, args)
        shape = max((t.shape for t in ts), key=len)
        for i, t in enumerate(ts):
            if t.shape != shape and t.ndim != 0:
                raise ValueError(f"fuse({name}): argument {i} has shape {t.shape}; fused functions take Tensors "
                                 f"of one shape {shape} and scalars (0-d Tensors or numbers).")
        key = (fn, tuple(t.shape != shape for t in ts), ts[0].dtype)  # which args are scalars
        tr = _traces.get(key)
        if tr is None:
            tr = _traces[key] = _trace(fn, name, ts, shape)
        return _fused_prim(*ts, fn=fn, key=key)
    fused.unfused = fn
    return fused


def _inputs(name, args):
    dtype = next((a.dtype for a in args if isinstance(a, Tensor)), None)
    if dtype is None:
        from ..runtime import default_dtype
        dtype = default_dtype()
    out = []
    for i, a in enumerate(args):
        if isinstance(a, numbers.Number) and not isinstance(a, bool):
            a = as_tensor(float(a), dtype)
        elif not isinstance(a, Tensor):
            raise TypeError(f"fuse({name}): argument {i} has type {type(a).__name__}; expected a Tensor or a number.")
        if a.dtype != dtype:
            raise TypeError(f"fuse({name}): argument {i} has dtype {a.dtype}; expected {dtype} like the others "
                            "(float32 or float64, one dtype for all).")
        out.append(a)
    if dtype not in ("float32", "float64"):
        raise TypeError(f"fuse({name}): got dtype {dtype}; expected float32 or float64.")
    return out


def detached_leaves(ts):
    """Fresh leaf Tensors on the buffers of ``ts``, each its own tape root (for tracing a function once)."""
    leaves = []
    for t in ts:
        leaf = Tensor._make(t._buf, t.shape, t.dtype)
        leaf._node = P.leaf_node(leaf)
        leaves.append(leaf)
    return leaves


def _trace(fn, name, ts, shape):
    """Run fn once on detached leaves; return the SSA statements of the kernel."""
    leaves = detached_leaves(ts)
    with P.enable_grad():
        out = fn(*leaves)
    if not isinstance(out, Tensor):
        raise TypeError(f"fuse({name}): fn returned {type(out).__name__}; expected one Tensor.")
    if out.shape != shape:
        raise ValueError(f"fuse({name}): fn returned shape {out.shape}; expected the input shape {shape} "
                         "(fused functions are elementwise).")
    arg_of = {id(l._node): i for i, l in enumerate(leaves)}
    arrays = [i for i, t in enumerate(ts) if t.shape == shape]
    scalar_args = [i for i in range(len(ts)) if i not in arrays]
    names = {i: f"x{arrays.index(i)}" if i in arrays else f"s{scalar_args.index(i)}" for i in range(len(ts))}
    stmts, consts, seen = [], [], {}
    ops = sorted(set(KF.UNARY) | set(KF.BINARY))

    def visit(x):
        node = x._node
        if node is None:  # a constant (a Python number inside fn, or a captured 0-d Tensor)
            if x.size != 1:
                raise ValueError(f"fuse({name}): fn uses a captured Tensor of shape {x.shape}; pass it as an "
                                 "argument (only scalar constants are folded into the kernel).")
            consts.append(float(x.item()))
            return f"s{len(scalar_args) + len(consts) - 1}"
        if id(node) in arg_of:
            return names[arg_of[id(node)]]
        if id(node) in seen:
            return seen[id(node)]
        op = node.prim.name
        if op == "identity":  # a watched input (transforms._watch): the value itself
            r = visit(node.inputs[0])
            seen[id(node)] = r
            return r
        if op not in KF.UNARY and op not in KF.BINARY:
            raise ValueError(NOT_ELEMENTWISE.format(name=name, op=op, ops=", ".join(ops)))
        if node.params:
            raise ValueError(NOT_ELEMENTWISE.format(name=name, op=op, ops=", ".join(ops)))
        refs = [visit(i) for i in node.inputs]
        stmts.append((op, tuple(refs)))
        seen[id(node)] = f"v{len(stmts) - 1}"
        return seen[id(node)]

    r = visit(out)
    if not stmts or r != f"v{len(stmts) - 1}":
        raise ValueError(f"fuse({name}): fn returned an input or a constant; nothing to fuse.")
    if len(arrays) + len(scalar_args) + len(consts) + 2 > 64:
        raise ValueError(f"fuse({name}): {len(ts)} arguments and {len(consts)} constants exceed Taichi's "
                         "64 kernel arguments; split the function.")
    return _Trace(tuple(stmts), tuple(consts), len(arrays), tuple(scalar_args), ts[0].dtype)


def _forward(*ts, fn, key):
    tr = _traces[key]
    shape = max((t.shape for t in ts), key=len)
    n = math.prod(shape)
    out = backend.empty(n, tr.dtype)
    if n:
        arrays = [t._buf for t in ts if t.shape == shape]
        scalars = [ts[i].item() for i in tr.scalar_args] + list(tr.consts)
        KF.run(tr.stmts, arrays, scalars, out, n, tr.dtype)
    return out, shape, tr.dtype


_fused_prim = P.Primitive("fused", _forward)


_grad_fns: dict = {}  # (fn, i) -> fused function (g, *ts) -> cotangent of input i, or None if not fusable


def _grad_fn(fn, i):
    """``sciml.fuse`` of the composite's VJP for input i: the backward of an elementwise chain is
    itself an elementwise chain of (g, *inputs), so it runs as one generated kernel too."""
    k = (fn, i)
    if k not in _grad_fns:
        def vjp_i(g, *ts):
            from .transforms import _watch
            with P.enable_grad():
                ws = [_watch(t) for t in ts]
                y = fn(*ws)
                (r,) = B.backward_to([y], [g], [ws[i]._node], create_graph=True)
            return zeros(g.shape, g.dtype) if r is None else r
        vjp_i.__name__ = f"{getattr(fn, '__name__', 'fn')}_vjp{i}"
        _grad_fns[k] = fuse(vjp_i)
    return _grad_fns[k]


@_fused_prim.def_vjp
def _fused_vjp(g, *ts, out, fn, key):
    """Cotangents: one fused kernel per wanted input (the composite's VJP traced and fused, see
    :func:`_grad_fn`); the unfused composite's rules where that chain is not fusable (scalar
    arguments, comparisons). Either way the rules are the composite's, so any order works."""
    mask = [B.needs(i) for i in range(len(ts))]
    if all(t.shape == g.shape for t in ts) and all(_grad_fns.get((fn, i), True) is not None
                                                   for i, m in enumerate(mask) if m):
        try:
            return tuple(_grad_fn(fn, i)(g, *ts) if m else None for i, m in enumerate(mask))
        except (ValueError, TypeError):
            for i, m in enumerate(mask):
                if m:
                    _grad_fns[(fn, i)] = None
    return _fused_vjp_composite(g, *ts, fn=fn, mask=mask)


def _fused_vjp_composite(g, *ts, fn, mask):
    from .transforms import _watch
    with P.enable_grad():
        ws = [_watch(t) for t in ts]
        y = fn(*ws)
    res = B.backward_to([y], [g], [w._node for w, m in zip(ws, mask) if m], create_graph=P.is_grad_enabled())
    it = iter(res)
    return tuple(next(it) if m else None for m in mask)


@_fused_prim.def_jvp
def _fused_jvp(tangents, *ts, out, fn, key):
    from .transforms import jvp
    tg = tuple(zeros(t.shape, t.dtype) if d is None else d for t, d in zip(ts, tangents))
    return jvp(fn, tuple(ts), tg)[1]


@_fused_prim.def_batched_jvp
def _fused_bjvp(tangents, *ts, out, fn, key):
    from .transforms import batched_jvp
    return batched_jvp(fn, tuple(ts), tuple(tangents))[1]
