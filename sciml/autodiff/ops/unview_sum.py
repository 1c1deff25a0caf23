"""``unview_sum(*gs, metas, in_shape)``: the sum of the transposes of disjoint strided views of one input,
written straight into one zeroed buffer (one fill, one scatter per view, no dense adds). What the backward
pass uses for the cotangent of an input read through several disjoint views (``x[a:b]`` slices of a flat
parameter vector: W4b's Hessian assembly), instead of one zero-filled buffer, scatter and add per view."""
from __future__ import annotations

import math

from ... import backend
from ...kernels import index as K
from ...kernels import rows as KR
from ..primitive import Primitive

ON = [True]  # the backward's switch (autodiff/backward.py); False: one unview and one add per view


def _bounds(meta):
    """The lowest and highest address a view meta (offset, ndim, *shape, *strides) reads."""
    off, nd = meta[0], meta[1]
    shape, strides = meta[2:2 + nd], meta[2 + nd:2 + 2 * nd]
    if any(s == 0 for s in shape):
        return None
    lo = off + sum(st * (s - 1) for s, st in zip(shape, strides) if st < 0)
    hi = off + sum(st * (s - 1) for s, st in zip(shape, strides) if st > 0)
    return lo, hi


def disjoint(metas) -> bool:
    """True when the views' address ranges do not overlap (then scatters need no adds)."""
    b = [_bounds(m) for m in metas]
    if any(x is None for x in b):
        return False
    b.sort()
    return all(p[1] < q[0] for p, q in zip(b, b[1:]))


def _forward(*gs, metas, in_shape):
    from .shape import _ROWS_MIN
    n = math.prod(in_shape)
    dtype = gs[0].dtype
    out = backend.zeros(n, dtype)
    for g, meta in zip(gs, metas):
        if g.size and not (g.size >= _ROWS_MIN and backend.on_host() and KR.scatter(g._buf, out, g.size, meta, dtype)):
            K.strided_scatter(g._buf, out, g.size, meta, dtype)
    return out, in_shape, dtype


_usum = Primitive("unview_sum", _forward)
_usum.def_shape(lambda *gs, metas, in_shape: (in_shape, gs[0].dtype))


@_usum.def_vjp
def _vjp(g, *gs, out, metas, in_shape):
    from ..backward import needs
    from .shape import _view
    return tuple(_view(g, meta=m, shape=x.shape) if needs(i) else None for i, (x, m) in enumerate(zip(gs, metas)))


def _present(ts, metas):
    keep = [(t, m) for t, m in zip(ts, metas) if t is not None]
    return [t for t, _ in keep], [m for _, m in keep]


@_usum.def_jvp
def _jvp(ts, *gs, out, metas, in_shape):
    t, m = _present(ts, metas)
    return unview_sum(t, m, in_shape) if t else None


@_usum.def_batched_jvp
def _bjvp(ts, *gs, out, metas, in_shape):
    from .shape import _batch_meta
    t, m = _present(ts, metas)
    if not t:
        return None
    nb, size = t[0].shape[0], math.prod(in_shape)
    return unview_sum(t, [_batch_meta(x, nb, size) for x in m], (nb,) + tuple(in_shape))


def unview_sum(gs, metas, in_shape):
    """zeros(in_shape) with each ``gs[i]`` scattered at the addresses of view ``metas[i]`` (disjoint views)."""
    from .shape import _unview
    if len(gs) == 1:
        return _unview(gs[0], meta=metas[0], in_shape=tuple(in_shape))
    return _usum(*gs, metas=tuple(metas), in_shape=tuple(in_shape))
