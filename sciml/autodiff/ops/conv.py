"""NN layer primitives: fused dense epilogue ``bias_act``, fused ``softmax_cross_entropy``, and
(below) unfold/fold (im2col / col2im) for convolution and pooling.

Every rule has two paths: when the backward pass is itself being recorded (higher-order
derivatives, ``is_grad_enabled()`` inside the rule) it is written in composed sciml ops, so it
differentiates again; otherwise it runs one fused Taichi kernel. Both give the same numbers (tested).
"""
from __future__ import annotations

import math

from ... import backend
from ...kernels import conv as K
from ...kernels import elementwise as E
from ..backward import needs
from ..primitive import Primitive, is_grad_enabled
from ..tensor import Tensor, as_tensor
from ._util import check_float
from .elementwise import sigmoid, square, step, tanh, relu
from .nn import softmax
from .reduce import reshape, sum

__all__ = ["bias_act", "softmax_cross_entropy"]

_ACT_FN = {"identity": lambda z: z, "relu": relu, "tanh": tanh, "sigmoid": sigmoid}


def _deriv_from_out(act, y):
    """act'(z) written from y = act(z), in sciml ops."""
    if act == "relu":
        return step(y)
    if act == "tanh":
        return 1.0 - square(y)
    if act == "sigmoid":
        return y * (1.0 - y)
    return None


def _recorded(*ts):
    """True when a rule's result must itself be differentiable: the backward pass is being recorded
    (create_graph) or forward-mode tangents ride on its inputs (forward-over-reverse)."""
    return is_grad_enabled() or any(t._tangents for t in ts)


# --- bias + activation ----------------------------------------------------------------------
def _bias_act_fwd(h, b, act):
    cols = b.shape[0]
    rows = h.size // cols if cols else 0
    y = backend.empty(h.size, h.dtype)
    if h.size:
        K.bias_act(act, h._buf, b._buf, y, rows, cols, h.dtype)
    return y, h.shape, h.dtype


_bias_act = Primitive("bias_act", _bias_act_fwd)


@_bias_act.def_vjp
def _bias_act_vjp(g, h, b, out, act):
    cols = b.shape[0]
    rows = h.size // cols if cols else 0
    if _recorded(g, h, b, out):  # recorded backward: composed ops, differentiable again
        d = _deriv_from_out(act, out)
        gz = g if d is None else g * d
        gb = sum(reshape(gz, (rows, cols)), 0) if needs(1) else None
        return gz, gb
    ident = act == "identity"  # gz = g: only the bias column sums need a kernel
    gz = None if ident or not needs(0) else backend.empty(h.size, h.dtype)
    gb = backend.empty(cols, h.dtype) if needs(1) else None
    if h.size and (gz is not None or gb is not None):
        K.bias_act_vjp(act, g._buf, out._buf, gz, gb, rows, cols, h.dtype)
    gh = (g if ident else Tensor._make(gz, h.shape, h.dtype)) if needs(0) else None
    return gh, Tensor._make(gb, b.shape, b.dtype) if gb is not None else None


@_bias_act.def_jvp
def _bias_act_jvp(ts, h, b, out, act):
    t = ts[0]
    if ts[1] is not None:
        t = ts[1] if t is None else t + ts[1]
        if t.shape != out.shape:
            from .reduce import broadcast_to
            t = broadcast_to(t, out.shape)
    d = _deriv_from_out(act, out)
    return t if d is None else t * d


@_bias_act.def_batched_jvp
def _bias_act_bjvp(ts, h, b, out, act):
    from ._util import lift
    t = ts[0]
    if ts[1] is not None:
        tb = lift(ts[1], out.ndim)
        t = tb if t is None else t + tb
        if t.shape[1:] != out.shape:
            from .reduce import broadcast_to
            t = broadcast_to(t, t.shape[:1] + out.shape)
    d = _deriv_from_out(act, out)
    return t if d is None else t * d


def bias_act(h, b, act="identity"):
    """act(h + b) with b broadcast along the last axis, in one fused kernel (its adjoint also one).

    Args:
        h: (..., m) Tensor (e.g. x @ W).
        b: (m,) bias.
        act: "identity" | "relu" | "tanh" | "sigmoid".
    """
    h, b = as_tensor(h), as_tensor(b)
    check_float("bias_act", h, b)
    if act not in K.ACTS:
        raise ValueError(f"bias_act: act={act!r}; expected one of {K.ACTS}.")
    if b.ndim != 1 or h.ndim == 0 or h.shape[-1] != b.shape[0]:
        raise ValueError(f"bias_act: h has shape {h.shape} and b {b.shape}; expected h (..., m) and b (m,).")
    if h.dtype != b.dtype:
        raise TypeError(f"bias_act: h has dtype {h.dtype} and b {b.dtype}; expected the same float dtype.")
    return _bias_act(h, b, act=act)


# --- softmax cross-entropy ------------------------------------------------------------------
def _xent_fwd(x, q, reduction):
    rows, cols = x.shape
    rowloss = backend.empty(max(rows, 1), x.dtype)
    total = backend.zeros(1, x.dtype)
    scale = 1.0 / rows if reduction == "mean" and rows else 1.0
    K.xent(x._buf, q._buf, rowloss, total, rows, cols, scale, x.dtype)
    if reduction == "none":
        return rowloss, (rows,), x.dtype
    return total, (), x.dtype


_xent = Primitive("softmax_cross_entropy", _xent_fwd)


def _expand_g(g, rows, reduction):
    if reduction == "none":
        return reshape(g, (rows, 1))
    return g * (1.0 / rows) if reduction == "mean" else g


@_xent.def_vjp
def _xent_vjp(g, x, q, out, reduction):
    rows, cols = x.shape
    if not needs(0):
        return None, None
    if _recorded(g, x, q, out):
        qs = sum(q, -1, keepdims=True)
        return _expand_g(g, rows, reduction) * (softmax(x) * qs - q), None
    gx = backend.empty(x.size, x.dtype)
    if x.size:
        scale = 1.0 / rows if reduction == "mean" else 1.0
        K.xent_grad(x._buf, q._buf, g._buf, gx, rows, cols, scale, reduction == "none", x.dtype)
    return Tensor._make(gx, x.shape, x.dtype), None


@_xent.def_jvp
def _xent_jvp(ts, x, q, out, reduction):
    if ts[0] is None:
        return None
    rows = x.shape[0]
    qs = sum(q, -1, keepdims=True)
    per_row = sum((softmax(x) * qs - q) * ts[0], -1)
    if reduction == "none":
        return per_row
    s = sum(per_row)
    return s * (1.0 / rows) if reduction == "mean" else s


@_xent.def_batched_jvp
def _xent_bjvp(ts, x, q, out, reduction):
    if ts[0] is None:
        return None
    rows = x.shape[0]
    qs = sum(q, -1, keepdims=True)
    per_row = sum((softmax(x) * qs - q) * ts[0], -1)  # (B, rows)
    if reduction == "none":
        return per_row
    s = sum(per_row, -1)
    return s * (1.0 / rows) if reduction == "mean" else s


def softmax_cross_entropy(logits, q, reduction="mean"):
    """Cross-entropy of target distributions ``q`` (n, C) (rows need not sum to 1) against
    softmax(logits), in one fused kernel: L_r = logsumexp(x_r) sum(q_r) - q_r . x_r.

    Returns a scalar (reduction "mean" over rows, or "sum") or (n,) ("none"). ``q`` gets no gradient.
    """
    x, q = as_tensor(logits), as_tensor(q)
    check_float("softmax_cross_entropy", x, q)
    if x.ndim != 2 or q.shape != x.shape:
        raise ValueError(f"softmax_cross_entropy: logits {x.shape} and q {q.shape}; expected both (n, C).")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"softmax_cross_entropy: reduction={reduction!r}; expected 'mean', 'sum' or 'none'.")
    return _xent(x, q, reduction=reduction)



# --- unfold / fold (im2col / col2im) --------------------------------------------------------
def _out_size(n, k, s, p):
    return (n + 2 * p - k) // s + 1


def _meta(in_shape, geom):
    N, Cc, H, W = in_shape
    kh, kw, sh, sw, ph, pw = geom
    return (N, Cc, H, W, kh, kw, sh, sw, ph, pw, _out_size(H, kh, sh, ph), _out_size(W, kw, sw, pw))


def _unfold_fwd(x, geom, pad_value):
    m = _meta(x.shape, geom)
    N, Cc, _, _, kh, kw = m[:6]
    shape = (N, m[10], m[11], Cc, kh, kw)
    n = math.prod(shape)
    out = backend.empty(max(n, 1), x.dtype)
    if n:
        K.unfold(x._buf, out, backend.meta(m), n, float(pad_value), x.dtype)
    return out, shape, x.dtype


def _fold_fwd(cols, geom, in_shape):
    m = _meta(in_shape, geom)
    n = math.prod(in_shape)
    out = backend.empty(max(n, 1), cols.dtype)
    if n:
        K.fold(cols._buf, out, backend.meta(m), n, cols.dtype)
    return out, tuple(in_shape), cols.dtype


_unfold = Primitive("unfold", _unfold_fwd)
_fold = Primitive("fold", _fold_fwd)
_unfold.def_vjp(lambda g, x, out, geom, pad_value: (_fold(g, geom=geom, in_shape=x.shape),))
_unfold.def_jvp(lambda ts, x, out, geom, pad_value: _unfold(ts[0], geom=geom, pad_value=0.0))
_fold.def_vjp(lambda g, cols, out, geom, in_shape: (_unfold(g, geom=geom, pad_value=0.0),))
_fold.def_jvp(lambda ts, cols, out, geom, in_shape: _fold(ts[0], geom=geom, in_shape=in_shape))


def _merge_batch(t):
    return reshape(t, (t.shape[0] * t.shape[1],) + t.shape[2:])


# batched: the B tangents are B * N images
_unfold.def_batched_jvp(lambda ts, x, out, geom, pad_value: reshape(
    _unfold(_merge_batch(ts[0]), geom=geom, pad_value=0.0), ts[0].shape[:1] + out.shape))
_fold.def_batched_jvp(lambda ts, cols, out, geom, in_shape: reshape(
    _fold(_merge_batch(ts[0]), geom=geom, in_shape=(ts[0].shape[0] * in_shape[0],) + tuple(in_shape[1:])),
    ts[0].shape[:1] + out.shape))


def _pair(name, v):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise ValueError(f"{name}: got {v}; expected an int or a pair of ints.")
    return v


def unfold(x, kernel_size, stride=1, padding=0, pad_value=0.0):
    """Sliding windows (im2col) of images x (N, C, H, W) -> (N, Ho, Wo, C, kh, kw).

    Ho = (H + 2 ph - kh) // sh + 1 (same for W). Taps outside the image read ``pad_value`` (0, or
    -inf for max-pooling). Linear in x; its VJP is :func:`fold` and fold's is unfold, so any
    derivative order works.
    """
    x = as_tensor(x)
    check_float("unfold", x)
    if x.ndim != 4:
        raise ValueError(f"unfold: x has shape {x.shape}; expected (N, C, H, W).")
    kh, kw = _pair("unfold(kernel_size)", kernel_size)
    sh, sw = _pair("unfold(stride)", stride)
    ph, pw = _pair("unfold(padding)", padding)
    if min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0:
        raise ValueError(f"unfold: kernel_size {(kh, kw)} and stride {(sh, sw)} must be >= 1, padding "
                         f"{(ph, pw)} >= 0.")
    H, W = x.shape[2:]
    if H + 2 * ph < kh or W + 2 * pw < kw:
        raise ValueError(f"unfold: the {kh}x{kw} kernel is larger than the padded image {H + 2 * ph}x{W + 2 * pw} "
                         f"(x has shape {x.shape}, padding {(ph, pw)}).")
    return _unfold(x, geom=(kh, kw, sh, sw, ph, pw), pad_value=float(pad_value))


def fold(cols, in_shape, kernel_size, stride=1, padding=0):
    """Adjoint of :func:`unfold`: cols (N, Ho, Wo, C, kh, kw) summed back into images of ``in_shape``."""
    cols = as_tensor(cols)
    kh, kw = _pair("fold(kernel_size)", kernel_size)
    sh, sw = _pair("fold(stride)", stride)
    ph, pw = _pair("fold(padding)", padding)
    geom = (kh, kw, sh, sw, ph, pw)
    m = _meta(tuple(in_shape), geom)
    want = (m[0], m[10], m[11], m[1], kh, kw)
    if cols.shape != want:
        raise ValueError(f"fold: cols has shape {cols.shape}; expected {want} for images of shape {tuple(in_shape)}.")
    return _fold(cols, geom=geom, in_shape=tuple(int(s) for s in in_shape))


__all__ += ["unfold", "fold"]
