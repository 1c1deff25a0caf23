"""Shape ops: transpose, indexing and slicing, concat/stack/split, squeeze/unsqueeze."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ... import backend
from ...kernels import index as K
from ...kernels import rows as KR
from ..primitive import Primitive
from ..tensor import Tensor, as_tensor, check_size, tensor
from ._util import check_int, host_values, norm_axis, one_axis
from .reduce import reshape


# --- strided views (transpose and basic slicing share one gather kernel) -------------------
def _view_forward(x, meta, shape):
    n = math.prod(shape)
    out = backend.empty(n, x.dtype)
    if n and not (n >= _ROWS_MIN and backend.on_host() and KR.gather(x._buf, out, n, meta, x.dtype)):
        K.strided_gather(x._buf, out, n, meta, x.dtype)
    return out, shape, x.dtype


_ROWS_MIN = 1 << 12  # views at least this big try the row-wise gather / scatter (CPU)


def _unview_forward(g, meta, in_shape):
    n = math.prod(in_shape)
    out = backend.zeros(n, g.dtype)
    if g.size and not (g.size >= _ROWS_MIN and backend.on_host() and KR.scatter(g._buf, out, g.size, meta, g.dtype)):
        K.strided_scatter(g._buf, out, g.size, meta, g.dtype)
    return out, in_shape, g.dtype


_view = Primitive("view", _view_forward)       # out = x[addresses]
_unview = Primitive("unview", _unview_forward)  # out = zeros; out[addresses] = g  (its transpose)
_view.def_vjp(lambda g, x, out, meta, shape: (_unview(g, meta=meta, in_shape=x.shape),))
_view.def_jvp(lambda ts, x, out, meta, shape: _view(ts[0], meta=meta, shape=shape))
_unview.def_vjp(lambda g, x, out, meta, in_shape: (_view(g, meta=meta, shape=x.shape),))
_unview.def_jvp(lambda ts, x, out, meta, in_shape: _unview(ts[0], meta=meta, in_shape=in_shape))


def _batch_meta(meta, nb, batch_stride):
    """A view meta (offset, ndim, *shape, *strides) with a leading batch axis of stride ``batch_stride``."""
    off, nd = meta[0], meta[1]
    return (off, nd + 1, nb, *meta[2:2 + nd], batch_stride, *meta[2 + nd:])


_view.def_batched_jvp(lambda ts, x, out, meta, shape: _view(
    ts[0], meta=_batch_meta(meta, ts[0].shape[0], x.size), shape=ts[0].shape[:1] + shape))
_unview.def_batched_jvp(lambda ts, x, out, meta, in_shape: _unview(
    ts[0], meta=_batch_meta(meta, ts[0].shape[0], math.prod(in_shape)), in_shape=ts[0].shape[:1] + in_shape))


def _slice_base(x):
    """(base, offset): ``x`` as recorded by a primitive that declares ``flat_slice`` (``params -> offset``: its
    output is the contiguous ``base.flat[offset:offset + x.size]``, e.g. the parts of ``_rnn_fused``'s packed
    output), else (x, 0). A view of such an ``x`` is taken as one view of ``base``, so that its cotangent is
    scattered into base's directly and no full-size cotangent of ``x`` is materialised and repacked."""
    n = x._node
    f = getattr(n.prim, "flat_slice", None) if n is not None else None
    return (n.inputs[0], f(n.params)) if f is not None else (x, 0)


def transpose(x, axes=None):
    """Permute axes (reverse them when ``axes`` is None), like numpy.transpose."""
    x = as_tensor(x)
    if axes is None:
        axes = tuple(range(x.ndim))[::-1]
    else:
        if not isinstance(axes, (tuple, list)):
            raise TypeError(f"transpose: axes={axes!r}; expected a tuple of ints or None.")
        if len(axes) != x.ndim:
            raise ValueError(f"transpose: axes {tuple(axes)} are not a permutation of the {x.ndim} axes of "
                             f"shape {x.shape}.")
        axes = tuple(one_axis("transpose", a, x.ndim, "axes entry") for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"transpose: axes {axes} are not a permutation of the {x.ndim} axes of shape {x.shape}.")
    if axes == tuple(range(x.ndim)):
        return x
    st = K.contiguous_strides(x.shape)
    shape = tuple(x.shape[a] for a in axes)
    if [s for s in x.shape if s != 1] == [s for s in shape if s != 1] and \
            [a for a in axes if x.shape[a] != 1] == sorted(a for a in axes if x.shape[a] != 1):
        return reshape(x, shape)  # only size-1 axes move: no data movement
    x, off = _slice_base(x)
    return _view(x, meta=K.view_meta(off, shape, [st[a] for a in axes]), shape=shape)


def _axis_list(name, arg, a, ndim):
    if isinstance(a, (tuple, list)):
        out = [one_axis(name, v, ndim, arg) for v in a]
    else:
        out = [one_axis(name, a, ndim, arg)]
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: repeated axis in {arg}={a}.")
    return out


def moveaxis(x, source, destination):
    """Move axes ``source`` to positions ``destination`` (ints or sequences of ints), like numpy.moveaxis."""
    x = as_tensor(x)
    src = _axis_list("moveaxis", "source", source, x.ndim)
    dst = _axis_list("moveaxis", "destination", destination, x.ndim)
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: source={source} and destination={destination} have different lengths.")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, order)


def getitem(x, idx):
    """numpy indexing: basic (ints, slices, None, ...) as strided views; integer arrays on any axes,
    boolean masks (eager) and their mixes as gathers (see :mod:`sciml.autodiff.ops.indexing`)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    x = as_tensor(x)
    if any(_is_advanced(i) for i in idx):
        if len(idx) >= 1 and isinstance(idx[0], (Tensor, list, np.ndarray)) and x.ndim and \
                all(isinstance(i, slice) and i == _FULL for i in idx[1:]):
            kind = idx[0].dtype if isinstance(idx[0], Tensor) else None
            if kind == "int32" or (kind is None and _int_array(idx[0])):
                return take(x, idx[0])  # rows: the common x[idx] (mini-batches)
        from .indexing import advanced
        return advanced(x, idx)
    n_ell = builtins_sum(i is Ellipsis for i in idx)
    if n_ell > 1:
        raise IndexError("Tensor indexing: at most one Ellipsis.")
    used = builtins_sum(1 for i in idx if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise IndexError(f"Tensor indexing: too many indices ({used}) for a Tensor of shape {x.shape}.")
    if n_ell:
        k = idx.index(Ellipsis)
        idx = idx[:k] + (slice(None),) * (x.ndim - used) + idx[k + 1:]
    else:
        idx = idx + (slice(None),) * (x.ndim - used)
    st = K.contiguous_strides(x.shape)
    offset, shape, strides, d = 0, [], [], 0
    for i in idx:
        if i is None:
            shape.append(1)
            strides.append(0)
            continue
        size = x.shape[d]
        if isinstance(i, slice):
            start, stop, step = i.indices(size)
            length = len(range(start, stop, step))
            offset += start * st[d] if length else 0
            shape.append(length)
            strides.append(step * st[d])
        elif isinstance(i, (numbers.Integral, np.integer)):
            j = int(i)
            if not -size <= j < size:
                raise IndexError(f"Tensor indexing: index {j} is out of range for axis {d} with size {size}.")
            offset += (j % size) * st[d]
        else:
            raise IndexError(f"Tensor indexing: unsupported index {i!r} of type {type(i).__name__}.")
        d += 1
    shape = tuple(shape)
    if shape == x.shape and offset == 0 and list(strides) == st:
        return x
    if math.prod(shape) == x.size and offset == 0:
        return reshape(x, shape)
    x, off = _slice_base(x)
    return _view(x, meta=K.view_meta(off + offset, shape, strides), shape=shape)


import builtins as _b  # noqa: E402

builtins_sum = _b.sum


_FULL = slice(None)


def _is_advanced(i):
    return isinstance(i, (Tensor, list, tuple, np.ndarray, bool, np.bool_))


def _int_array(i):
    if isinstance(i, np.ndarray):
        return i.dtype.kind in "iu" and i.ndim > 0
    return isinstance(i, list) and bool(i) and all(type(v) is int for v in i)  # noqa: E721


def _as_index(i, name="Tensor indexing"):
    """An int32 index Tensor from a Tensor, list or numpy array of integers."""
    if isinstance(i, Tensor):
        if i.dtype != "int32":
            raise IndexError(f"{name}: index Tensor has dtype {i.dtype}; expected int32.")
        return i
    try:
        a = np.asarray(i)
    except ValueError:
        raise IndexError(f"{name}: index {i!r} is not a rectangular array of integers.") from None
    if a.dtype == np.bool_:
        raise IndexError(f"{name}: got a boolean index; expected integers.")
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)  # [] is an empty integer index, as in numpy
    if not np.issubdtype(a.dtype, np.integer):
        raise IndexError(f"{name}: index array has dtype {a.dtype}; expected integers.")
    if a.size and (a.max() > 2**31 - 1 or a.min() < -2**31):
        raise IndexError(f"{name}: index values do not fit in int32.")
    return tensor(a.astype(np.int32), "int32")


# --- gather rows / scatter-add rows ------------------------------------------------------
def _take_forward(x, idx):
    rows, row = x.shape[0], math.prod(x.shape[1:])
    shape = idx.shape + x.shape[1:]
    out = backend.empty(math.prod(shape), x.dtype)
    if idx.size and row:
        K.take_rows(x._buf, idx._buf, out, idx.size, row, rows, x.dtype)
    return out, shape, x.dtype


def _scatter_forward(g, idx, rows):
    row = math.prod(g.shape[idx.ndim:])
    shape = (rows,) + g.shape[idx.ndim:]
    out = backend.zeros(rows * row, g.dtype)
    if idx.size and row:
        K.scatter_add_rows(g._buf, idx._buf, out, idx.size, row, rows, g.dtype)
    return out, shape, g.dtype


_take = Primitive("take", _take_forward)
_scatter_add = Primitive("scatter_add", _scatter_forward)
_take.def_vjp(lambda g, x, idx, out: (_scatter_add(g, idx, rows=x.shape[0]), None))
_take.def_jvp(lambda ts, x, idx, out: _take(ts[0], idx) if ts[0] is not None else None)
_scatter_add.def_vjp(lambda g, h, idx, out, rows: (_take(g, idx), None))
_scatter_add.def_jvp(lambda ts, h, idx, out, rows: _scatter_add(ts[0], idx, rows=rows) if ts[0] is not None else None)


def _batch_rows(idx, nb, rows):
    """Row indices into a (nb * rows, ...) stack: entry (b, i) -> b * rows + (idx[i] mod rows)."""
    a = idx.numpy().astype(np.int64).reshape(-1) % max(rows, 1)
    return tensor((np.arange(nb, dtype=np.int64)[:, None] * rows + a[None, :]).astype(np.int32), "int32")


@_take.def_batched_jvp
def _take_bjvp(ts, x, idx, out):
    t = ts[0]
    if t is None:
        return None
    nb, rows = t.shape[0], x.shape[0]
    r = _take(reshape(t, (nb * rows,) + x.shape[1:]), _batch_rows(idx, nb, rows))
    return reshape(r, (nb,) + out.shape)


@_scatter_add.def_batched_jvp
def _scatter_bjvp(ts, h, idx, out, rows):
    t = ts[0]
    if t is None:
        return None
    nb, rest = t.shape[0], h.shape[idx.ndim:]
    bidx = reshape(_batch_rows(idx, nb, rows), (nb * idx.size,))
    r = _scatter_add(reshape(t, (nb * idx.size,) + rest), bidx, rows=nb * rows)
    return reshape(r, (nb,) + out.shape)


def _check_range(name, a, size, axis=0):
    """IndexError unless every index in ``a`` (numpy, or None when unreadable) is in [-size, size)."""
    if a is None or not a.size:
        return
    lo, hi = int(a.min()), int(a.max())
    if lo < -size or hi >= size:
        bad = hi if hi >= size else lo
        raise IndexError(f"{name}: index {bad} is out of range for axis {axis} with size {size} "
                         f"(expected {-size} <= index < {size}).")


def _index_values(idx):
    """Host values of an index Tensor when cheap to read (always on CPU; below 64K entries on a device)."""
    if backend.on_host() or idx.size < 65536:
        return host_values(idx)
    return None


def take(x, idx):
    """Rows of ``x`` at integer positions ``idx`` (any shape): result shape ``idx.shape + x.shape[1:]``.
    Negative indices count from the end; out-of-range ones raise IndexError."""
    x = as_tensor(x)
    if x.ndim == 0:
        raise IndexError("take: cannot index a 0-d Tensor.")
    idx = _as_index(idx, "take")
    _check_range("take", _index_values(idx), x.shape[0])
    return _take(x, idx)


def scatter_add(values, idx, rows: int):
    """zeros((rows,) + values.shape[idx.ndim:]) with ``values`` rows added at ``idx`` (duplicates sum).

    ``values`` has shape ``idx.shape + row_shape``; negative indices count from the end; out-of-range
    ones raise IndexError (as numpy's ``np.add.at``)."""
    values = as_tensor(values)
    idx = _as_index(idx, "scatter_add")
    rows = check_int("scatter_add", "rows", rows, 0)
    check_size("scatter_add", (rows,) + values.shape[idx.ndim:])
    if values.shape[:idx.ndim] != idx.shape:
        raise ValueError(f"scatter_add: values of shape {values.shape} do not start with the index shape "
                         f"{idx.shape}; expected idx.shape + row_shape.")
    _check_range("scatter_add", _index_values(idx), rows)
    return _scatter_add(values, idx, rows=rows)


# --- concat / stack / split -----------------------------------------------------------------
def _concat_forward(*xs, axis):
    shape = list(xs[0].shape)
    shape[axis] = builtins_sum(x.shape[axis] for x in xs)
    shape = tuple(shape)
    out = backend.empty(math.prod(shape), xs[0].dtype)
    st = K.contiguous_strides(shape)
    off = 0
    for x in xs:
        if x.size:
            K.strided_scatter(x._buf, out, x.size, K.view_meta(off * st[axis], x.shape, st), x.dtype)
        off += x.shape[axis]
    return out, shape, xs[0].dtype


_concat = Primitive("concat", _concat_forward)


@_concat.def_vjp
def _concat_vjp(g, *xs, out, axis):
    res, off = [], 0
    for x in xs:
        sl = (slice(None),) * axis + (slice(off, off + x.shape[axis]),)
        res.append(getitem(g, sl))
        off += x.shape[axis]
    return tuple(res)


@_concat.def_jvp
def _concat_jvp(ts, *xs, out, axis):
    from ..tensor import zeros
    return _concat(*[t if t is not None else zeros(x.shape, x.dtype) for t, x in zip(ts, xs)], axis=axis)


@_concat.def_batched_jvp
def _concat_bjvp(ts, *xs, out, axis):
    from ..tensor import zeros
    nb = next(t for t in ts if t is not None).shape[0]
    return _concat(*[t if t is not None else zeros((nb,) + x.shape, x.dtype) for t, x in zip(ts, xs)],
                   axis=axis + 1)


def _tensor_list(name, xs):
    if isinstance(xs, Tensor):
        xs = list(xs)  # numpy iterates over the first axis
    elif not isinstance(xs, (list, tuple)):
        raise TypeError(f"{name}: got {type(xs).__name__}; expected a list or tuple of Tensors.")
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ValueError(f"{name}: got an empty list of tensors.")
    return xs


def concat(xs, axis=0):
    """Join Tensors along an existing axis (numpy.concatenate)."""
    xs = _tensor_list("concat", xs)
    nd = xs[0].ndim
    if nd == 0:
        raise ValueError("concat: zero-dimensional tensors cannot be concatenated; use stack.")
    axis = one_axis("concat", axis, nd)
    for i, x in enumerate(xs):
        if x.ndim != nd or x.shape[:axis] + x.shape[axis + 1:] != xs[0].shape[:axis] + xs[0].shape[axis + 1:]:
            raise ValueError(f"concat: tensor {i} has shape {x.shape}, incompatible with {xs[0].shape} "
                             f"along axis {axis} (all other axes must match).")
        if x.dtype != xs[0].dtype:
            raise TypeError(f"concat: tensor {i} has dtype {x.dtype}; expected {xs[0].dtype}.")
    if len(xs) == 1:
        return xs[0]
    return _concat(*xs, axis=axis)


def stack(xs, axis=0):
    """Join Tensors of one shape along a new axis (numpy.stack)."""
    xs = _tensor_list("stack", xs)
    for i, x in enumerate(xs):
        if x.shape != xs[0].shape:
            raise ValueError(f"stack: tensor {i} has shape {x.shape}; expected {xs[0].shape} like tensor 0.")
    axis = one_axis("stack", axis, xs[0].ndim + 1, of=f"stacking {xs[0].ndim}-d Tensors (the result has "
                    f"{xs[0].ndim + 1} dimensions)")
    return concat([unsqueeze(x, axis) for x in xs], axis)


def split(x, indices_or_sections, axis=0):
    """numpy.split: a number of equal sections or a list of split indices."""
    x = as_tensor(x)
    if x.ndim == 0:
        raise ValueError("split: cannot split a 0-d Tensor.")
    axis = one_axis("split", axis, x.ndim)
    n = x.shape[axis]
    if isinstance(indices_or_sections, (tuple, list, np.ndarray)):
        bounds = [0, *(check_int("split", "indices_or_sections entry", v) for v in indices_or_sections), n]
    else:
        k = check_int("split", "indices_or_sections", indices_or_sections)
        if k <= 0 or n % k:
            raise ValueError(f"split: axis {axis} of size {n} cannot be split into {k} equal sections.")
        bounds = [i * (n // k) for i in range(k + 1)]
    return [getitem(x, (slice(None),) * axis + (slice(a, b),)) for a, b in zip(bounds, bounds[1:])]


def squeeze(x, axis=None):
    """Remove size-1 axes (all of them, or those in ``axis``), like numpy.squeeze."""
    x = as_tensor(x)
    if axis is None:
        return reshape(x, tuple(s for s in x.shape if s != 1))
    if x.ndim == 0:
        norm_axis("squeeze", axis, 1)  # numpy lets a 0-d array squeeze axis 0 / -1
        return x
    axes = set(norm_axis("squeeze", axis, x.ndim))
    for a in sorted(axes):
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} of shape {x.shape} has size {x.shape[a]}, not 1.")
    return reshape(x, tuple(s for d, s in enumerate(x.shape) if d not in axes))


def unsqueeze(x, axis):
    """Insert a size-1 axis at ``axis`` (in ``[-ndim - 1, ndim]``), like numpy.expand_dims."""
    x = as_tensor(x)
    axis = one_axis("unsqueeze", axis, x.ndim + 1, of=f"a {x.ndim}-d Tensor (the result has {x.ndim + 1} "
                    "dimensions)")
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])
