"""Shape ops: transpose, indexing and slicing, concat/stack/split, squeeze/unsqueeze."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ... import backend
from ...kernels import index as K
from ...kernels import rows as KR
from ..primitive import Primitive
from ..tensor import Tensor, as_tensor, tensor
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


def transpose(x, axes=None):
    """Permute axes (reverse them when ``axes`` is None), like numpy.transpose."""
    x = as_tensor(x)
    axes = tuple(range(x.ndim))[::-1] if axes is None else tuple(int(a) % max(x.ndim, 1) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"transpose: axes {axes} are not a permutation of the {x.ndim} axes of shape {x.shape}.")
    if axes == tuple(range(x.ndim)):
        return x
    st = K.contiguous_strides(x.shape)
    shape = tuple(x.shape[a] for a in axes)
    if [s for s in x.shape if s != 1] == [s for s in shape if s != 1] and \
            [a for a in axes if x.shape[a] != 1] == sorted(a for a in axes if x.shape[a] != 1):
        return reshape(x, shape)  # only size-1 axes move: no data movement
    return _view(x, meta=K.view_meta(0, shape, [st[a] for a in axes]), shape=shape)


def moveaxis(x, source, destination):
    x = as_tensor(x)
    order = [a for a in range(x.ndim) if a != source % x.ndim]
    order.insert(destination % x.ndim, source % x.ndim)
    return transpose(x, order)


def getitem(x, idx):
    """numpy basic indexing (ints, slices, None, ...) plus an integer array on the first index."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if idx and _is_index_array(idx[0]):
        r = take(x, idx[0])
        return getitem(r, (slice(None),) * np.ndim(_as_index(idx[0])) + idx[1:]) if len(idx) > 1 else r
    if any(_is_index_array(i) for i in idx):
        raise IndexError("Tensor indexing: an integer array is supported only as the first index "
                         f"(got {idx}); move that axis first with transpose, or use take().")
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
    return _view(x, meta=K.view_meta(offset, shape, strides), shape=shape)


import builtins as _b  # noqa: E402

builtins_sum = _b.sum


def _is_index_array(i):
    return isinstance(i, (Tensor, list, np.ndarray)) and not isinstance(i, bool)


def _as_index(i):
    if isinstance(i, Tensor):
        if i.dtype != "int32":
            raise IndexError(f"Tensor indexing: index Tensor has dtype {i.dtype}; expected int32.")
        return i
    a = np.asarray(i)
    if a.dtype == np.bool_:
        raise IndexError("Tensor indexing: boolean masks are not supported (the result's shape would depend "
                         "on the data); use where(mask, x, 0) or take(x, np.nonzero(mask)[0]).")
    if not np.issubdtype(a.dtype, np.integer):
        raise IndexError(f"Tensor indexing: index array has dtype {a.dtype}; expected integers.")
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


def take(x, idx):
    """Rows of ``x`` at integer positions ``idx`` (any shape): result shape ``idx.shape + x.shape[1:]``."""
    x = as_tensor(x)
    if x.ndim == 0:
        raise IndexError("take: cannot index a 0-d Tensor.")
    idx = _as_index(idx)
    if idx.size:
        a = idx.numpy() if backend.on_host() or idx.size < 65536 else None
        if a is not None and (a.max() >= x.shape[0] or a.min() < -x.shape[0]):
            bad = a[(a >= x.shape[0]) | (a < -x.shape[0])][0]
            raise IndexError(f"take: index {bad} is out of range for axis 0 with size {x.shape[0]}.")
    return _take(x, idx)


def scatter_add(values, idx, rows: int):
    """zeros((rows,) + values.shape[idx.ndim:]) with ``values`` rows added at ``idx`` (duplicates sum)."""
    return _scatter_add(as_tensor(values), _as_index(idx), rows=int(rows))


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


def concat(xs, axis=0):
    """Join Tensors along an existing axis (numpy.concatenate)."""
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ValueError("concat: got an empty list of tensors.")
    nd = xs[0].ndim
    if nd == 0:
        raise ValueError("concat: zero-dimensional tensors cannot be concatenated; use stack.")
    axis = int(axis) % nd
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
    """Join Tensors of one shape along a new axis."""
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ValueError("stack: got an empty list of tensors.")
    for i, x in enumerate(xs):
        if x.shape != xs[0].shape:
            raise ValueError(f"stack: tensor {i} has shape {x.shape}; expected {xs[0].shape} like tensor 0.")
    axis = int(axis) % (xs[0].ndim + 1)
    return concat([unsqueeze(x, axis) for x in xs], axis)


def split(x, indices_or_sections, axis=0):
    """numpy.split: a number of equal sections or a list of split indices."""
    x = as_tensor(x)
    axis = int(axis) % x.ndim
    n = x.shape[axis]
    if isinstance(indices_or_sections, numbers.Integral):
        k = int(indices_or_sections)
        if k <= 0 or n % k:
            raise ValueError(f"split: axis {axis} of size {n} cannot be split into {k} equal sections.")
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        bounds = [0, *map(int, indices_or_sections), n]
    return [getitem(x, (slice(None),) * axis + (slice(a, b),)) for a, b in zip(bounds, bounds[1:])]


def squeeze(x, axis=None):
    x = as_tensor(x)
    if axis is None:
        return reshape(x, tuple(s for s in x.shape if s != 1))
    axes = {int(a) % x.ndim for a in ((axis,) if isinstance(axis, numbers.Integral) else axis)}
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} of shape {x.shape} has size {x.shape[a]}, not 1.")
    return reshape(x, tuple(s for d, s in enumerate(x.shape) if d not in axes))


def unsqueeze(x, axis):
    x = as_tensor(x)
    axis = int(axis) % (x.ndim + 1)
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])
