"""``pair_sum(a, p, q, c) = op1(a, p) + op2(q, c)``: the two-term product rule of a binary op's
batched JVP (``t_x * y + x * t_y``; ``tanh_grad(t_g, y) + twice_mul(-g y, t_y)``) as one primitive and,
on CPU, one row-wise kernel (three passes over the (B,) + s tangents become one).

``a`` and ``c`` are batched tangents of shape (B,) + s, ``p`` and ``q`` unbatched of shape s. Its rules
are the two binary ops' own rules (only ops whose rules do not read ``out``), so it differentiates
like the unfused sum.
"""
from __future__ import annotations

import math

from ... import backend
from ...kernels import rows as KR
from .. import backward as BW
from ..primitive import Primitive

OPS = ("add", "sub", "mul", "tanh_grad", "twice_mul", "sigmoid_grad")  # rules independent of `out`
MIN_SIZE = 1 << 12


def _prims():
    from . import elementwise as E
    return {name: getattr(E, name).primitive for name in OPS}


def _forward(a, p, q, c, op1, op2):
    n = a.size
    out = backend.empty(n, a.dtype)
    if n:
        KR.pair_sum(op1, op2, a._buf, p._buf, q._buf, c._buf, out, n // p.size, p.size, a.dtype)
    return out, a.shape, a.dtype


_pair = Primitive("pair_sum", _forward)


@_pair.def_vjp
def _pair_vjp(g, a, p, q, c, out, op1, op2):
    P = _prims()
    mask = BW._needs["mask"] or (True, True, True, True)
    try:
        BW._needs["mask"] = mask[:2]
        g1 = P[op1].vjp(g, a, p, out=out)
        BW._needs["mask"] = mask[2:]
        g2 = P[op2].vjp(g, q, c, out=out)
    finally:
        BW._needs["mask"] = mask if BW._needs["mask"] is not None else None
    return tuple(g1) + tuple(g2)


def _sum(r1, r2):
    return r1 if r2 is None else r2 if r1 is None else r1 + r2


@_pair.def_jvp
def _pair_jvp(ts, a, p, q, c, out, op1, op2):
    P = _prims()
    return _sum(P[op1].jvp(ts[:2], a, p, out=out), P[op2].jvp(ts[2:], q, c, out=out))


@_pair.def_batched_jvp
def _pair_bjvp(ts, a, p, q, c, out, op1, op2):
    P = _prims()
    return _sum(P[op1].batched_jvp(ts[:2], a, p, out=out), P[op2].batched_jvp(ts[2:], q, c, out=out))


def pair_sum(op1, a, p, op2, q, c):
    """op1(a, p) + op2(q, c) for a, c of shape (B,) + s and p, q of shape s (same dtype), or None when
    the fused kernel does not apply (the caller then composes the two ops)."""
    s = p.shape
    if (op1 not in OPS or op2 not in OPS or q.shape != s or a.shape != c.shape or a.shape[1:] != s
            or not backend.on_host() or a.size < MIN_SIZE or math.prod(s) < KR.MIN_INNER
            or len({a.dtype, p.dtype, q.dtype, c.dtype}) != 1):
        return None
    return _pair(a, p, q, c, op1=op1, op2=op2)
