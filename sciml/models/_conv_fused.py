"""The convolution epilogue as one primitive: ``conv_epilogue(y, b, (N, Ho, Wo))`` = the GEMM rows y (N*Ho*Wo, O)
plus the bias b (O,), laid out as images (N, O, Ho, Wo), in one kernel (``sciml/kernels/nn_conv.py``); its
adjoint is one kernel too. Recorded backward passes and forward-mode tangents use
:func:`conv_epilogue_composed` (bias add + transpose in sciml ops), so every order differentiates.
"""
from __future__ import annotations

from .. import backend
from ..autodiff.backward import needs
from ..autodiff.ops import reshape, transpose
from ..autodiff.primitive import Primitive, is_grad_enabled
from ..autodiff.tensor import Tensor, zeros
from ..kernels import nn_conv as K


def conv_epilogue_composed(y, b, shape, relu=False):
    N, Ho, Wo = shape
    out = transpose(reshape(y + b, (N, Ho, Wo, b.shape[0])), (0, 3, 1, 2))
    if relu:
        from ..autodiff.ops import relu as _relu
        out = _relu(out)
    return out


def _fwd(y, b, shape, relu=False):
    N, Ho, Wo = shape
    O = b.shape[0]
    out = backend.empty(max(y.size, 1), y.dtype)
    if y.size:
        K.conv_epilogue(y._buf, b._buf, out, N, Ho * Wo, O, y.dtype, relu)
    return out, (N, O, Ho, Wo), y.dtype


_epi = Primitive("conv_epilogue", _fwd)


@_epi.def_vjp
def _vjp(g, y, b, out, shape, relu=False):
    if is_grad_enabled() or any(t._tangents for t in (g, y, b, out)):
        from ..autodiff.transforms import vjp
        _, pull = vjp(lambda y, b: conv_epilogue_composed(y, b, shape, relu), y, b)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    N, Ho, Wo = shape
    O, dt = b.shape[0], y.dtype
    gy = backend.empty(max(y.size, 1), dt) if needs(0) else None
    gb = backend.empty(O, dt)
    if y.size:
        K.conv_epilogue_vjp(g._buf, gy, gb, N, Ho * Wo, O, dt, out._buf if relu else None)
    else:
        gb = backend.zeros(O, dt)
    return (Tensor._make(gy, y.shape, dt) if gy is not None else None,
            Tensor._make(gb, b.shape, dt) if needs(1) else None)


@_epi.def_jvp
def _jvp(ts, y, b, out, shape, relu=False):
    from ..autodiff.transforms import jvp
    ts = tuple(zeros(v.shape, v.dtype) if t is None else t for v, t in zip((y, b), ts))
    return jvp(lambda y, b: conv_epilogue_composed(y, b, shape, relu), (y, b), ts)[1]


def conv_epilogue(y, b, shape, relu=False):
    """(N, O, Ho, Wo) images from the GEMM rows y (N*Ho*Wo, O) plus the bias b (O,); ``shape`` = (N, Ho, Wo);
    ``relu``: then ReLU, in the same kernel."""
    return _epi(y, b, shape=tuple(shape), relu=bool(relu))


# --- 2-D pooling: one kernel forward, one backward (sciml/kernels/pool.py) ----------------------------------
def _pool_fwd(x, mode, k, s, p, out_hw, composed):
    from ..kernels import pool as KP
    N, Cc, H, W = x.shape
    Ho, Wo = out_hw
    y = backend.empty(max(N * Cc * Ho * Wo, 1), x.dtype)
    if N * Cc * Ho * Wo:
        KP.pool2d(mode, x._buf, y, N * Cc, H, W, Ho, Wo, k, s, p, x.dtype)
    return y, (N, Cc, Ho, Wo), x.dtype


_pool = Primitive("pool2d", _pool_fwd)


@_pool.def_vjp
def _pool_vjp(g, x, out, mode, k, s, p, out_hw, composed):
    if is_grad_enabled() or any(t._tangents for t in (g, x, out)):
        from ..autodiff.transforms import vjp
        _, pull = vjp(composed, x)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    from ..kernels import pool as KP
    N, Cc, H, W = x.shape
    gx = backend.empty(max(x.size, 1), x.dtype)
    if x.size:
        KP.pool2d_vjp(mode, x._buf, g._buf, gx, N * Cc, H, W, out_hw[0], out_hw[1], k, s, p, x.dtype)
    return (Tensor._make(gx, x.shape, x.dtype),)


@_pool.def_jvp
def _pool_jvp(ts, x, out, mode, k, s, p, out_hw, composed):
    from ..autodiff.transforms import jvp
    return jvp(composed, (x,), (ts[0],))[1]


def pool2d(x, mode, k, s, p, composed):
    """max / mean pooling of x (N, C, H, W) over kh x kw windows (k, s, p: pairs, already checked) in one kernel;
    ``composed`` (x -> the same pooling in sciml ops) differentiates the recorded backward passes and tangents."""
    Ho = (x.shape[2] + 2 * p[0] - k[0]) // s[0] + 1
    Wo = (x.shape[3] + 2 * p[1] - k[1]) // s[1] + 1
    return _pool(x, mode=mode, k=tuple(k), s=tuple(s), p=tuple(p), out_hw=(Ho, Wo), composed=composed)


# --- Conv2d -> ReLU -> MaxPool2d(k) (windows tiling the image): the epilogue with a max-pool tail, one kernel
# forward and one backward (sciml/kernels/nn_conv.py); the rules' recorded / forward-mode paths compose
# conv_epilogue_composed and max_pool2d.
def conv_epilogue_pool_composed(y, b, shape, relu, k):
    from .conv import max_pool2d
    return max_pool2d(conv_epilogue_composed(y, b, shape, relu), k)


def _ep_fwd(y, b, shape, relu, k):
    N, H, W = shape
    O = b.shape[0]
    Ho, Wo = H // k[0], W // k[1]
    out = backend.empty(max(N * O * Ho * Wo, 1), y.dtype)
    if y.size:
        K.conv_epilogue_pool(y._buf, b._buf, out, N, H, W, O, k, y.dtype, relu)
    return out, (N, O, Ho, Wo), y.dtype


_epi_pool = Primitive("conv_epilogue_pool", _ep_fwd)


@_epi_pool.def_vjp
def _ep_vjp(g, y, b, out, shape, relu, k):
    if is_grad_enabled() or any(t._tangents for t in (g, y, b, out)):
        from ..autodiff.transforms import vjp
        _, pull = vjp(lambda y, b: conv_epilogue_pool_composed(y, b, shape, relu, k), y, b)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    N, H, W = shape
    O, dt = b.shape[0], y.dtype
    gy = backend.empty(max(y.size, 1), dt)
    gb = backend.empty(O, dt)
    if y.size:
        K.conv_epilogue_pool_vjp(g._buf, y._buf, b._buf, gy, gb, N, H, W, O, k, dt, relu)
    else:
        gb = backend.zeros(O, dt)
    return (Tensor._make(gy, y.shape, dt) if needs(0) else None, Tensor._make(gb, b.shape, dt) if needs(1) else None)


@_epi_pool.def_jvp
def _ep_jvp(ts, y, b, out, shape, relu, k):
    from ..autodiff.transforms import jvp
    ts = tuple(zeros(v.shape, v.dtype) if t is None else t for v, t in zip((y, b), ts))
    return jvp(lambda y, b: conv_epilogue_pool_composed(y, b, shape, relu, k), (y, b), ts)[1]


def conv_epilogue_pool(y, b, shape, relu, k):
    """max_pool2d(conv_epilogue(y, b, shape, relu), k) with kh x kw windows tiling the (Ho, Wo) = shape[1:] image
    (stride = kernel, no padding, sizes divisible), in one kernel forward and one backward."""
    return _epi_pool(y, b, shape=tuple(shape), relu=bool(relu), k=tuple(k))


def tiling_pool(layer, hw):
    """(kh, kw) when ``layer`` is exactly a MaxPool2d whose windows tile an image of size hw (stride = kernel,
    no padding, hw divisible), else None."""
    from .conv import MaxPool2d
    if type(layer) is not MaxPool2d:
        return None
    try:
        k = _as_pair(layer.kernel_size)
        s = k if layer.stride is None else _as_pair(layer.stride)
        p = _as_pair(layer.padding)
    except (TypeError, ValueError):
        return None
    if s != k or p != (0, 0) or hw[0] % k[0] or hw[1] % k[1] or k[0] < 1 or k[1] < 1:
        return None
    return k


def _as_pair(v):
    t = (int(v), int(v)) if isinstance(v, int) else tuple(int(a) for a in v)
    if len(t) != 2:
        raise ValueError
    return t


def relu_pool(layer, x, pool):
    """Sequential's ``layer -> ReLU -> pool`` in fused kernels: Conv2d (bias epilogue, ReLU and max-pool in one
    kernel) or BatchNorm2d in training mode (statistics, normalisation, ReLU and max-pool in one kernel); None
    when ``pool`` is not a MaxPool2d whose windows tile the image or the layer's fused path does not apply."""
    from .conv import Conv2d
    from .norm import BatchNorm2d
    t = type(layer)
    if t is Conv2d:
        if layer.bias is None:
            return None
        y, used = _conv2d_pool(layer, x, pool)
        return y if used else _finish_pool(y, pool)
    if t is BatchNorm2d and x.ndim == 4:
        k = tiling_pool(pool, x.shape[2:])
        return layer._forward_pool(x, True, k) if k is not None else None
    return None


def _conv2d_pool(layer, x, pool):
    from .conv import _conv2d
    return _conv2d(layer._check_x(x), layer.weight, layer.bias, layer.stride, layer.padding, layer.dilation,
                   layer.groups, relu=True, pool=pool)


def _finish_pool(y, pool):
    return pool(y)


# --- Conv2d -> BatchNorm2d (training) -> ReLU -> MaxPool2d from the GEMM rows: one primitive, one kernel forward and
# one backward on CPU (kernels/conv_bn.py, channel vectors); elsewhere (devices, odd channel counts) the conv
# epilogue kernel then the pooled batch-norm kernel, and their adjoints.
def conv_bn_pool_composed(y, cb, w, b, shape, eps, relu, k):
    from ._norm_fused import batch_norm_composed
    from .conv import max_pool2d
    return max_pool2d(batch_norm_composed(conv_epilogue_composed(y, cb, shape), w, b, eps, relu), k)


def _cbp_fwd(y, cb, w, b, shape, eps, momentum, running, saved, relu, k):
    from ..kernels import conv_bn as KB
    from ..kernels import norm as KN
    N, H, W = shape
    O, dt = cb.shape[0], y.dtype
    Ho, Wo = H // k[0], W // k[1]
    out = backend.empty(N * O * Ho * Wo, dt)
    mu, var = backend.empty(O, dt), backend.empty(O, dt)
    rm, rv = (running[0]._buf, running[1]._buf) if running is not None else (mu, var)
    lp = KB.lanes((y._buf, cb._buf, w._buf, b._buf, out, mu, var, rm, rv), O, dt, (0,))
    if lp is not None:
        KB.conv_bn_pool(lp, y._buf, cb._buf, w._buf, b._buf, out, mu, var, rm, rv, N, H, W, O, k, float(eps),
                        float(momentum), running is not None, dt, relu)
    else:
        x = backend.empty(y.size, dt)
        K.conv_epilogue(y._buf, cb._buf, x, N, H * W, O, dt)
        KN.batch_norm_fwd(x, w._buf, b._buf, out, mu, var, rm, rv, N, O, H * W, float(eps), float(momentum),
                          running is not None, dt, relu, k, W)
        saved["x"] = x
    saved["mean"], saved["var"] = mu, var
    return out, (N, O, Ho, Wo), dt


_cbp = Primitive("conv_bn_pool", _cbp_fwd)


@_cbp.def_vjp
def _cbp_vjp(g, y, cb, w, b, out, shape, eps, momentum, running, saved, relu, k):
    if is_grad_enabled() or any(t._tangents for t in (g, y, cb, w, b, out)):
        from ..autodiff.transforms import vjp
        _, pull = vjp(lambda *a: conv_bn_pool_composed(*a, shape, eps, relu, k), y, cb, w, b)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    from ..kernels import conv_bn as KB
    from ..kernels import norm as KN
    N, H, W = shape
    O, dt = cb.shape[0], y.dtype
    gy = backend.empty(y.size, dt)
    gcb, gw, gb = backend.empty(O, dt), backend.empty(O, dt), backend.empty(O, dt)
    mu, var = saved["mean"], saved["var"]
    lp = KB.lanes((g._buf, y._buf, cb._buf, w._buf, b._buf, mu, var, gy, gcb, gw, gb), O, dt, (1, 7)) \
        if "x" not in saved else None
    if lp is not None:
        KB.conv_bn_pool_vjp(lp, g._buf, y._buf, cb._buf, w._buf, b._buf, mu, var, gy, gcb, gw, gb, N, H, W, O, k,
                            float(eps), dt, relu)
    else:
        x = saved.get("x")
        if x is None:
            x = backend.empty(y.size, dt)
            K.conv_epilogue(y._buf, cb._buf, x, N, H * W, O, dt)
        gx = backend.empty(y.size, dt)
        KN.batch_norm_bwd_pool(x, g._buf, w._buf, b._buf, mu, var, gx, gw, gb, N, O, H * W, float(eps), dt, True,
                               relu, k, W)
        K.conv_epilogue_vjp(gx, gy, gcb, N, H * W, O, dt)
    mk = lambda buf, t, i: Tensor._make(buf, t.shape, dt) if needs(i) else None   # noqa: E731
    return mk(gy, y, 0), mk(gcb, cb, 1), mk(gw, w, 2), mk(gb, b, 3)


@_cbp.def_jvp
def _cbp_jvp(ts, y, cb, w, b, out, shape, eps, momentum, running, saved, relu, k):
    from ..autodiff.transforms import jvp
    xs = (y, cb, w, b)
    ts = tuple(zeros(v.shape, v.dtype) if t is None else t for v, t in zip(xs, ts))
    return jvp(lambda *a: conv_bn_pool_composed(*a, shape, eps, relu, k), xs, ts)[1]


def conv_bn_pool(y, cb, w, b, shape, eps=1e-5, momentum=0.1, running=None, relu=True, k=(2, 2)):
    """max_pool2d(batch_norm_train(conv_epilogue(y, cb, shape), w, b, eps, momentum, running, relu), k) for the
    GEMM rows y (N*H*W, O) of a convolution, its bias cb and BatchNorm's w, b (O,); shape = (N, H, W) with kh x kw
    windows tiling (H, W): one kernel forward and one backward. ``running``: (running mean, running variance)
    Buffers updated in place, or None."""
    return _cbp(y, cb, w, b, shape=tuple(shape), eps=float(eps), momentum=float(momentum), running=running,
                saved={}, relu=bool(relu), k=tuple(k))


def _conv_bn_relu_pool(conv, bn, pool, x):
    """Sequential's Conv2d -> BatchNorm2d -> ReLU -> MaxPool2d: :func:`conv_bn_pool` when it applies (training mode,
    affine, conv bias, one dtype, windows tiling the image), else the conv, then :func:`relu_pool` or the layers."""
    from .conv import _conv2d
    w, b = bn.weight, bn.bias
    ok = (bn.training and w is not None and conv.bias is not None and bn.num_features == conv.out_channels
          and all(t.dtype == conv.weight.dtype for t in (conv.bias, w, b, bn.running_mean, bn.running_var)))

    def tail(y, cb, shape):
        k = tiling_pool(pool, shape[1:])
        if not ok or k is None or shape[0] * shape[1] * shape[2] < 2:
            return None
        return conv_bn_pool(y, cb, w, b, shape, bn.eps, bn.momentum, (bn.running_mean, bn.running_var), True, k)
    y, used = _conv2d(conv._check_x(x), conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation,
                      conv.groups, tail=tail)
    if used:
        return y
    r = relu_pool(bn, y, pool)
    return r if r is not None else pool(bn._forward(y, relu=True))


FOLD_EVAL_BN = True   # False: an eval-mode BatchNorm2d after a Conv2d runs as its own pass


def _conv_bn_eval(conv, bn, x, relu=False, pool=None):
    """Conv2d -> BatchNorm2d in eval mode as one conv with the batch norm folded into its weight and bias:
    s = gamma / sqrt(running_var + eps), W' = W * s (per output channel), b' = (b - running_mean) * s + beta;
    then ReLU (``relu``) and ``pool`` in the conv's epilogue where it applies. Written in sciml ops, so the
    derivatives w.r.t. x, W, b, gamma and beta are those of the layers (the running statistics are constants
    in eval mode, as in the layer); equal to the layers up to rounding."""
    from ..autodiff.ops import sqrt
    from .conv import _conv2d
    O = conv.out_channels
    rm, rv = bn.running_mean.detach(), bn.running_var.detach()
    s = 1.0 / sqrt(rv + bn.eps)
    if bn.weight is not None:
        s = s * bn.weight
    w = conv.weight * s.reshape(O, 1, 1, 1)
    b = -rm * s if conv.bias is None else (conv.bias - rm) * s
    if bn.bias is not None:
        b = b + bn.bias
    r = _conv2d(conv._check_x(x), w, b, conv.stride, conv.padding, conv.dilation, conv.groups, relu=relu, pool=pool)
    if pool is None:
        return r
    y, used = r
    return y if used else _finish_pool(y, pool)


def fused_block(layers, i, x):
    """(output, layers used) for the fused patterns of Sequential starting at layers[i], or None:
    Conv2d -> BatchNorm2d -> ReLU -> MaxPool2d and (Conv2d | BatchNorm2d) -> ReLU -> MaxPool2d in training
    mode; Conv2d -> BatchNorm2d in eval mode as one conv with the batch norm folded in (:func:`_conv_bn_eval`)."""
    from .conv import Conv2d, MaxPool2d
    from .layers import _is_relu
    from .norm import BatchNorm2d
    n = len(layers)
    if (FOLD_EVAL_BN and i + 1 < n and type(layers[i]) is Conv2d and type(layers[i + 1]) is BatchNorm2d
            and not layers[i + 1].training and layers[i + 1].num_features == layers[i].out_channels
            and all(t is None or t.dtype == layers[i].weight.dtype
                    for t in (layers[i].bias, layers[i + 1].weight, layers[i + 1].bias, layers[i + 1].running_mean,
                              layers[i + 1].running_var))):
        if i + 2 < n and _is_relu(layers[i + 2]):
            if i + 3 < n and type(layers[i + 3]) is MaxPool2d:
                return _conv_bn_eval(layers[i], layers[i + 1], x, True, layers[i + 3]), 4
            return _conv_bn_eval(layers[i], layers[i + 1], x, True), 3
        return _conv_bn_eval(layers[i], layers[i + 1], x), 2
    if (i + 3 < n and type(layers[i]) is Conv2d and type(layers[i + 1]) is BatchNorm2d and _is_relu(layers[i + 2])
            and type(layers[i + 3]) is MaxPool2d):
        return _conv_bn_relu_pool(layers[i], layers[i + 1], layers[i + 3], x), 4
    if i + 2 < n and _is_relu(layers[i + 1]) and type(layers[i + 2]) is MaxPool2d:
        y = relu_pool(layers[i], x, layers[i + 2])
        if y is not None:
            return y, 3
    return None


# --- channel-last im2col: cols (N, Ho, Wo, kh, kw, C), the weight as (O, kh, kw, C) (kernels/conv_cl.py) ----------
def _ucl_fwd(x, geom):
    from ..kernels import conv_cl as KC
    N, Cc, H, W = x.shape
    kh, kw, sh, sw, ph, pw = geom
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    out = backend.empty(N * Ho * Wo * kh * kw * Cc, x.dtype)
    KC.unfold(x._buf, out, N, Cc, H, W, Ho, Wo, geom, x.dtype)
    return out, (N, Ho, Wo, kh, kw, Cc), x.dtype


def _fcl_fwd(cols, geom, in_shape):
    from ..kernels import conv_cl as KC
    N, Cc, H, W = in_shape
    out = backend.empty(N * Cc * H * W, cols.dtype)
    KC.fold(cols._buf, out, N, Cc, H, W, cols.shape[1], cols.shape[2], geom, cols.dtype)
    return out, tuple(in_shape), cols.dtype


_unfold_cl = Primitive("unfold_cl", _ucl_fwd)
_fold_cl = Primitive("fold_cl", _fcl_fwd)
_unfold_cl.def_vjp(lambda g, x, out, geom: (_fold_cl(g, geom=geom, in_shape=x.shape),))   # linear: any order
_unfold_cl.def_jvp(lambda ts, x, out, geom: _unfold_cl(ts[0], geom=geom))
_fold_cl.def_vjp(lambda g, cols, out, geom, in_shape: (_unfold_cl(g, geom=geom),))
_fold_cl.def_jvp(lambda ts, cols, out, geom, in_shape: _fold_cl(ts[0], geom=geom, in_shape=in_shape))


def unfold_cl(x, geom):
    """Zero-padded windows of x (N, C, H, W), channels innermost: (N, Ho, Wo, kh, kw, C); geom = (kh, kw, sh, sw,
    ph, pw), checked by the caller. Linear; its adjoint is :func:`fold_cl` (and fold_cl's is unfold_cl)."""
    return _unfold_cl(x, geom=tuple(int(v) for v in geom))


def fold_cl(cols, geom, in_shape):
    """The adjoint of :func:`unfold_cl`: cols (N, Ho, Wo, kh, kw, C) summed back into images of ``in_shape``."""
    return _fold_cl(cols, geom=tuple(int(v) for v in geom), in_shape=tuple(int(v) for v in in_shape))


CHANNEL_LAST = True   # False: conv2d's im2col keeps the taps innermost (conv.py's unfold) everywhere


def channel_last_ok(x, groups, dilation):
    """Whether conv2d uses :func:`unfold_cl` for x: one group, no dilation, float, on the host with channel
    vectors (C a multiple of 4: ``kernels/_vec.py``'s 16-byte lanes); elsewhere the taps-innermost im2col runs."""
    return (CHANNEL_LAST and groups == 1 and dilation == (1, 1) and x.dtype in ("float32", "float64")
            and x.shape[1] % 4 == 0 and backend.on_host())
