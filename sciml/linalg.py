"""``sciml.linalg``: dense linear algebra with derivatives of every order.

solve, inv, cholesky, triangular_solve, qr, svd, eigh, eigvalsh, det, slogdet, norm, lstsq, pinv,
all batched over leading axes (``(..., n, n)``) as in numpy.

Each factorization is one primitive. Its forward calls LAPACK on CPU (numpy.linalg / scipy, as the
GEMM calls BLAS; recorded and replayed by ``sm.jit``); on devices Cholesky, triangular solve and
solve run as Taichi kernels (``sciml/kernels/linalg_dense.py``) and the others copy to the host and
call LAPACK there (docs/arrays.md lists these fallbacks). Derivative rules are written in sciml ops
(matmuls, triangular solves, masks), so ``grad(grad(...))``, ``hessian`` and ``jvp`` of ``grad`` work.

Conventions follow JAX where numpy says nothing: ``cholesky`` and ``eigh`` read the symmetric part
``(a + a^T) / 2`` (so derivatives are symmetric); a matrix that is not positive definite (cholesky)
or singular (solve) gives NaN/inf rather than an exception.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import backend
from .autodiff.backward import needs
from .autodiff.ops import concat, getitem, matmul, reshape, sqrt, abs as _abs, transpose
from .autodiff.ops import max as _max, min as _min, sum as _sum, exp, broadcast_to
from .autodiff.primitive import Primitive
from .autodiff.tensor import as_tensor, tensor
from .kernels import _common as C
from .kernels import linalg_dense as KD

__all__ = ["cholesky", "det", "eigh", "eigvalsh", "inv", "lstsq", "norm", "pinv", "qr", "slogdet", "solve",
           "svd", "triangular_solve", "use_lapack"]

_lapack = {"enabled": None}


def use_lapack(flag=None):
    """Route CPU factorizations to LAPACK (None/True: the default on CPU) or to sciml's Taichi kernels
    (False; Cholesky, triangular solve and solve only). Returns the previous setting."""
    prev = _lapack["enabled"]
    _lapack["enabled"] = flag
    return prev


def _host_lapack() -> bool:
    f = _lapack["enabled"]
    return backend.on_host() if f is None else bool(f)


# --- validation ------------------------------------------------------------------------------
def _float_matrix(name, arg, x, square=False, min_ndim=2):
    x = as_tensor(x)
    if x.dtype not in ("float32", "float64"):
        if x.dtype in ("int32", "bool"):
            from .runtime import default_dtype
            x = x.astype(default_dtype())
        else:  # pragma: no cover
            raise TypeError(f"{name}: {arg} has dtype {x.dtype}; expected float32 or float64.")
    if x.ndim < min_ndim:
        raise ValueError(f"{name}: {arg} has shape {x.shape}; expected at least {min_ndim} dimensions "
                         f"({'(..., n, n)' if square else '(..., m, n)'}).")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{name}: {arg} has shape {x.shape}; expected square matrices (..., n, n).")
    return x


def _same_dtype(name, a, b):
    if a.dtype != b.dtype:
        raise TypeError(f"{name}: a has dtype {a.dtype} and b has dtype {b.dtype}; expected one float dtype "
                        "(cast with .astype(...)).")


# --- host calls --------------------------------------------------------------------------------
def _read(buf, shape, dtype):
    n = math.prod(shape)
    if isinstance(buf, np.ndarray):
        return buf[:n].reshape(shape)
    return buf.to_numpy()[:n].reshape(shape).astype(backend.NP_DTYPES[dtype])


def _write(buf, arr, dtype):
    arr = np.ascontiguousarray(arr, backend.NP_DTYPES[dtype]).reshape(-1)
    if isinstance(buf, np.ndarray):
        buf[:arr.size] = arr
    else:
        full = np.zeros(buf.shape[0], backend.NP_DTYPES[dtype])
        full[:arr.size] = arr
        buf.from_numpy(full)


def _host(fn, inputs, out_size, dtype):
    """A new flat buffer of ``out_size`` holding ``fn(*numpy inputs)`` (flattened), computed on the
    host; recorded by ``sm.jit`` as a host call so replays run it again."""
    out = backend.empty(out_size, dtype)
    shapes = [x.shape for x in inputs]

    def call(*bufs):
        arrs = [_read(b, s, dtype) for b, s in zip(bufs[:-1], shapes)]
        with np.errstate(all="ignore"):
            _write(bufs[-1], fn(*arrs), dtype)
    if out_size:
        C.host_call(call, *[x._buf for x in inputs], out)
    return out


def _per_matrix(fn, a, *rest, fill=np.nan):
    """``fn`` over the leading batch of numpy arrays; a LinAlgError gives ``fill`` for that matrix."""
    try:
        return fn(a, *rest)
    except np.linalg.LinAlgError:
        pass
    batch = a.shape[:-2]
    outs = []
    for i in np.ndindex(*batch):
        try:
            outs.append(fn(a[i], *[r[i] for r in rest]))
        except np.linalg.LinAlgError:
            shape = fn(np.eye(a.shape[-1], dtype=a.dtype), *[np.zeros_like(r[i]) for r in rest]).shape
            outs.append(np.full(shape, fill, a.dtype))
    return np.stack(outs).reshape(batch + outs[0].shape) if outs else fn(a, *rest)


# --- helpers in sciml ops -----------------------------------------------------------------------
def _mT(x):
    """Swap the last two axes."""
    if x.ndim < 2:
        return x
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes)


_masks: dict = {}


def _mask(n, m, k, dtype, upper=False):
    key = (n, m, k, dtype, upper)
    t = _masks.get(key)
    if t is None:
        a = np.triu(np.ones((n, m)), k) if upper else np.tril(np.ones((n, m)), k)
        if len(_masks) > 256:
            _masks.clear()
        t = _masks[key] = tensor(a, dtype)
    return t


def _tril(x, k=0):
    return x * _mask(x.shape[-2], x.shape[-1], k, x.dtype)


def _triu(x, k=0):
    return x * _mask(x.shape[-2], x.shape[-1], k, x.dtype, upper=True)


def _eye(n, dtype):
    return _mask(n, n, 0, dtype) * _mask(n, n, 0, dtype, upper=True)


def _sym(x):
    return 0.5 * (x + _mT(x))


def _diag_embed(v):
    """(..., n) -> (..., n, n) with v on the diagonal."""
    n = v.shape[-1]
    return reshape(v, v.shape + (1,)) * _eye(n, v.dtype)


def _diag(x):
    """(..., n, n) -> (..., n)."""
    return _sum(x * _eye(x.shape[-1], x.dtype), axis=-1)


def _last(x, start, stop, shape):
    """x[..., start:stop] reshaped to x.shape[:-1] + shape (a view, differentiable)."""
    return reshape(getitem(x, (Ellipsis, slice(start, stop))), x.shape[:-1] + tuple(shape))


def _pack(parts):
    """Concatenate tensors (..., *s_i) flattened along one last axis: the packed cotangent of a
    multi-output primitive (see :func:`_unpack`)."""
    lead = parts[0][1]
    return concat([reshape(p, lead + (-1,)) for p, _ in parts], -1)


# --- cholesky ------------------------------------------------------------------------------------
def _chol_forward(a):
    n = a.shape[-1]
    nb = math.prod(a.shape[:-2])
    if _host_lapack():
        def f(x):
            return _per_matrix(np.linalg.cholesky, x)
        return _host(f, [a], a.size, a.dtype), a.shape, a.dtype
    out = backend.empty(a.size, a.dtype)
    if a.size:
        KD.cholesky(a._buf, out, nb, n, a.dtype)
    return out, a.shape, a.dtype


_chol = Primitive("cholesky", _chol_forward)


def _phi(x):
    """Lower triangle with the diagonal halved."""
    return _tril(x, -1) + 0.5 * x * _eye(x.shape[-1], x.dtype)


@_chol.def_vjp
def _chol_vjp(g, a, out):
    # A-bar = sym(L^{-T} Phi(L^T G) L^{-1}) (Murray 2016)
    p = _phi(matmul(out, g, transpose_a=True))
    x = _trsm(out, p, lower=True, trans=True, unit=False)           # L^{-T} P
    s = _mT(_trsm(out, _mT(x), lower=True, trans=True, unit=False))  # (L^{-T} X^T)^T = X L^{-1}
    return (_sym(s),)


@_chol.def_jvp
def _chol_jvp(ts, a, out):
    # L-dot = L Phi(L^{-1} A-dot L^{-T})
    x = _trsm(out, ts[0], lower=True, trans=False, unit=False)           # L^{-1} A
    y = _mT(_trsm(out, _mT(x), lower=True, trans=False, unit=False))      # X L^{-T}
    return matmul(out, _phi(y))


def cholesky(a, upper=False):
    """Cholesky factor of symmetric positive definite matrices.

    Args:
        a: (..., n, n) Tensor; its symmetric part (a + a^T)/2 is factored.
        upper: return U = L^T with a = U^T U instead of L.
    Returns:
        (..., n, n) lower-triangular L with a = L L^T (NaN where a is not positive definite).
    Example:
        >>> sm.linalg.cholesky(sm.tensor([[4.0, 2.0], [2.0, 3.0]]))   # [[2, 0], [1, 1.414]]
    """
    a = _float_matrix("cholesky", "a", a, square=True)
    L = _chol(_sym(a))
    return _mT(L) if upper else L


# --- triangular solve -----------------------------------------------------------------------------
def _trsm_forward(a, b, lower, trans, unit):
    n, m = b.shape[-2], b.shape[-1]
    nb = math.prod(b.shape[:-2])
    if _host_lapack():
        from scipy.linalg import solve_triangular

        def f(A, B):
            out = np.empty_like(B)
            for i in np.ndindex(*A.shape[:-2]):
                out[i] = solve_triangular(A[i], B[i], trans=int(trans), lower=lower, unit_diagonal=unit,
                                          check_finite=False)
            return out
        return _host(f, [a, b], b.size, b.dtype), b.shape, b.dtype
    out = backend.empty(b.size, b.dtype)
    if b.size:
        KD.triangular_solve(a._buf, b._buf, out, nb, n, m, lower, trans, unit, b.dtype)
    return out, b.shape, b.dtype


_trsm = Primitive("triangular_solve", _trsm_forward)


def _tri_part(x, lower, unit):
    if lower:
        return _tril(x, -1 if unit else 0)
    return _triu(x, 1 if unit else 0)


@_trsm.def_vjp
def _trsm_vjp(g, a, b, out, lower, trans, unit):
    gb = _trsm(a, g, lower=lower, trans=not trans, unit=unit)
    ga = None
    if needs(0):
        ga = -matmul(out, gb, transpose_b=True) if trans else -matmul(gb, out, transpose_b=True)
        ga = _tri_part(ga, lower, unit)
    return ga, gb


@_trsm.def_jvp
def _trsm_jvp(ts, a, b, out, lower, trans, unit):
    r = ts[1]
    if ts[0] is not None:
        da = _tri_part(ts[0], lower, unit)
        t = matmul(da, out, transpose_a=trans)
        r = -t if r is None else r - t
    return _trsm(a, r, lower=lower, trans=trans, unit=unit)


def _trans_flag(trans):
    if trans in (0, "N", False):
        return False
    if trans in (1, "T", "C", 2, True):
        return True
    raise ValueError(f"triangular_solve: trans={trans!r}; expected 0/'N' or 1/'T'.")


def triangular_solve(a, b, trans=0, lower=False, unit_diagonal=False):
    """Solve op(a) x = b for triangular a (scipy.linalg.solve_triangular's arguments).

    Args:
        a: (..., n, n) triangular matrices (only the triangle named by ``lower`` is read).
        b: (..., n, k) or (n,) right-hand sides (leading axes broadcast against a's).
        trans: 0/'N' solves a x = b, 1/'T' solves a^T x = b.
        lower: a is lower triangular (default upper, as scipy).
        unit_diagonal: assume ones on the diagonal (not read).
    Returns:
        x shaped like the broadcast b.
    """
    a = _float_matrix("triangular_solve", "a", a, square=True)
    b = as_tensor(b, a.dtype)
    _same_dtype("triangular_solve", a, b)
    a, b, vec = _solve_operands("triangular_solve", a, b)
    x = _trsm(a, b, lower=bool(lower), trans=_trans_flag(trans), unit=bool(unit_diagonal))
    return reshape(x, x.shape[:-1]) if vec else x


def _solve_operands(name, a, b):
    """numpy 2's rule: b is a vector only when 1-D; batch axes broadcast."""
    n = a.shape[-1]
    vec = b.ndim == 1
    if vec:
        b = reshape(b, (n, 1)) if b.shape[0] == n else b
    if b.ndim < 2 or b.shape[-2] != n:
        raise ValueError(f"{name}: a has shape {a.shape} and b has shape {b.shape if not vec else (b.shape[0],)}; "
                         f"expected b of shape (..., {n}, k) or ({n},).")
    from .autodiff.ops._util import broadcast_shapes
    batch = broadcast_shapes(name + " (batch dimensions)", a.shape[:-2], b.shape[:-2])
    if a.shape[:-2] != batch:
        a = broadcast_to(a, batch + a.shape[-2:])
    if b.shape[:-2] != batch:
        b = broadcast_to(b, batch + b.shape[-2:])
    return a, b, vec


# --- solve ----------------------------------------------------------------------------------------------
def _solve_forward(a, b):
    n, m = b.shape[-2], b.shape[-1]
    nb = math.prod(b.shape[:-2])
    if _host_lapack():
        return _host(lambda A, B: _per_matrix(np.linalg.solve, A, B, fill=np.nan), [a, b], b.size,
                     b.dtype), b.shape, b.dtype
    out = backend.empty(b.size, b.dtype)
    if b.size:
        KD.lu_solve(a._buf, b._buf, out, nb, n, m, b.dtype)
    return out, b.shape, b.dtype


_solve = Primitive("solve", _solve_forward)


@_solve.def_vjp
def _solve_vjp(g, a, b, out):
    gb = _solve(_mT(a), g)
    ga = -matmul(gb, out, transpose_b=True) if needs(0) else None
    return ga, gb


@_solve.def_jvp
def _solve_jvp(ts, a, b, out):
    r = ts[1]
    if ts[0] is not None:
        t = matmul(ts[0], out)
        r = -t if r is None else r - t
    return _solve(a, r)


def solve(a, b):
    """Solve a x = b (LU with partial pivoting), numpy.linalg.solve's semantics.

    Args:
        a: (..., n, n) Tensor.
        b: (..., n, k) or (n,) Tensor; leading axes broadcast against a's.
    Returns:
        x shaped like the broadcast b (NaN/inf where a is singular).
    """
    a = _float_matrix("solve", "a", a, square=True)
    b = as_tensor(b, a.dtype)
    _same_dtype("solve", a, b)
    a, b, vec = _solve_operands("solve", a, b)
    x = _solve(a, b)
    return reshape(x, x.shape[:-1]) if vec else x


def inv(a):
    """Inverse of (..., n, n) matrices (solve against the identity)."""
    a = _float_matrix("inv", "a", a, square=True)
    n = a.shape[-1]
    return _solve(a, broadcast_to(_eye(n, a.dtype), a.shape))


# --- slogdet / det ---------------------------------------------------------------------------------------
def _slogdet_forward(a):
    def f(x):
        s, l = np.linalg.slogdet(x)
        return np.stack([s, l], -1)
    return _host(f, [a], 2 * math.prod(a.shape[:-2]), a.dtype), a.shape[:-2] + (2,), a.dtype


_slogdet = Primitive("slogdet", _slogdet_forward)


@_slogdet.def_vjp
def _slogdet_vjp(g, a, out):
    gl = reshape(getitem(g, (Ellipsis, slice(1, 2))), g.shape[:-1] + (1, 1))
    return (gl * _mT(inv(a)),)


def slogdet(a):
    """(sign, log|det a|) of (..., n, n) matrices; log|det| is differentiable (sign is constant).

    Returns:
        A pair of (...,) Tensors.
    """
    a = _float_matrix("slogdet", "a", a, square=True)
    p = _slogdet(a)
    sign = getitem(p, (Ellipsis, 0)).detach()
    return sign, getitem(p, (Ellipsis, 1))


def det(a):
    """Determinant of (..., n, n) matrices (sign * exp(log|det|), differentiable)."""
    s, l = slogdet(a)
    return s * exp(l)


# --- eigh ---------------------------------------------------------------------------------------------------
def _eigh_forward(a):
    n = a.shape[-1]

    def f(x):
        w, v = np.linalg.eigh(x)
        return np.concatenate([w, v.reshape(v.shape[:-2] + (n * n,))], -1)
    lead = a.shape[:-2]
    return _host(f, [a], math.prod(lead) * (n + n * n), a.dtype), lead + (n + n * n,), a.dtype


_eigh = Primitive("eigh", _eigh_forward)


def _eig_gap(w):
    """F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it."""
    n = w.shape[-1]
    d = reshape(w, w.shape[:-1] + (1, n)) - reshape(w, w.shape + (1,))
    eye = _eye(n, w.dtype)
    return (1.0 - eye) / (d + eye)


@_eigh.def_vjp
def _eigh_vjp(g, a, out):
    n = a.shape[-1]
    w, v = _last(out, 0, n, (n,)), _last(out, n, n + n * n, (n, n))
    gw, gv = _last(g, 0, n, (n,)), _last(g, n, n + n * n, (n, n))
    inner = _diag_embed(gw) + _eig_gap(w) * matmul(v, gv, transpose_a=True)
    return (matmul(matmul(v, inner), v, transpose_b=True),)


def eigh(a, UPLO="L"):
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices, numpy.linalg.eigh's result.

    The symmetric part (a + a^T)/2 is used (``UPLO`` is accepted for numpy compatibility). Derivatives
    are defined where eigenvalues are distinct; functions of the eigenvectors must not depend on their
    signs.

    Returns:
        (w, v): w (..., n), v (..., n, n) with a v[..., :, i] = w[..., i] v[..., :, i].
    """
    if UPLO not in ("L", "U"):
        raise ValueError(f"eigh: UPLO={UPLO!r}; expected 'L' or 'U'.")
    a = _float_matrix("eigh", "a", a, square=True)
    n = a.shape[-1]
    p = _eigh(_sym(a))
    return _last(p, 0, n, (n,)), _last(p, n, n + n * n, (n, n))


def eigvalsh(a, UPLO="L"):
    """Eigenvalues (ascending) of symmetric (..., n, n) matrices."""
    return eigh(a, UPLO)[0]


# --- qr -------------------------------------------------------------------------------------------------------
def _qr_forward(a):
    m, n = a.shape[-2:]
    k = min(m, n)

    def f(x):
        q, r = np.linalg.qr(x, mode="reduced")
        lead = x.shape[:-2]
        return np.concatenate([q.reshape(lead + (m * k,)), r.reshape(lead + (k * n,))], -1)
    lead = a.shape[:-2]
    return _host(f, [a], math.prod(lead) * (m * k + k * n), a.dtype), lead + (m * k + k * n,), a.dtype


_qr = Primitive("qr", _qr_forward)


def _copyltu(x):
    return _tril(x, -1) + _mT(_tril(x, -1)) + x * _eye(x.shape[-1], x.dtype)


def _qr_tall_vjp(q, r, gq, gr):
    """A-bar for m >= n: (G_Q + Q copyltu(M)) R^{-T}, M = R G_R^T - G_Q^T Q."""
    mm = matmul(r, gr, transpose_b=True) - matmul(gq, q, transpose_a=True)
    z = gq + matmul(q, _copyltu(mm))
    return _mT(_trsm(r, _mT(z), lower=False, trans=False, unit=False))


@_qr.def_vjp
def _qr_vjp(g, a, out):
    m, n = a.shape[-2:]
    k = min(m, n)
    q, r = _last(out, 0, m * k, (m, k)), _last(out, m * k, m * k + k * n, (k, n))
    gq, gr = _last(g, 0, m * k, (m, k)), _last(g, m * k, m * k + k * n, (k, n))
    if m >= n:
        return (_qr_tall_vjp(q, r, gq, gr),)
    # wide: A = [X | Y], R = [U | V] with X = Q U, V = Q^T Y (Liao et al. 2019)
    u = getitem(r, (Ellipsis, slice(0, m)))
    y = getitem(a, (Ellipsis, slice(m, n)))
    gu, gv = getitem(gr, (Ellipsis, slice(0, m))), getitem(gr, (Ellipsis, slice(m, n)))
    gx = _qr_tall_vjp(q, u, gq + matmul(y, gv, transpose_b=True), gu)
    return (concat([gx, matmul(q, gv)], -1),)


_NO_COMPLETE_DERIV = ("{what} of a non-square matrix (shape {shape}) has no derivative: its extra {vecs} span "
                      "the orthogonal complement and are not unique (PyTorch and JAX refuse it too). Differentiate "
                      "{alt} instead.")


def _qr_complete_forward(a):
    m, n = a.shape[-2:]

    def f(x):
        q, r = np.linalg.qr(x, mode="complete")
        lead = x.shape[:-2]
        return np.concatenate([q.reshape(lead + (m * m,)), r.reshape(lead + (m * n,))], -1)
    lead = a.shape[:-2]
    return _host(f, [a], math.prod(lead) * (m * m + m * n), a.dtype), lead + (m * m + m * n,), a.dtype


_qr_complete = Primitive("qr_complete", _qr_complete_forward)


@_qr_complete.def_vjp
def _qr_complete_vjp(g, a, out):
    raise NotImplementedError(_NO_COMPLETE_DERIV.format(what="qr(mode='complete')", shape=a.shape,
                                                        vecs="columns of q", alt="qr(mode='reduced')"))


def qr(a, mode="reduced"):
    """QR decomposition a = q r of (..., m, n) matrices (numpy.linalg.qr), k = min(m, n).

    Modes: ``'reduced'`` (numpy's default): q (..., m, k), r (..., k, n); ``'complete'``: q (..., m, m),
    r (..., m, n); ``'r'``: r of the reduced form. Derivatives follow LAPACK's sign convention and are
    defined for full-rank a; ``'complete'`` with m > n has none (its last m - n columns of q are not unique:
    a clear error when differentiated, as in PyTorch and JAX); for m <= n it is the reduced form.
    """
    if mode not in ("reduced", "r", "complete"):
        raise ValueError(f"qr: mode={mode!r}; expected 'reduced', 'complete' or 'r'.")
    a = _float_matrix("qr", "a", a)
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "complete" and m > n:
        p = _qr_complete(a)
        return _last(p, 0, m * m, (m, m)), _last(p, m * m, m * m + m * n, (m, n))
    p = _qr(a)
    r = _last(p, m * k, m * k + k * n, (k, n))
    return r if mode == "r" else (_last(p, 0, m * k, (m, k)), r)


# --- svd --------------------------------------------------------------------------------------------------------
def _svd_forward(a):
    m, n = a.shape[-2:]
    k = min(m, n)

    def f(x):
        u, s, vt = _per_matrix(lambda y: _svd_np(y), x)
        lead = x.shape[:-2]
        return np.concatenate([u.reshape(lead + (m * k,)), s, vt.reshape(lead + (k * n,))], -1)
    lead = a.shape[:-2]
    size = m * k + k + k * n
    return _host(f, [a], math.prod(lead) * size, a.dtype), lead + (size,), a.dtype


def _svd_np(x):
    return np.linalg.svd(x, full_matrices=False)


_svd = Primitive("svd", _svd_forward)


@_svd.def_vjp
def _svd_vjp(g, a, out):
    # Townsend (2016), real case
    m, n = a.shape[-2:]
    k = min(m, n)
    u, s, vt = _svd_parts(out, m, n, k)
    gu, gs, gvt = _svd_parts(g, m, n, k)
    v, gv = _mT(vt), _mT(gvt)
    s2 = s * s
    f = _eig_gap(s2)                                     # 1 / (s_j^2 - s_i^2)
    sr = reshape(s, s.shape + (1,))                       # column: s_i
    sc = reshape(s, s.shape[:-1] + (1, k))                # row: s_j
    utgu = matmul(u, gu, transpose_a=True)
    vtgv = matmul(v, gv, transpose_a=True)
    j = f * (utgu - _mT(utgu))
    kk = f * (vtgv - _mT(vtgv))
    inner = j * sc + _diag_embed(gs) + sr * kk
    ga = matmul(matmul(u, inner), vt)
    sinv = 1.0 / sc
    if m > k:  # (I - U U^T) G_U S^{-1} V^T
        t = gu - matmul(u, utgu)
        ga = ga + matmul(t * sinv, vt)
    if n > k:  # U S^{-1} G_V^T (I - V V^T)
        t = gv - matmul(v, vtgv)
        ga = ga + matmul(u * sinv, _mT(t))
    return (ga,)


def _svd_parts(p, m, n, k):
    return (_last(p, 0, m * k, (m, k)), _last(p, m * k, m * k + k, (k,)),
            _last(p, m * k + k, m * k + k + k * n, (k, n)))


def _svd_full_forward(a):
    m, n = a.shape[-2:]

    def f(x):
        u, _, vt = _per_matrix(lambda y: np.linalg.svd(y, full_matrices=True), x)
        lead = x.shape[:-2]
        return np.concatenate([u.reshape(lead + (m * m,)), vt.reshape(lead + (n * n,))], -1)
    lead = a.shape[:-2]
    return _host(f, [a], math.prod(lead) * (m * m + n * n), a.dtype), lead + (m * m + n * n,), a.dtype


_svd_full = Primitive("svd_full", _svd_full_forward)  # (u (m, m), vh (n, n)); s comes from _svd


@_svd_full.def_vjp
def _svd_full_vjp(g, a, out):
    raise NotImplementedError(_NO_COMPLETE_DERIV.format(
        what="svd(full_matrices=True)", shape=a.shape, vecs="singular vectors",
        alt="svd(full_matrices=False) (or only s: svd(a, compute_uv=False))"))


def svd(a, full_matrices=True, compute_uv=True):
    """Singular value decomposition a = u diag(s) vh of (..., m, n) matrices (numpy.linalg.svd).

    Args:
        full_matrices: as numpy: True gives u (..., m, m), vh (..., n, n); False u (..., m, k), vh (..., k, n),
            k = min(m, n).
        compute_uv: False returns s only.
    Returns:
        (u, s, vh) or s; s descending. Derivatives need distinct non-zero singular values (of u, vh:
        functions that do not depend on the signs of singular-vector pairs). For a non-square a with
        ``full_matrices=True``, u and vh have no derivative (their extra columns / rows are not unique: a clear
        error when differentiated, as in PyTorch and JAX); s keeps its derivative.
    """
    a = _float_matrix("svd", "a", a)
    m, n = a.shape[-2:]
    k = min(m, n)
    if full_matrices and m != n and compute_uv:
        s = _svd_parts(_svd(a), m, n, k)[1]
        p = _svd_full(a)
        return _last(p, 0, m * m, (m, m)), s, _last(p, m * m, m * m + n * n, (n, n))
    u, s, vt = _svd_parts(_svd(a), m, n, k)
    return (u, s, vt) if compute_uv else s


# --- pinv / lstsq -------------------------------------------------------------------------------------------------
def _pinv_forward(a, rtol):
    m, n = a.shape[-2:]

    def f(x):
        return np.linalg.pinv(x, rcond=rtol) if rtol is not None else np.linalg.pinv(x)
    return _host(f, [a], math.prod(a.shape[:-2]) * m * n, a.dtype), a.shape[:-2] + (n, m), a.dtype


_pinv = Primitive("pinv", _pinv_forward)


@_pinv.def_vjp
def _pinv_vjp(g, a, out, rtol):
    # dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P   (constant rank; Golub & Pereyra 1973)
    p = out
    ga = -matmul(matmul(p, g, transpose_a=True), p, transpose_b=True)
    ap = matmul(a, p)
    pa = matmul(p, a)
    t2 = matmul(matmul(g, p, transpose_a=True), p, transpose_b=True)   # G^T P P^T
    ga = ga + t2 - matmul(ap, t2)
    t3 = matmul(matmul(p, p, transpose_a=True), g, transpose_b=True)   # P^T P G^T
    ga = ga + t3 - matmul(t3, pa)
    return (ga,)


def pinv(a, rcond=None):
    """Moore-Penrose pseudo-inverse of (..., m, n) matrices, shape (..., n, m) (numpy.linalg.pinv).

    Derivatives hold where the rank is locally constant (always for full-rank a)."""
    a = _float_matrix("pinv", "a", a)
    if rcond is not None and not isinstance(rcond, numbers.Real):
        raise TypeError(f"pinv: rcond={rcond!r}; expected a float or None.")
    return _pinv(a, rtol=None if rcond is None else float(rcond))


def lstsq(a, b, rcond=None):
    """Least-squares solution of a x = b (numpy.linalg.lstsq), through the pseudo-inverse.

    Args:
        a: (m, n) Tensor; b: (m,) or (m, k).
    Returns:
        (x, residuals, rank, s): x (n,) or (n, k); residuals = squared 2-norm of b - a x per column
        (always computed: numpy returns an empty array when rank < n or m <= n); rank: an int32 Tensor;
        s: singular values of a.
    """
    a = _float_matrix("lstsq", "a", a)
    b = as_tensor(b, a.dtype)
    _same_dtype("lstsq", a, b)
    if a.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ValueError(f"lstsq: a has shape {a.shape} and b has shape {b.shape}; expected a (m, n) and "
                         f"b ({a.shape[0]},) or ({a.shape[0]}, k).")
    x = matmul(pinv(a, rcond), b)
    r = matmul(a, x) - b
    resid = _sum(r * r, axis=0)
    s = svd(a, full_matrices=False, compute_uv=False)
    m, n = a.shape
    eps = np.finfo(backend.NP_DTYPES[a.dtype]).eps
    tol = (max(m, n) * eps if rcond is None else float(rcond)) * _max(s)
    rank = _sum((s > tol).astype("int32"))
    return x, resid, rank, s


# --- norm ---------------------------------------------------------------------------------------------------------------
def _safe_sqrt_sum_sq(x, axis, keepdims):
    return sqrt(_sum(x * x, axis=axis, keepdims=keepdims))


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector or matrix norm, numpy.linalg.norm's semantics.

    Vector ords: None/2, 1, inf, -inf, 0 (count, not differentiable), any other p. Matrix ords (2-D x
    or a 2-tuple ``axis``): None/'fro', 'nuc', 1, -1, 2, -2, inf, -inf.
    """
    x = as_tensor(x)
    if x.dtype not in ("float32", "float64"):
        from .runtime import default_dtype
        x = x.astype(default_dtype())
    if axis is None:
        if ord is None:
            r = _safe_sqrt_sum_sq(reshape(x, (-1,)), 0, False)
            return reshape(r, (1,) * x.ndim) if keepdims else r
        if x.ndim not in (1, 2):
            raise ValueError(f"norm: ord={ord!r} with axis=None needs a 1-D or 2-D x, got shape {x.shape}.")
        axis = tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    axes = tuple(int(a) % max(x.ndim, 1) for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes[0], keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError(f"norm: axis={axis!r}; expected None, an int or a pair of ints.")


def _vector_norm(x, ord, ax, keepdims):
    if ord is None or ord == 2:
        return _safe_sqrt_sum_sq(x, ax, keepdims)
    ax_ = _abs(x)
    if ord == np.inf:
        return _max(ax_, ax, keepdims)
    if ord == -np.inf:
        return _min(ax_, ax, keepdims)
    if ord == 1:
        return _sum(ax_, ax, keepdims)
    if ord == 0:
        return _sum((ax_ > 0).astype(x.dtype), ax, keepdims)
    if isinstance(ord, str):
        raise ValueError(f"norm: ord={ord!r} is a matrix norm; x is reduced over one axis.")
    p = float(ord)
    return _sum(ax_ ** p, ax, keepdims) ** (1.0 / p)


def _matrix_norm(x, ord, axes, keepdims):
    a0, a1 = axes
    if a0 == a1:
        raise ValueError(f"norm: axis={axes} repeats an axis.")
    if ord is None or ord == "fro":
        r = _sum(x * x, axis=axes, keepdims=keepdims)
        return sqrt(r)
    if ord in (1, -1, np.inf, -np.inf):
        row_ax, col_ax = (a0, a1) if ord in (1, -1) else (a1, a0)
        s = _sum(_abs(x), axis=row_ax, keepdims=True)
        r = _max(s, axis=col_ax, keepdims=True) if ord in (1, np.inf) else _min(s, axis=col_ax, keepdims=True)
        return r if keepdims else reshape(r, tuple(d for i, d in enumerate(x.shape) if i not in axes))
    if ord in (2, -2, "nuc"):
        rest = [i for i in range(x.ndim) if i not in axes]
        xm = transpose(x, rest + [a0, a1])
        s = svd(xm, full_matrices=False, compute_uv=False)
        r = _max(s, -1) if ord == 2 else _min(s, -1) if ord == -2 else _sum(s, -1)
        if keepdims:
            shape = list(x.shape)
            shape[a0] = shape[a1] = 1
            r = reshape(r, tuple(shape))
        return r
    raise ValueError(f"norm: ord={ord!r} is not a matrix norm; expected None, 'fro', 'nuc', 1, -1, 2, -2, inf, -inf.")
