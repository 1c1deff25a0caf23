"""Normalisation, dropout and embedding layers (sciml ops: differentiable to any order)."""
from __future__ import annotations

import numpy as np

from .. import backend

from ..autodiff.ops import mean, sqrt, take
from ..autodiff.primitive import Primitive, no_grad
from ..autodiff.tensor import Tensor, as_tensor, tensor
from . import _check as C
from . import init as I
from .module import Buffer, Module, Parameter

__all__ = ["BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "Dropout",
           "Embedding", "dropout", "group_norm"]


class _BatchNorm(Module):
    _dims: tuple = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, *, dtype=None):
        name = type(self).__name__
        self.num_features = C.pos_int(name, "num_features", num_features)
        self.eps = C.pos_float(name, "eps", eps)
        self.momentum = C.prob(name, "momentum", momentum, closed_right=True)
        affine = C.boolean(name, "affine", affine)
        nC = self.num_features
        self.weight = Parameter(I.ones((nC,), dtype=dtype)) if affine else None
        self.bias = Parameter(I.zeros((nC,), dtype=dtype)) if affine else None
        self.running_mean = Buffer(np.zeros(nC), dtype=dtype or None)
        self.running_var = Buffer(np.ones(nC), dtype=dtype or None)

    def _check(self, x):
        x = as_tensor(x)
        name = type(self).__name__
        if x.ndim not in self._dims or x.shape[1] != self.num_features:
            want = " or ".join(f"(N, {self.num_features}{', ...' * (d - 2)})" if d > 2 else f"(N, {self.num_features})"
                               for d in self._dims)
            raise ValueError(f"{name}(num_features={self.num_features}): x has shape {x.shape}; expected {want}.")
        return x

    def forward(self, x):
        return self._forward(x)

    def _forward(self, x, relu=False):
        """forward, then ReLU when ``relu`` (in the fused training kernel: Sequential's BatchNorm -> ReLU)."""
        y, fused = self._forward_impl(x, relu)
        if relu and not fused:
            from ..autodiff.ops import relu as _relu
            y = _relu(y)
        return y

    def _forward_pool(self, x, relu, pool):
        """ReLU (when ``relu``) and the max over ``pool`` = (kh, kw) tiles after the training-mode forward, in its
        fused kernels (Sequential's BatchNorm2d -> ReLU -> MaxPool2d); None when that path does not apply."""
        x = self._check(x)
        w, b = self.weight, self.bias
        if (not self.training or w is None or x.ndim != 4 or x.size // self.num_features < 2
                or x.shape[2] % pool[0] or x.shape[3] % pool[1]
                or not all(t.dtype == x.dtype for t in (w, b, self.running_mean, self.running_var))):
            return None
        from ._norm_fused import batch_norm_train
        return batch_norm_train(x, w, b, self.eps, self.momentum, (self.running_mean, self.running_var), relu,
                                pool)

    def _forward_impl(self, x, relu):
        x = self._check(x)
        axes = (0,) + tuple(range(2, x.ndim))
        bshape = (1, self.num_features) + (1,) * (x.ndim - 2)
        if self.training:
            n = x.size // self.num_features
            if n < 2:
                raise ValueError(f"{type(self).__name__}: training needs more than one value per channel, got x of "
                                 f"shape {x.shape}; use eval() or a larger batch.")
            w, b = self.weight, self.bias
            if w is None:
                w, b = tensor(np.ones(self.num_features), x.dtype), tensor(np.zeros(self.num_features), x.dtype)
            if all(t.dtype == x.dtype for t in (w, b, self.running_mean, self.running_var)):
                from ._norm_fused import batch_norm_train  # one kernel forward (running stats included), one backward
                return batch_norm_train(x, w, b, self.eps, self.momentum, (self.running_mean, self.running_var),
                                        relu), True
            mu = mean(x, axes, keepdims=True)
            d = x - mu
            var = mean(d * d, axes, keepdims=True)
            with no_grad():
                m = self.momentum
                rm = self.running_mean.detach() * (1 - m) + mu.detach().reshape(self.num_features) * m
                rv = self.running_var.detach() * (1 - m) + var.detach().reshape(self.num_features) * (m * n / (n - 1))
                self.running_mean._assign(rm)
                self.running_var._assign(rv)
        else:
            w, b, rm, rv = self.weight, self.bias, self.running_mean, self.running_var
            if x.dtype in ("float32", "float64") and all(t is None or t.dtype == x.dtype for t in (w, b, rm, rv)):
                from ._norm_fused import batch_norm_eval   # one kernel (ReLU included when asked)
                return batch_norm_eval(x, w, b, rm, rv, self.eps, relu), True
            mu = self.running_mean.detach().reshape(bshape)
            var = self.running_var.detach().reshape(bshape)
            d = x - mu
        y = d / sqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight.reshape(bshape) + self.bias.reshape(bshape)
        return y, False

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


class BatchNorm1d(_BatchNorm):
    """Batch normalisation (Ioffe & Szegedy 2015) over (N, C) or (N, C, L): per-channel batch statistics in
    training (running estimates updated with ``momentum``, unbiased variance as PyTorch), running ones in eval."""
    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over images (N, C, H, W)."""
    _dims = (4,)


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing ``normalized_shape`` axes (Ba et al. 2016)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, *, dtype=None):
        if isinstance(normalized_shape, (list, tuple)):
            shape = C.int_tuple("LayerNorm", "normalized_shape", tuple(normalized_shape), len(normalized_shape))
        else:
            shape = (C.pos_int("LayerNorm", "normalized_shape", normalized_shape),)
        self.normalized_shape, self.eps = shape, C.pos_float("LayerNorm", "eps", eps)
        self.weight = Parameter(I.ones(shape, dtype=dtype)) if C.boolean("LayerNorm", "elementwise_affine",
                                                                         elementwise_affine) else None
        self.bias = Parameter(I.zeros(shape, dtype=dtype)) if elementwise_affine else None

    def forward(self, x):
        x = as_tensor(x)
        k = len(self.normalized_shape)
        if x.shape[x.ndim - k:] != self.normalized_shape or x.ndim < k:
            raise ValueError(f"LayerNorm(normalized_shape={self.normalized_shape}): x has shape {x.shape}; expected "
                             f"(..., {', '.join(map(str, self.normalized_shape))}).")
        w, b = self.weight, self.bias
        if w is None:
            w, b = tensor(np.ones(self.normalized_shape), x.dtype), tensor(np.zeros(self.normalized_shape), x.dtype)
        if w.dtype == x.dtype and b.dtype == x.dtype:
            from ._norm_fused import layer_norm  # one kernel forward, one backward
            return layer_norm(x, w, b, self.eps)
        axes = tuple(range(x.ndim - k, x.ndim))
        d = x - mean(x, axes, keepdims=True)
        y = d / sqrt(mean(d * d, axes, keepdims=True) + self.eps)
        if self.weight is not None:
            y = y * self.weight + self.bias
        return y

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalise x (N, C, ...) over each group of C / num_groups channels and all trailing axes (biased variance,
    as PyTorch), then scale and shift per channel."""
    x = as_tensor(x)
    N, Cc = x.shape[:2]
    rest = x.shape[2:]
    g = x.reshape((N, num_groups, -1))
    d = g - mean(g, 2, keepdims=True)
    y = (d / sqrt(mean(d * d, 2, keepdims=True) + eps)).reshape(x.shape)
    if weight is not None:
        b = (1, Cc) + (1,) * len(rest)
        y = y * weight.reshape(b) + bias.reshape(b)
    return y


class GroupNorm(Module):
    """Group normalisation (Wu & He 2018): x (N, C, *) normalised over C / num_groups channels and the trailing
    axes per sample; ``affine`` adds per-channel weight (ones) and bias (zeros), as PyTorch."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, *, dtype=None):
        self.num_groups = C.pos_int("GroupNorm", "num_groups", num_groups)
        self.num_channels = C.pos_int("GroupNorm", "num_channels", num_channels)
        if self.num_channels % self.num_groups:
            raise ValueError(f"GroupNorm: num_channels={num_channels} is not divisible by num_groups={num_groups}.")
        self.eps = C.pos_float("GroupNorm", "eps", eps)
        affine = C.boolean("GroupNorm", "affine", affine)
        self.weight = Parameter(I.ones((self.num_channels,), dtype=dtype)) if affine else None
        self.bias = Parameter(I.zeros((self.num_channels,), dtype=dtype)) if affine else None

    def forward(self, x):
        x = as_tensor(x)
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm(num_channels={self.num_channels}): x has shape {x.shape}; expected "
                             f"(N, {self.num_channels}, ...).")
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}"


class _InstanceNorm(Module):
    _nd = 1

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False, *, dtype=None):
        name = type(self).__name__
        self.num_features = C.pos_int(name, "num_features", num_features)
        self.eps = C.pos_float(name, "eps", eps)
        self.momentum = C.prob(name, "momentum", momentum, closed_right=True)
        if C.boolean(name, "track_running_stats", track_running_stats):
            raise NotImplementedError(f"{name}: track_running_stats=True is not supported; instance statistics are "
                                      "used in training and evaluation (PyTorch's default).")
        affine = C.boolean(name, "affine", affine)
        self.weight = Parameter(I.ones((self.num_features,), dtype=dtype)) if affine else None
        self.bias = Parameter(I.zeros((self.num_features,), dtype=dtype)) if affine else None

    def forward(self, x):
        x = as_tensor(x)
        if x.ndim != self._nd + 2 or x.shape[1] != self.num_features:
            dims = "L" if self._nd == 1 else "H, W"
            raise ValueError(f"{type(self).__name__}(num_features={self.num_features}): x has shape {x.shape}; "
                             f"expected (N, {self.num_features}, {dims}).")
        return group_norm(x, self.num_features, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, affine={self.weight is not None}"


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation (Ulyanov et al. 2016) of (N, C, L): each sample's channel over L."""
    _nd = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of images (N, C, H, W): each sample's channel over H, W."""
    _nd = 2


def dropout(x, p, rng, training=True):
    """Zero each element with probability p and scale the rest by 1 / (1 - p) (inverted dropout);
    the mask comes from the numpy Generator ``rng``."""
    x = as_tensor(x)
    if not training or p == 0:
        return x
    keep = rng.random(x.shape) >= p
    return x * tensor(keep / (1.0 - p), x.dtype)


def _mask_fwd(state, shape, dtype, p):
    from ..kernels import nn_dropout as KD
    n = int(np.prod(shape, dtype=np.int64))
    out = backend.empty(max(n, 1), dtype)
    KD.mask(state._buf, out, n, p, state.dtype, dtype)
    return out, shape, dtype


_dropout_mask = Primitive("dropout_mask", _mask_fwd, order=0)  # a constant to every transform


class Dropout(Module):
    """Inverted dropout with its own seeded random stream (``seed``; None: drawn from the global generator
    that :func:`sciml.manual_seed` seeds): active in train(), identity in eval().

    The mask is drawn by a Taichi kernel from a counter-based generator (Threefry-2x32,
    ``sciml/kernels/nn_dropout.py``) whose key and counter live in the buffer ``rng_state`` (6 integers
    < 2**16), and a second kernel advances the counter: ``state_dict()``, ``save``/``load`` and Trainer
    checkpoints carry the stream (a resumed run draws the same masks as an uninterrupted one), and a
    function jitted with ``sm.jit`` draws a fresh mask on every replay, the same sequence as eager calls
    (jit's verification runs restore the state they advance).
    """

    def __init__(self, p=0.5, *, seed=None):
        from ..kernels.nn_dropout import state_words
        self.p = C.prob("Dropout", "p", p)
        self.rng_state = Buffer(np.array(state_words(I.resolve_seed(seed, "Dropout(seed)")), dtype=np.float64))

    def forward(self, x):
        x = as_tensor(x)
        if not self.training or self.p == 0:
            return x
        if self.rng_state.shape != (6,):
            raise ValueError(f"Dropout: rng_state has shape {self.rng_state.shape}; expected (6,) (a stream saved by "
                             "an older sciml cannot be continued: load the state dict without it, strict=False).")
        if x.dtype in ("float32", "float64"):
            from ._dense_fused import epilogue   # mask, counter advance and product in one kernel; adjoint one
            return epilogue(x, None, "identity", self.p, self.rng_state)
        return x * _dropout_mask(self.rng_state, shape=x.shape, dtype=x.dtype, p=self.p)

    def _stream(self):
        """(p, rng_state) when this layer drops (train mode, p > 0), else (0.0, None); checks the state."""
        if not self.training or self.p == 0:
            return 0.0, None
        if self.rng_state.shape != (6,):
            raise ValueError(f"Dropout: rng_state has shape {self.rng_state.shape}; expected (6,) (a stream saved by "
                             "an older sciml cannot be continued: load the state dict without it, strict=False).")
        return self.p, self.rng_state

    def extra_repr(self):
        return f"p={self.p}"


class Embedding(Module):
    """Rows of a (num_embeddings, embedding_dim) table at integer indices: idx (...) -> (..., embedding_dim).
    Initialised N(0, 1) as PyTorch (``init=`` another initialiser name or callable)."""

    def __init__(self, num_embeddings, embedding_dim, *, seed=None, init="normal", dtype=None):
        self.num_embeddings = C.pos_int("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = C.pos_int("Embedding", "embedding_dim", embedding_dim)
        self.weight = Parameter(I.get(init)((self.num_embeddings, self.embedding_dim),
                                            seed=I.resolve_seed(seed, "Embedding(seed)"), dtype=dtype))

    def forward(self, idx):
        a = idx.numpy() if isinstance(idx, Tensor) else np.asarray(idx)
        if a.dtype.kind not in "iu":
            raise TypeError(f"Embedding: indices have dtype {a.dtype}; expected integers.")
        if a.size and (a.min() < 0 or a.max() >= self.num_embeddings):
            bad = a[(a < 0) | (a >= self.num_embeddings)].flat[0]
            raise ValueError(f"Embedding(num_embeddings={self.num_embeddings}): index {bad} is out of range; "
                             f"expected indices in [0, {self.num_embeddings}).")
        return take(self.weight, a)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"
