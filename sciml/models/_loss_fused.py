"""Mean / summed squared error as one primitive: one kernel forward (small host inputs: a serial pass with
block sums; else parallel partial sums then their ordered sum: deterministic), one backward (``sciml/kernels/conv.py``), in place of subtract, square, reduce, scale and their five adjoint kernels.
Recorded backward passes and forward-mode tangents differentiate :func:`mse_composed`, so every order works.
"""
from __future__ import annotations

from .. import backend
from ..autodiff.backward import needs
from ..autodiff.primitive import CALL_HOOK, Primitive, is_grad_enabled
from ..autodiff.tensor import Tensor, zeros
from ..kernels import conv as K

__all__ = ["mse", "mse_composed", "fusable"]


def mse_composed(pred, target, reduction="mean"):
    d = pred - target
    return (d * d).mean() if reduction == "mean" else (d * d).sum()


def _scale(n, reduction):
    return 1.0 / n if reduction == "mean" else 1.0


def _fwd(p, t, reduction):
    out = backend.empty(1, p.dtype)
    K.sqerr(p._buf, t._buf, out, p.size, _scale(p.size, reduction), p.dtype)
    return out, (), p.dtype


_mse = Primitive("mse", _fwd)


@_mse.def_vjp
def _vjp(g, p, t, out, reduction):
    if is_grad_enabled() or any(x._tangents for x in (g, p, t, out)):
        from ..autodiff.transforms import vjp
        _, pull = vjp(lambda p, t: mse_composed(p, t, reduction), p, t)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    dt = p.dtype
    gp = backend.empty(p.size, dt)
    gt = backend.empty(p.size, dt) if needs(1) else None
    K.sqerr_vjp(g._buf, p._buf, t._buf, gp, gt, p.size, _scale(p.size, reduction), dt)
    return (Tensor._make(gp, p.shape, dt) if needs(0) else None,
            Tensor._make(gt, t.shape, dt) if gt is not None else None)


@_mse.def_jvp
def _jvp(ts, p, t, out, reduction):
    from ..autodiff.transforms import jvp
    ts = tuple(zeros(v.shape, v.dtype) if x is None else x for v, x in zip((p, t), ts))
    return jvp(lambda p, t: mse_composed(p, t, reduction), (p, t), ts)[1]


def fusable(pred, target, reduction):
    """True when :func:`mse` applies: mean or sum of two float Tensors of one shape and dtype, at least one value,
    and no vmap (or other call hook) active: there the composed ops batch natively."""
    return (reduction in ("mean", "sum") and pred.dtype in ("float32", "float64") and target.dtype == pred.dtype
            and pred.shape == target.shape and 0 < pred.size < (1 << 31) and CALL_HOOK[0] is None)


def mse(pred, target, reduction="mean"):
    """mean (or sum) of (pred - target)^2 in one kernel (checked inputs: see :func:`fusable`)."""
    return _mse(pred, target, reduction=reduction)
