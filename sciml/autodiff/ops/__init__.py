"""sciml ops: every function here is built from primitives whose rules are sciml ops."""
from .. import tensor as _tensor_mod
from .elementwise import (abs, add, astype, clip, cos, div, equal, exp, floor, greater, greater_equal, less,
                          less_equal, log, maximum, minimum, mul, neg, not_equal, pow, reciprocal, relu, sigmoid,
                          sign, sin, softplus, sqrt, square, step, sub, sum_to, tanh, where)
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
