"""sciml ops: every function here is built from primitives whose rules are sciml ops."""
from .. import tensor as _tensor_mod
from .elementwise import (abs, add, arccos, arccosh, arcsin, arcsinh, arctan, arctanh, astype, atan2, clip, cos,
                          cosh, div, equal, erf, erfc, exp, expm1, floor, greater, greater_equal, isfinite, isinf,
                          isnan, less, less_equal, log, log1p, maximum, minimum, mul, neg, not_equal, pow, reciprocal,
                          relu, sigmoid, sign, sin, sinh, softplus, sqrt, square, step, sub, sum_to, tan, tanh, where)
from .linalg import dot, matmul, use_blas
from .nn import gelu, log_softmax, logsumexp, silu, softmax
from .reduce import broadcast_to, max, mean, min, reshape, sum, var
from .indexing import take_along_axis
from .shape import concat, getitem, moveaxis, scatter_add, split, squeeze, stack, take, transpose, unsqueeze
from . import elementwise as _e, linalg as _l, nn as _n, reduce as _r, shape as _s  # noqa: F401


class _Methods:
    """Namespace the Tensor methods dispatch to."""


for _name, _fn in list(globals().items()):
    if callable(_fn) and not _name.startswith("_"):
        setattr(_Methods, _name, staticmethod(_fn))
_tensor_mod.ops = _Methods


# Tensor methods of the elementwise ops that tensor.py does not define itself (x.erf(), x.isnan(), ...)
_METHODS = ("log1p", "expm1", "erf", "erfc", "tan", "sinh", "cosh", "arcsin", "arccos", "arctan", "arcsinh",
            "arccosh", "arctanh", "isnan", "isinf", "isfinite", "sign", "sigmoid", "relu", "floor", "reciprocal")


def _method(fn):
    def m(self):
        return fn(self)
    m.__name__ = fn.__name__
    m.__doc__ = fn.__doc__
    return m


for _name in _METHODS:
    if not hasattr(_tensor_mod.Tensor, _name):
        setattr(_tensor_mod.Tensor, _name, _method(globals()[_name]))


# Tensor methods of the array ops (x.cumsum(axis), x.argmax(), x.sort(), ...), as numpy's ndarray methods
from . import array as _array  # noqa: E402  (array imports the modules above)

_ARRAY_METHODS = ("cumsum", "cumprod", "prod", "std", "argmax", "argmin", "argsort", "sort", "flip", "any", "all",
                  "trace", "diagonal")


def _array_method(fn):
    def m(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    m.__name__ = fn.__name__
    m.__doc__ = fn.__doc__
    return m


for _name in _ARRAY_METHODS:
    if not hasattr(_tensor_mod.Tensor, _name):
        setattr(_tensor_mod.Tensor, _name, _array_method(getattr(_array, _name)))
