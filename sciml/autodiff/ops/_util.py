"""Shared helpers for op definitions: operand coercion, broadcasting, axes."""
from __future__ import annotations

import numbers

import numpy as np

from ..tensor import Tensor, _is_int, as_tensor, check_int, check_size, scalar, shape_tuple, tensor  # noqa: F401

FLOATS = ("float32", "float64")


def operands(name, x, y):
    """Coerce (x, y) to Tensors of one dtype; Python numbers take the other operand's dtype."""
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        if x.dtype != y.dtype:
            x, y = _promote(name, x, y)
        return x, y
    if isinstance(x, Tensor):
        y = _coerce(name, y, x.dtype)
    elif isinstance(y, Tensor):
        x = _coerce(name, x, y.dtype)
    else:
        x = as_tensor(x)
        y = _coerce(name, y, x.dtype)
    if x.dtype != y.dtype:  # int tensor with a float number: the number's float dtype wins
        x, y = _promote(name, x, y)
    return x, y


def _coerce(name, v, dtype):
    if isinstance(v, Tensor):
        return v
    if isinstance(v, numbers.Number) and not isinstance(v, bool):
        if dtype in ("int32", "bool") and not isinstance(v, numbers.Integral):
            from ...runtime import default_dtype
            dtype = default_dtype()
        return scalar(v, "int32" if dtype == "bool" else dtype)
    if isinstance(v, (np.ndarray, list, tuple, bool, np.generic)):
        return tensor(v, dtype if dtype in FLOATS else None)
    raise TypeError(f"{name}: got an operand of type {type(v).__name__}; expected a Tensor, a number or an array.")


def _promote(name, x, y):
    fx, fy = x.dtype in FLOATS, y.dtype in FLOATS
    if fx and fy:
        raise TypeError(f"{name}: operands have dtypes {x.dtype} and {y.dtype}; sciml does not promote between "
                        "float dtypes silently. Cast one with .astype(...).")
    if fx:
        return x, y.astype(x.dtype)
    if fy:
        return x.astype(y.dtype), y
    return x.astype("int32"), y.astype("int32")


def broadcast_shapes(name, *shapes):
    """numpy's broadcasting rule, with an error naming the op and the shapes."""
    if len(shapes) == 2 and shapes[0] == shapes[1]:
        return shapes[0]
    nd = max(len(s) for s in shapes)
    out = []
    for d in range(nd):
        sizes = {s[len(s) - nd + d] for s in shapes if len(s) - nd + d >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"{name}: shapes {', '.join(map(str, shapes))} cannot be broadcast together "
                             f"(axis {d - nd} has sizes {sorted(sizes)}); numpy's broadcasting rules apply.")
        out.append(sizes.pop() if sizes else 1)
    check_size(name, out)
    return tuple(out)


def check_float(name, *xs):
    for x in xs:
        if x.dtype not in FLOATS:
            raise TypeError(f"{name}: got a Tensor of dtype {x.dtype}; expected float32 or float64 "
                            "(cast with .astype('float32')).")


class AxisError(ValueError, IndexError):
    """An axis out of range (a ValueError and an IndexError, as numpy's AxisError)."""


def one_axis(name, axis, ndim, arg="axis", of=None):
    """One axis in ``[-ndim, ndim)`` as a non-negative int (numpy semantics). ``of`` describes the
    Tensor in the message (default: "a Tensor with {ndim} dimension(s)")."""
    a = axis if type(axis) is int else check_int(name, arg, axis)  # noqa: E721
    if not -ndim <= a < ndim:
        raise AxisError(f"{name}: {arg} {a} is out of range for {of or f'a Tensor with {ndim} dimension(s)'} "
                        f"(expected {-ndim} <= {arg} < {ndim}).")
    return a % ndim


def norm_axis(name, axis, ndim):
    """A sorted tuple of non-negative axes (None -> all): an int or a sequence of ints in
    ``[-ndim, ndim)``, without repeats (numpy semantics; a 0-d Tensor has no axis 0)."""
    if axis is None:
        return tuple(range(ndim))
    if type(axis) is int and -ndim <= axis < ndim:  # noqa: E721 (fast path)
        return (axis % ndim,)
    if isinstance(axis, (list, tuple)):
        axes = tuple(axis)
    elif _is_int(axis):
        axes = (axis,)
    else:
        raise TypeError(f"{name}: axis={axis!r} ({type(axis).__name__}); expected an int, a tuple of ints or None.")
    out = [one_axis(name, a, ndim) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: repeated axis in axis={axis}.")
    return tuple(sorted(out))


def host_values(t):
    """The values of an index Tensor as a numpy array, or None inside a ``sciml.jit`` trace where
    they depend on the traced inputs, and for a Tensor batched by ``sm.vmap`` (its numpy() would show the
    first example only): callers then compute with sciml ops."""
    from ... import backend
    from .. import vmap as _vm
    if _vm._active and _vm._levels_of(t):
        return None
    rec = backend.TRACE[0]
    if rec is not None:
        from ..jit import _root
        if id(_root(t._buf)) in rec.dynamic:
            return None
    return t.numpy()


def lift(t, ndim):
    """A batched tangent ``(B,) + s`` viewed as ``(B,) + (1,) * (ndim - len(s)) + s`` (zero-copy), so that
    it broadcasts against rank-``ndim`` operands with the batch axis kept in front. None stays None."""
    if t is None:
        return None
    k = ndim - (t.ndim - 1)
    if k <= 0:
        return t
    from .reduce import reshape
    return reshape(t, t.shape[:1] + (1,) * k + t.shape[1:])


def batch_size(ts):
    """B of the first non-None batched tangent."""
    for t in ts:
        if t is not None:
            return t.shape[0]
    raise ValueError("batch_size: no tangent")
