"""numpy's advanced indexing, ``take_along_axis`` and JAX's functional updates ``x.at[idx].set(v)``.

Every advanced index is turned into flat addresses into ``x`` (a numpy computation on the host when the
indices can be read there, sciml integer ops when they are values traced by ``sciml.jit``), and the
values are gathered with the ``take`` primitive (whose VJP is ``scatter_add`` and back), so derivatives
of any order come from those two rules. Trailing axes indexed by full slices stay whole rows, so
``x[idx, :]`` and ``x[:, idx]`` of a wide ``x`` move rows, not single elements.

Rules (numpy's): integer arrays on any axis broadcast together to a shape B; integer scalars next to
them count as 0-d arrays; if the array indices are adjacent B replaces them in place, else B comes
first; a boolean array of k dimensions stands for the k integer arrays of its ``nonzero()`` (eager
only: the result's shape depends on the mask's values, so ``sciml.jit`` refuses a traced mask).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ... import backend
from ..tensor import Tensor, as_tensor, tensor, zeros
from ._util import host_values, one_axis

NAME = "Tensor indexing"


def _is_int(i):
    return isinstance(i, (numbers.Integral, np.integer)) and not isinstance(i, (bool, np.bool_))


def _array_entry(i, name):
    """('mask', bool values) | ('arr', int values or an int32 Tensor) for an array-like index."""
    if isinstance(i, Tensor):
        if i.dtype == "bool":
            return "mask", i
        if i.dtype != "int32":
            raise IndexError(f"{name}: index Tensor has dtype {i.dtype}; expected int32 (or bool for a mask).")
        return "arr", i
    try:
        a = np.asarray(i)
    except ValueError:
        raise IndexError(f"{name}: index {i!r} is not a rectangular array of integers or booleans.") from None
    if a.dtype == np.bool_:
        return "mask", a
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)  # [] is an empty integer index, as in numpy
    if not np.issubdtype(a.dtype, np.integer):
        raise IndexError(f"{name}: index array has dtype {a.dtype}; expected integers or booleans.")
    return "arr", a


def _mask_values(m, name):
    if isinstance(m, np.ndarray):
        return m
    v = host_values(m)
    if v is None and backend.TRACE[0] is None:  # a mask batched by sm.vmap: a different shape per example
        raise IndexError(f"{name} with a boolean mask batched by sm.vmap: the result's shape would differ from "
                         "example to example. Use sm.where(mask, x, 0) inside the vmapped function.")
    if v is None:
        rec = backend.TRACE[0]
        rec.fail(f"{name} with a boolean mask computed from the inputs: the result's shape depends on the mask's "
                 "values, which a trace cannot know. Use sm.where(mask, x, 0) inside the jitted function, or "
                 "index outside it.")
    return v


def _parse(shape, idx, name):
    """Expand ``idx`` against ``shape`` into entries ``(kind, value, axis)``:
    ('new', None, None) | ('slice', (start, step, length), d) | ('adv', values, d or None)."""
    nd = len(shape)
    items = []
    for i in idx:
        if i is None or i is Ellipsis or isinstance(i, slice) or _is_int(i):
            items.append(i)
        elif isinstance(i, (bool, np.bool_)):
            items.append(("bool0", bool(i)))
        elif isinstance(i, (Tensor, list, tuple, np.ndarray)):
            kind, v = _array_entry(i, name)
            if kind == "arr" and getattr(v, "ndim", 1) == 0 and isinstance(v, np.ndarray):
                items.append(int(v))  # a 0-d integer array is an integer
            else:
                items.append((kind, v))
        else:
            raise IndexError(f"{name}: unsupported index {i!r} of type {type(i).__name__}; expected ints, slices, "
                             "None, Ellipsis, integer arrays or boolean masks.")
    n_ell = sum(i is Ellipsis for i in items)
    if n_ell > 1:
        raise IndexError(f"{name}: at most one Ellipsis.")

    def consumed(i):
        if i is None or i is Ellipsis:
            return 0
        if isinstance(i, tuple):
            return 0 if i[0] == "bool0" else (i[1].ndim if i[0] == "mask" else 1)
        return 1
    used = sum(consumed(i) for i in items)
    if used > nd:
        raise IndexError(f"{name}: too many indices ({used}) for a Tensor of shape {tuple(shape)}.")
    if n_ell:
        k = items.index(Ellipsis)
        items = items[:k] + [slice(None)] * (nd - used) + items[k + 1:]
    else:
        items = items + [slice(None)] * (nd - used)
    entries, d = [], 0
    for i in items:
        if i is None:
            entries.append(("new", None, None))
        elif isinstance(i, slice):
            start, stop, step = i.indices(shape[d])
            entries.append(("slice", (start, step, len(range(start, stop, step))), d))
            d += 1
        elif _is_int(i):
            j = int(i)
            if not -shape[d] <= j < shape[d]:
                raise IndexError(f"{name}: index {j} is out of range for axis {d} with size {shape[d]}.")
            entries.append(("adv", np.asarray(j % shape[d]), d))
            d += 1
        elif i[0] == "bool0":
            entries.append(("adv", np.zeros(1 if i[1] else 0, np.int64), None))
        elif i[0] == "mask":
            m = _mask_values(i[1], name)
            if m.shape != tuple(shape[d:d + m.ndim]):
                raise IndexError(f"{name}: boolean mask of shape {m.shape} does not match the indexed axes "
                                 f"{tuple(shape[d:d + m.ndim])} of shape {tuple(shape)} (from axis {d}).")
            for k, nz in enumerate(np.nonzero(m)):
                entries.append(("adv", nz, d + k))
            d += m.ndim
        else:
            v = i[1]
            if isinstance(v, Tensor):
                hv = host_values(v) if backend.on_host() or v.size < 65536 else None
                if hv is None:  # traced by sciml.jit (or large on a device): wrap negatives with sciml ops
                    from .elementwise import where
                    v = where(v < 0, v + shape[d], v)
                else:
                    v = hv
            if isinstance(v, np.ndarray) and v.size:
                lo, hi = int(v.min()), int(v.max())
                if lo < -shape[d] or hi >= shape[d]:
                    raise IndexError(f"{name}: index {hi if hi >= shape[d] else lo} is out of range for axis {d} "
                                     f"with size {shape[d]} (expected {-shape[d]} <= index < {shape[d]}).")
                v = np.where(v < 0, v + shape[d], v)
            entries.append(("adv", v, d))
            d += 1
    return entries


def _placement(entries):
    """(B, where B goes among the result axes: the index of the first advanced entry if they are
    adjacent in the index, else 0)."""
    pos = [k for k, e in enumerate(entries) if e[0] == "adv"]
    try:
        bshape = np.broadcast_shapes(*[tuple(e[1].shape) for e in entries if e[0] == "adv"])
    except ValueError:
        shapes = " ".join(str(tuple(e[1].shape)) for e in entries if e[0] == "adv")
        raise IndexError(f"{NAME}: shape mismatch: the index arrays cannot be broadcast together "
                         f"(shapes {shapes}).") from None
    adjacent = pos == list(range(pos[0], pos[0] + len(pos)))
    return tuple(bshape), adjacent


def advanced(x, idx, name=NAME):
    """``x[idx]`` for an index with arrays or masks in it (numpy semantics)."""
    from .reduce import reshape
    from .shape import _take
    entries = _parse(x.shape, idx, name)
    bshape, adjacent = _placement(entries)
    # trailing full slices stay whole rows
    k = len(entries)
    while k > 0 and entries[k - 1][0] == "slice" and entries[k - 1][1] == (0, 1, x.shape[entries[k - 1][2]]):
        k -= 1
    tail = tuple(x.shape[entries[j][2]] for j in range(k, len(entries)))
    lead_entries = entries[:k]
    lead_axes = len(x.shape) - len(tail)
    row = math.prod(tail)
    lead_st = _strides(x.shape[:lead_axes])
    # the lead part of the result: entries in order, B in its place
    res, parts, bpos = [], [], None  # parts: (kind, value, stride, result axis)
    for kind, v, d in lead_entries:
        if kind == "adv":
            if bpos is None:
                bpos = len(res) if adjacent else 0
                if adjacent:
                    res.extend(bshape)
            parts.append(("adv", v, 0 if d is None else lead_st[d], None))
        elif kind == "slice":
            res.append(v[2])
            parts.append(("slice", v, lead_st[d], len(res) - 1))
        else:
            res.append(1)
    if not adjacent:
        res = list(bshape) + res
        parts = [(kd, v, st, r + len(bshape) if r is not None else None) for kd, v, st, r in parts]
        bpos = 0
    res = tuple(res)
    shape = res + tail
    if not math.prod(shape):
        return zeros(shape, x.dtype)
    addr = _addresses(res, parts, bpos, len(bshape))
    x2 = reshape(x, (x.size // row, row))
    return reshape(_take(x2, addr), shape)


def _strides(shape):
    st, acc = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        st[d] = acc
        acc *= shape[d]
    return st


def _addresses(res, parts, bpos, nb):
    """Row addresses of shape ``res``: the sum of each entry's contribution on its result axes."""
    host = np.zeros((1,) * len(res), np.int64)
    dyn = None
    for kind, v, st, r in parts:
        if kind == "slice":
            start, step, n = v
            c = (start + step * np.arange(n, dtype=np.int64)) * st
            host = host + c.reshape((1,) * r + (n,) + (1,) * (len(res) - r - 1))
            continue
        lead = (1,) * bpos
        trail = (1,) * (len(res) - bpos - nb)
        if isinstance(v, np.ndarray):
            c = v.astype(np.int64) * st
            c = c.reshape((1,) * (nb - c.ndim) + c.shape)
            host = host + c.reshape(lead + c.shape + trail)
        else:  # an index Tensor traced by sciml.jit: sciml int32 ops (out-of-range ones are clamped by the kernel)
            from .reduce import reshape
            w = reshape(v * st, lead + (1,) * (nb - v.ndim) + v.shape + trail)
            dyn = w if dyn is None else dyn + w
    host = np.broadcast_to(host, res)
    if host.size and int(host.max()) >= 2**31:
        raise IndexError(f"{NAME}: addresses do not fit in int32 (a Tensor this large cannot be indexed).")
    base = tensor(np.ascontiguousarray(host, np.int32), "int32")
    if dyn is None:
        return base
    return dyn + base  # base has the full shape res


# --- take_along_axis ------------------------------------------------------------------------
def take_along_axis(x, indices, axis):
    """Values of ``x`` at ``indices`` along ``axis`` (numpy.take_along_axis): ``indices`` has x's number
    of dimensions and broadcasts against x on the other axes; ``axis=None`` works on the flattened x."""
    from .reduce import reshape
    x = as_tensor(x)
    kind, v = _array_entry(indices, "take_along_axis") if not isinstance(indices, (int, float)) else (None, None)
    if kind != "arr":
        raise IndexError(f"take_along_axis: indices {indices!r}; expected an integer array (int32 Tensor, list or "
                         "numpy array).")
    if axis is None:
        if v.ndim != 1:
            raise ValueError(f"take_along_axis: with axis=None the indices must be 1-D, got shape {tuple(v.shape)}.")
        x = reshape(x, (x.size,))
        axis = 0
    if v.ndim != x.ndim:
        raise ValueError(f"take_along_axis: indices of shape {tuple(v.shape)} ({v.ndim}-d) for x of shape {x.shape} "
                         f"({x.ndim}-d); expected the same number of dimensions.")
    axis = one_axis("take_along_axis", axis, x.ndim)
    for d in range(x.ndim):
        if d != axis and v.shape[d] not in (1, x.shape[d]) and x.shape[d] != 1:
            raise ValueError(f"take_along_axis: indices of shape {tuple(v.shape)} do not broadcast against x of "
                             f"shape {x.shape} on axis {d}.")
    fancy = []
    for d in range(x.ndim):
        if d == axis:
            fancy.append(indices)
        else:
            fancy.append(np.arange(x.shape[d]).reshape((1,) * d + (x.shape[d],) + (1,) * (x.ndim - d - 1)))
    return advanced(x, tuple(fancy), "take_along_axis")


# --- x.at[idx].set / add / multiply / min / max -----------------------------------------------
class _At:
    """``x.at[idx]``: functional updates (JAX semantics): a new Tensor, ``x`` is unchanged."""
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x

    def __getitem__(self, idx):
        return _AtRef(self.x, idx)


class _AtRef:
    __slots__ = ("x", "idx")

    def __init__(self, x, idx):
        self.x, self.idx = x, idx

    def get(self):
        """``x[idx]``."""
        return self.x[self.idx]

    def set(self, v):
        """``x`` with ``x[idx] = v`` (``v`` broadcast to ``x[idx].shape``; for repeated indices the last wins)."""
        return update(self.x, self.idx, v, "set")

    def add(self, v):
        """``x`` with ``v`` added at ``idx`` (repeated indices add up, as ``np.add.at``)."""
        return update(self.x, self.idx, v, "add")

    def multiply(self, v):
        """``x`` with ``x[idx]`` multiplied by ``v`` (repeated indices multiply up)."""
        return update(self.x, self.idx, v, "multiply")

    mul = multiply

    def min(self, v):
        """``x`` with ``x[idx] = minimum(x[idx], v)`` (repeated indices: the minimum of all)."""
        return update(self.x, self.idx, v, "min")

    def max(self, v):
        """``x`` with ``x[idx] = maximum(x[idx], v)`` (repeated indices: the maximum of all)."""
        return update(self.x, self.idx, v, "max")


_MODES = ("set", "add", "multiply", "min", "max")


def update(x, idx, v, mode):
    """The functional update ``x.at[idx].<mode>(v)``: differentiable in ``x`` and ``v``.

    Repeated indices: ``add`` sums, ``multiply`` multiplies, ``min`` / ``max`` reduce, ``set`` keeps the
    last (numpy's order). Under ``sciml.jit`` with indices computed from the traced inputs, repeated
    indices in ``set`` average and in ``multiply`` / ``min`` / ``max`` are unspecified (as JAX says).
    """
    from .elementwise import maximum, minimum, where
    from .reduce import broadcast_to, reshape
    from .shape import _scatter_add, _take
    x = as_tensor(x)
    if mode not in _MODES:
        raise ValueError(f"at[...]: mode {mode!r}; expected one of {', '.join(_MODES)}.")
    if not isinstance(v, Tensor):
        v = as_tensor(v, x.dtype if x.dtype in ("float32", "float64") else None)
    if v.dtype != x.dtype:
        if x.dtype in ("float32", "float64") and v.dtype in ("int32", "bool"):
            v = v.astype(x.dtype)
        else:
            raise TypeError(f"at[...].{mode}: values of dtype {v.dtype} for a Tensor of dtype {x.dtype}; cast them "
                            f"with .astype('{x.dtype}').")
    if not isinstance(idx, tuple):
        idx = (idx,)
    addr = _host_addresses(x.shape, idx)
    if addr is None:  # indices traced by sciml.jit: addresses computed by kernels
        addr = reshape(_iota(x.size), x.shape)[idx]
    try:
        vb = broadcast_to(v, addr.shape)
    except ValueError:
        raise ValueError(f"at[...].{mode}: values of shape {v.shape} cannot be broadcast to the indexed shape "
                         f"{addr.shape}.") from None
    n = x.size
    flat_x = reshape(x, (n,))
    flat_v = reshape(vb, (vb.size,))
    flat_a = reshape(addr, (addr.size,))
    if not flat_a.size:
        return x
    if mode == "add":
        return reshape(flat_x + _scatter_add(flat_v, flat_a, rows=n), x.shape)
    a = host_values(flat_a)
    layers = _layers(a) if a is not None else None
    out = flat_x
    if layers is None:  # traced addresses: one layer (repeats unspecified; set averages)
        hits = _scatter_add(zeros((flat_a.size,), x.dtype) + 1, flat_a, rows=n)
        s = _scatter_add(flat_v, flat_a, rows=n)
        mask = hits > 0
        if mode == "set":
            out = where(mask, s / where(mask, hits, 1), out)
        else:
            out = _combine(mode, out, s, mask, maximum, minimum, where)
        return reshape(out, x.shape)
    for pos, addrs in layers:
        pos_t = tensor(pos.astype(np.int32), "int32")
        a_t = tensor(addrs.astype(np.int32), "int32")
        s = _scatter_add(_take(flat_v, pos_t), a_t, rows=n)
        m = np.zeros(n, np.bool_)
        m[addrs] = True
        mask = tensor(m, "bool")
        out = where(mask, s, out) if mode == "set" else _combine(mode, out, s, mask, maximum, minimum, where)
    return reshape(out, x.shape)


def _combine(mode, out, s, mask, maximum, minimum, where):
    if mode == "multiply":
        return where(mask, out * s, out)
    return where(mask, (maximum if mode == "max" else minimum)(out, s), out)


def _layers(a):
    """Positions and addresses split into layers without repeated addresses: layer j holds each
    address's j-th occurrence (in order), so applying the layers in turn follows numpy's order."""
    a = np.asarray(a, np.int64)
    order = np.argsort(a, kind="stable")
    sa = a[order]
    starts = np.r_[0, np.nonzero(np.diff(sa))[0] + 1] if sa.size else np.zeros(0, np.int64)
    occ_sorted = np.arange(sa.size) - np.repeat(starts, np.diff(np.r_[starts, sa.size]))
    occ = np.empty_like(occ_sorted)
    occ[order] = occ_sorted
    out = []
    for j in range(int(occ.max()) + 1 if occ.size else 0):
        pos = np.nonzero(occ == j)[0]
        out.append((pos, a[pos]))
    return out


def _host_addresses(shape, idx):
    """Flat addresses of ``x[idx]`` computed on the host as an int32 Tensor (numpy's own indexing of an
    arange), or None when an index Tensor holds values traced by ``sciml.jit``."""
    np_idx = []
    for i in idx:
        if isinstance(i, Tensor):
            v = host_values(i)
            if v is None:
                return None
            i = v
        np_idx.append(i)
    n = math.prod(shape)
    if n >= 2**31:
        return None
    iota = np.arange(n, dtype=np.int32).reshape(shape)
    try:
        a = iota[tuple(np_idx)]
    except (IndexError, TypeError, ValueError):
        return None  # the kernel path raises sciml's own error for it
    return tensor(np.ascontiguousarray(a), "int32")


_iotas: dict = {}


def _iota(n):
    t = _iotas.get(n)
    if t is None:
        if len(_iotas) > 64:
            _iotas.clear()
        t = _iotas[n] = tensor(np.arange(n, dtype=np.int32), "int32")
    return t

