"""matmul: one primitive C = op(A) @ op(B) over equal batch dims, with transposes as flags so
that its VJP rules need no transpose copies."""
from __future__ import annotations

import math

import numpy as np

from ... import backend
from ...kernels import index as K
from ...kernels import linalg as L
from ..backward import needs
from ..primitive import Primitive
from ..tensor import MAX_ELEMENTS as _MAX_ELEMENTS
from ..tensor import Tensor as _Tensor
from ..tensor import as_tensor, check_size
from ._util import FLOATS as _FLOATS
from ._util import check_float, operands
from .reduce import broadcast_to, reshape

_blas = {"enabled": None}


def use_blas(flag=None):
    """Route CPU GEMMs to numpy's BLAS (default on CPU) or to sciml's Taichi GEMM kernel.
    Returns the previous setting."""
    prev = _blas["enabled"]
    _blas["enabled"] = flag
    return prev


def _dims(a, b, ta, tb):
    m, k = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
    k2, n = (b.shape[-1], b.shape[-2]) if tb else (b.shape[-2], b.shape[-1])
    return m, k, k2, n


def _mm_forward(a, b, ta, tb):
    sa, sb = a.shape, b.shape  # (_dims inline: every Python step counts after a cache-evicting GEMM)
    m, k = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
    n = sb[-2] if tb else sb[-1]
    batch = a.shape[:-2]
    nb = math.prod(batch)
    out = backend.empty(nb * m * n, a.dtype)
    if nb * m * n:
        if k == 0:
            from ...kernels.elementwise import fill
            fill(out, 0.0, nb * m * n, a.dtype)
        else:
            L.matmul(a._buf, b._buf, out, nb, m, n, k, ta, tb, a.dtype, _blas["enabled"])
    return out, batch + (m, n), a.dtype


_mm = Primitive("matmul", _mm_forward)


@_mm.def_shape
def _mm_shape(a, b, ta, tb):
    m, _, _, n = _dims(a, b, ta, tb)
    return a.shape[:-2] + (m, n), a.dtype


@_mm.def_vjp
def _mm_vjp(g, a, b, out, ta, tb):
    ga = gb = None
    if needs(0):
        ga = _mm(b, g, ta=tb, tb=True) if ta else _mm(g, b, ta=False, tb=not tb)
    if needs(1):
        gb = _mm(g, a, ta=True, tb=ta) if tb else _mm(a, g, ta=not ta, tb=False)
    return ga, gb


@_mm.def_jvp
def _mm_jvp(ts, a, b, out, ta, tb):
    if ts[0] is not None and ts[1] is not None:  # T_a B + A T_b: one primitive, the second GEMM accumulates
        return _mm2(ts[0], b, a, ts[1], ta=ta, tb=tb, tc=ta, td=tb)
    if ts[0] is not None:
        return _mm(ts[0], b, ta=ta, tb=tb)
    if ts[1] is not None:
        return _mm(a, ts[1], ta=ta, tb=tb)
    return None


# --- matmul2: op(a) @ op(b) + op(c) @ op(d) --------------------------------------------------------
def _mm2_forward(a, b, c, d, ta, tb, tc, td):
    """Both products have the same output shape; the second GEMM accumulates into the first's output
    (BLAS beta = 1), so the sum costs no elementwise pass."""
    out, shape, dtype = _mm_forward(a, b, ta, tb)
    m, k, _, n = _dims(c, d, tc, td)
    nb = math.prod(c.shape[:-2])
    if nb * m * n and k:
        L.matmul(c._buf, d._buf, out, nb, m, n, k, tc, td, dtype, _blas["enabled"], True)
    return out, shape, dtype


_mm2 = Primitive("matmul2", _mm2_forward)
_mm2.def_shape(lambda a, b, c, d, ta, tb, tc, td: _mm_shape(a, b, ta, tb))


def _pair_vjp(g, x, y, tx, ty, nx, ny):
    gx = gy = None
    shape = _mm_shape(x, y, tx, ty)[0]
    if g.shape != shape:  # the second pair may be a reshape of the output (same row-major elements)
        g = reshape(g, shape)
    if nx:
        gx = _mm(y, g, ta=ty, tb=True) if tx else _mm(g, y, ta=False, tb=not ty)
    if ny:
        gy = _mm(g, x, ta=True, tb=tx) if ty else _mm(x, g, ta=not tx, tb=False)
    return gx, gy


@_mm2.def_vjp
def _mm2_vjp(g, a, b, c, d, out, ta, tb, tc, td):
    return _pair_vjp(g, a, b, ta, tb, needs(0), needs(1)) + _pair_vjp(g, c, d, tc, td, needs(2), needs(3))


@_mm2.def_jvp
def _mm2_jvp(ts, a, b, c, d, out, ta, tb, tc, td):
    terms = [(x, y, fx, fy) for x, y, fx, fy in ((ts[0], b, ta, tb), (a, ts[1], ta, tb), (ts[2], d, tc, td),
                                                 (c, ts[3], tc, td)) if x is not None and y is not None]
    r = None
    for i in range(0, len(terms), 2):
        if i + 1 < len(terms):
            (x, y, fx, fy), (u, v, fu, fv) = terms[i], terms[i + 1]
            t = _mm2(x, y, u, v, ta=fx, tb=fy, tc=fu, td=fv)
        else:
            x, y, fx, fy = terms[i]
            t = _mm(x, y, ta=fx, tb=fy)
        t = t if t.shape == out.shape else reshape(t, out.shape)  # a pair shaped as a reshape of the output
        r = t if r is None else r + t
    return r


# --- matmul_tadd: transpose(r) + op(c) @ op(d) -----------------------------------------------------
def _tmm_forward(r, c, d, tc, td):
    """out (B, m, n) = r (B, n, m) transposed per block + op(c) @ op(d), the product 2-D (B m, n): the
    transpose writes out, then the GEMM accumulates into it (BLAS beta = 1)."""
    from .shape import _view_forward
    nb, n, m = r.shape
    out, shape, dtype = _view_forward(r, K.view_meta(0, (nb, m, n), (n * m, 1, m)), (nb, m, n))
    mm, k, _, nn = _dims(c, d, tc, td)
    if mm * nn and k:
        L.matmul(c._buf, d._buf, out, 1, mm, nn, k, tc, td, dtype, _blas["enabled"], True)
    return out, shape, dtype


_tmm = Primitive("matmul_tadd", _tmm_forward)
_tmm.def_shape(lambda r, c, d, tc, td: ((r.shape[0], r.shape[2], r.shape[1]), r.dtype))


@_tmm.def_vjp
def _tmm_vjp(g, r, c, d, out, tc, td):
    from .shape import transpose
    gr = transpose(g, (0, 2, 1)) if needs(0) else None
    return (gr,) + _pair_vjp(g, c, d, tc, td, needs(1), needs(2))


def _tmm_sum(tr, tm, shape, transpose):
    parts = [transpose(tr) if tr is not None else None, None if tm is None else reshape(tm, shape)]
    parts = [p for p in parts if p is not None]
    return None if not parts else parts[0] if len(parts) == 1 else parts[0] + parts[1]


@_tmm.def_jvp
def _tmm_jvp(ts, r, c, d, out, tc, td):
    from .shape import transpose
    return _tmm_sum(ts[0], _mm_jvp(ts[1:], c, d, None, tc, td), out.shape, lambda t: transpose(t, (0, 2, 1)))


@_tmm.def_batched_jvp
def _tmm_bjvp(ts, r, c, d, out, tc, td):
    from .shape import transpose
    tm = _mm_bjvp(ts[1:], c, d, None, tc, td) if ts[1] is not None or ts[2] is not None else None
    nb = (ts[0] if ts[0] is not None else tm).shape[0]
    return _tmm_sum(ts[0], tm, (nb,) + out.shape, lambda t: transpose(t, (0, 1, 3, 2)))


_bcast_cache: dict = {}  # (id buf, id node, shape, B) -> (buf, node, broadcast); cleared when a batched_jvp ends


def _repeat(a, nb):
    """``a`` broadcast to ``(nb,) + a.shape``. Within one batched pass the same activation is repeated
    in the forward (a @ T_W) and again in the backward (a^T @ T_g): the copy is made once."""
    if a._tangents is not None:
        return broadcast_to(a, (nb,) + a.shape)
    key = (id(a._buf), id(a._node), a.shape, nb)
    hit = _bcast_cache.get(key)
    if hit is None:
        hit = _bcast_cache[key] = (a._buf, a._node, broadcast_to(a, (nb,) + a.shape))
    return hit[2]


def _bmm_left(t, b, ta, tb):
    """op(t[i]) @ op(b) for every i of a batched tangent t (B,) + a.shape."""
    nb = t.shape[0]
    if b.ndim == 2 and b.shape[1 if tb else 0] == 1:  # k = 1: outer products, one broadcast multiply
        m, n = t.shape[-1] if ta else t.shape[-2], b.size
        return reshape(t, (nb, m, 1)) * reshape(b, (1, n))
    if b.ndim == 2:
        if not ta:  # stack the B blocks' rows: one (B m, k) @ op(b) GEMM, zero-copy
            m, k = t.shape[-2:]
            r = _mm(reshape(t, (nb * m, k)), b, ta=False, tb=tb)
            return reshape(r, (nb, m, r.shape[-1]))
        k, m = t.shape[-2:]
        n = b.shape[0] if tb else b.shape[1]
        if m <= n:  # transposing t (B k m) is cheaper than repeating b B times
            from .shape import transpose
            return _bmm_left(transpose(t, (0, 2, 1)), b, False, tb)
    return _mm(t, _repeat(b, nb), ta=ta, tb=tb)


def _bmm_right(a, t, ta, tb):
    """op(a) @ op(t[i]) for every i of a batched tangent t (B,) + b.shape."""
    nb = t.shape[0]
    if a.ndim == 2 and a.shape[0 if ta else 1] == 1:  # k = 1: outer products, one broadcast multiply
        m, n = a.size, t.shape[-2] if tb else t.shape[-1]  # (a k = 1 GEMM rounds a * t once: the same numbers)
        return reshape(a, (m, 1)) * reshape(t, (nb, 1, n))
    if a.ndim == 2 and tb:  # (op(a) t_i^T)^T = t_i op(a)^T: one (B n, k) GEMM, then a per-block transpose
        n, k = t.shape[-2:]
        m = a.shape[1] if ta else a.shape[0]
        if m * n <= m * k:
            from .shape import transpose
            r = _mm(reshape(t, (nb * n, k)), a, ta=False, tb=not ta)
            return transpose(reshape(r, (nb, n, m)), (0, 2, 1))
    return _mm(_repeat(a, nb), t, ta=ta, tb=tb)


def _stacked_left(t, b, ta, tb):
    """t (B m, k): the operand of _bmm_left's one zero-copy GEMM with op(b), or None (another path)."""
    if b.ndim == 2 and not ta and b.shape[1 if tb else 0] != 1:
        nb, m, k = t.shape
        return reshape(t, (nb * m, k))
    return None


def _right_pair(a, t, ta, tb):
    """The operands (x, y) of _bmm_right's GEMM _mm(x, y) with a repeated a, or None (another path)."""
    if a.ndim == 2 and (a.shape[0 if ta else 1] == 1 or (tb and (a.shape[1] if ta else a.shape[0]) * t.shape[-2]
                                                          <= (a.shape[1] if ta else a.shape[0]) * t.shape[-1])):
        return None
    return _repeat(a, t.shape[0]), t


def _right_transposed(a, t, ta, tb):
    """r (B, n, m): the one GEMM of _bmm_right's transpose path (the product is r's per-block transpose), or None."""
    if a.ndim == 2 and tb and a.shape[0 if ta else 1] != 1:
        nb, n, k = t.shape
        m = a.shape[1] if ta else a.shape[0]
        if m * n <= m * k:
            return reshape(_mm(reshape(t, (nb * n, k)), a, ta=False, tb=not ta), (nb, n, m))
    return None


@_mm.def_batched_jvp
def _mm_bjvp(ts, a, b, out, ta, tb):
    if ts[0] is not None and ts[1] is not None:  # T_A B + A T_B with no separate sum pass: the stacked GEMM
        s = _stacked_left(ts[0], b, ta, tb)      # of the first accumulates (BLAS beta = 1) into the second's
        if s is not None:                        # output (the same sum, rounded once, as r1 + r2)
            rp = _right_pair(a, ts[1], ta, tb)
            if rp is not None:
                return _mm2(rp[0], rp[1], s, b, ta=ta, tb=tb, tc=False, td=tb)
            rt = _right_transposed(a, ts[1], ta, tb)
            if rt is not None:
                return _tmm(rt, s, b, tc=False, td=tb)
    r = None
    if ts[0] is not None:
        r = _bmm_left(ts[0], b, ta, tb)
    if ts[1] is not None:
        t = _bmm_right(a, ts[1], ta, tb)
        r = t if r is None else r + t
    return r


@_mm2.def_batched_jvp
def _mm2_bjvp(ts, a, b, c, d, out, ta, tb, tc, td):
    r1 = _mm_bjvp(ts[:2], a, b, out, ta, tb) if ts[0] is not None or ts[1] is not None else None
    r2 = _mm_bjvp(ts[2:], c, d, out, tc, td) if ts[2] is not None or ts[3] is not None else None
    r1, r2 = (r if r is None or r.shape[1:] == out.shape else reshape(r, r.shape[:1] + out.shape) for r in (r1, r2))
    if r1 is None or r2 is None:
        return r1 if r2 is None else r2
    return r1 + r2


def matmul(a, b, transpose_a=False, transpose_b=False):
    """Matrix product with numpy's semantics (1-D vectors, batch broadcasting).

    Args:
        a: (..., m, k) Tensor (or (..., k, m) with ``transpose_a``).
        b: (..., k, n) Tensor (or (..., n, k) with ``transpose_b``).
    Returns:
        (..., m, n) Tensor.
    """
    if (transpose_a is False and transpose_b is False and type(a) is _Tensor and type(b) is _Tensor
            and a.dtype == b.dtype and a.dtype in _FLOATS and len(a.shape) == 2 and len(b.shape) == 2
            and a.shape[1] == b.shape[0]):
        # the common case, (m, k) @ (k, n) of one float dtype, without the general path's checks (~4 us of a
        # ~19 us call; the skinny PINN GEMMs take ~190 us in numpy's OpenBLAS): the same primitive call
        m, n = a.shape[0], b.shape[1]
        if m * n > _MAX_ELEMENTS:
            check_size("matmul", (m, n))
        return _mm(a, b, ta=False, tb=False)
    for arg, flag in (("transpose_a", transpose_a), ("transpose_b", transpose_b)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"matmul: {arg}={flag!r} ({type(flag).__name__}); expected True or False.")
    a, b = operands("matmul", a, b)
    check_float("matmul", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must have at least 1 dimension, got shapes {a.shape} and {b.shape}; "
                         "use * for scalars.")
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = reshape(a, (1, a.shape[0]))
    if vb:
        b = reshape(b, (b.shape[0], 1))
    m, k, k2, n = _dims(a, b, transpose_a, transpose_b)
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align "
                         f"(inner dimensions {k} != {k2}).")
    ba, bb = a.shape[:-2], b.shape[:-2]
    if ba == bb:
        check_size("matmul", ba + (m, n))
    else:
        if not bb and not transpose_a:  # (..., m, k) @ (k, n): one flat 2-D GEMM
            check_size("matmul", ba + (m, n))
            r = _mm(reshape(a, (-1, k)), b, ta=False, tb=transpose_b)
            r = reshape(r, ba + (m, n))
            return _squeeze_vec(r, va, vb)
        from ._util import broadcast_shapes
        batch = broadcast_shapes("matmul (batch dimensions)", ba, bb)
        check_size("matmul", batch + (m, n))
        a = broadcast_to(a, batch + a.shape[-2:])
        b = broadcast_to(b, batch + b.shape[-2:])
    return _squeeze_vec(_mm(a, b, ta=transpose_a, tb=transpose_b), va, vb)


def _squeeze_vec(r, va, vb):
    if va and vb:
        return reshape(r, r.shape[:-2])
    if va:
        return reshape(r, r.shape[:-2] + r.shape[-1:])
    if vb:
        return reshape(r, r.shape[:-1])
    return r


def dot(a, b):
    """Inner product of two 1-D tensors (or sum of x*y over the last axis)."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"dot: operands must have at least 1 dimension, got shapes {a.shape} and {b.shape}; "
                         "use * for scalars.")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"dot: shapes {a.shape} and {b.shape} do not align (last dimensions {a.shape[-1]} != "
                         f"{b.shape[-1]}).")
    return (a * b).sum(axis=-1)
