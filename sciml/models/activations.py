"""Activations as functions (sciml ops, differentiable to any order) and as modules."""
from __future__ import annotations

from ..autodiff.ops import gelu, relu, sigmoid, silu, sin, softplus, tanh
from ..autodiff.ops import log_softmax as _log_softmax, softmax as _softmax
from .module import Module

__all__ = ["relu", "tanh", "sigmoid", "gelu", "silu", "sin", "softplus", "ReLU", "Tanh", "Sigmoid", "GELU",
           "SiLU", "Sin", "Softplus", "Softmax", "LogSoftmax"]


def _act(name, fn):
    doc = f"Module form of :func:`sciml.{fn.__name__}` (no parameters)."
    return type(name, (Module,), {"forward": lambda self, x: fn(x), "__doc__": doc})


ReLU = _act("ReLU", relu)
Tanh = _act("Tanh", tanh)
Sigmoid = _act("Sigmoid", sigmoid)
GELU = _act("GELU", gelu)
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
