"""Reductions (sum, mean, max, min), broadcast_to and reshape: linear ops with linear rules."""
from __future__ import annotations

import builtins
import math
import numbers
import warnings

import numpy as np

from ... import backend
from ...kernels import index as K
from ...kernels import reduce as R
from ...kernels import rows as KR
from ..primitive import Primitive
from ..tensor import Tensor, as_tensor
from ._util import broadcast_shapes, check_float, lift, norm_axis, shape_tuple


# --- reshape (zero-copy: tensors are immutable, so the buffer is shared) --------------------
def _reshape_forward(x, shape):
    return x._buf, shape, x.dtype


_reshape = Primitive("reshape", _reshape_forward)
_reshape.def_vjp(lambda g, x, out, shape: (_reshape(g, shape=x.shape),))
_reshape.def_jvp(lambda ts, x, out, shape: _reshape(ts[0], shape=shape))
_reshape.def_batched_jvp(lambda ts, x, out, shape: _reshape(ts[0], shape=ts[0].shape[:1] + shape))


def reshape(x, shape):
    """``x`` with a new shape of the same size (integers; one entry may be -1)."""
    x = as_tensor(x)
    if type(shape) is not tuple or any(type(s) is not int for s in shape):  # noqa: E721 (bool is not an int here)
        shape = _shape_ints(shape)
    if x.shape == shape:
        return x
    if any(s < -1 for s in shape) or shape.count(-1) > 1:
        raise ValueError(f"reshape: shape={shape}; expected sizes >= 0 and at most one -1.")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or x.size % known:
            raise ValueError(f"reshape: cannot reshape {x.shape} ({x.size} elements) into {shape}.")
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    if math.prod(shape) != x.size:
        raise ValueError(f"reshape: cannot reshape {x.shape} ({x.size} elements) into {shape}.")
    if shape == x.shape:
        return x
    return _reshape(x, shape=shape)


def _shape_ints(shape):
    if isinstance(shape, (numbers.Integral, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
            isinstance(s, (numbers.Integral, np.integer)) and not isinstance(s, (bool, np.bool_)) for s in shape):
        raise TypeError(f"reshape: shape={shape!r}; expected an int or a tuple of ints (one may be -1).")
    return tuple(int(s) for s in shape)


# --- broadcast_to ------------------------------------------------------------------------
def _broadcast_forward(x, shape):
    n = math.prod(shape)
    out = backend.empty(n, x.dtype)
    if n:
        r = len(shape)
        xs = (1,) * (r - len(x.shape)) + x.shape
        strides = K.contiguous_strides(xs)
        strides = [0 if xs[d] == 1 and shape[d] != 1 else strides[d] for d in range(r)]
        meta = K.view_meta(0, shape, strides)
        if not (n >= 1 << 12 and backend.on_host() and KR.gather(x._buf, out, n, meta, x.dtype)):
            K.strided_gather(x._buf, out, n, meta, x.dtype)
    return out, shape, x.dtype


_broadcast = Primitive("broadcast_to", _broadcast_forward)


@_broadcast.def_vjp
def _broadcast_vjp(g, x, out, shape):
    from .elementwise import sum_to
    return (sum_to(g, x.shape),)


_broadcast.def_jvp(lambda ts, x, out, shape: _broadcast(ts[0], shape=shape))
_broadcast.def_batched_jvp(lambda ts, x, out, shape: _broadcast(lift(ts[0], len(shape)), shape=ts[0].shape[:1] + shape))


def broadcast_to(x, shape):
    """``x`` repeated along new or size-1 axes to ``shape`` (numpy rules)."""
    x = as_tensor(x)
    shape = shape_tuple("broadcast_to", shape)
    if len(shape) < x.ndim or broadcast_shapes("broadcast_to", x.shape, shape) != shape:
        raise ValueError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}.")
    if shape == x.shape:
        return x
    if math.prod(shape) == x.size:
        return reshape(x, shape)
    return _broadcast(x, shape=shape)


# --- sum / max / min over one axis (keepdims) ---------------------------------------------
def _reduce_forward(op):
    def forward(x, axis):
        shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]
        n = math.prod(shape)
        out = backend.empty(n, x.dtype)
        if n:
            o, r, i = R.reduce_shape(x.shape, axis)
            if r == 0:
                if op != "sum":
                    raise ValueError(f"{op}: cannot reduce over axis {axis} of size 0 (no identity; "
                                     "numpy raises too).")
                out = backend.zeros(n, x.dtype)
                return out, shape, x.dtype
            R.reduce(op, x._buf, out, o, r, i, x.dtype)
        return out, shape, x.dtype
    return forward


_sum1 = Primitive("sum", _reduce_forward("sum"))
_sum1.def_vjp(lambda g, x, out, axis: (_broadcast(g, shape=x.shape),))
_sum1.def_jvp(lambda ts, x, out, axis: _sum1(ts[0], axis=axis))
_sum1.def_batched_jvp(lambda ts, x, out, axis: _sum1(ts[0], axis=axis + 1))


def _extremum_mask(x, out):
    from .elementwise import equal
    m = equal(x, out).astype(x.dtype)
    return m


def _ext_vjp(g, x, out, axis):
    m = _extremum_mask(x, out)
    cnt = _sum1(m, axis=axis)
    return (_broadcast(g / cnt, shape=x.shape) * m,)


def _ext_jvp(ts, x, out, axis):
    m = _extremum_mask(x, out)
    return _sum1(ts[0] * m, axis=axis) / _sum1(m, axis=axis)


def _ext_bjvp(ts, x, out, axis):
    m = _extremum_mask(x, out)
    return _sum1(ts[0] * m, axis=axis + 1) / _sum1(m, axis=axis)


_max1 = Primitive("max", _reduce_forward("max"))
_min1 = Primitive("min", _reduce_forward("min"))
for _p in (_max1, _min1):
    _p.def_vjp(_ext_vjp)
    _p.def_jvp(_ext_jvp)
    _p.def_batched_jvp(_ext_bjvp)


def _keepdims(name, keepdims):
    if keepdims is True or keepdims is False:
        return keepdims
    if isinstance(keepdims, (bool, np.bool_)) or (isinstance(keepdims, (numbers.Integral, np.integer))
                                                   and keepdims in (0, 1)):
        return bool(keepdims)
    raise TypeError(f"{name}: keepdims={keepdims!r} ({type(keepdims).__name__}); expected True or False.")


def _reduce(name, prim, x, axis, keepdims):
    x = as_tensor(x)
    keepdims = _keepdims(name, keepdims)
    if x.dtype == "bool":  # as numpy: sum counts (int), max / min stay bool
        r = _reduce(name, prim, x.astype("int32"), axis, keepdims)
        return r if name == "sum" else r.astype("bool")
    axes = norm_axis(name, axis, x.ndim)
    if x.ndim == 0:
        return x
    if name == "min" and x.dtype == "int32":
        # min = -1 - max(-1 - x): an exact, order-reversing bijection of int32 (no overflow), because the
        # min kernel starts int32 from a cast of +inf (INT_MIN); kernels/reduce.py's owner should start at INT_MAX
        return -1 - _reduce("max", _max1, -1 - x, axis, keepdims)
    if axis is None and x.ndim > 1:
        r = prim(reshape(x, (x.size,)), axis=0)
        return reshape(r, (1,) * x.ndim if keepdims else ())
    r = x
    for a in reversed(axes):
        r = prim(r, axis=a)
    if not keepdims:
        r = reshape(r, tuple(s for d, s in enumerate(x.shape) if d not in axes))
    return r


def sum(x, axis=None, keepdims=False):
    """Sum over ``axis`` (an int, a tuple, or None for all). An int32 sum that does not fit in int32
    raises OverflowError (numpy would widen to int64; sciml has no int64)."""
    if axis is None and keepdims is False and type(x) is Tensor and x.dtype in _FLOATS and x.shape:
        # the whole sum of a float Tensor (a loss, a mean): the same primitives as _reduce below without its
        # argument checks (~10 us of Python per call here)
        r = _sum1(x if len(x.shape) == 1 else _reshape(x, shape=(x.size,)), axis=0)
        return _reshape(r, shape=())
    r = _reduce("sum", _sum1, x, axis, keepdims)
    if r.dtype == "int32" and isinstance(x, Tensor) and x.dtype == "int32" and x.size > 1:
        _check_int_sum(x, axis, r)
    return r


_FLOATS = ("float32", "float64")


def _check_int_sum(x, axis, r):
    from ._util import host_values
    if not (backend.on_host() or x.size < 65536):
        return
    a = host_values(x)
    if a is None:  # traced by sciml.jit: cannot be read
        return
    a = a.astype(np.int64)
    if int(np.abs(a).max()) * (x.size // builtins.max(r.size, 1)) < 2**31:
        return
    exact = np.sum(a, axis=norm_axis("sum", axis, x.ndim))
    if exact.size and (exact.max() > 2**31 - 1 or exact.min() < -2**31):
        raise OverflowError(f"sum: the int32 sum of a Tensor of shape {x.shape} overflows int32 (exact value "
                            f"{exact.max() if exact.max() > 2**31 - 1 else exact.min()}); cast to float64 first "
                            "(x.astype('float64').sum()).")


def _empty_mean(name, x, axes, keepdims, what):
    """numpy's answer for a mean over zero elements: NaN (with a RuntimeWarning when there is any output)."""
    from ..tensor import full
    shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape)) if keepdims else \
        tuple(s for d, s in enumerate(x.shape) if d not in axes)
    if math.prod(shape):
        warnings.warn(f"{name}: {what} of an empty slice is NaN (axis of size 0 in shape {x.shape}).",
                      RuntimeWarning, stacklevel=3)
    return full(shape, float("nan"), x.dtype)


def mean(x, axis=None, keepdims=False):
    """Mean over ``axis`` (an int, a tuple, or None for all). Over zero elements: NaN with a
    RuntimeWarning, as numpy."""
    x = as_tensor(x)
    check_float("mean", x)
    keepdims = _keepdims("mean", keepdims)
    axes = norm_axis("mean", axis, x.ndim)
    count = math.prod(x.shape[a] for a in axes)
    if count == 0:
        return _empty_mean("mean", x, axes, keepdims, "mean")
    return sum(x, axis, keepdims) * (1.0 / count)


def max(x, axis=None, keepdims=False):
    """Maximum over ``axis``; the gradient is shared equally between tied maxima."""
    return _reduce("max", _max1, x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    """Minimum over ``axis``; the gradient is shared equally between tied minima."""
    return _reduce("min", _min1, x, axis, keepdims)


def var(x, axis=None, keepdims=False):
    """Population variance over ``axis``. Over zero elements: NaN with a RuntimeWarning, as numpy."""
    x = as_tensor(x)
    check_float("var", x)
    keepdims = _keepdims("var", keepdims)
    axes = norm_axis("var", axis, x.ndim)
    if math.prod(x.shape[a] for a in axes) == 0:
        return _empty_mean("var", x, axes, keepdims, "variance")
    m = mean(x, axis, keepdims=True)
    return mean((x - m) * (x - m), axis, keepdims)


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)
