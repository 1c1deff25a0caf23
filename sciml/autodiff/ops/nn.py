"""softmax, log_softmax, logsumexp: one row-wise kernel each; rules in sciml ops."""
from __future__ import annotations

import math
import numbers

from ... import backend
from ...kernels import softmax as S
from ..primitive import Primitive
from ..tensor import as_tensor
from ._util import check_float, norm_axis
from .elementwise import erfc, exp, log, sigmoid, tanh
from .reduce import broadcast_to, reshape, sum
from .shape import moveaxis


def _rows_forward(op):
    def forward(x):
        cols = x.shape[-1]
        rows = x.size // cols if cols else 0
        shape = x.shape if op != "logsumexp" else x.shape[:-1] + (1,)
        n = math.prod(shape)
        out = backend.empty(n, x.dtype)
        if rows and cols:
            S.rowwise(op, x._buf, out, rows, cols, x.dtype)
        elif n and op == "logsumexp":  # the log of an empty sum: -inf (scipy.special.logsumexp)
            from ...kernels import elementwise as E
            E.fill(out, -math.inf, n, x.dtype)
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


def _one_axis(name, axis, ndim):
    """``axis`` (one int, negative allowed) checked by ``_util.norm_axis``: out of range raises."""
    if axis is None or not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise TypeError(f"{name}: axis={axis!r}; expected one integer axis.")
    return norm_axis(name, axis, ndim)[0]


def _on_axis(prim, x, axis, name):
    x = as_tensor(x)
    check_float(name, x)
    if x.ndim == 0:
        raise ValueError(f"{name}: needs at least one dimension, got a 0-d Tensor.")
    axis = _one_axis(name, axis, x.ndim)
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
    if axis is None or x.ndim == 0:
        if axis is not None:
            norm_axis("logsumexp", axis, 0)  # raises unless numpy would accept the axis of a 0-d array
        out = logsumexp(reshape(x, (x.size,)), 0)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    axis = _one_axis("logsumexp", axis, x.ndim)
    y = _lse(x if axis == x.ndim - 1 else moveaxis(x, axis, -1))
    if axis != x.ndim - 1:
        y = moveaxis(y, -1, axis)
    return y if keepdims else reshape(y, x.shape[:axis] + x.shape[axis + 1:])


def gelu(x, approximate="none"):
    """Gaussian error linear unit x Phi(x), as PyTorch's ``gelu``.

    Args:
        x: Tensor of any shape.
        approximate: "none" (default: exact, 0.5 x (1 + erf(x / sqrt(2)))) or "tanh" (the GPT-2 form
            0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), sciml's only form before 0.2).
    Example:
        >>> sm.gelu(sm.tensor([-1.0, 0.0, 1.0]))   # Tensor([-0.1587, 0., 0.8413])
    """
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)))
    if approximate != "none":
        raise ValueError(f"gelu: approximate={approximate!r}; expected 'none' or 'tanh'.")
    from .gelu_fused import gelu as _fused  # one kernel each way; equals 0.5 x erfc(-x / sqrt 2) (composed)
    return _fused(x)


def silu(x):
    """x * sigmoid(x) (swish)."""
    return x * sigmoid(x)


def log1p_exp(x):
    return log(1.0 + exp(x))


__all__ = ["softmax", "log_softmax", "logsumexp", "gelu", "silu", "broadcast_to"]
