"""Parameter initialisers with explicit seeds (numpy PCG64 streams: same values on every arch).

Layers initialise as PyTorch's do unless told otherwise (``init=`` on each layer): Linear and
Conv* weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (``"torch"``), Embedding N(0, 1),
norms ones / zeros. :class:`sciml.models.MLP` keeps DeepXDE's convention (Glorot-uniform weights,
zero biases) by default. A layer built without ``seed=`` draws a fresh seed from the global
generator that :func:`sciml.manual_seed` seeds (:func:`next_seed`), so two same-shaped layers get
different weights and a script is reproducible after ``sm.manual_seed(s)``; an explicit ``seed=``
gives the same values as always.

Fan convention: a 2-D weight is stored ``(in_features, out_features)`` (``y = x @ W + b``), so
fan_in = shape[0], fan_out = shape[1]; a conv weight ``(out_channels, in_channels, *kernel)``
has fan_in = in_channels * prod(kernel), fan_out = out_channels * prod(kernel).

    >>> W = sm.models.init.xavier_uniform((784, 512), seed=0)
"""
from __future__ import annotations

import math

import numpy as np

from ..autodiff.tensor import tensor

__all__ = ["split_seed", "next_seed", "resolve_seed", "torch_uniform", "fans", "zeros", "ones", "constant", "normal", "uniform", "xavier_uniform",
           "xavier_normal", "glorot_uniform", "glorot_normal", "kaiming_uniform", "kaiming_normal",
           "he_uniform", "he_normal", "get"]


def split_seed(seed, n: int):
    """``n`` independent integer seeds derived from ``seed`` (numpy SeedSequence)."""
    return [int(s) for s in np.random.SeedSequence(int(seed)).generate_state(n)]


def next_seed() -> int:
    """A fresh seed drawn from sciml's global generator (reseeded by :func:`sciml.manual_seed`)."""
    from .. import runtime
    return int(runtime.default_rng().integers(0, 2 ** 63 - 1))


def resolve_seed(seed, where="seed"):
    """``seed`` checked as a non-negative integer, or a fresh one from :func:`next_seed` if None."""
    if seed is None:
        return next_seed()
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TypeError(f"{where}: got {seed!r}; expected a non-negative integer or None (draw from the global "
                        "generator that sciml.manual_seed seeds).")
    return int(seed)


def fans(shape):
    """(fan_in, fan_out) for a weight of ``shape`` (see the module docstring)."""
    shape = tuple(shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    rf = math.prod(shape[2:])
    return shape[1] * rf, shape[0] * rf


def _rng(seed):
    return np.random.default_rng(int(seed))


def zeros(shape, *, seed=0, dtype=None):
    return tensor(np.zeros(shape), dtype or "float")


def ones(shape, *, seed=0, dtype=None):
    return tensor(np.ones(shape), dtype or "float")


def constant(shape, value, *, dtype=None):
    return tensor(np.full(shape, float(value)), dtype or "float")


def normal(shape, *, seed=0, mean=0.0, std=1.0, dtype=None):
    """N(mean, std^2) samples."""
    return tensor(_rng(seed).normal(mean, std, size=shape), dtype or "float")


def uniform(shape, *, seed=0, low=0.0, high=1.0, dtype=None):
    return tensor(_rng(seed).uniform(low, high, size=shape), dtype or "float")


def xavier_uniform(shape, *, seed=0, gain=1.0, dtype=None):
    """Glorot & Bengio (2010): U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out))."""
    fi, fo = fans(shape)
    a = gain * math.sqrt(6.0 / (fi + fo))
    return uniform(shape, seed=seed, low=-a, high=a, dtype=dtype)


def xavier_normal(shape, *, seed=0, gain=1.0, dtype=None):
    """Glorot normal: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fi, fo = fans(shape)
    return normal(shape, seed=seed, std=gain * math.sqrt(2.0 / (fi + fo)), dtype=dtype)


def kaiming_uniform(shape, *, seed=0, gain=math.sqrt(2.0), mode="fan_in", dtype=None):
    """He et al. (2015): U(-b, b), b = gain * sqrt(3 / fan) (gain sqrt(2) for ReLU)."""
    fi, fo = fans(shape)
    b = gain * math.sqrt(3.0 / (fi if mode == "fan_in" else fo))
    return uniform(shape, seed=seed, low=-b, high=b, dtype=dtype)


def kaiming_normal(shape, *, seed=0, gain=math.sqrt(2.0), mode="fan_in", dtype=None):
    """He normal: N(0, std^2), std = gain / sqrt(fan)."""
    fi, fo = fans(shape)
    return normal(shape, seed=seed, std=gain / math.sqrt(fi if mode == "fan_in" else fo), dtype=dtype)


def torch_uniform(shape, *, seed=0, fan_in=None, dtype=None):
    """PyTorch's default for Linear / Conv weights and biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    (``kaiming_uniform(a=sqrt(5))``); ``fan_in`` defaults to the weight convention of :func:`fans`."""
    fi = fans(shape)[0] if fan_in is None else int(fan_in)
    b = 1.0 / math.sqrt(max(fi, 1))
    return uniform(shape, seed=seed, low=-b, high=b, dtype=dtype)


glorot_uniform, glorot_normal = xavier_uniform, xavier_normal
he_uniform, he_normal = kaiming_uniform, kaiming_normal

_BY_NAME = {"zeros": zeros, "ones": ones, "normal": normal, "uniform": uniform, "xavier_uniform": xavier_uniform,
            "xavier_normal": xavier_normal, "glorot_uniform": xavier_uniform, "glorot_normal": xavier_normal,
            "kaiming_uniform": kaiming_uniform, "kaiming_normal": kaiming_normal, "he_uniform": kaiming_uniform,
            "he_normal": kaiming_normal, "torch": torch_uniform}


def get(init):
    """An initialiser from its name or a callable ``f(shape, *, seed, dtype) -> Tensor``."""
    if callable(init):
        return init
    try:
        return _BY_NAME[init]
    except KeyError:
        raise ValueError(f"init: got {init!r}; expected a callable or one of {sorted(_BY_NAME)}.") from None
