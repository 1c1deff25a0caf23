"""Batch normalisation in training mode as one primitive: one fused kernel forward (batch statistics,
normalisation, affine, running-statistics update), one backward (``sciml/kernels/norm.py``).

Derivatives of every order: when the backward pass is recorded or forward-mode tangents ride on the inputs,
the rules differentiate :func:`batch_norm_composed` (the same function in composed sciml ops), which
differentiates again; fused and composed agree to rounding (tested in float64 and against PyTorch).
"""
from __future__ import annotations

from .. import backend
from ..autodiff.backward import needs
from ..autodiff.ops import mean, reshape, sqrt
from ..autodiff.primitive import Primitive, is_grad_enabled
from ..autodiff.tensor import Tensor, zeros
from ..kernels import norm as K

__all__ = ["batch_norm_train", "batch_norm_composed", "layer_norm", "layer_norm_composed"]


def batch_norm_composed(x, w, b, eps, relu=False):
    """(x - mean) / sqrt(var + eps) * w + b with the batch statistics over every axis but 1 (biased var);
    then ReLU with ``relu``."""
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    d = x - mean(x, axes, keepdims=True)
    var = mean(d * d, axes, keepdims=True)
    y = d / sqrt(var + eps) * reshape(w, bshape) + reshape(b, bshape)
    if relu:
        from ..autodiff.ops import relu as _relu
        y = _relu(y)
    return y


def _dims(x):
    N, Cc = x.shape[:2]
    return N, Cc, x.size // (N * Cc) if N * Cc else 0


def _fwd(x, w, b, eps, momentum, running, saved, relu=False):
    N, Cc, S = _dims(x)
    dt = x.dtype
    y = backend.empty(max(x.size, 1), dt)
    mu, var = backend.empty(Cc, dt), backend.empty(Cc, dt)
    rm, rv = (running[0]._buf, running[1]._buf) if running is not None else (mu, var)
    K.batch_norm_fwd(x._buf, w._buf, b._buf, y, mu, var, rm, rv, N, Cc, S, float(eps), float(momentum),
                     running is not None, dt, relu)
    saved["mean"], saved["var"] = mu, var
    return y, x.shape, dt


_bn = Primitive("batch_norm", _fwd)


def _recorded(*ts):
    return is_grad_enabled() or any(t._tangents for t in ts)


@_bn.def_vjp
def _vjp(g, x, w, b, out, eps, momentum, running, saved, relu=False):
    if _recorded(g, x, w, b, out):
        from ..autodiff.transforms import vjp
        _, pull = vjp(lambda x, w, b: batch_norm_composed(x, w, b, eps, relu), x, w, b)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    N, Cc, S = _dims(x)
    dt = x.dtype
    gx = backend.empty(max(x.size, 1), dt) if needs(0) else None
    gw, gb = backend.empty(Cc, dt), backend.empty(Cc, dt)
    K.batch_norm_bwd(x._buf, g._buf, w._buf, saved["mean"], saved["var"], gx if gx is not None else gw, gw, gb,
                     N, Cc, S, float(eps), dt, with_x=gx is not None, y=out._buf if relu else None)
    return (Tensor._make(gx, x.shape, dt) if gx is not None else None,
            Tensor._make(gw, w.shape, dt) if needs(1) else None, Tensor._make(gb, b.shape, dt) if needs(2) else None)


@_bn.def_jvp
def _jvp(ts, x, w, b, out, eps, momentum, running, saved, relu=False):
    from ..autodiff.transforms import jvp
    xs = (x, w, b)
    ts = tuple(zeros(v.shape, v.dtype) if t is None else t for v, t in zip(xs, ts))
    return jvp(lambda x, w, b: batch_norm_composed(x, w, b, eps, relu), xs, ts)[1]


def batch_norm_train(x, w, b, eps=1e-5, momentum=0.1, running=None, relu=False):
    """Batch normalisation of x (N, C, ...) with its batch statistics; w, b (C,). ``running``: a pair of (C,)
    Buffers (running mean, running variance) updated in place by the forward kernel, or None. ``relu``: then
    ReLU in the same kernel (its step in the backward kernel)."""
    return _bn(x, w, b, eps=eps, momentum=momentum, running=running, saved={}, relu=bool(relu))


# --- LayerNorm over the trailing axes: one kernel forward, one backward -------------------------------------
def layer_norm_composed(x, w, b, eps):
    """(x - mean) / sqrt(var + eps) * w + b over the trailing ``w.ndim`` axes (biased var)."""
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    d = x - mean(x, axes, keepdims=True)
    return d / sqrt(mean(d * d, axes, keepdims=True) + eps) * w + b


def _ln_fwd(x, w, b, eps, saved):
    D = w.size
    R = x.size // D if D else 0
    dt = x.dtype
    y = backend.empty(max(x.size, 1), dt)
    mu, rs = backend.empty(max(R, 1), dt), backend.empty(max(R, 1), dt)
    if x.size:
        K.layer_norm_fwd(x._buf, w._buf, b._buf, y, mu, rs, R, D, float(eps), dt)
    saved["mean"], saved["rstd"] = mu, rs
    return y, x.shape, dt


_ln = Primitive("layer_norm", _ln_fwd)


@_ln.def_vjp
def _ln_vjp(g, x, w, b, out, eps, saved):
    if _recorded(g, x, w, b, out) or not x.size:
        from ..autodiff.transforms import vjp
        _, pull = vjp(lambda x, w, b: layer_norm_composed(x, w, b, eps), x, w, b)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    D = w.size
    R, dt = x.size // D, x.dtype
    gx = backend.empty(x.size, dt) if needs(0) else None
    gw, gb = backend.empty(D, dt), backend.empty(D, dt)
    K.layer_norm_bwd(x._buf, g._buf, w._buf, saved["mean"], saved["rstd"], gx if gx is not None else gw, gw, gb,
                     R, D, dt, with_x=gx is not None)
    return (Tensor._make(gx, x.shape, dt) if gx is not None else None,
            Tensor._make(gw, w.shape, dt) if needs(1) else None, Tensor._make(gb, b.shape, dt) if needs(2) else None)


@_ln.def_jvp
def _ln_jvp(ts, x, w, b, out, eps, saved):
    from ..autodiff.transforms import jvp
    xs = (x, w, b)
    ts = tuple(zeros(v.shape, v.dtype) if t is None else t for v, t in zip(xs, ts))
    return jvp(lambda x, w, b: layer_norm_composed(x, w, b, eps), xs, ts)[1]


def layer_norm(x, w, b, eps=1e-5):
    """Layer normalisation of x (..., *w.shape) over its trailing ``w.ndim`` axes, then ``* w + b``."""
    return _ln(x, w, b, eps=eps, saved={})
