"""numpy-style array ops: sorting and arg-reductions, scans, std/prod, and layout ops (pad, flip, roll,
tile, repeat, diag, trace, outer, kron, meshgrid, einsum, cross, any/all).

New primitives (Taichi kernels in ``kernels/sort.py``): cumsum and cumprod (row scans), prod; argsort and
argmax/argmin produce int32 constants. Everything else is composed from existing primitives (views,
gathers, broadcasts, matmul), so it inherits their derivative and batching rules; sort/topk values
are gathers at the argsort indices (derivative: scatter back).
"""
from __future__ import annotations

import math
import numbers
import string

import numpy as np

from ... import backend
from ...kernels import index as K
from ...kernels import sort as KS
from ..primitive import Primitive
from ..tensor import Tensor, as_tensor, tensor, zeros, full
from ._util import check_float, norm_axis
from .elementwise import equal, not_equal, sqrt
from .linalg import matmul
from .reduce import broadcast_to, reshape, sum as _sum, var
from .shape import _take, _view, concat, getitem, moveaxis, stack, take, transpose

__all__ = ["all", "any", "argmax", "argmin", "argsort", "cross", "cumprod", "cumsum", "diag", "diagonal", "einsum",
           "flip", "kron", "meshgrid", "outer", "pad", "prod", "repeat", "roll", "sort", "std", "take_along_last",
           "tile", "topk", "trace"]


def _axis(name, axis, ndim):
    if not isinstance(axis, numbers.Integral) or not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{name}: axis={axis!r} is out of range for a Tensor with {ndim} dimension(s).")
    return int(axis) % max(ndim, 1)


def _rows(x, axis):
    """x with ``axis`` moved last, as contiguous (rows, n), and the moved shape."""
    xm = moveaxis(x, axis, -1) if axis != x.ndim - 1 else x
    return reshape(xm, (-1, x.shape[axis]) if x.shape[axis] else (0, 0)), xm.shape


def _unrows(r, moved_shape, axis, ndim):
    y = reshape(r, moved_shape)
    return moveaxis(y, -1, axis) if axis != ndim - 1 else y


# --- scans ---------------------------------------------------------------------------------------------
def _scan_forward(op):
    def forward(x, reverse):
        rows, n = x.shape
        out = backend.empty(x.size, x.dtype)
        if x.size:
            KS.scan(op, x._buf, out, rows, n, reverse, x.dtype)
        return out, x.shape, x.dtype
    return forward


_cumsum = Primitive("cumsum", _scan_forward("sum"))
_cumsum.def_vjp(lambda g, x, out, reverse: (_cumsum(g, reverse=not reverse),))
_cumsum.def_jvp(lambda ts, x, out, reverse: _cumsum(ts[0], reverse=reverse))
_cumsum.def_batched_jvp(lambda ts, x, out, reverse: reshape(
    _cumsum(reshape(ts[0], (-1, x.shape[1])), reverse=reverse), ts[0].shape))

_cumprod = Primitive("cumprod", _scan_forward("prod"))
# d out_j / d x_i = out_j / x_i for i <= j (x must not contain zeros for these rules)
_cumprod.def_vjp(lambda g, x, out, reverse: (_cumsum(g * out, reverse=not reverse) / x,))
_cumprod.def_jvp(lambda ts, x, out, reverse: _cumsum(ts[0] / x, reverse=reverse) * out)


def _scan(name, prim, x, axis, reverse=False):
    x = as_tensor(x)
    if x.dtype in ("int32", "bool"):
        from ...runtime import default_dtype
        x = x.astype(default_dtype())
    check_float(name, x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = _axis(name, axis, x.ndim)
    if x.ndim == 0:
        return x
    r, moved = _rows(x, axis)
    return _unrows(prim(r, reverse=reverse), moved, axis, x.ndim)


def cumsum(x, axis=None):
    """Cumulative sum along ``axis`` (None: over the flattened x), numpy.cumsum."""
    return _scan("cumsum", _cumsum, x, axis)


def cumprod(x, axis=None):
    """Cumulative product along ``axis`` (None: flattened). Derivatives divide by x: x must have no zeros."""
    return _scan("cumprod", _cumprod, x, axis)


def _exclusive(x, reverse):
    """Products of the entries strictly before (after, if reverse) each one along the last axis."""
    one = full(x.shape[:-1] + (1,), 1.0, x.dtype)
    if reverse:
        shifted = concat([getitem(x, (Ellipsis, slice(1, None))), one], -1)
    else:
        shifted = concat([one, getitem(x, (Ellipsis, slice(0, -1)))], -1)
    return _cumprod(shifted, reverse=reverse)


def _prod_forward(x):
    rows, n = x.shape
    out = backend.empty(rows * n, x.dtype)
    if x.size:
        KS.scan("prod", x._buf, out, rows, n, False, x.dtype)
    res = backend.empty(rows, x.dtype)
    if rows:
        K.strided_gather(out, res, rows, K.view_meta(n - 1, (rows,), (n,)), x.dtype)
    return res, (rows, 1), x.dtype


_prod = Primitive("prod", _prod_forward)
# zero-safe: d prod / d x_i = prod_{j<i} x_j * prod_{j>i} x_j
_prod.def_vjp(lambda g, x, out: (g * (_exclusive(x, False) * _exclusive(x, True)),))


def prod(x, axis=None, keepdims=False):
    """Product over ``axis`` (int, tuple or None). Its gradient is exact with zeros in x."""
    x = as_tensor(x)
    if x.dtype in ("int32", "bool"):
        from ...runtime import default_dtype
        x = x.astype(default_dtype())
    check_float("prod", x)
    axes = norm_axis("prod", axis, x.ndim)
    if x.ndim == 0:
        return x
    keep = [d for d in range(x.ndim) if d not in axes]
    xm = transpose(x, keep + list(axes))
    n = math.prod(x.shape[a] for a in axes)
    if n == 0:
        r = full(tuple(x.shape[d] for d in keep), 1.0, x.dtype)
    else:
        r = reshape(_prod(reshape(xm, (-1, n))), tuple(x.shape[d] for d in keep))
    if keepdims:
        r = reshape(r, tuple(1 if d in axes else s for d, s in enumerate(x.shape)))
    return r


def std(x, axis=None, ddof=0, keepdims=False):
    """Standard deviation over ``axis`` with ``ddof`` (numpy.std)."""
    x = as_tensor(x)
    axes = norm_axis("std", axis, x.ndim)
    n = math.prod(x.shape[a] for a in axes) if x.ndim else 1
    v = var(x, axis, keepdims)
    if ddof:
        v = v * (n / (n - ddof)) if n > ddof else v * float("nan")
    return sqrt(v)


# --- sort / argsort / argmax / topk --------------------------------------------------------------------------
def _argsort_forward(r):
    rows, n = r.shape
    idx = backend.empty(rows * n, "int32")
    if r.size:
        KS.argsort(r._buf, idx, rows, n, r.dtype)
    return idx, r.shape, "int32"


_argsort_p = Primitive("argsort", _argsort_forward, order=0)  # integer result: a constant to every transform


def _argsort_rows(r):
    return _argsort_p(r)


def _argext_forward(r, is_max):
    idx = backend.empty(r.shape[0], "int32")
    if r.shape[0]:
        KS.argext(r._buf, idx, r.shape[0], r.shape[1], is_max, r.dtype)
    return idx, r.shape[:1], "int32"


_argext_p = Primitive("argext", _argext_forward, order=0)


def argsort(x, axis=-1, descending=False, stable=True):
    """Indices that sort ``x`` along ``axis`` (stable; NaN last; int32). ``descending`` keeps ties in order."""
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    if x.ndim == 0:
        return zeros((), "int32")
    axis = _axis("argsort", axis, x.ndim)
    r, moved = _rows(x.detach(), axis)
    if descending:
        r = -r if r.dtype != "bool" else -r.astype("int32")
    return _unrows(_argsort_rows(r), moved, axis, x.ndim)


def take_along_last(x, idx):
    """y[..., j] = x[..., idx[..., j]] for x and idx of equal leading shape (a differentiable gather)."""
    n = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    base = tensor((np.arange(rows, dtype=np.int64) * n).astype(np.int32).reshape(x.shape[:-1] + (1,)), "int32")
    fidx = idx + base
    return reshape(_take(reshape(x, (-1,)), reshape(fidx, (-1,))), idx.shape)  # in range by construction


def sort(x, axis=-1, descending=False):
    """``x`` sorted along ``axis`` (values differentiable: a gather at the argsort indices)."""
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    if x.ndim == 0:
        return x
    axis = _axis("sort", axis, x.ndim)
    r, moved = _rows(x, axis)
    rd = r.detach()
    idx = _argsort_rows(-rd if descending else rd)
    return _unrows(take_along_last(r, idx), moved, axis, x.ndim)


def topk(x, k):
    """The ``k`` largest entries along the last axis, descending, and their int32 indices (jax.lax.top_k)."""
    x = as_tensor(x)
    if x.ndim == 0:
        raise ValueError("topk: x must have at least 1 dimension.")
    n = x.shape[-1]
    if not isinstance(k, numbers.Integral) or not 0 <= k <= n:
        raise ValueError(f"topk: k={k!r}; expected an int in [0, {n}] (the size of the last axis).")
    r = reshape(x, (-1, n))
    idx = getitem(_argsort_rows(-r.detach()), (slice(None), slice(0, int(k))))
    vals = take_along_last(r, idx)
    return reshape(vals, x.shape[:-1] + (k,)), reshape(idx, x.shape[:-1] + (k,))


def _argext(name, x, axis, keepdims, is_max):
    x = as_tensor(x)
    if x.dtype == "bool":
        x = x.astype("int32")
    if x.size == 0:
        raise ValueError(f"{name}: attempt to get {name} of an empty Tensor.")
    if axis is None:
        r = reshape(x.detach(), (1, -1))
        out_shape = (1,) * x.ndim if keepdims else ()
    else:
        axis = _axis(name, axis, x.ndim)
        r, moved = _rows(x.detach(), axis)
        out_shape = tuple(1 if d == axis else s for d, s in enumerate(x.shape)) if keepdims else \
            tuple(s for d, s in enumerate(x.shape) if d != axis)
    if r.dtype == "int32":
        from ...runtime import default_dtype
        r = r.astype("float64" if default_dtype() == "float64" else "float32")
    return reshape(_argext_p(r, is_max=is_max), out_shape)


def argmax(x, axis=None, keepdims=False):
    """Index of the first maximum along ``axis`` (None: of the flattened x); int32."""
    return _argext("argmax", x, axis, keepdims, True)


def argmin(x, axis=None, keepdims=False):
    """Index of the first minimum along ``axis`` (None: of the flattened x); int32."""
    return _argext("argmin", x, axis, keepdims, False)


# --- any / all -------------------------------------------------------------------------------------------
def any(x, axis=None, keepdims=False):
    """True where some entry along ``axis`` is non-zero (bool)."""
    x = as_tensor(x)
    nz = not_equal(x, 0) if x.dtype != "bool" else x
    return not_equal(_sum(nz.astype("int32"), axis, keepdims), 0)


def all(x, axis=None, keepdims=False):
    """True where every entry along ``axis`` is non-zero (bool)."""
    x = as_tensor(x)
    z = equal(x, 0) if x.dtype != "bool" else equal(x.astype("int32"), 0)
    return equal(_sum(z.astype("int32"), axis, keepdims), 0)


# --- layout ops ---------------------------------------------------------------------------------------------
def flip(x, axis=None):
    """Reverse the order of entries along ``axis`` (int, tuple or None for all)."""
    x = as_tensor(x)
    axes = norm_axis("flip", axis, x.ndim)
    idx = tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(x.ndim))
    return getitem(x, idx) if x.ndim else x


def roll(x, shift, axis=None):
    """Shift entries cyclically along ``axis`` (numpy.roll; None: over the flattened x)."""
    x = as_tensor(x)
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, 0), x.shape)
    shifts = (shift,) if isinstance(shift, numbers.Integral) else tuple(shift)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    if len(shifts) != len(axes):
        if len(shifts) == 1:
            shifts = shifts * len(axes)
        else:
            raise ValueError(f"roll: shift {shift!r} and axis {axis!r} have different lengths.")
    for s, a in zip(shifts, axes):
        a = _axis("roll", a, x.ndim)
        n = x.shape[a]
        if n == 0:
            continue
        s = int(s) % n
        if s:
            pre = (slice(None),) * a
            x = concat([getitem(x, pre + (slice(n - s, None),)), getitem(x, pre + (slice(0, n - s),))], a)
    return x


def tile(x, reps):
    """Repeat the whole of ``x`` ``reps`` times along each axis (numpy.tile)."""
    x = as_tensor(x)
    reps = (int(reps),) if isinstance(reps, numbers.Integral) else tuple(int(r) for r in reps)
    nd = max(x.ndim, len(reps))
    shape = (1,) * (nd - x.ndim) + x.shape
    reps = (1,) * (nd - len(reps)) + reps
    inter = []
    for r, s in zip(reps, shape):
        inter += [1, s]
    y = reshape(x, tuple(inter))
    big = []
    for r, s in zip(reps, shape):
        big += [r, s]
    y = broadcast_to(y, tuple(big))
    return reshape(y, tuple(r * s for r, s in zip(reps, shape)))


def repeat(x, repeats, axis=None):
    """Repeat each entry ``repeats`` times along ``axis`` (numpy.repeat; repeats an int or per-entry ints)."""
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = _axis("repeat", axis, x.ndim)
    n = x.shape[axis]
    if isinstance(repeats, numbers.Integral):
        r = int(repeats)
        if r < 0:
            raise ValueError(f"repeat: repeats={r}; expected >= 0.")
        y = reshape(x, x.shape[:axis + 1] + (1,) + x.shape[axis + 1:])
        y = broadcast_to(y, x.shape[:axis + 1] + (r,) + x.shape[axis + 1:])
        return reshape(y, x.shape[:axis] + (n * r,) + x.shape[axis + 1:])
    reps = np.asarray(repeats.numpy() if isinstance(repeats, Tensor) else repeats)
    if reps.shape != (n,) or (reps < 0).any():
        raise ValueError(f"repeat: repeats has shape {reps.shape}; expected ({n},) non-negative ints for axis "
                         f"{axis} of size {n}.")
    idx = np.repeat(np.arange(n), reps).astype(np.int32)
    return moveaxis(take(moveaxis(x, axis, 0), idx), 0, axis)


def diagonal(x, offset=0, axis1=0, axis2=1):
    """The diagonal of the (axis1, axis2) planes as the last axis (numpy.diagonal; a strided view)."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise ValueError(f"diagonal: x has shape {x.shape}; expected at least 2 dimensions.")
    a1, a2 = _axis("diagonal", axis1, x.ndim), _axis("diagonal", axis2, x.ndim)
    if a1 == a2:
        raise ValueError(f"diagonal: axis1 and axis2 are both {a1}.")
    st = K.contiguous_strides(x.shape)
    n1, n2 = x.shape[a1], x.shape[a2]
    k = int(offset)
    length = max(0, min(n1, n2 - k) if k >= 0 else min(n1 + k, n2))
    off = (k * st[a2] if k >= 0 else -k * st[a1]) if length else 0
    rest = [d for d in range(x.ndim) if d not in (a1, a2)]
    shape = tuple(x.shape[d] for d in rest) + (length,)
    strides = [st[d] for d in rest] + [st[a1] + st[a2]]
    if math.prod(shape) == 0:
        return zeros(shape, x.dtype)
    return _view(x, meta=K.view_meta(off, shape, strides), shape=shape)


def diag(v, k=0):
    """numpy.diag: a 1-D v gives the 2-D matrix with v on diagonal k; a 2-D v gives its k-th diagonal."""
    v = as_tensor(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError(f"diag: v has shape {v.shape}; expected 1-D or 2-D.")
    n = v.shape[0]
    m = n + (k if k >= 0 else -k)
    mat = reshape(v, (n, 1)) * tensor(np.eye(n), v.dtype)
    if k == 0:
        return mat
    return pad(mat, ((0, k), (k, 0)) if k > 0 else ((-k, 0), (0, -k))) if m else mat


def trace(x, offset=0, axis1=0, axis2=1):
    """Sum of the diagonal (numpy.trace)."""
    return _sum(diagonal(x, offset, axis1, axis2), -1)


def outer(a, b):
    """Outer product of the flattened a and b: shape (a.size, b.size)."""
    a, b = as_tensor(a), as_tensor(b)
    return reshape(a, (-1, 1)) * reshape(b, (1, -1))


def kron(a, b):
    """Kronecker product (numpy.kron)."""
    a, b = as_tensor(a), as_tensor(b)
    nd = max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + a.shape
    sb = (1,) * (nd - b.ndim) + b.shape
    ia, ib = [], []
    for x, y in zip(sa, sb):
        ia += [x, 1]
        ib += [1, y]
    r = reshape(a, tuple(ia)) * reshape(b, tuple(ib))
    return reshape(r, tuple(x * y for x, y in zip(sa, sb)))


def meshgrid(*xs, indexing="xy"):
    """Coordinate grids from 1-D tensors (numpy.meshgrid; ``indexing`` 'xy' or 'ij')."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing={indexing!r}; expected 'xy' or 'ij'.")
    xs = [reshape(as_tensor(x), (-1,)) for x in xs]
    shape = [x.shape[0] for x in xs]
    if indexing == "xy" and len(xs) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xs):
        pos = i
        if indexing == "xy" and len(xs) >= 2 and i < 2:
            pos = 1 - i
        s = [1] * len(xs)
        s[pos] = x.shape[0]
        out.append(broadcast_to(reshape(x, tuple(s)), tuple(shape)))
    return out


def cross(a, b, axis=-1):
    """Cross product of 3-vectors along ``axis`` (numpy.cross for 3-component vectors)."""
    a, b = as_tensor(a), as_tensor(b)
    aa, ab = _axis("cross", axis, a.ndim), _axis("cross", axis, b.ndim)
    if a.shape[aa] != 3 or b.shape[ab] != 3:
        raise ValueError(f"cross: a has shape {a.shape} and b has shape {b.shape}; expected size 3 along axis {axis}.")
    a, b = moveaxis(a, aa, -1), moveaxis(b, ab, -1)
    c = [getitem(a, (Ellipsis, i)) for i in range(3)]
    d = [getitem(b, (Ellipsis, i)) for i in range(3)]
    r = stack([c[1] * d[2] - c[2] * d[1], c[2] * d[0] - c[0] * d[2], c[0] * d[1] - c[1] * d[0]], -1)
    return moveaxis(r, -1, aa) if r.ndim > 1 else r


def pad(x, pad_width, mode="constant", constant_values=0):
    """numpy.pad for modes 'constant', 'edge', 'wrap' and 'reflect'."""
    x = as_tensor(x)
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2)) if x.ndim else np.zeros((0, 2), int)
    if (pw < 0).any():
        raise ValueError(f"pad: pad_width={pad_width!r} has negative entries.")
    if mode not in ("constant", "edge", "wrap", "reflect"):
        raise ValueError(f"pad: mode={mode!r}; expected 'constant', 'edge', 'wrap' or 'reflect'.")
    for d in range(x.ndim):
        lo, hi = int(pw[d, 0]), int(pw[d, 1])
        if not lo and not hi:
            continue
        n = x.shape[d]
        pre = (slice(None),) * d
        if mode != "constant" and n == 0:
            raise ValueError(f"pad: cannot pad axis {d} of size 0 with mode {mode!r}.")
        if mode == "reflect" and (lo >= n or hi >= n):
            raise ValueError(f"pad: mode 'reflect' needs pad widths < {n} on axis {d}, got ({lo}, {hi}).")
        if mode == "wrap" and (lo > n or hi > n):
            raise ValueError(f"pad: mode 'wrap' needs pad widths <= {n} on axis {d}, got ({lo}, {hi}).")
        parts = []
        if lo:
            parts.append(_pad_piece(x, d, lo, True, mode, constant_values, pre))
        parts.append(x)
        if hi:
            parts.append(_pad_piece(x, d, hi, False, mode, constant_values, pre))
        x = concat(parts, d)
    return x


def _pad_piece(x, d, w, before, mode, value, pre):
    n = x.shape[d]
    shape = x.shape[:d] + (w,) + x.shape[d + 1:]
    if mode == "constant":
        return full(shape, float(value), x.dtype)
    if mode == "edge":
        e = getitem(x, pre + (slice(0, 1) if before else slice(n - 1, n),))
        return broadcast_to(e, shape)
    if mode == "wrap":
        return getitem(x, pre + (slice(n - w, n) if before else slice(0, w),))
    # reflect (edge not repeated)
    stop = n - 2 - w if n - 2 - w >= 0 else None
    return getitem(x, pre + (slice(w, 0, -1) if before else slice(n - 2, stop, -1),))


# --- einsum --------------------------------------------------------------------------------------------------
def einsum(subscripts, *operands):
    """Einstein summation (numpy.einsum, explicit or implicit output, '...' allowed), composed from
    diagonals, sums, transposes, reshapes and batched matmuls (contracted pairwise, left to right)."""
    if not isinstance(subscripts, str):
        raise TypeError("einsum: subscripts must be a string such as 'ij,jk->ik'.")
    ops = [as_tensor(o) for o in operands]
    s = subscripts.replace(" ", "")
    lhs, arrow, rhs = s.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(ops):
        raise ValueError(f"einsum: {len(ins)} operand subscripts in {subscripts!r} but {len(ops)} operands.")
    used = set(c for c in s if c.isalpha())
    free = iter(c for c in string.ascii_letters if c not in used)
    ell = None
    for i, (sub, o) in enumerate(zip(ins, ops)):
        if "..." in sub:
            k = o.ndim - (len(sub) - 3)
            if ell is None or k > len(ell):
                ell = (ell or "") + "".join(next(free) for _ in range(k - len(ell or "")))
    new_ins = []
    for sub, o in zip(ins, ops):
        if "..." in sub:
            k = o.ndim - (len(sub) - 3)
            sub = sub.replace("...", ell[len(ell) - k:] if k else "")
        if len(sub) != o.ndim or not sub.isalpha() and sub:
            raise ValueError(f"einsum: subscripts {sub!r} do not match an operand of shape {o.shape}.")
        new_ins.append(sub)
    if arrow:
        out = rhs.replace("...", ell or "")
    else:
        counts = {}
        for sub in new_ins:
            for c in sub:
                counts[c] = counts.get(c, 0) + 1
        out = (ell or "") + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in (ell or "")))
    sizes = {}
    for sub, o in zip(new_ins, ops):
        for c, n in zip(sub, o.shape):
            if c in sizes and n != sizes[c] and 1 not in (n, sizes[c]):
                raise ValueError(f"einsum: index {c!r} has sizes {sizes[c]} and {n}.")
            sizes[c] = builtins_max(sizes.get(c, 1), n)
    for c in out:
        if c not in sizes:
            raise ValueError(f"einsum: output index {c!r} does not appear in the inputs.")
    terms = [_einsum_prepare(o, sub, out, new_ins, i) for i, (o, sub) in enumerate(zip(ops, new_ins))]
    x, xs = terms[0]
    for i in range(1, len(terms)):
        y, ys = terms[i]
        rest = set(out)
        for j in range(i + 1, len(terms)):
            rest |= set(terms[j][1])
        x, xs = _contract(x, xs, y, ys, rest, sizes)
    # sum indices no longer needed, then order as out
    drop = [k for k, c in enumerate(xs) if c not in out]
    if drop:
        x = _sum(x, tuple(drop))
        xs = "".join(c for c in xs if c in out)
    if xs != out:
        x = transpose(x, [xs.index(c) for c in out])
    target = tuple(sizes[c] for c in out)
    return broadcast_to(x, target) if x.shape != target else x


import builtins as _b  # noqa: E402

builtins_max = _b.max


def _einsum_prepare(o, sub, out, all_ins, i):
    """Take repeated-index diagonals and sum indices that appear only here and not in the output."""
    while len(set(sub)) != len(sub):
        for c in sub:
            if sub.count(c) > 1:
                p = sub.index(c)
                q = sub.index(c, p + 1)
                o = diagonal(o, 0, p, q)
                sub = "".join(ch for k, ch in enumerate(sub) if k not in (p, q)) + c
                break
    others = set("".join(s for j, s in enumerate(all_ins) if j != i)) | set(out)
    drop = [k for k, c in enumerate(sub) if c not in others]
    if drop:
        o = _sum(o, tuple(drop))
        sub = "".join(c for k, c in enumerate(sub) if k not in drop)
    return o, sub


def _contract(x, xs, y, ys, keep, sizes):
    """Contract x (subscripts xs) with y (ys): indices in both and in ``keep`` are batch axes, in both
    and not kept are summed (a matmul), in one only are kept."""
    batch = [c for c in xs if c in ys and c in keep]
    summed = [c for c in xs if c in ys and c not in keep]
    xo = [c for c in xs if c not in ys]
    yo = [c for c in ys if c not in xs]
    nb = tuple(builtins_max(x.shape[xs.index(c)], y.shape[ys.index(c)]) for c in batch)
    xt = transpose(x, [xs.index(c) for c in batch + xo + summed])
    yt = transpose(y, [ys.index(c) for c in batch + summed + yo])
    xb = broadcast_to(xt, nb + xt.shape[len(batch):]) if tuple(xt.shape[:len(batch)]) != nb else xt
    yb = broadcast_to(yt, nb + yt.shape[len(batch):]) if tuple(yt.shape[:len(batch)]) != nb else yt
    m = math.prod(xb.shape[len(batch):len(batch) + len(xo)])
    k = math.prod(xb.shape[len(batch) + len(xo):])
    n = math.prod(yb.shape[len(batch) + len(summed):])
    r = matmul(reshape(xb, nb + (m, k)), reshape(yb, nb + (k, n)))
    shape = nb + tuple(xb.shape[len(batch):len(batch) + len(xo)]) + tuple(yb.shape[len(batch) + len(summed):])
    return reshape(r, shape), "".join(batch + xo + yo)
