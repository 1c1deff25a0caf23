"""softmax, log_softmax, logsumexp: one row-wise kernel each; rules in sciml ops."""
from __future__ import annotations

import math

from ... import backend
from ...kernels import softmax as S
from ..primitive import Primitive
from ..tensor import as_tensor
from ._util import check_float
from .elementwise import exp, log, sigmoid, tanh
from .reduce import broadcast_to, reshape, sum
from .shape import moveaxis


def _rows_forward(op):
    def forward(x):
        cols = x.shape[-1]
        rows = x.size // cols if cols else 0
        shape = x.shape if op != "logsumexp" else x.shape[:-1] + (1,)
        out = backend.empty(math.prod(shape), x.dtype)
        if rows and cols:
            S.rowwise(op, x._buf, out, rows, cols, x.dtype)
        return out, shape, x.dtype
    return forward


_softmax = Primitive("softmax", _rows_forward("softmax"))
_softmax.def_vjp(lambda g, x, out: (out * (g - sum(g * out, -1, keepdims=True)),))
_softmax.def_jvp(lambda ts, x, out: out * (ts[0] - sum(ts[0] * out, -1, keepdims=True)))
_log_softmax = Primitive("log_softmax", _rows_forward("log_softmax"))
_log_softmax.def_vjp(lambda g, x, out: (g - exp(out) * sum(g, -1, keepdims=True),))
_log_softmax.def_jvp(lambda ts, x, out: ts[0] - sum(exp(out) * ts[0], -1, keepdims=True))
_lse = Primitive("logsumexp", _rows_forward("logsumexp"))
_lse.def_vjp(lambda g, x, out: (g * exp(x - out),))
_lse.def_jvp(lambda ts, x, out: sum(ts[0] * exp(x - out), -1, keepdims=True))
for _p in (_softmax, _log_softmax, _lse):  # row-wise over the last axis: the rules hold with a leading batch axis
    _p.def_batched_jvp(_p.jvp)


def _on_axis(prim, x, axis, name):
    x = as_tensor(x)
    check_float(name, x)
    if x.ndim == 0:
        raise ValueError(f"{name}: needs at least one dimension, got a 0-d Tensor.")
    axis = int(axis) % x.ndim
    if axis == x.ndim - 1:
        return prim(x), None
    return moveaxis(prim(moveaxis(x, axis, -1)), -1, axis), axis


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along ``axis`` (max-shifted, stable)."""
    return _on_axis(_softmax, x, axis, "softmax")[0]


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along ``axis`` (stable)."""
    return _on_axis(_log_softmax, x, axis, "log_softmax")[0]


def logsumexp(x, axis=-1, keepdims=False):
    """log(sum(exp(x))) along one ``axis`` (stable)."""
    x = as_tensor(x)
    check_float("logsumexp", x)
    if axis is None:
        x, axis = reshape(x, (x.size,)), 0
    axis = int(axis) % max(x.ndim, 1)
    y = _lse(x if axis == x.ndim - 1 else moveaxis(x, axis, -1))
    if axis != x.ndim - 1:
        y = moveaxis(y, -1, axis)
    return y if keepdims else reshape(y, x.shape[:axis] + x.shape[axis + 1:])


def gelu(x):
    """Gaussian error linear unit, tanh form (as in GPT-2 / PyTorch approximate='tanh')."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)))


def silu(x):
    """x * sigmoid(x) (swish)."""
    return x * sigmoid(x)


def log1p_exp(x):
    return log(1.0 + exp(x))


__all__ = ["softmax", "log_softmax", "logsumexp", "gelu", "silu", "broadcast_to"]
