"""Multi-head scaled-dot-product attention as one primitive: ``attention``.

Reads the heads straight out of the projections (one packed (B, L, 3E) ``[q | k | v]`` for self-attention, or
three (B, n, E) tensors) and writes the merged (B, L, E) output: no head split or merge transposes. Forward
and backward are one Taichi kernel each (``sciml/kernels/attention.py``); the softmax weights are kept for
the backward. An additive float mask and dropout multipliers on the weights (both constants) are optional.

Derivatives of every order: when the backward pass is itself recorded (``grad`` of ``grad``, forward-over-
reverse) or forward-mode tangents ride on the inputs, the rules differentiate the same computation written
in composed sciml ops (:func:`attention_composed`), which differentiates again; both agree to rounding
(tested in float64, and against PyTorch).
"""
from __future__ import annotations

import math

from .. import backend
from ..autodiff.backward import needs
from ..autodiff.ops import matmul, reshape, softmax, transpose
from ..autodiff.primitive import Primitive, is_grad_enabled
from ..autodiff.tensor import Tensor, zeros
from ..kernels import attention as K

__all__ = ["attention", "attention_composed", "attention_weights"]

_I32 = 2 ** 31 - 1


def _heads(t, col, B, n, h, d):
    """(B, h, n, d) heads of columns col..col+h*d of t (B, n, width)."""
    E = h * d
    if t.shape[2] != E:
        t = t[:, :, col:col + E]
    return transpose(reshape(t, (B, n, h, d)), (0, 2, 1, 3))


def attention_composed(*inputs, num_heads, packed, has_mask, has_drop, scale=None):
    """:func:`attention` in composed ops (any order of derivatives)."""
    i = 1 if packed else 3
    q, k, v = (inputs[0],) * 3 if packed else inputs[:3]
    mask = inputs[i] if has_mask else None
    drop = inputs[i + int(has_mask)] if has_drop else None
    B, L = q.shape[:2]
    S = k.shape[1]
    E = q.shape[2] // 3 if packed else q.shape[2]
    h = num_heads
    d = E // h
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    qh, kh, vh = _heads(q, 0, B, L, h, d), _heads(k, E if packed else 0, B, S, h, d), \
        _heads(v, 2 * E if packed else 0, B, S, h, d)
    s = matmul(qh, kh, transpose_b=True) * sc
    if mask is not None:
        s = s + mask
    w = softmax(s, -1)
    if drop is not None:
        w = w * drop
    return reshape(transpose(matmul(w, vh), (0, 2, 1, 3)), (B, L, E))


def attention_weights(*inputs, num_heads, mask=None, scale=None):
    """The softmax weights (B, h, L, S) of :func:`attention` (same inputs), in composed ops."""
    packed = len(inputs) == 1
    q, k = (inputs[0],) * 2 if packed else inputs[:2]
    B, L = q.shape[:2]
    S = k.shape[1]
    E = q.shape[2] // 3 if packed else q.shape[2]
    d = E // num_heads
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    s = matmul(_heads(q, 0, B, L, num_heads, d), _heads(k, E if packed else 0, B, S, num_heads, d),
               transpose_b=True) * sc
    return softmax(s if mask is None else s + mask, -1)


def _geometry(inputs, num_heads, packed):
    q = inputs[0]
    k = inputs[0] if packed else inputs[1]
    B, L = q.shape[:2]
    S = k.shape[1]
    E = q.shape[2] // 3 if packed else q.shape[2]
    return B, L, S, E, num_heads, E // num_heads


def _fwd(*inputs, num_heads, packed, has_mask, has_drop, scale, saved):
    B, L, S, E, h, d = _geometry(inputs, num_heads, packed)
    dt = inputs[0].dtype
    i = 1 if packed else 3
    if packed:
        Q = Kb = Vb = inputs[0]._buf
        offs = (0, 3 * E, E, 3 * E, 2 * E, 3 * E)
    else:
        Q, Kb, Vb = (t._buf for t in inputs[:3])
        offs = (0, E, 0, E, 0, E)
    M = inputs[i] if has_mask else None
    D = inputs[i + int(has_mask)]._buf if has_drop else None
    mstr = (0, 0)
    if M is not None:
        mstr = (M.shape[1] * L * S if M.shape[0] > 1 else 0, L * S if M.shape[1] > 1 else 0)
        M = M._buf
    O = backend.empty(B * L * E, dt)
    P = backend.empty(B * h * L * S, dt)
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    K.forward(Q, Kb, Vb, M, D, O, P, B, h, L, S, d, offs, mstr, sc, dt)
    saved["P"], saved["offs"] = P, offs
    return O, (B, L, E), dt


_attn = Primitive("attention", _fwd)


def _recorded(*ts):
    return is_grad_enabled() or any(t._tangents for t in ts)


@_attn.def_vjp
def _vjp(g, *inputs, out, num_heads, packed, has_mask, has_drop, scale, saved):
    kw = dict(num_heads=num_heads, packed=packed, has_mask=has_mask, has_drop=has_drop, scale=scale)
    n = 1 if packed else 3
    if _recorded(g, out, *inputs):
        from ..autodiff.transforms import vjp
        consts = inputs[n:]
        _, pull = vjp(lambda *qkv: attention_composed(*qkv, *consts, **kw), *inputs[:n])
        return tuple(pull(g, create_graph=is_grad_enabled())) + (None,) * len(consts)
    B, L, S, E, h, d = _geometry(inputs, num_heads, packed)
    dt = g.dtype
    D = inputs[n + int(has_mask)]._buf if has_drop else None
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    if packed:
        Q = Kb = Vb = inputs[0]._buf
        dQ = dK = dV = backend.empty(B * L * 3 * E, dt)
        grads = (Tensor._make(dQ, inputs[0].shape, dt),)
    else:
        Q, Kb, Vb = (t._buf for t in inputs[:3])
        dQ, dK, dV = backend.empty(B * L * E, dt), backend.empty(B * S * E, dt), backend.empty(B * S * E, dt)
        grads = tuple(Tensor._make(b, t.shape, dt) if needs(i) else None
                      for i, (b, t) in enumerate(zip((dQ, dK, dV), inputs[:3])))
    K.backward(Q, Kb, Vb, D, saved["P"], g._buf, dQ, dK, dV, B, h, L, S, d, saved["offs"], sc, dt)
    return grads + (None,) * (len(inputs) - n)


@_attn.def_jvp
def _jvp(ts, *inputs, out, num_heads, packed, has_mask, has_drop, scale, saved):
    from ..autodiff.transforms import jvp
    kw = dict(num_heads=num_heads, packed=packed, has_mask=has_mask, has_drop=has_drop, scale=scale)
    n = 1 if packed else 3
    consts = inputs[n:]
    xs = inputs[:n]
    ts = tuple(zeros(x.shape, x.dtype) if t is None else t for x, t in zip(xs, ts[:n]))
    return jvp(lambda *qkv: attention_composed(*qkv, *consts, **kw), xs, ts)[1]


def attention(q, k=None, v=None, *, num_heads, mask=None, dropout=None, scale=None):
    """Multi-head attention softmax(q_h k_h^T * scale + mask) (* dropout) v_h for every head h, merged.

    Args:
        q: (B, L, E) queries, or with ``k`` and ``v`` None a packed (B, L, 3E) ``[q | k | v]`` (self-attention).
        k, v: (B, S, E) keys and values.
        num_heads: h (E divisible by h); head h uses columns h*d..h*d+d (d = E / h).
        mask: additive float mask (B or 1, h or 1, L, S), a constant.
        dropout: multipliers (B, h, L, S) on the weights (0 or 1 / (1 - p)), a constant.
        scale: default 1 / sqrt(d).
    Returns:
        (B, L, E).
    """
    packed = k is None
    inputs = (q,) if packed else (q, k, v)
    B, L, S, E, h, d = _geometry(inputs, num_heads, packed)
    extra = tuple(t for t in (mask, dropout) if t is not None)
    kw = dict(num_heads=num_heads, packed=packed, has_mask=mask is not None, has_drop=dropout is not None,
              scale=scale)
    if max(B * L * 3 * E, B * h * L * S, B * S * E) > _I32:
        return attention_composed(*inputs, *extra, **kw)
    return _attn(*inputs, *extra, **kw, saved={})
