"""Matrix multiply: a register-tiled Taichi GEMM (every arch) and the CPU BLAS dispatch.

C[b] = op(A[b]) @ op(B[b]) with op = transpose when ``ta``/``tb``; A, B, C contiguous.
Each parallel iteration computes a 4x4 tile of C in registers, reading 4 values of A and 4
of B per k (TAICHI-NOTES.md: the best form found here, 27-69 GFLOP/s). On CPU, dense GEMM
dispatches to numpy's BLAS (3-10x faster here), the one place sciml routes around Taichi.
"""
import numpy as np

from . import _common as C
from .. import backend

TILE = 4
DEVICE_MAX_K = 2048


def matmul(a, b, out, batch: int, m: int, n: int, k: int, ta: bool, tb: bool, dtype: str, use_blas=None):
    """out (batch, m, n) = op(a) @ op(b) with a (batch, m, k) or (batch, k, m) if ta, etc."""
    if use_blas is None:
        use_blas = backend.on_host()
    if use_blas:
        A = a[: batch * m * k].reshape((batch, k, m) if ta else (batch, m, k))
        B = b[: batch * k * n].reshape((batch, n, k) if tb else (batch, k, n))
        if ta:
            A = A.transpose(0, 2, 1)
        if tb:
            B = B.transpose(0, 2, 1)
        np.matmul(A, B, out=out[: batch * m * n].reshape(batch, m, n))
        return
    if k > DEVICE_MAX_K and not backend.on_host():
        # one invocation per 4x4 tile must stay short on devices (see reduce.py): split k and add
        kern = C.cached(("gemm_k", dtype, ta, tb), lambda: _build(dtype, ta, tb, split=True))
        for k0 in range(0, k, DEVICE_MAX_K):
            kern(a, b, out, batch, m, n, k, k0, min(k0 + DEVICE_MAX_K, k), int(k0 > 0))
        return
    kern = C.cached(("gemm", dtype, ta, tb), lambda: _build(dtype, ta, tb))
    kern(a, b, out, batch, m, n, k)


def _build(dtype, ta, tb, split=False):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.func
    def tile(a: ti.template(), b: ti.template(), c: ti.template(), t, m, n, k, k0, k1, accum):
        nbi = (m + TILE - 1) // TILE
        nbj = (n + TILE - 1) // TILE
        bt = t // (nbi * nbj)
        rem = t % (nbi * nbj)
        i0 = (rem // nbj) * TILE
        j0 = (rem % nbj) * TILE
        oa = bt * m * k
        ob = bt * k * n
        acc = ti.Matrix.zero(T, TILE, TILE)
        for kk in range(k0, k1):
            av = ti.Vector.zero(T, TILE)
            bv = ti.Vector.zero(T, TILE)
            for ii in ti.static(range(TILE)):
                i = ti.min(i0 + ii, m - 1)
                if ti.static(ta):
                    av[ii] = a[oa + kk * m + i]
                else:
                    av[ii] = a[oa + i * k + kk]
            for jj in ti.static(range(TILE)):
                j = ti.min(j0 + jj, n - 1)
                if ti.static(tb):
                    bv[jj] = b[ob + j * k + kk]
                else:
                    bv[jj] = b[ob + kk * n + j]
            for ii in ti.static(range(TILE)):
                for jj in ti.static(range(TILE)):
                    acc[ii, jj] += av[ii] * bv[jj]
        for ii in ti.static(range(TILE)):
            for jj in ti.static(range(TILE)):
                if i0 + ii < m and j0 + jj < n:
                    o = bt * m * n + (i0 + ii) * n + j0 + jj
                    if accum != 0:
                        c[o] += acc[ii, jj]
                    else:
                        c[o] = acc[ii, jj]

    if split:
        @ti.kernel
        def gemm_k(a: A, b: A, c: A, batch: ti.i32, m: ti.i32, n: ti.i32, k: ti.i32, k0: ti.i32, k1: ti.i32,
                   accum: ti.i32):
            for t in range(batch * ((m + TILE - 1) // TILE) * ((n + TILE - 1) // TILE)):
                tile(a, b, c, t, m, n, k, k0, k1, accum)
        return gemm_k

    @ti.kernel
    def gemm(a: A, b: A, c: A, batch: ti.i32, m: ti.i32, n: ti.i32, k: ti.i32):
        for t in range(batch * ((m + TILE - 1) // TILE) * ((n + TILE - 1) // TILE)):
            tile(a, b, c, t, m, n, k, 0, k, 0)
    return gemm
