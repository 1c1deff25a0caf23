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

__all__ = ["batch_norm_train", "batch_norm_composed", "batch_norm_eval", "batch_norm_eval_composed", "layer_norm", "layer_norm_composed"]


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


def _composed(eps, relu, pool):
    if pool is None:
        return lambda x, w, b: batch_norm_composed(x, w, b, eps, relu)
    from .conv import max_pool2d
    return lambda x, w, b: max_pool2d(batch_norm_composed(x, w, b, eps, relu), pool)


def _fwd(x, w, b, eps, momentum, running, saved, relu=False, pool=None):
    N, Cc, S = _dims(x)
    dt = x.dtype
    shape = x.shape if pool is None else (N, Cc, x.shape[2] // pool[0], x.shape[3] // pool[1])
    y = backend.empty(max(N * Cc * S // (1 if pool is None else pool[0] * pool[1]), 1), dt)
    mu, var = backend.empty(Cc, dt), backend.empty(Cc, dt)
    rm, rv = (running[0]._buf, running[1]._buf) if running is not None else (mu, var)
    K.batch_norm_fwd(x._buf, w._buf, b._buf, y, mu, var, rm, rv, N, Cc, S, float(eps), float(momentum),
                     running is not None, dt, relu, pool, x.shape[3] if pool is not None else 1)
    saved["mean"], saved["var"] = mu, var
    return y, shape, dt


_bn = Primitive("batch_norm", _fwd)


def _recorded(*ts):
    return is_grad_enabled() or any(t._tangents for t in ts)


@_bn.def_vjp
def _vjp(g, x, w, b, out, eps, momentum, running, saved, relu=False, pool=None):
    if _recorded(g, x, w, b, out):
        from ..autodiff.transforms import vjp
        _, pull = vjp(_composed(eps, relu, pool), x, w, b)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    N, Cc, S = _dims(x)
    dt = x.dtype
    gx = backend.empty(max(x.size, 1), dt) if needs(0) else None
    gw, gb = backend.empty(Cc, dt), backend.empty(Cc, dt)
    if pool is not None:
        K.batch_norm_bwd_pool(x._buf, g._buf, w._buf, b._buf, saved["mean"], saved["var"],
                              gx if gx is not None else gw, gw, gb, N, Cc, S, float(eps), dt, gx is not None, relu,
                              pool, x.shape[3])
    else:
        K.batch_norm_bwd(x._buf, g._buf, w._buf, saved["mean"], saved["var"], gx if gx is not None else gw, gw,
                         gb, N, Cc, S, float(eps), dt, with_x=gx is not None, y=out._buf if relu else None)
    return (Tensor._make(gx, x.shape, dt) if gx is not None else None,
            Tensor._make(gw, w.shape, dt) if needs(1) else None, Tensor._make(gb, b.shape, dt) if needs(2) else None)


@_bn.def_jvp
def _jvp(ts, x, w, b, out, eps, momentum, running, saved, relu=False, pool=None):
    from ..autodiff.transforms import jvp
    xs = (x, w, b)
    ts = tuple(zeros(v.shape, v.dtype) if t is None else t for v, t in zip(xs, ts))
    return jvp(_composed(eps, relu, pool), xs, ts)[1]


def batch_norm_train(x, w, b, eps=1e-5, momentum=0.1, running=None, relu=False, pool=None):
    """Batch normalisation of x (N, C, ...) with its batch statistics; w, b (C,). ``running``: a pair of (C,)
    Buffers (running mean, running variance) updated in place by the forward kernel, or None. ``relu``: then
    ReLU in the same kernel (its step in the backward kernel). ``pool`` (kh, kw), x (N, C, H, W) with H, W
    divisible by them: then the max over kh x kw tiles (a following MaxPool2d), in the same kernels."""
    if pool is not None:
        pool = tuple(int(v) for v in pool)
        if x.ndim != 4 or x.shape[2] % pool[0] or x.shape[3] % pool[1]:
            raise ValueError(f"batch_norm_train: pool {pool} does not tile x of shape {x.shape}.")
    return _bn(x, w, b, eps=eps, momentum=momentum, running=running, saved={}, relu=bool(relu), pool=pool)


# --- BatchNorm in eval mode (running statistics): one kernel forward ---------------------------------------
def batch_norm_eval_composed(x, w, b, rm, rv, eps, relu=False):
    """(x - rm) / sqrt(rv + eps) * w + b per channel (axis 1) in sciml ops; rm, rv constants; w, b None: no
    affine; then ReLU with ``relu``."""
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    y = (x - reshape(rm.detach(), bshape)) / sqrt(reshape(rv.detach(), bshape) + eps)
    if w is not None:
        y = y * reshape(w, bshape) + reshape(b, bshape)
    if relu:
        from ..autodiff.ops import relu as _relu
        y = _relu(y)
    return y


def _eval_fwd(*ins, rm, rv, eps, relu):
    x = ins[0]
    w, b = (ins[1], ins[2]) if len(ins) == 3 else (None, None)
    N, Cc, S = _dims(x)
    y = backend.empty(max(x.size, 1), x.dtype)
    if x.size:
        K.batch_norm_eval(x._buf, w._buf if w is not None else None, b._buf if b is not None else None, rm._buf,
                          rv._buf, y, N, Cc, S, float(eps), x.dtype, relu)
    return y, x.shape, x.dtype


_bn_eval = Primitive("batch_norm_eval", _eval_fwd)


def _eval_composed(rm, rv, eps, relu):
    return lambda x, w=None, b=None: batch_norm_eval_composed(x, w, b, rm, rv, eps, relu)


@_bn_eval.def_vjp
def _eval_vjp(g, *ins, out, rm, rv, eps, relu):   # eval-mode gradients are rare: the composed rule, any order
    from ..autodiff.transforms import vjp
    _, pull = vjp(_eval_composed(rm, rv, eps, relu), *ins)
    return tuple(pull(g, create_graph=is_grad_enabled()))


@_bn_eval.def_jvp
def _eval_jvp(ts, *ins, out, rm, rv, eps, relu):
    from ..autodiff.transforms import jvp
    ts = tuple(zeros(v.shape, v.dtype) if t is None else t for v, t in zip(ins, ts))
    return jvp(_eval_composed(rm, rv, eps, relu), ins, ts)[1]


def batch_norm_eval(x, w, b, rm, rv, eps=1e-5, relu=False):
    """Batch normalisation of x (N, C, ...) with the running statistics rm, rv (C,) (constants), affine w, b (C,)
    or both None, then ReLU with ``relu``: one kernel forward."""
    ins = (x,) if w is None else (x, w, b)
    return _bn_eval(*ins, rm=rm, rv=rv, eps=float(eps), relu=bool(relu))


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
