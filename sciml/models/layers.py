"""Dense layers and containers: Linear, MLP, Sequential, Flatten, Identity."""
from __future__ import annotations

import numbers

from ..autodiff.ops import matmul, relu, reshape, sigmoid, tanh
from ..autodiff.ops.conv import bias_act
from ..autodiff.tensor import Tensor, as_tensor
from . import _check as C
from . import init as I
from .module import Module, Parameter

__all__ = ["Linear", "MLP", "Sequential", "Flatten", "Identity"]


class Linear(Module):
    """y = x @ W + b, with W stored (in_features, out_features) and b (out_features,).

    Args:
        in_features, out_features: sizes of the last axis of x and y (positive integers).
        bias: add a bias.
        seed: seed of the initialisers (None: a fresh seed from the global generator that
            :func:`sciml.manual_seed` seeds).
        init: ``"torch"`` (default, PyTorch's: weight and bias U(-1/sqrt(in_features), 1/sqrt(in_features))),
            or another initialiser name / callable ``f(shape, *, seed, dtype)`` for the weight (the bias is
            then zeros), e.g. ``"xavier_uniform"`` (Glorot; DeepXDE's default).
        dtype: parameter dtype (default: sciml's default float dtype).
    Shapes:
        x (..., in_features) -> y (..., out_features).
    Example:
        >>> layer = sm.models.Linear(3, 2, seed=0); layer(sm.ones((4, 3))).shape
        (4, 2)
    """

    def __init__(self, in_features, out_features, bias=True, *, seed=None, init="torch", dtype=None):
        self.in_features = C.pos_int("Linear", "in_features", in_features)
        self.out_features = C.pos_int("Linear", "out_features", out_features)
        seed = I.resolve_seed(seed, "Linear(seed)")
        self.weight = Parameter(I.get(init)((self.in_features, self.out_features), seed=seed, dtype=dtype))
        self.bias = Parameter(_bias_init(init, self.out_features, self.in_features, seed, self.weight.dtype)) \
            if C.boolean("Linear", "bias", bias) else None

    def forward(self, x):
        x = self._check(x)
        return _dense(x, self.weight, self.bias, "identity")

    def _check(self, x):
        x = as_tensor(x)
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            lead = "(n, " if x.ndim <= 2 else "(..., "
            raise ValueError(f"Linear(in_features={self.in_features}): x has shape {x.shape}; "
                             f"expected {lead}{self.in_features}).")
        return x

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _bias_init(init, n, fan_in, seed, dtype):
    """A layer's bias: U(+-1/sqrt(fan_in)) with PyTorch's init (seeded apart from the weight), else zeros."""
    if isinstance(init, str) and init == "torch":
        return I.torch_uniform((n,), seed=I.split_seed(seed, 2)[1], fan_in=fan_in, dtype=dtype)
    return I.zeros((n,), dtype=dtype)


def _dense(x, W, b, act):
    """act(x @ W + b): one GEMM and one fused bias/activation kernel (``sciml.autodiff.ops.conv.bias_act``)."""
    h = matmul(x, W)
    if b is None:
        return h
    if isinstance(b, Tensor) and b.ndim == 1 and b.dtype == h.dtype and isinstance(W, Tensor):
        return bias_act(h, b, act)
    return h + b


_FUSED_ACTS = {relu: "relu", tanh: "tanh", sigmoid: "sigmoid"}


def _activation(a):
    if isinstance(a, str):
        from . import activations as A
        table = {"tanh": A.tanh, "relu": A.relu, "sigmoid": A.sigmoid, "gelu": A.gelu, "silu": A.silu,
                 "swish": A.silu, "sin": A.sin, "softplus": A.softplus, "elu": A.elu, "selu": A.selu,
                 "leaky_relu": A.leaky_relu, "mish": A.mish, "softsign": A.softsign}
        fn = table.get(a.strip().lower())
        if fn is None:
            raise ValueError(f"MLP(activation={a!r}): unknown activation name; expected one of "
                             f"{sorted(table)} or a function Tensor -> Tensor.")
        return fn
    if not callable(a):
        raise TypeError(f"MLP(activation=...): got a {type(a).__name__}; expected a function Tensor -> Tensor "
                        "or a name such as 'tanh'.")
    return a


class MLP(Module):
    """Fully connected network mapping x of shape (n, sizes[0]) to (n, sizes[-1]).

    ``layers`` is the list of :class:`Linear` layers and ``activation`` the function applied
    between them (not after the last): the PINN fused Taylor-mode path reads both.

    Args:
        sizes: layer widths, e.g. [2, 32, 32, 1].
        activation: a function Tensor -> Tensor (default ``sciml.tanh``) or its name, as in
            DeepXDE: "tanh", "relu", "sigmoid", "gelu", "silu" ("swish"), "sin", "softplus".
        seed: seeds of the layers are derived from it (``init.split_seed``); None draws one from the
            global generator (:func:`sciml.manual_seed`).
        init: weight initialiser of every layer. The default ``"xavier_uniform"`` (Glorot weights, zero
            biases) is DeepXDE's FNN convention, on which the PINN recipes are tuned; ``init="torch"`` gives
            PyTorch's ``nn.Linear`` default (weights and biases U(+-1/sqrt(fan_in))).
    """

    def __init__(self, sizes, activation=tanh, *, seed=None, init="xavier_uniform", dtype=None):
        if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
            raise TypeError(f"MLP(sizes): got {sizes!r}; expected a list of layer widths, e.g. [2, 32, 1].")
        sizes = list(sizes)
        if len(sizes) < 2 or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s <= 0
                                 for s in sizes):
            raise ValueError(f"MLP(sizes): got {sizes}; expected at least two positive integer widths, e.g. "
                             "[2, 32, 1].")
        sizes = [int(s) for s in sizes]
        self.sizes = sizes
        seeds = I.split_seed(I.resolve_seed(seed, "MLP(seed)"), len(sizes) - 1)
        self.layers = [Linear(a, b, seed=s, init=init, dtype=dtype) for a, b, s in zip(sizes, sizes[1:], seeds)]
        self.activation = _activation(activation)

    def forward(self, x):
        act = _FUSED_ACTS.get(self.activation)
        for layer in self.layers[:-1]:
            if act is not None and layer.bias is not None:
                layer._check(x)
                x = _dense(x, layer.weight, layer.bias, act)   # GEMM + one fused bias/activation kernel
            else:
                x = self.activation(layer(x))
        return self.layers[-1](x)

    def extra_repr(self):
        return f"sizes={self.sizes}, activation={getattr(self.activation, '__name__', self.activation)}"


class Sequential(Module):
    """Applies modules (or plain functions) in order: ``Sequential(Linear(4, 8), ReLU(), Linear(8, 1))``."""

    def __init__(self, *layers):
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        for i, l in enumerate(layers):
            if not callable(l):
                raise TypeError(f"Sequential: item {i} is a {type(l).__name__}; expected a Module or a function.")
        self.layers = list(layers)

    def forward(self, x):
        layers = self.layers
        i, n = 0, len(layers)
        while i < n:
            layer = layers[i]
            if i + 1 < n and type(layer) in _RELU_FUSED:   # conv / batch-norm blocks (models/_conv_fused.py)
                from ._conv_fused import fused_block        # (models/_conv_fused.py)
                r = fused_block(layers, i, x)
                if r is not None:
                    x, used = r
                    i += used
                    continue
            if i + 1 < n and type(layer) in _RELU_FUSED and _is_relu(layers[i + 1]):
                y = _RELU_FUSED[type(layer)](layer, x)
                if y is not None:
                    x = y
                    i += 2
                    continue
            if type(layer) is Linear and i + 1 < n:
                plan = _epilogue_plan(layers, i + 1)
                if plan is not None:
                    act, drop, used = plan
                    y = _fused_linear(layer, x, act, drop)
                    if y is not None:
                        x = y
                        i += 1 + used
                        continue
            x = layer(x)
            i += 1
        return x

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self):
        return len(self.layers)

    def append(self, layer):
        self.layers.append(layer)
        return self


def _epilogue_plan(layers, i):
    """(activation name, Dropout or None, modules used) when layers[i:] starts with an activation module
    and / or a Dropout that :func:`~sciml.models._dense_fused.epilogue` computes with the Linear before them
    (exact types only: a subclass may override forward), else None."""
    acts, Dropout = _fusion_types()[1:]
    act, used = acts.get(type(layers[i])), 0
    if act is not None:
        used = 1
    else:
        act = "identity"
    drop = layers[i + used] if i + used < len(layers) and type(layers[i + used]) is Dropout else None
    if drop is not None:
        used += 1
    return (act, drop, used) if used else None


def _fused_linear(layer, x, act, drop):
    """dropout(act(layer(x))) as one GEMM and one epilogue kernel, or None when the dtypes do not allow it."""
    x = layer._check(x)
    W, b = layer.weight, layer.bias
    if not isinstance(W, Tensor) or W.dtype not in ("float32", "float64") or x.dtype != W.dtype or \
            (b is not None and (not isinstance(b, Tensor) or b.dtype != W.dtype or b.ndim != 1)):
        return None
    p, state = drop._stream() if drop is not None else (0.0, None)
    from ._dense_fused import epilogue
    return epilogue(matmul(x, W), b, act, p, state)


_TYPES = []


def _fusion_types():
    """(ReLU, {activation type: epilogue name}, Dropout), imported once (the modules import this one)."""
    if not _TYPES:
        from . import activations as A
        from .norm import Dropout
        _TYPES.extend((A.ReLU, {A.ReLU: "relu", A.Tanh: "tanh", A.Sigmoid: "sigmoid", A.SiLU: "silu"}, Dropout))
    return _TYPES


def _is_relu(m):
    return type(m) is _fusion_types()[0]


def _conv_relu(layer, x):
    from .conv import _conv2d
    return _conv2d(layer._check_x(x), layer.weight, layer.bias, layer.stride, layer.padding, layer.dilation,
                   layer.groups, relu=True)


def _bn_relu(layer, x):
    return layer._forward(x, relu=True)


def _relu_fused():
    from .conv import Conv2d
    from .norm import BatchNorm1d, BatchNorm2d
    return {Conv2d: _conv_relu, BatchNorm1d: _bn_relu, BatchNorm2d: _bn_relu}


class _Lazy(dict):
    """{layer type: fn(layer, x) -> ReLU(layer(x)) in fused kernels, or None}, filled on first use (import order)."""

    def __contains__(self, k):
        if not dict.__len__(self):
            self.update(_relu_fused())
        return dict.__contains__(self, k)


_RELU_FUSED = _Lazy()


class Flatten(Module):
    """(n, d1, d2, ...) -> (n, d1 * d2 * ...)."""

    def forward(self, x):
        x = as_tensor(x)
        if x.ndim < 1:
            raise ValueError(f"Flatten: x has shape {x.shape}; expected at least one dimension (the batch).")
        return reshape(x, (x.shape[0], -1))


class Identity(Module):
    def forward(self, x):
        return x
