"""Matrix multiply: a register-tiled Taichi GEMM (every arch) and the CPU BLAS dispatch.

C[b] = op(A[b]) @ op(B[b]) with op = transpose when ``ta``/``tb``; A, B, C contiguous.
Each parallel iteration computes an 8x4 tile of C in registers, reading 8 values of A and 4
of B^T per k (B is transposed first, so both operands are read along k). On CPU, dense GEMM
dispatches to BLAS (3-10x faster here): a ctypes CBLAS (``kernels/blas.py``: Intel MKL on Intel
CPUs, numpy's bundled OpenBLAS elsewhere), else numpy's matmul; the one place sciml routes around
Taichi.
"""
import numpy as np

from . import _common as C
from .. import backend
from . import blas as _blas
from . import skinny_gemm as _skinny

TILE_I, TILE_J = 8, 4  # register tile of C (swept here: 8x4 beat 4x4, 4x8, 8x8, 6x8, 4x12)
DEVICE_MAX_K = 2048
# a GEMM traced inside a single-threaded block replays on one thread (below); False: at the process-wide
# count (benchmarks/bench_w4.py --replay-gemm-threads compares both; same bits, OpenBLAS splits m and n)
REPLAY_ONE_THREAD = True


def matmul(a, b, out, batch: int, m: int, n: int, k: int, ta: bool, tb: bool, dtype: str, use_blas=None,
           accumulate: bool = False):
    """out (batch, m, n) = op(a) @ op(b) with a (batch, m, k) or (batch, k, m) if ta, etc.
    With ``accumulate``, out += op(a) @ op(b) (BLAS beta = 1; the Taichi kernel's accumulate flag)."""
    if use_blas is None:
        use_blas = backend.on_host()
    if use_blas:
        if (batch == 1 and not ta and not accumulate and m * n * k >= _skinny.MIN_WORK
                and _skinny.run(a, b, out, m, n, k, tb, dtype, _blas.get_threads() == 1)):
            return  # skinny float32 products (skinny_gemm.py: the FMA kernel, or the opt-in one)
        if C.TRACE[0] is None and _numpy_call(a, b, out, batch, m, n, k, ta, tb, accumulate):
            return
        if C.TRACE[0] is not None and _blas.get_threads() == 1 and REPLAY_ONE_THREAD:
            # traced inside a single-threaded block (a batched-tangent pass runs its many small GEMMs on one
            # thread): the replay must too, or its GEMMs take the process-wide count (W4b replay under load
            # 2 threads: 126 of 175 ms in GEMMs)
            C.host_call(_host_matmul_1t, a, b, out, batch, m, n, k, ta, tb, dtype, accumulate)
        else:
            C.host_call(_host_matmul, a, b, out, batch, m, n, k, ta, tb, dtype, accumulate)
        return
    if not backend.on_host():  # devices: the strided split-K GEMM (kernels/blas.py: no transpose copies)
        _blas.device_gemm(a, b, out, batch, m, n, k, ta, tb, dtype, accumulate)
        return
    kern = C.cached(("gemm_nt", dtype), lambda: _build(dtype))
    # the kernel wants A as (m, k) and B as (n, k), both row-major ("B transposed": both operands
    # are read along k, 8x4 register tile; 3-5x faster here than reading B by columns)
    if ta:
        a = _transpose(a, batch, k, m, dtype)
    if not tb:
        b = _transpose(b, batch, k, n, dtype)
    step = k if backend.on_host() else DEVICE_MAX_K  # one invocation per tile must stay short on devices
    for k0 in range(0, k, step):
        kern(a, b, out, batch, m, n, k, k0, min(k0 + step, k), int(accumulate or k0 > 0))


def _host_matmul(a, b, out, batch, m, n, k, ta, tb, dtype, accumulate):
    """The CPU BLAS GEMM (a ctypes CBLAS: MKL or OpenBLAS, else numpy's matmul) on flat host buffers."""
    if _numpy_call(a, b, out, batch, m, n, k, ta, tb, accumulate):
        return
    if _blas.available() and dtype in ("float32", "float64") and m * n * k > 0 \
            and (batch <= 16 or m * n * k >= 1 << 15):  # many tiny GEMMs: numpy's batched loop
        mk, kn, mn = m * k, k * n, m * n
        for i in range(batch):
            _blas.gemm(a[i * mk:(i + 1) * mk], b[i * kn:(i + 1) * kn], out[i * mn:(i + 1) * mn], m, n, k,
                       ta, tb, dtype, accumulate)
        return
    if accumulate:
        tmp = np.empty(batch * m * n, out.dtype)
        _host_matmul(a, b, tmp, batch, m, n, k, ta, tb, dtype, False)
        out[: batch * m * n] += tmp
        return
    if batch == 1:  # 2-D views: numpy's plain GEMM path (a batch of 1 goes through the slower loop)
        A = a[: m * k].reshape((k, m) if ta else (m, k))
        B = b[: k * n].reshape((n, k) if tb else (k, n))
        np.matmul(A.T if ta else A, B.T if tb else B, out=out[: m * n].reshape(m, n))
        return
    A = a[: batch * m * k].reshape((batch, k, m) if ta else (batch, m, k))
    B = b[: batch * k * n].reshape((batch, n, k) if tb else (batch, k, n))
    if ta:
        A = A.transpose(0, 2, 1)
    if tb:
        B = B.transpose(0, 2, 1)
    np.matmul(A, B, out=out[: batch * m * n].reshape(batch, m, n))


def _numpy_call(a, b, out, batch, m, n, k, ta, tb, accumulate):
    """numpy's matmul where it calls the very cblas_?gemm of the ctypes path (numpy's OpenBLAS: the same library
    instance, the same arguments; tests/autodiff/test_matmul_paths.py checks the bits): ~5 us less per call than
    the ctypes call, and called straight from ``matmul`` when not tracing (no host_call / _host_matmul frames:
    after a large GEMM the interpreter's own data is out of the caches, and each Python step costs several
    times its hot cost; issue 18, the skinny PINN GEMMs). Not for vectors (numpy: gemv) nor a possible A @ A.T
    (numpy: syrk). False: not taken."""
    if batch != 1 or accumulate or m < 2 or n < 2 or k < 1 or (ta != tb and m == n):
        return False
    st = _blas._state  # blas.numpy_same()'s cached answer, read inline (it is checked against the library in use)
    c = st.get("npsame")
    if not (c[1] if c is not None and st["checked"] and c[0] is st["lib"] else _blas.numpy_same()):
        return False
    mk, kn, mn = m * k, k * n, m * n
    A = (a if a.size == mk else a[:mk]).reshape((k, m) if ta else (m, k))
    B = (b if b.size == kn else b[:kn]).reshape((n, k) if tb else (k, n))
    np.matmul(A.T if ta else A, B.T if tb else B, out=(out if out.size == mn else out[:mn]).reshape(m, n))
    return True


def _host_matmul_1t(a, b, out, batch, m, n, k, ta, tb, dtype, accumulate):
    """:func:`_host_matmul` with one GEMM thread (what a jit replay of a single-threaded trace runs)."""
    with _blas.threads(1):
        _host_matmul(a, b, out, batch, m, n, k, ta, tb, dtype, accumulate)


def _transpose(x, batch: int, rows: int, cols: int, dtype: str):
    """(batch, rows, cols) -> (batch, cols, rows), a new contiguous buffer."""
    from . import index as K
    n = batch * rows * cols
    out = backend.empty(n, dtype)
    K.strided_gather(x, out, n, K.view_meta(0, (batch, cols, rows), (rows * cols, 1, cols)), dtype)
    return out


def _build(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    TI, TJ = TILE_I, TILE_J

    @ti.kernel
    def gemm_nt(a: A, bt: A, c: A, batch: ti.i32, m: ti.i32, n: ti.i32, k: ti.i32, k0: ti.i32, k1: ti.i32,
                accum: ti.i32):
        nbi = (m + TI - 1) // TI
        nbj = (n + TJ - 1) // TJ
        for t in range(batch * nbi * nbj):
            bt_ = t // (nbi * nbj)
            rem = t % (nbi * nbj)
            i0 = (rem // nbj) * TI
            j0 = (rem % nbj) * TJ
            acc = ti.Matrix.zero(T, TI, TJ)
            ra = ti.Vector.zero(ti.i32, TI)  # row starts (edge tiles repeat the last row; not stored)
            rb = ti.Vector.zero(ti.i32, TJ)
            for ii in ti.static(range(TI)):
                ra[ii] = bt_ * m * k + ti.min(i0 + ii, m - 1) * k
            for jj in ti.static(range(TJ)):
                rb[jj] = bt_ * n * k + ti.min(j0 + jj, n - 1) * k
            for kk in range(k0, k1):
                av = ti.Vector.zero(T, TI)
                bv = ti.Vector.zero(T, TJ)
                for ii in ti.static(range(TI)):
                    av[ii] = a[ra[ii] + kk]
                for jj in ti.static(range(TJ)):
                    bv[jj] = bt[rb[jj] + kk]
                for ii in ti.static(range(TI)):
                    for jj in ti.static(range(TJ)):
                        acc[ii, jj] += av[ii] * bv[jj]
            for ii in ti.static(range(TI)):
                for jj in ti.static(range(TJ)):
                    if i0 + ii < m and j0 + jj < n:
                        o = bt_ * m * n + (i0 + ii) * n + j0 + jj
                        if accum != 0:
                            c[o] += acc[ii, jj]
                        else:
                            c[o] = acc[ii, jj]
    return gemm_nt
