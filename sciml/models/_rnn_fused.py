"""One direction of one recurrent layer (LSTM, GRU, Elman RNN) as one primitive: ``rnn_layer``.

Forward: one GEMM for all steps' input projections, then per step one GEMM ``h W_hh^T`` and one fused cell
kernel that adds the biases, applies the gates and writes the output straight into its final layout
(``batch_first`` or not); backward: per step one fused cell-adjoint kernel and one GEMM ``dG W_hh``, then
one GEMM each for ``dx``, ``dW_ih``, ``dW_hh`` over all steps and a column sum for the biases
(``sciml/kernels/rnn_seq.py``). The float32 LSTM on CPU runs each direction's whole step loop in one kernel each
way instead (``sciml/kernels/lstm_host.py``), with the same saved buffers and the same weight-gradient GEMMs.
A batch-first input (``x_batch_first``, the models' first layer) is transposed on the host inside the primitive
(one numpy copy; its cotangent transposed back), not by a ``transpose`` op (a strided-gather launch, ~90 us here).

Derivatives of every order: when the backward pass is itself recorded (``grad`` of ``grad``,
forward-over-reverse) or forward-mode tangents ride on the inputs, the rules differentiate the same recurrence
written in composed sciml ops (:func:`rnn_layer_composed`), which differentiates again; both paths agree to
rounding (tested in float64, and against PyTorch).
"""
from __future__ import annotations

from .. import backend
from ..autodiff.backward import needs
from ..autodiff.ops import concat, matmul, relu, reshape, sigmoid, stack, tanh, transpose
from ..autodiff.primitive import Primitive, is_grad_enabled
from ..autodiff.tensor import Tensor, zeros
from ..kernels import _common as KC
from ..kernels import recurrent as KR
from ..kernels import rnn_seq as K

__all__ = ["rnn_layer", "rnn_layer_composed", "rnn_outputs"]

_I32 = 2 ** 31 - 1
KINDS = tuple(K.NG)


def _cell(kind, g, gh, h, c, H):
    """One step from the input pre-activations ``g`` (biases included) and ``gh = h W_hh^T`` (GRU: + b_hh)."""
    if kind == "LSTM":
        a = g + gh
        i, f, gg, o = (a[:, k * H:(k + 1) * H] for k in range(4))
        c = sigmoid(f) * c + sigmoid(i) * tanh(gg)
        return sigmoid(o) * tanh(c), c
    if kind == "GRU":
        r = sigmoid(g[:, :H] + gh[:, :H])
        z = sigmoid(g[:, H:2 * H] + gh[:, H:2 * H])
        n = tanh(g[:, 2 * H:] + r * gh[:, 2 * H:])
        return (1.0 - z) * n + z * h, None
    a = g + gh
    return (tanh(a) if kind == "RNN_TANH" else relu(a)), None


def rnn_layer_composed(x, W_ih, b, W_hh, h0, c0=None, *, kind, reverse=False, batch_first=False,
                       x_batch_first=False):
    """The packed result of :func:`rnn_layer` in composed ops (any order of derivatives)."""
    if x_batch_first:
        x = transpose(x, (1, 0, 2))
    T, B, _ = x.shape
    H = h0.shape[1]
    nb = K.NG[kind] * H
    gx = reshape(matmul(reshape(x, (T * B, -1)), W_ih, transpose_b=True), (T, B, -1)) + b[:nb]
    b_hh = b[nb:] if kind == "GRU" else None
    h, c, ys = h0, c0, [None] * T
    for s in range(T):
        t = T - 1 - s if reverse else s
        gh = matmul(h, W_hh, transpose_b=True)
        if b_hh is not None:
            gh = gh + b_hh
        h, c = _cell(kind, gx[t], gh, h, c, H)
        ys[t] = h
    y = stack(ys, 1 if batch_first else 0)
    parts = [reshape(y, (-1,)), reshape(h, (-1,))]
    if kind == "LSTM":
        parts.append(reshape(c, (-1,)))
    return concat(parts, 0)


def _recorded(*ts):
    return is_grad_enabled() or any(t._tangents for t in ts)


def _layout(T, B, H, batch_first):
    return (T * H, H) if batch_first else (H, B * H)   # (row stride of b, of t) in y


def _time_first(src, dst, B, T, I):
    """dst (T, B, I) = src (B, T, I) on host buffers."""
    dst[:T * B * I].reshape(T, B, I)[:] = src[:T * B * I].reshape(B, T, I).transpose(1, 0, 2)


def _batch_first(src, dst, T, B, I):
    """dst (B, T, I) = src (T, B, I) on host buffers."""
    dst[:T * B * I].reshape(B, T, I)[:] = src[:T * B * I].reshape(T, B, I).transpose(1, 0, 2)


def _shape(x, x_batch_first):
    """(T, B, I) of the input."""
    return (x.shape[1], x.shape[0], x.shape[2]) if x_batch_first else x.shape


def _fwd(x, W_ih, b, W_hh, h0, *c0, kind, reverse, batch_first, x_batch_first, saved):
    T, B, I = _shape(x, x_batch_first)
    H, dt = h0.shape[1], x.dtype
    ybs, yts = _layout(T, B, H, batch_first)
    X = x._buf
    if x_batch_first:  # (host only) one numpy transposition of the input, not a strided-view op and its launch
        X = K.buf(T * B * I, dt)
        KC.host_call(_time_first, x._buf, X, B, T, I)
        saved["X"] = X
    P, bufs = K.forward(kind, X, W_ih._buf, b._buf, W_hh._buf, h0._buf, c0[0]._buf if c0 else None, T, B, I, H,
                        reverse, ybs, yts, dt)
    saved.update(bufs)
    n = (T + (2 if kind == "LSTM" else 1)) * B * H
    return P, (n,), dt


_rnn = Primitive("rnn_layer", _fwd)


@_rnn.def_vjp
def _vjp(g, x, W_ih, b, W_hh, h0, *c0, out, kind, reverse, batch_first, x_batch_first, saved):
    args = (x, W_ih, b, W_hh, h0) + c0
    kw = dict(kind=kind, reverse=reverse, batch_first=batch_first, x_batch_first=x_batch_first)
    if _recorded(g, out, *args):
        from ..autodiff.transforms import vjp
        _, pull = vjp(lambda *a: rnn_layer_composed(*a, **kw), *args)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    T, B, I = _shape(x, x_batch_first)
    H, dt = h0.shape[1], x.dtype
    ybs, yts = _layout(T, B, H, batch_first)
    need = [needs(i) for i in range(len(args))] + [False] * (6 - len(args))
    r = K.backward(kind, g._buf, saved.get("X", x._buf), W_ih._buf, W_hh._buf, saved, T, B, I, H, reverse, ybs, yts,
                   dt, need)
    if x_batch_first and r[0] is not None:
        dx = K.buf(T * B * I, dt)
        KC.host_call(_batch_first, r[0], dx, T, B, I)
        r = [dx] + list(r[1:])
    shapes = [x.shape, W_ih.shape, b.shape, W_hh.shape, h0.shape, h0.shape]
    res = tuple(None if buf is None or not need[i] else Tensor._make(buf, shapes[i], dt) for i, buf in enumerate(r))
    return res[:len(args)]


@_rnn.def_jvp
def _jvp(ts, x, W_ih, b, W_hh, h0, *c0, out, kind, reverse, batch_first, x_batch_first, saved):
    from ..autodiff.transforms import jvp
    xs = (x, W_ih, b, W_hh, h0) + c0
    ts = tuple(zeros(a.shape, a.dtype) if t is None else t for a, t in zip(xs, ts))
    kw = dict(kind=kind, reverse=reverse, batch_first=batch_first, x_batch_first=x_batch_first)
    return jvp(lambda *a: rnn_layer_composed(*a, **kw), xs, ts)[1]


def rnn_layer(x, W_ih, b, W_hh, h0, c0=None, *, kind="LSTM", reverse=False, batch_first=False, x_batch_first=False):
    """Run one direction of one recurrent layer over a whole sequence.

    Args:
        x: (T, B, I) inputs, time first.
        W_ih: (NG*H, I) and W_hh (NG*H, H): PyTorch's weights (NG = 4 LSTM (i, f, g, o), 3 GRU (r, z, n),
            1 RNN).
        b: (NG*H,) ``b_ih + b_hh`` (LSTM, RNN); for the GRU (2*NG*H,) ``[b_ih | b_hh]``.
        h0, c0: (B, H) initial states (c0 for the LSTM only).
        kind: "LSTM", "GRU", "RNN_TANH" or "RNN_RELU".
        reverse: run from t = T-1 down to 0 (the backward direction of a bidirectional layer).
        batch_first: the output ``y`` laid out (B, T, H) instead of (T, B, H).
        x_batch_first: ``x`` given as (B, T, I) (on CPU read through one host transposition into the time-first
            buffer, its cotangent transposed back; elsewhere a ``transpose`` op first).
    Returns:
        A flat Tensor ``[y, h_T, c_T]`` (``c_T`` for the LSTM only); see :func:`rnn_outputs`.
    """
    if kind not in K.NG:
        raise ValueError(f"rnn_layer: kind={kind!r}; expected one of {', '.join(K.NG)}.")
    if x_batch_first and not backend.on_host():
        x, x_batch_first = transpose(x, (1, 0, 2)), False
    T, B, _ = _shape(x, x_batch_first)
    H = h0.shape[1]
    args = (x, W_ih, b, W_hh, h0) + ((c0,) if kind == "LSTM" else ())
    if T * B * K.NG[kind] * H > _I32 or W_ih.shape[0] * max(W_ih.shape[1], H) > _I32:
        return rnn_layer_composed(*args, kind=kind, reverse=reverse, batch_first=batch_first,
                                  x_batch_first=x_batch_first)
    return _rnn(*args, kind=kind, reverse=reverse, batch_first=batch_first, x_batch_first=x_batch_first, saved={})


# --- zero-copy parts of the packed output --------------------------------------------------------------
def _part_fwd(p, start, shape):
    import math
    n = math.prod(shape)
    if backend.on_host():
        return p._buf[start:start + n], shape, p.dtype
    out = backend.empty(n, p.dtype)
    KR.copy(p._buf, start, out, 0, n, p.dtype)
    return out, shape, p.dtype


def _unpart_fwd(g, start, total):
    n = g.size
    if not backend.on_host():  # device buffers start zeroed
        out = backend.zeros(total, g.dtype)
        KR.copy(g._buf, 0, out, start, n, g.dtype)
        return out, (total,), g.dtype
    out = K.buf(total, g.dtype)
    zero = backend.zeros(max(start, total - start - n), g.dtype)
    KR.copy(zero, 0, out, 0, start, g.dtype)
    KR.copy(g._buf, 0, out, start, n, g.dtype)
    KR.copy(zero, 0, out, start + n, total - start - n, g.dtype)
    return out, (total,), g.dtype


_part = Primitive("rnn_part", _part_fwd)          # out = p[start:start + n] viewed as shape
_unpart = Primitive("rnn_unpart", _unpart_fwd)    # out = zeros(total); out[start:start + n] = g (its transpose)
_part.flat_slice = lambda params: params["start"]  # a view of a part is one view of p (ops/shape.py: no repack)
_part.def_vjp(lambda g, p, out, start, shape: (_unpart(g, start=start, total=p.size),))
_part.def_jvp(lambda ts, p, out, start, shape: _part(ts[0], start=start, shape=shape))
_unpart.def_vjp(lambda g, x, out, start, total: (_part(g, start=start, shape=x.shape),))
_unpart.def_jvp(lambda ts, x, out, start, total: _unpart(ts[0], start=start, total=total))


def rnn_outputs(P, T, B, H, kind, batch_first=False):
    """(y (T, B, H) or (B, T, H), h_T (B, H), c_T (B, H) or None) from :func:`rnn_layer`'s packed result."""
    nY, BH = T * B * H, B * H
    y = _part(P, start=0, shape=(B, T, H) if batch_first else (T, B, H))
    h = _part(P, start=nY, shape=(B, H))
    c = _part(P, start=nY + BH, shape=(B, H)) if kind == "LSTM" else None
    return y, h, c
