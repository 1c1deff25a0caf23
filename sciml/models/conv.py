"""Convolution and pooling: unfold (im2col, a Taichi gather primitive whose VJP is the fold
scatter primitive) + one GEMM; pooling = window gather + max / mean. Differentiable to any order.

Layouts follow PyTorch: images (N, C, H, W), signals (N, C, L); conv weights (out, in, *kernel).
"""
from __future__ import annotations

import math

from ..autodiff.ops import matmul, max as _max, mean as _mean, reshape, transpose
from ..autodiff.ops.conv import bias_act, fold, unfold
from ..autodiff.tensor import as_tensor
from . import _check as C
from . import init as I
from .module import Module, Parameter

__all__ = ["conv2d", "conv1d", "conv3d", "conv_transpose1d", "conv_transpose2d", "max_pool2d", "avg_pool2d",
           "max_pool1d", "avg_pool1d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "interpolate", "Conv2d", "Conv1d",
           "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "MaxPool2d", "AvgPool2d", "MaxPool1d", "AvgPool1d",
           "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "Upsample"]


def _pair(name, v, minimum=1):
    where, _, arg = name.partition("(")
    return C.int_tuple(where, arg.rstrip(")") or "value", v, 2, minimum)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation (PyTorch's conv2d): x (N, C, H, W), weight (O, C / groups, kh, kw), bias (O,)
    -> (N, O, Ho, Wo) with Ho = (H + 2 ph - dh (kh - 1) - 1) // sh + 1.

    ``dilation`` spaces the kernel taps (im2col over the dilated window, then a strided view of it);
    ``groups`` splits the channels into independent convolutions (one batched GEMM)."""
    return _conv2d(x, weight, bias, stride, padding, dilation, groups)


def _conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, relu=False, pool=None, tail=None):
    """conv2d, then ReLU when ``relu`` (fused into the bias epilogue kernel: Sequential's Conv2d -> ReLU); ``pool``:
    a layer that may follow (Sequential's Conv2d -> ReLU -> MaxPool2d): when it is a max-pool whose windows tile
    the output, it is applied in the same epilogue kernel and the result is ``(y, True)``, else ``(y, False)``.
    ``tail(rows, bias, (N, Ho, Wo))``: an epilogue on the GEMM rows (N*Ho*Wo, O) returning the result or None
    (then the plain epilogue runs); the result is ``(y, True | False)`` too."""
    if tail is not None:
        pool = tail
    x, weight = as_tensor(x), as_tensor(weight)
    if x.ndim != 4:
        raise ValueError(f"conv2d: x has shape {x.shape}; expected (N, C, H, W).")
    groups = C.pos_int("conv2d", "groups", groups)
    dh, dw = C.int_tuple("conv2d", "dilation", dilation, 2)
    sh, sw = C.int_tuple("conv2d", "stride", stride, 2)
    ph, pw = C.int_tuple("conv2d", "padding", padding, 2, 0)
    Cin = x.shape[1]
    if Cin % groups or weight.ndim != 4 or weight.shape[0] % groups or weight.shape[1] * groups != Cin:
        raise ValueError(f"conv2d: weight has shape {weight.shape} for x of shape {x.shape} and groups={groups}; "
                         f"expected (out_channels divisible by {groups}, {Cin // groups if Cin % groups == 0 else '?'}"
                         ", kh, kw) with in_channels divisible by groups.")
    O, Cg, kh, kw = weight.shape
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if x.shape[2] + 2 * ph < eh or x.shape[3] + 2 * pw < ew:
        raise ValueError(f"conv2d: the {kh}x{kw} kernel is larger than the padded image (dilation {(dh, dw)}): "
                         f"{x.shape[2] + 2 * ph}x{x.shape[3] + 2 * pw} (x has shape {x.shape}).")
    from ._conv_fused import channel_last_ok
    if channel_last_ok(x, groups, (dh, dw)):   # channels innermost: vector gathers / scatters (kernels/conv_cl.py)
        from ._conv_fused import unfold_cl
        cols = unfold_cl(x, (kh, kw, sh, sw, ph, pw))                      # (N, Ho, Wo, kh, kw, C)
        N, Ho, Wo = cols.shape[:3]
        O = weight.shape[0]
        y = matmul(reshape(cols, (N * Ho * Wo, kh * kw * Cin)),
                   reshape(transpose(weight, (0, 2, 3, 1)), (O, kh * kw * Cin)), transpose_b=True)
        return _conv_epilogues(y, bias, N, Ho, Wo, O, relu, pool, tail)
    cols = unfold(x, (eh, ew), (sh, sw), (ph, pw))                 # (N, Ho, Wo, C, eh, ew)
    if dh > 1 or dw > 1:
        cols = cols[:, :, :, :, ::dh, ::dw]
    N, Ho, Wo = cols.shape[:3]
    k = Cg * kh * kw
    if groups == 1:
        y = matmul(reshape(cols, (N * Ho * Wo, k)), reshape(weight, (O, k)), transpose_b=True)
    else:
        cg = transpose(reshape(cols, (N * Ho * Wo, groups, k)), (1, 0, 2))           # (G, NHoWo, k)
        wg = reshape(weight, (groups, O // groups, k))                              # (G, Og, k)
        y = reshape(transpose(matmul(cg, wg, transpose_b=True), (1, 0, 2)), (N * Ho * Wo, O))
    return _conv_epilogues(y, bias, N, Ho, Wo, O, relu, pool, tail)


def _conv_epilogues(y, bias, N, Ho, Wo, O, relu, pool, tail):
    """The GEMM rows y (N*Ho*Wo, O) -> images (N, O, Ho, Wo) with the bias, ReLU, a tiling max-pool or ``tail``
    (see :func:`_conv2d`)."""
    if bias is not None:
        bias = as_tensor(bias, y.dtype)
        if bias.dtype == y.dtype and bias.shape == (O,):  # bias + NHWC -> NCHW in one kernel (adjoint: one)
            from ._conv_fused import conv_epilogue, conv_epilogue_pool, tiling_pool
            if tail is not None:
                r = tail(y, bias, (N, Ho, Wo))
                if r is not None:
                    return r, True
            k = tiling_pool(pool, (Ho, Wo)) if pool is not None and tail is None else None
            if k is not None:                               # ... and the max-pool too
                return conv_epilogue_pool(y, bias, (N, Ho, Wo), relu, k), True
            y = conv_epilogue(y, bias, (N, Ho, Wo), relu)
            return (y, False) if pool is not None else y
        y = bias_act(y, bias, "identity")
    y = transpose(reshape(y, (N, Ho, Wo, O)), (0, 3, 1, 2))
    if relu:
        from ..autodiff.ops import relu as _relu
        y = _relu(y)
    return (y, False) if pool is not None else y


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation: x (N, C, L), weight (O, C / groups, k) -> (N, O, Lo)."""
    x, weight = as_tensor(x), as_tensor(weight)
    if x.ndim != 3:
        raise ValueError(f"conv1d: x has shape {x.shape}; expected (N, C, L).")
    if weight.ndim != 3:
        raise ValueError(f"conv1d: weight has shape {weight.shape}; expected (out_channels, in_channels / groups, k).")
    N, Cc, L = x.shape
    s = C.int_tuple("conv1d", "stride", stride, 1)[0]
    p = C.int_tuple("conv1d", "padding", padding, 1, 0)[0]
    d = C.int_tuple("conv1d", "dilation", dilation, 1)[0]
    y = conv2d(reshape(x, (N, Cc, 1, L)), reshape(weight, weight.shape[:2] + (1, weight.shape[2])), bias,
               (1, s), (0, p), (1, d), groups)
    return reshape(y, (N, y.shape[1], y.shape[3]))


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D cross-correlation: x (N, C, D, H, W), weight (O, C / groups, kd, kh, kw) -> (N, O, Do, Ho, Wo):
    a sum over the kd depth taps of 2-D convolutions of depth slices (the output depths batched)."""
    from ..autodiff.ops import concat
    x, weight = as_tensor(x), as_tensor(weight)
    if x.ndim != 5:
        raise ValueError(f"conv3d: x has shape {x.shape}; expected (N, C, D, H, W).")
    if weight.ndim != 5:
        raise ValueError(f"conv3d: weight has shape {weight.shape}; expected (out, in / groups, kd, kh, kw).")
    sd, sh, sw = C.int_tuple("conv3d", "stride", stride, 3)
    pd, ph, pw = C.int_tuple("conv3d", "padding", padding, 3, 0)
    dd, dh, dw = C.int_tuple("conv3d", "dilation", dilation, 3)
    N, Cc, D, H, W = x.shape
    kd = weight.shape[2]
    if pd:
        z = x[:, :, :1] * 0.0
        pad = concat([z] * pd, axis=2)
        x = concat([pad, x, pad], axis=2)
    Dp = x.shape[2]
    Do = (Dp - dd * (kd - 1) - 1) // sd + 1
    if Do < 1:
        raise ValueError(f"conv3d: the depth kernel {kd} (dilation {dd}) is larger than the padded depth {Dp}.")
    y = None
    for t in range(kd):
        start = t * dd
        sl = x[:, :, start:start + sd * (Do - 1) + 1:sd]                       # (N, C, Do, H, W)
        sl = reshape(transpose(sl, (0, 2, 1, 3, 4)), (N * Do, Cc, H, W))
        yt = conv2d(sl, weight[:, :, t], None, (sh, sw), (ph, pw), (dh, dw), groups)
        y = yt if y is None else y + yt
    O, Ho, Wo = y.shape[1:]
    y = transpose(reshape(y, (N, Do, O, Ho, Wo)), (0, 2, 1, 3, 4))
    if bias is not None:
        y = y + reshape(as_tensor(bias, y.dtype), (1, O, 1, 1, 1))
    return y


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1):
    """Transposed 2-D convolution (PyTorch's conv_transpose2d, the adjoint of conv2d in x): x (N, Cin, H, W),
    weight (Cin, O / groups, kh, kw) -> (N, O, Ho, Wo), Ho = (H - 1) sh - 2 ph + kh + output_padding.
    One GEMM to columns, then :func:`~sciml.autodiff.ops.conv.fold` (the scatter-add of im2col)."""
    x, weight = as_tensor(x), as_tensor(weight)
    if x.ndim != 4:
        raise ValueError(f"conv_transpose2d: x has shape {x.shape}; expected (N, C, H, W).")
    groups = C.pos_int("conv_transpose2d", "groups", groups)
    sh, sw = C.int_tuple("conv_transpose2d", "stride", stride, 2)
    ph, pw = C.int_tuple("conv_transpose2d", "padding", padding, 2, 0)
    oh, ow = C.int_tuple("conv_transpose2d", "output_padding", output_padding, 2, 0)
    if oh >= sh or ow >= sw:
        raise ValueError(f"conv_transpose2d: output_padding {(oh, ow)} must be smaller than stride {(sh, sw)}.")
    N, Cin, H, W = x.shape
    if weight.ndim != 4 or weight.shape[0] != Cin or Cin % groups:
        raise ValueError(f"conv_transpose2d: weight has shape {weight.shape} for x of shape {x.shape}; expected "
                         f"({Cin}, out_channels / groups, kh, kw) with in_channels divisible by groups={groups}.")
    _, Og, kh, kw = weight.shape
    O = Og * groups
    Ho, Wo = (H - 1) * sh - 2 * ph + kh + oh, (W - 1) * sw - 2 * pw + kw + ow
    if Ho < 1 or Wo < 1:
        raise ValueError(f"conv_transpose2d: the output would be {Ho}x{Wo}; reduce padding {(ph, pw)}.")
    xf = reshape(transpose(x, (0, 2, 3, 1)), (N * H * W, Cin))
    if groups == 1:
        cols = matmul(xf, reshape(weight, (Cin, O * kh * kw)))                 # (NHW, O kh kw)
    else:
        Cg = Cin // groups
        xg = transpose(reshape(xf, (N * H * W, groups, Cg)), (1, 0, 2))          # (G, NHW, Cg)
        wg = reshape(weight, (groups, Cg, Og * kh * kw))
        cols = reshape(transpose(matmul(xg, wg), (1, 0, 2)), (N * H * W, O * kh * kw))
    cols = reshape(cols, (N, H, W, O, kh, kw))
    y = fold(cols, (N, O, Ho, Wo), (kh, kw), (sh, sw), (ph, pw))
    if bias is not None:
        y = y + reshape(as_tensor(bias, y.dtype), (1, O, 1, 1))
    return y


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1):
    """Transposed 1-D convolution: x (N, Cin, L), weight (Cin, O / groups, k) -> (N, O, Lo)."""
    x, weight = as_tensor(x), as_tensor(weight)
    if x.ndim != 3 or weight.ndim != 3:
        raise ValueError(f"conv_transpose1d: x {x.shape}, weight {weight.shape}; expected (N, C, L) and "
                         "(in_channels, out_channels / groups, k).")
    N, Cc, L = x.shape
    s = C.int_tuple("conv_transpose1d", "stride", stride, 1)[0]
    p = C.int_tuple("conv_transpose1d", "padding", padding, 1, 0)[0]
    op = C.int_tuple("conv_transpose1d", "output_padding", output_padding, 1, 0)[0]
    y = conv_transpose2d(reshape(x, (N, Cc, 1, L)), reshape(weight, weight.shape[:2] + (1, weight.shape[2])), bias,
                         (1, s), (0, p), (0, op), groups)
    return reshape(y, (N, y.shape[1], y.shape[3]))


def _pool(x, name, kernel_size, stride, padding, pad_value, reduce):
    x = as_tensor(x)
    if x.ndim != 4:
        raise ValueError(f"{name}: x has shape {x.shape}; expected (N, C, H, W).")
    kh, kw = _pair(f"{name}(kernel_size)", kernel_size)
    stride = (kh, kw) if stride is None else _pair(f"{name}(stride)", stride)
    ph, pw = _pair(f"{name}(padding)", padding, 0)
    if 2 * ph > kh or 2 * pw > kw:
        raise ValueError(f"{name}: padding {(ph, pw)} must be at most half the kernel size {(kh, kw)}.")
    if x.shape[2] + 2 * ph < kh or x.shape[3] + 2 * pw < kw:
        raise ValueError(f"{name}: the {kh}x{kw} kernel is larger than the padded image "
                         f"{x.shape[2] + 2 * ph}x{x.shape[3] + 2 * pw} (x has shape {x.shape}).")

    def composed(x):
        cols = unfold(x, (kh, kw), stride, (ph, pw), pad_value)       # (N, Ho, Wo, C, kh, kw)
        N, Ho, Wo, Cc = cols.shape[:4]
        r = reduce(reshape(cols, (N, Ho, Wo, Cc, kh * kw)), -1)
        return transpose(r, (0, 3, 1, 2))
    if x.dtype in ("float32", "float64") and x.size:
        from ._conv_fused import pool2d       # one kernel forward, one backward; composed for higher orders
        return pool2d(x, "max" if reduce is _max else "avg", (kh, kw), stride, (ph, pw), composed)
    return composed(x)


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Max over kh x kw windows (stride defaults to the kernel size; padding reads -inf).
    Tied maxima share the gradient equally."""
    return _pool(x, "max_pool2d", kernel_size, stride, padding, float("-inf"), _max)


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over kh x kw windows (zero padding counted, as PyTorch's count_include_pad=True)."""
    return _pool(x, "avg_pool2d", kernel_size, stride, padding, 0.0, _mean)


def _init_conv(layer, name, shape, bias, seed, init, dtype, fan_in=None, n_bias=None):
    """weight (and bias) of a conv layer: PyTorch's U(+-1/sqrt(fan_in)) for init="torch", else init(weight)
    and zero bias."""
    from .layers import _bias_init
    seed = I.resolve_seed(seed, f"{name}(seed)")
    fi = I.fans(shape)[0] if fan_in is None else fan_in
    if isinstance(init, str) and init == "torch":
        layer.weight = Parameter(I.torch_uniform(shape, seed=seed, fan_in=fi, dtype=dtype))
    else:
        layer.weight = Parameter(I.get(init)(shape, seed=seed, dtype=dtype))
    layer.bias = Parameter(_bias_init(init, shape[0] if n_bias is None else n_bias, fi, seed, layer.weight.dtype)) \
        if C.boolean(name, "bias", bias) else None


class _ConvNd(Module):
    _nd = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 *, output_padding=0, seed=None, init="torch", dtype=None):
        name, nd = type(self).__name__, self._nd
        self.in_channels = C.pos_int(name, "in_channels", in_channels)
        self.out_channels = C.pos_int(name, "out_channels", out_channels)
        self.groups = C.pos_int(name, "groups", groups)
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"{name}: in_channels={in_channels} and out_channels={out_channels} must both be "
                             f"divisible by groups={groups}.")
        ks = C.int_tuple(name, "kernel_size", kernel_size, nd)
        st = C.int_tuple(name, "stride", stride, nd)
        pd = C.int_tuple(name, "padding", padding, nd, 0)
        dl = C.int_tuple(name, "dilation", dilation, nd)
        op = C.int_tuple(name, "output_padding", output_padding, nd, 0)
        if self._transposed:
            if any(d != 1 for d in dl):
                raise NotImplementedError(f"{name}: dilation={dilation} is not supported for transposed "
                                          "convolutions (only 1).")
            if any(o >= s_ for o, s_ in zip(op, st)):
                raise ValueError(f"{name}: output_padding={output_padding} must be smaller than stride={stride}.")
        elif any(op):
            raise TypeError(f"{name}: output_padding is only for transposed convolutions.")
        one = (lambda t: t[0]) if nd == 1 else (lambda t: t)
        self.kernel_size, self.stride, self.padding, self.dilation = one(ks), one(st), one(pd), one(dl)
        if self._transposed:
            self.output_padding = one(op)
            shape = (self.in_channels, self.out_channels // self.groups) + ks
            fan_in = self.out_channels // self.groups * math.prod(ks)        # PyTorch: weight.size(1) * prod(k)
            _init_conv(self, name, shape, bias, seed, init, dtype, fan_in=fan_in, n_bias=self.out_channels)
        else:
            shape = (self.out_channels, self.in_channels // self.groups) + ks
            _init_conv(self, name, shape, bias, seed, init, dtype)

    def _check_x(self, x):
        x = as_tensor(x)
        if x.ndim != self._nd + 2 or x.shape[1] != self.in_channels:
            dims = {1: "L", 2: "H, W", 3: "D, H, W"}[self._nd]
            raise ValueError(f"{type(self).__name__}(in_channels={self.in_channels}): x has shape {x.shape}; expected "
                             f"(N, {self.in_channels}, {dims}).")
        return x

    def extra_repr(self):
        r = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
             f"padding={self.padding}")
        if self.dilation not in (1, (1,) * self._nd):
            r += f", dilation={self.dilation}"
        if self.groups != 1:
            r += f", groups={self.groups}"
        return r


class Conv2d(_ConvNd):
    """2-D convolution layer: (N, in_channels, H, W) -> (N, out_channels, Ho, Wo) (PyTorch's arguments).

    Args:
        in_channels, out_channels, kernel_size: sizes; kernel_size an int or (kh, kw).
        stride, padding, dilation: ints or pairs.
        groups: split the channels into this many independent convolutions.
        bias: add a per-channel bias.
        seed: initialiser seed (None: drawn from the global generator, see :func:`sciml.manual_seed`).
        init: ``"torch"`` (default, PyTorch's: weight and bias U(+-1/sqrt(fan_in)), fan_in = in_channels / groups *
            kh * kw) or another initialiser for the weight (bias zeros), e.g. ``"kaiming_uniform"``.
    """

    def forward(self, x):
        return conv2d(self._check_x(x), self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv1d(_ConvNd):
    """1-D convolution layer: (N, in_channels, L) -> (N, out_channels, Lo) (arguments as :class:`Conv2d`)."""
    _nd = 1

    def forward(self, x):
        return conv1d(self._check_x(x), self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv3d(_ConvNd):
    """3-D convolution layer: (N, in_channels, D, H, W) -> (N, out_channels, Do, Ho, Wo) (arguments as
    :class:`Conv2d`, triples)."""
    _nd = 3

    def forward(self, x):
        return conv3d(self._check_x(x), self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(_ConvNd):
    """Transposed 2-D convolution (PyTorch's ConvTranspose2d; weight (in, out / groups, kh, kw), initialised as
    PyTorch with fan_in = out / groups * kh * kw): (N, in, H, W) -> (N, out, Ho, Wo),
    Ho = (H - 1) stride - 2 padding + kh + output_padding. ``dilation`` must be 1."""
    _transposed = True

    def forward(self, x):
        return conv_transpose2d(self._check_x(x), self.weight, self.bias, self.stride, self.padding,
                                self.output_padding, self.groups)


class ConvTranspose1d(_ConvNd):
    """Transposed 1-D convolution: (N, in, L) -> (N, out, (L - 1) stride - 2 padding + k + output_padding)."""
    _nd = 1
    _transposed = True

    def forward(self, x):
        return conv_transpose1d(self._check_x(x), self.weight, self.bias, self.stride, self.padding,
                                self.output_padding, self.groups)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        name = type(self).__name__
        C.int_tuple(name, "kernel_size", kernel_size, 2)
        if stride is not None:
            C.int_tuple(name, "stride", stride, 2)
        C.int_tuple(name, "padding", padding, 2, 0)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(MaxPool2d):
    def forward(self, x):
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding)


def _pool1d(fn, name, x, kernel_size, stride, padding):
    x = as_tensor(x)
    if x.ndim != 3:
        raise ValueError(f"{name}: x has shape {x.shape}; expected (N, C, L).")
    k = C.int_tuple(name, "kernel_size", kernel_size, 1)[0]
    s = k if stride is None else C.int_tuple(name, "stride", stride, 1)[0]
    p = C.int_tuple(name, "padding", padding, 1, 0)[0]
    N, Cc, L = x.shape
    y = fn(reshape(x, (N, Cc, 1, L)), (1, k), (1, s), (0, p))
    return reshape(y, (N, Cc, y.shape[3]))


def max_pool1d(x, kernel_size, stride=None, padding=0):
    """Max over windows of signals (N, C, L) (stride defaults to the kernel size)."""
    return _pool1d(max_pool2d, "max_pool1d", x, kernel_size, stride, padding)


def avg_pool1d(x, kernel_size, stride=None, padding=0):
    """Mean over windows of signals (N, C, L) (zero padding counted, as PyTorch's default)."""
    return _pool1d(avg_pool2d, "avg_pool1d", x, kernel_size, stride, padding)


def _adaptive_matrix(n_in, n_out, dtype):
    """(n_out, n_in) averaging matrix of PyTorch's adaptive pooling: row i averages [floor(i n / m), ceil((i+1) n / m))."""
    import numpy as np
    A = np.zeros((n_out, n_in))
    for i in range(n_out):
        a, b = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
        A[i, a:b] = 1.0 / (b - a)
    from ..autodiff.tensor import tensor
    return tensor(A, dtype)


def _interp_matrix(n_in, n_out, mode, align_corners, scale, dtype):
    """(n_out, n_in) matrix of 1-D nearest / linear interpolation with PyTorch's coordinate rules."""
    import numpy as np
    A = np.zeros((n_out, n_in))
    r = (n_in / n_out) if scale is None else 1.0 / scale
    for i in range(n_out):
        if mode == "nearest":
            A[i, min(int(math.floor(i * r)), n_in - 1)] = 1.0
            continue
        if align_corners:
            src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = max((i + 0.5) * r - 0.5, 0.0)
        i0 = min(int(math.floor(src)), n_in - 1)
        i1 = min(i0 + 1, n_in - 1)
        w = src - i0
        A[i, i0] += 1.0 - w
        A[i, i1] += w
    from ..autodiff.tensor import tensor
    return tensor(A, dtype)


def _separable(x, mats):
    """Apply a (m_k, n_k) matrix along each trailing spatial axis k of x (N, C, *spatial): plain 2-D GEMMs."""
    lead = x.shape[:2]
    nd = len(mats)
    for k, A in enumerate(mats):
        ax = 2 + k
        perm = [a for a in range(x.ndim) if a != ax] + [ax]
        xt = transpose(x, perm)
        shp = xt.shape
        y = matmul(reshape(xt, (-1, shp[-1])), A, transpose_b=True)
        y = reshape(y, shp[:-1] + (A.shape[0],))
        inv = [0] * x.ndim
        for i, a in enumerate(perm):
            inv[a] = i
        x = transpose(y, inv)
    assert x.shape[:2] == lead and len(x.shape) == nd + 2
    return x


def adaptive_avg_pool2d(x, output_size):
    """Average pooling to a fixed output size (PyTorch's adaptive_avg_pool2d windows), x (N, C, H, W)."""
    x = as_tensor(x)
    if x.ndim != 4:
        raise ValueError(f"adaptive_avg_pool2d: x has shape {x.shape}; expected (N, C, H, W).")
    oh, ow = C.int_tuple("adaptive_avg_pool2d", "output_size", output_size, 2)
    return _separable(x, [_adaptive_matrix(x.shape[2], oh, x.dtype), _adaptive_matrix(x.shape[3], ow, x.dtype)])


def adaptive_avg_pool1d(x, output_size):
    """Average pooling of signals (N, C, L) to ``output_size`` values (PyTorch's windows)."""
    x = as_tensor(x)
    if x.ndim != 3:
        raise ValueError(f"adaptive_avg_pool1d: x has shape {x.shape}; expected (N, C, L).")
    o = C.int_tuple("adaptive_avg_pool1d", "output_size", output_size, 1)[0]
    return _separable(x, [_adaptive_matrix(x.shape[2], o, x.dtype)])


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Resize signals (N, C, L) or images (N, C, H, W): ``mode`` "nearest", "linear" (1-D) or "bilinear"
    (2-D), PyTorch's coordinate conventions (``align_corners`` for the linear modes, default False).
    Each spatial axis is one GEMM with the interpolation matrix: differentiable to any order."""
    x = as_tensor(x)
    if x.ndim not in (3, 4):
        raise ValueError(f"interpolate: x has shape {x.shape}; expected (N, C, L) or (N, C, H, W).")
    nd = x.ndim - 2
    modes = {1: ("nearest", "linear"), 2: ("nearest", "bilinear")}[nd]
    if mode not in modes:
        raise ValueError(f"interpolate: mode={mode!r} for a {nd}-D input; expected one of {modes}.")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor.")
    if mode == "nearest" and align_corners is not None:
        raise ValueError("interpolate: align_corners applies to the linear modes only.")
    if size is not None:
        out = C.int_tuple("interpolate", "size", size, nd)
        scales = (None,) * nd
    else:
        sf = (scale_factor,) * nd if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        if len(sf) != nd or any(not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0 for v in sf):
            raise ValueError(f"interpolate: scale_factor={scale_factor!r}; expected {nd} positive number(s).")
        out = tuple(int(math.floor(n * f)) for n, f in zip(x.shape[2:], sf))
        scales = tuple(float(v) for v in sf)
    m = "nearest" if mode == "nearest" else "linear"
    mats = [_interp_matrix(n, o, m, bool(align_corners), sc, x.dtype) for n, o, sc in zip(x.shape[2:], out, scales)]
    return _separable(x, mats)


class MaxPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        name = type(self).__name__
        C.int_tuple(name, "kernel_size", kernel_size, 1)
        if stride is not None:
            C.int_tuple(name, "stride", stride, 1)
        C.int_tuple(name, "padding", padding, 1, 0)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return max_pool1d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(MaxPool1d):
    def forward(self, x):
        return avg_pool1d(x, self.kernel_size, self.stride, self.padding)


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        self.output_size = C.int_tuple("AdaptiveAvgPool2d", "output_size", output_size, 2)

    def forward(self, x):
        return adaptive_avg_pool2d(x, self.output_size)


class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size):
        self.output_size = C.int_tuple("AdaptiveAvgPool1d", "output_size", output_size, 1)[0]

    def forward(self, x):
        return adaptive_avg_pool1d(x, self.output_size)


class Upsample(Module):
    """Module form of :func:`interpolate` (PyTorch's Upsample)."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None):
        self.size, self.scale_factor, self.mode, self.align_corners = size, scale_factor, mode, align_corners

    def forward(self, x):
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)

    def extra_repr(self):
        return f"size={self.size}, scale_factor={self.scale_factor}, mode={self.mode!r}"
