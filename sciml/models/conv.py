"""Convolution and pooling: unfold (im2col, a Taichi gather primitive whose VJP is the fold
scatter primitive) + one GEMM; pooling = window gather + max / mean. Differentiable to any order.

Layouts follow PyTorch: images (N, C, H, W), signals (N, C, L); conv weights (out, in, *kernel).
"""
from __future__ import annotations

from ..autodiff.ops import matmul, max as _max, mean as _mean, reshape, transpose
from ..autodiff.ops.conv import bias_act, unfold
from ..autodiff.tensor import as_tensor
from . import _check as C
from . import init as I
from .module import Module, Parameter

__all__ = ["conv2d", "conv1d", "max_pool2d", "avg_pool2d", "Conv2d", "Conv1d", "MaxPool2d", "AvgPool2d"]


def _pair(name, v):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise ValueError(f"{name}: got {v}; expected an int or a pair of ints.")
    return v


def conv2d(x, weight, bias=None, stride=1, padding=0):
    """2-D cross-correlation (PyTorch's conv2d): x (N, C, H, W), weight (O, C, kh, kw), bias (O,)
    -> (N, O, Ho, Wo) with Ho = (H + 2 ph - kh) // sh + 1."""
    x, weight = as_tensor(x), as_tensor(weight)
    if x.ndim != 4:
        raise ValueError(f"conv2d: x has shape {x.shape}; expected (N, C, H, W).")
    if weight.ndim != 4 or weight.shape[1] != x.shape[1]:
        raise ValueError(f"conv2d: weight has shape {weight.shape} for x of shape {x.shape}; expected "
                         f"(out_channels, {x.shape[1]}, kh, kw).")
    O, Cc, kh, kw = weight.shape
    cols = unfold(x, (kh, kw), stride, padding)                   # (N, Ho, Wo, C, kh, kw)
    N, Ho, Wo = cols.shape[:3]
    y = matmul(reshape(cols, (N * Ho * Wo, Cc * kh * kw)), reshape(weight, (O, Cc * kh * kw)), transpose_b=True)
    if bias is not None:
        y = bias_act(y, bias, "identity")
    return transpose(reshape(y, (N, Ho, Wo, O)), (0, 3, 1, 2))


def conv1d(x, weight, bias=None, stride=1, padding=0):
    """1-D cross-correlation: x (N, C, L), weight (O, C, k) -> (N, O, Lo)."""
    x, weight = as_tensor(x), as_tensor(weight)
    if x.ndim != 3:
        raise ValueError(f"conv1d: x has shape {x.shape}; expected (N, C, L).")
    if weight.ndim != 3 or weight.shape[1] != x.shape[1]:
        raise ValueError(f"conv1d: weight has shape {weight.shape} for x of shape {x.shape}; expected "
                         f"(out_channels, {x.shape[1]}, k).")
    N, Cc, L = x.shape
    y = conv2d(reshape(x, (N, Cc, 1, L)), reshape(weight, weight.shape[:2] + (1, weight.shape[2])), bias,
               (1, int(stride)), (0, int(padding)))
    return reshape(y, (N, y.shape[1], y.shape[3]))


def _pool(x, name, kernel_size, stride, padding, pad_value, reduce):
    x = as_tensor(x)
    if x.ndim != 4:
        raise ValueError(f"{name}: x has shape {x.shape}; expected (N, C, H, W).")
    kh, kw = _pair(f"{name}(kernel_size)", kernel_size)
    stride = (kh, kw) if stride is None else _pair(f"{name}(stride)", stride)
    ph, pw = _pair(f"{name}(padding)", padding)
    if 2 * ph > kh or 2 * pw > kw:
        raise ValueError(f"{name}: padding {(ph, pw)} must be at most half the kernel size {(kh, kw)}.")
    cols = unfold(x, (kh, kw), stride, (ph, pw), pad_value)       # (N, Ho, Wo, C, kh, kw)
    N, Ho, Wo, Cc = cols.shape[:4]
    r = reduce(reshape(cols, (N, Ho, Wo, Cc, kh * kw)), -1)
    return transpose(r, (0, 3, 1, 2))


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


class Conv2d(Module):
    """2-D convolution layer: (N, in_channels, H, W) -> (N, out_channels, Ho, Wo).

    Args:
        in_channels, out_channels, kernel_size: sizes; kernel_size an int or (kh, kw).
        stride, padding: ints or pairs.
        bias: add a per-channel bias.
        seed: initialiser seed (None: drawn from the global generator, see :func:`sciml.manual_seed`).
        init: ``"torch"`` (default, PyTorch's: weight and bias U(+-1/sqrt(fan_in)), fan_in = in_channels * kh * kw)
            or another initialiser for the weight (bias zeros), e.g. ``"kaiming_uniform"``.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True, *, seed=None,
                 init="torch", dtype=None):
        self.in_channels = C.pos_int("Conv2d", "in_channels", in_channels)
        self.out_channels = C.pos_int("Conv2d", "out_channels", out_channels)
        self.kernel_size = C.int_tuple("Conv2d", "kernel_size", kernel_size, 2)
        self.stride = C.int_tuple("Conv2d", "stride", stride, 2)
        self.padding = C.int_tuple("Conv2d", "padding", padding, 2, 0)
        shape = (self.out_channels, self.in_channels) + self.kernel_size
        _init_conv(self, "Conv2d", shape, bias, seed, init, dtype)

    def forward(self, x):
        x = as_tensor(x)
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"Conv2d(in_channels={self.in_channels}): x has shape {x.shape}; expected "
                             f"(N, {self.in_channels}, H, W).")
        return conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class Conv1d(Module):
    """1-D convolution layer: (N, in_channels, L) -> (N, out_channels, Lo)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True, *, seed=None,
                 init="torch", dtype=None):
        self.in_channels = C.pos_int("Conv1d", "in_channels", in_channels)
        self.out_channels = C.pos_int("Conv1d", "out_channels", out_channels)
        self.kernel_size = C.int_tuple("Conv1d", "kernel_size", kernel_size, 1)[0]
        self.stride = C.int_tuple("Conv1d", "stride", stride, 1)[0]
        self.padding = C.int_tuple("Conv1d", "padding", padding, 1, 0)[0]
        _init_conv(self, "Conv1d", (self.out_channels, self.in_channels, self.kernel_size), bias, seed, init, dtype)

    def forward(self, x):
        x = as_tensor(x)
        if x.ndim != 3 or x.shape[1] != self.in_channels:
            raise ValueError(f"Conv1d(in_channels={self.in_channels}): x has shape {x.shape}; expected "
                             f"(N, {self.in_channels}, L).")
        return conv1d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(MaxPool2d):
    def forward(self, x):
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding)
