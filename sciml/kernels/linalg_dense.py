"""Dense factorizations as Taichi kernels (every arch): Cholesky, triangular solve, LU solve.

These serve devices (Vulkan, CUDA); on CPU, sciml.linalg calls LAPACK (through numpy/scipy) by
default and these kernels run only when asked (``sciml.linalg.use_lapack(False)``, and the tests).
Matrices are flat, row-major, batched: ``a`` holds ``batch`` matrices of n x n.

Parallelism: one invocation per matrix (Cholesky, LU) or per matrix column of the right-hand side
(triangular solve); the inner loops run serially in that invocation. That suits many small and
medium systems (n up to a few hundred); large single factorizations belong to LAPACK/cuSOLVER.
Non-positive pivots give NaN/inf (as LAPACK-backed JAX does), never an exception.
"""
from . import _common as C
from .. import backend


def cholesky(a, out, batch: int, n: int, dtype: str):
    """out[b] = L with L L^T = a[b] (lower triangle of a read; upper of out zeroed)."""
    k = C.cached(("chol", dtype), lambda: _build_chol(dtype))
    k(a, out, batch, n)


def triangular_solve(a, b, out, batch: int, n: int, m: int, lower: bool, trans: bool, unit: bool, dtype: str):
    """out[b] (n, m) = op(a[b])^{-1} b[b] with op = transpose if ``trans``; a (n, n) triangular."""
    k = C.cached(("trsm", dtype), lambda: _build_trsm(dtype))
    k(a, b, out, batch, n, m, int(lower != trans), int(trans), int(unit))


def lu_solve(a, b, out, batch: int, n: int, m: int, dtype: str):
    """out[b] (n, m) = a[b]^{-1} b[b] by LU with partial pivoting (scratch: a copy of a, pivots)."""
    lu = backend.empty(batch * n * n, dtype)
    piv = backend.empty(batch * n, "int32")
    k = C.cached(("lusolve", dtype), lambda: _build_lu(dtype))
    k(a, b, out, lu, piv, batch, n, m)


def _build_chol(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def chol(a: A, out: A, batch: ti.i32, n: ti.i32):
        for b in range(batch):
            base = b * n * n
            for j in range(n):
                s = a[base + j * n + j]
                for k in range(j):
                    s -= out[base + j * n + k] * out[base + j * n + k]
                d = ti.sqrt(s) if s > 0 else ti.cast(ti.math.nan, T)
                out[base + j * n + j] = d
                for i in range(j + 1, n):
                    t = a[base + i * n + j]
                    for k in range(j):
                        t -= out[base + i * n + k] * out[base + j * n + k]
                    out[base + i * n + j] = t / d
                for i in range(j):
                    out[base + i * n + j] = ti.cast(0, T)
    return chol


def _build_trsm(dtype):
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def trsm(a: A, rhs: A, out: A, batch: ti.i32, n: ti.i32, m: ti.i32, eff_lower: ti.i32, trans: ti.i32,
             unit: ti.i32):
        for t in range(batch * m):
            bb = t // m
            c = t % m
            base = bb * n * n
            rbase = bb * n * m
            for ii in range(n):
                i = ii if eff_lower != 0 else n - 1 - ii
                s = rhs[rbase + i * m + c]
                k0 = 0 if eff_lower != 0 else i + 1
                k1 = i if eff_lower != 0 else n
                for k in range(k0, k1):
                    aik = a[base + i * n + k] if trans == 0 else a[base + k * n + i]
                    s -= aik * out[rbase + k * m + c]
                if unit == 0:
                    s = s / a[base + i * n + i]
                out[rbase + i * m + c] = s
    return trsm


def _build_lu(dtype):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")

    @ti.kernel
    def lu(a: A, rhs: A, out: A, w: A, piv: I, batch: ti.i32, n: ti.i32, m: ti.i32):
        for b in range(batch):
            base = b * n * n
            rb = b * n * m
            pb = b * n
            for i in range(n * n):
                w[base + i] = a[base + i]
            for i in range(n * m):
                out[rb + i] = rhs[rb + i]
            for j in range(n):
                p = j
                best = ti.abs(w[base + j * n + j])
                for i in range(j + 1, n):
                    v = ti.abs(w[base + i * n + j])
                    if v > best:
                        best = v
                        p = i
                piv[pb + j] = p
                if p != j:
                    for k in range(n):
                        tmp = w[base + j * n + k]
                        w[base + j * n + k] = w[base + p * n + k]
                        w[base + p * n + k] = tmp
                    for k in range(m):
                        tmp = out[rb + j * m + k]
                        out[rb + j * m + k] = out[rb + p * m + k]
                        out[rb + p * m + k] = tmp
                d = w[base + j * n + j]
                for i in range(j + 1, n):
                    f = w[base + i * n + j] / d
                    w[base + i * n + j] = f
                    for k in range(j + 1, n):
                        w[base + i * n + k] -= f * w[base + j * n + k]
                    for k in range(m):
                        out[rb + i * m + k] -= f * out[rb + j * m + k]
            for c in range(m):  # back substitution with U
                for ii in range(n):
                    i = n - 1 - ii
                    s = out[rb + i * m + c]
                    for k in range(i + 1, n):
                        s -= w[base + i * n + k] * out[rb + k * m + c]
                    out[rb + i * m + c] = s / w[base + i * n + i]
    return lu
