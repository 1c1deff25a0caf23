"""The LSTM time loop as one primitive: ``lstm_sequence(gx, W_hh, h0, c0)``.

Forward: per step one GEMM ``h_{t-1} W_hh^T`` added to the precomputed input projections ``gx[t]`` and one
fused cell kernel (gates, c_t, h_t); backward: per step one fused cell-adjoint kernel and one GEMM
``dG_t W_hh``, then one GEMM for the recurrent weight's gradient over all steps (``sciml/kernels/recurrent.py``).

Derivatives of every order: when the backward pass is itself recorded (``grad`` of ``grad``, forward-over-
reverse) or forward-mode tangents ride on the inputs, the rules differentiate the same recurrence written in
composed sciml ops (:func:`lstm_sequence_composed`), which differentiates again; the fused and composed paths
agree to rounding (tested in float64, and against PyTorch).
"""
from __future__ import annotations

from .. import backend
from ..autodiff.backward import needs
from ..autodiff.ops import concat, getitem, matmul, reshape, sigmoid, stack, tanh
from ..autodiff.primitive import Primitive, is_grad_enabled
from ..autodiff.tensor import Tensor, zeros
from ..kernels import recurrent as K

__all__ = ["lstm_sequence", "lstm_sequence_composed"]

_I32 = 2 ** 31 - 1


def lstm_sequence_composed(gx, W_hh, h0, c0):
    """The packed result of :func:`lstm_sequence` in composed ops (any order of derivatives)."""
    T, H = gx.shape[0], h0.shape[1]
    h, c, hs = h0, c0, [h0]
    for t in range(T):
        g = gx[t] + matmul(h, W_hh, transpose_b=True)
        i, f, gg, o = (g[:, k * H:(k + 1) * H] for k in range(4))
        c = sigmoid(f) * c + sigmoid(i) * tanh(gg)
        h = sigmoid(o) * tanh(c)
        hs.append(h)
    return concat([reshape(stack(hs, 0), (-1,)), reshape(c, (-1,))], 0)


def _recorded(*ts):
    return is_grad_enabled() or any(t._tangents for t in ts)


def _fwd(gx, W_hh, h0, c0, saved):
    T, B, G4 = gx.shape
    H, dt = G4 // 4, gx.dtype
    nS = (T + 1) * B * H
    P = backend.empty(nS + B * H, dt)  # [h_0 .. h_T | c_T]
    G = backend.empty(T * B * G4, dt)
    Cs = backend.empty(nS, dt)
    K.copy(gx._buf, 0, G, 0, T * B * G4, dt)
    K.copy(h0._buf, 0, P, 0, B * H, dt)
    K.copy(c0._buf, 0, Cs, 0, B * H, dt)
    K.lstm_forward(G, W_hh._buf, P, Cs, T, B, H, dt)
    K.copy(Cs, T * B * H, P, nS, B * H, dt)
    saved["G"], saved["Cs"] = G, Cs  # the activated gates and the cell states, for the backward kernels
    return P, (nS + B * H,), dt


_lstm = Primitive("lstm_sequence", _fwd)


@_lstm.def_vjp
def _vjp(g, gx, W_hh, h0, c0, out, saved):
    if _recorded(g, gx, W_hh, h0, c0, out):
        from ..autodiff.transforms import vjp
        _, pull = vjp(lstm_sequence_composed, gx, W_hh, h0, c0)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    T, B, G4 = gx.shape
    H, dt = G4 // 4, gx.dtype
    nS = (T + 1) * B * H
    dG = backend.empty(T * B * G4, dt)
    dh = backend.zeros(B * H, dt)
    dc = backend.empty(B * H, dt)
    K.copy(g._buf, nS, dc, 0, B * H, dt)
    K.lstm_backward(saved["G"], saved["Cs"], W_hh._buf, g._buf, dG, dh, dc, T, B, H, dt)
    dGt = Tensor._make(dG, (T, B, G4), dt)
    gW = None
    if needs(1):
        if backend.on_host():
            hp = out._buf[:T * B * H]
        else:
            hp = backend.empty(T * B * H, dt)
            K.copy(out._buf, 0, hp, 0, T * B * H, dt)
        gW = matmul(reshape(dGt, (T * B, G4)), Tensor._make(hp, (T * B, H), dt), transpose_a=True)
    return (dGt if needs(0) else None, gW, Tensor._make(dh, (B, H), dt) if needs(2) else None,
            Tensor._make(dc, (B, H), dt) if needs(3) else None)


@_lstm.def_jvp
def _jvp(ts, gx, W_hh, h0, c0, out, saved):
    from ..autodiff.transforms import jvp
    xs = (gx, W_hh, h0, c0)
    ts = tuple(zeros(x.shape, x.dtype) if t is None else t for x, t in zip(xs, ts))
    return jvp(lstm_sequence_composed, xs, ts)[1]


def lstm_sequence(gx, W_hh, h0, c0):
    """Run an LSTM over T steps given the input projections.

    Args:
        gx: (T, B, 4H) ``x_t W_ih^T + b_ih + b_hh`` for every step (gate order i, f, g, o).
        W_hh: (4H, H) recurrent weight.
        h0, c0: (B, H) initial states.
    Returns:
        A flat Tensor ``[h_0, h_1, ..., h_T, c_T]`` ((T + 1) * B * H + B * H values); see :func:`lstm_outputs`.
    """
    T, B, G4 = gx.shape
    if T * B * G4 > _I32 or (T + 1) * B * G4 // 4 > _I32:
        return lstm_sequence_composed(gx, W_hh, h0, c0)
    return _lstm(gx, W_hh, h0, c0, saved={})


def lstm_outputs(P, T, B, H):
    """(hs (T, B, H), h_T (B, H), c_T (B, H)) from :func:`lstm_sequence`'s packed result."""
    nS = (T + 1) * B * H
    hs = reshape(getitem(P, slice(B * H, nS)), (T, B, H))
    return hs, reshape(getitem(P, slice(T * B * H, nS)), (B, H)), reshape(getitem(P, slice(nS, nS + B * H)), (B, H))
