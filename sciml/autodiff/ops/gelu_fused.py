"""The exact GELU as one primitive (one kernel forward, one for its derivative): ``gelu(x) = x Phi(x)``.

Values equal ``sm.gelu(x)`` (the composed ``0.5 x erfc(-x / sqrt 2)``); the first derivative is the fused kernel
``gelu_grad(x, g) = g (Phi(x) + x phi(x))``, whose own rules are composed sciml ops
(d/dx (Phi + x phi) = phi (2 - x^2)), so every order works.
"""
from __future__ import annotations

import math

from ... import backend
from ...kernels import gelu as K
from ..primitive import Primitive
from ..tensor import as_tensor
from ._util import check_float
from .elementwise import exp

_RS2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _unary_forward_gelu(x):  # the name marks it elementwise-unary for vmap
    out = backend.empty(x.size, x.dtype)
    if x.size:
        K.gelu(x._buf, out, x.size, x.dtype)
    return out, x.shape, x.dtype


def _grad_forward(x, g):
    out = backend.empty(x.size, x.dtype)
    if x.size:
        K.gelu_grad(x._buf, g._buf, out, x.size, x.dtype)
    return out, x.shape, x.dtype


_gelu = Primitive("gelu", _unary_forward_gelu)
_gelu_grad = Primitive("gelu_grad", _grad_forward)


def _dd(x):
    """d/dx (Phi(x) + x phi(x)) = phi(x) (2 - x^2)."""
    return exp(x * x * -0.5) * _RS2PI * (2.0 - x * x)


_gelu.def_vjp(lambda g, x, out: (_gelu_grad(x, g),))
_gelu.def_jvp(lambda ts, x, out: _gelu_grad(x, ts[0]))
_gelu.def_shape(lambda x: (x.shape, x.dtype))


@_gelu.def_batched_jvp
def _gelu_bjvp(ts, x, out):
    from .reduce import broadcast_to
    return _gelu_grad(broadcast_to(x, ts[0].shape), ts[0])


@_gelu_grad.def_vjp
def _gelu_grad_vjp(c, x, g, out):
    return c * g * _dd(x), _gelu_grad(x, c)


@_gelu_grad.def_jvp
def _gelu_grad_jvp(ts, x, g, out):
    r = None
    if ts[0] is not None:
        r = ts[0] * g * _dd(x)
    if ts[1] is not None:
        t = _gelu_grad(x, ts[1])
        r = t if r is None else r + t
    return r


_gelu_grad.def_shape(lambda x, g: (x.shape, x.dtype))


def _vmap_rules():
    from .. import vmap as V

    def grad_rule(prim, xs, flags, params, nb):
        return prim(*V._bcast_all(xs, flags, nb))
    V.RULES["gelu_grad"] = grad_rule


_vmap_rules()


def gelu(x):
    """Gaussian error linear unit x Phi(x) (exact form, PyTorch's default ``gelu``), one fused kernel forward
    and one backward.

    Args:
        x: float Tensor of any shape.
    Example:
        >>> gelu(sm.tensor([-1.0, 0.0, 1.0]))   # Tensor([-0.1587, 0., 0.8413])
    """
    x = as_tensor(x)
    check_float("gelu", x)
    return _gelu(x)
