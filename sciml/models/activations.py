"""Activations as functions (sciml ops, differentiable to any order) and as modules."""
from __future__ import annotations

import inspect
import numbers

from ..autodiff.ops import abs as _abs, exp, gelu, greater, greater_equal, less_equal, relu, sigmoid, silu, sin, \
    softplus, tanh, where
from ..autodiff.ops import log_softmax as _log_softmax, softmax as _softmax
from ..autodiff.tensor import as_tensor
from .module import Module

__all__ = ["relu", "tanh", "sigmoid", "gelu", "silu", "sin", "softplus", "leaky_relu", "elu", "selu", "mish",
           "hardtanh", "softsign", "ReLU", "Tanh", "Sigmoid", "GELU", "SiLU", "Sin", "Softplus", "Softmax",
           "LogSoftmax", "LeakyReLU", "ELU", "SELU", "Mish", "Hardtanh", "Softsign"]


def _num(where, name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != v:
        raise TypeError(f"{where}: {name}={v!r}; expected a number.")
    return float(v)


# Composed from sciml ops (each differentiable to any order; NaN in gives NaN out). The derivative at the
# kinks follows PyTorch: leaky_relu and elu take the x <= 0 branch at 0, hardtanh has derivative 0 at its bounds.
def leaky_relu(x, negative_slope=0.01):
    """x if x > 0 else negative_slope * x (PyTorch's LeakyReLU)."""
    x = as_tensor(x)
    return where(greater(x, 0.0), x, x * _num("leaky_relu", "negative_slope", negative_slope))


def elu(x, alpha=1.0):
    """x if x > 0 else alpha (exp(x) - 1) (Clevert et al. 2016). The exp only sees x <= 0, so large inputs give
    no inf * 0 in the derivative."""
    x = as_tensor(x)
    a = _num("elu", "alpha", alpha)
    pos = greater(x, 0.0)
    neg = where(pos, 0.0, x)
    return where(pos, x, (exp(neg) - 1.0) * a)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x):
    """scale * elu(x, alpha) with Klambauer et al.'s constants (as PyTorch)."""
    return elu(x, _SELU_ALPHA) * _SELU_SCALE


def mish(x):
    """x tanh(softplus(x)) (Misra 2019)."""
    x = as_tensor(x)
    return x * tanh(softplus(x))


def hardtanh(x, min_val=-1.0, max_val=1.0):
    """x clamped to [min_val, max_val]; derivative 1 strictly inside, 0 outside and at the bounds (PyTorch)."""
    lo, hi = _num("hardtanh", "min_val", min_val), _num("hardtanh", "max_val", max_val)
    if not lo < hi:
        raise ValueError(f"hardtanh: min_val={min_val} must be below max_val={max_val}.")
    x = as_tensor(x)
    return where(less_equal(x, lo), lo, where(greater_equal(x, hi), hi, x))


def softsign(x):
    """x / (1 + |x|)."""
    x = as_tensor(x)
    return x / (_abs(x) + 1.0)


def _gelu_approximate_supported():
    try:
        return "approximate" in inspect.signature(gelu).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def _act(name, fn):
    doc = f"Module form of :func:`sciml.{fn.__name__}` (no parameters)."
    return type(name, (Module,), {"forward": lambda self, x: fn(x), "__doc__": doc})


ReLU = _act("ReLU", relu)
Tanh = _act("Tanh", tanh)
Sigmoid = _act("Sigmoid", sigmoid)


class GELU(Module):
    """Module form of :func:`sciml.gelu`. ``approximate`` (``"none"`` exact erf form, ``"tanh"``) is passed
    through when :func:`sciml.gelu` takes it; without an argument the op's own default is used."""

    def __init__(self, approximate=None):
        if approximate is not None and approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate={approximate!r}; expected 'none' or 'tanh'.")
        if approximate is not None and not _gelu_approximate_supported():
            if approximate == "none":
                raise NotImplementedError("GELU(approximate='none'): this sciml's gelu has only the tanh form.")
            approximate = None  # the tanh form is what gelu computes
        self.approximate = approximate

    def forward(self, x):
        return gelu(x) if self.approximate is None else gelu(x, approximate=self.approximate)

    def extra_repr(self):
        return "" if self.approximate is None else f"approximate={self.approximate!r}"


SiLU = _act("SiLU", silu)
Sin = _act("Sin", sin)
Softplus = _act("Softplus", softplus)


class Softmax(Module):
    def __init__(self, axis=-1):
        self.axis = axis

    def forward(self, x):
        return _softmax(x, self.axis)


class LogSoftmax(Module):
    def __init__(self, axis=-1):
        self.axis = axis

    def forward(self, x):
        return _log_softmax(x, self.axis)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01):
        self.negative_slope = _num("LeakyReLU", "negative_slope", negative_slope)

    def forward(self, x):
        return leaky_relu(x, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    def __init__(self, alpha=1.0):
        self.alpha = _num("ELU", "alpha", alpha)

    def forward(self, x):
        return elu(x, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}"


class Hardtanh(Module):
    def __init__(self, min_val=-1.0, max_val=1.0):
        self.min_val, self.max_val = _num("Hardtanh", "min_val", min_val), _num("Hardtanh", "max_val", max_val)
        if not self.min_val < self.max_val:
            raise ValueError(f"Hardtanh: min_val={min_val} must be below max_val={max_val}.")

    def forward(self, x):
        return hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}"


SELU = _act("SELU", selu)
Mish = _act("Mish", mish)
Softsign = _act("Softsign", softsign)
