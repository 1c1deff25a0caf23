"""Shared pieces of the fused recurrent layers (``rnn_seq.py``): copies between flat buffers, the per-step
GEMM (BLAS on CPU on one thread for small steps, a Taichi kernel on devices) and the float32 vector forms of
tanh/sigmoid the vector cell kernels use (the float32 rational tanh of ``elementwise``, every constant typed).
"""
from . import _common as C
from . import blas as _blas
from .linalg import _host_matmul
from .. import backend


def _build_copy(dtype, serial, add):
    """dst[d0 + i] = src[s0 + i] (``add``: +=), i < n."""
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def k(src: A, s0: ti.i32, dst: A, d0: ti.i32, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            if ti.static(add):
                dst[d0 + i] += src[s0 + i]
            else:
                dst[d0 + i] = src[s0 + i]
    return k


def _host_copy(src, s0, dst, d0, n):
    dst[d0:d0 + n] = src[s0:s0 + n]


def copy(src, s0: int, dst, d0: int, n: int, dtype: str, add: bool = False):
    """dst[d0:d0+n] = src[s0:s0+n] (``add``: +=) on flat buffers (on CPU a plain copy is a memcpy)."""
    if n and not add and backend.on_host():
        C.host_call(_host_copy, src, s0, dst, d0, n)
    elif n:
        serial = C.launch_mode(n, C.CHEAP)
        C.cached(("rec_copy", dtype, serial, add), lambda: _build_copy(dtype, serial, add))(src, s0, dst, d0, n)


def _build_step_gemm(dtype, trans):
    """Device GEMM of one step at buffer offsets. trans=False: out[o + b*N + n] += sum_k a[a0 + b*K + k] *
    W[n*K + k] (h W^T, W (N, K)); trans=True: out[o + b*N + n] = sum_k a[a0 + b*K + k] * W[k*N + n]
    (dG W, W (K, N))."""
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def k(a: A, a0: ti.i32, W: A, out: A, o: ti.i32, B: ti.i32, N: ti.i32, K: ti.i32):
        for b, n in ti.ndrange(B, N):
            s = a[a0] * 0
            for kk in range(K):
                if ti.static(trans):
                    s += a[a0 + b * K + kk] * W[kk * N + n]
                else:
                    s += a[a0 + b * K + kk] * W[n * K + kk]
            if ti.static(trans):
                out[o + b * N + n] = s
            else:
                out[o + b * N + n] += s
    return k


STEP_THREADS_BELOW = 1 << 22  # m*n*k below which the steps' GEMMs run on one BLAS thread


def _host_gemm(a, a0, W, out, o, m, n, k, trans_w, accumulate, dtype):
    """One step's GEMM on host buffers at offsets (the ctypes BLAS directly, else numpy's matmul)."""
    av, ov = a[a0:a0 + m * k], out[o:o + m * n]
    if not _blas.gemm(av, W, ov, m, n, k, False, not trans_w, dtype, accumulate):
        _host_matmul(av, W, ov, 1, m, n, k, False, not trans_w, dtype, accumulate)


def _step_threads(m, n, k):
    """A step's GEMM is small (32 x 512 x 128 in the benchmark) and the steps are sequential: on one BLAS thread
    it does not wait for a second one (measured on the loaded 2-core machine: 0.5-1.4 ms on one OpenBLAS thread
    against 3-36 ms on two). The eager loop runs inside this context; a jit replay keeps the process's count."""
    import contextlib
    if backend.on_host() and m * n * k < STEP_THREADS_BELOW:
        return _blas.threads(1)
    return contextlib.nullcontext()


# --- 16-byte vector forms of the cell kernels (CPU, float32, H % 4 == 0, aligned buffers; see _vec.py) ----
VECTOR = True  # False: the scalar kernels only (what devices run)


def _vec_funcs():
    ti = C.ti()
    from .elementwise import _F32_TANH
    T = ti.f32
    a1, a3, a5, a7, a9, a11, a13, b0, b2, b4, b6 = _F32_TANH

    @ti.func
    def ratio(x):  # elementwise._tanh_ratio with every constant typed f32 (an untyped literal is f64 in a
        c = ti.cast(7.90531110763549805, T)  # float64-default process, and a f64 constant next to an f32 vector
        xc = ti.select(x > c, c, ti.select(x < -c, -c, x))  # crashes; see _vec.py)
        x2 = xc * xc
        p = x2 * ti.cast(a13, T) + ti.cast(a11, T)
        p = x2 * p + ti.cast(a9, T)
        p = x2 * p + ti.cast(a7, T)
        p = x2 * p + ti.cast(a5, T)
        p = x2 * p + ti.cast(a3, T)
        p = x2 * p + ti.cast(a1, T)
        p = xc * p
        q = x2 * ti.cast(b6, T) + ti.cast(b4, T)
        q = x2 * q + ti.cast(b2, T)
        q = x2 * q + ti.cast(b0, T)
        one = ti.cast(1, T)
        sat = ti.cast(9.0, T)
        return ti.select(x > sat, one, ti.select(x < -sat, -one, p / q))

    @ti.func
    def tanh(x):  # the scalar kernels' tanh32: x itself where |x| < 4e-4
        return ti.select(x * x < ti.cast(1.6e-7, T), x, ratio(x))

    @ti.func
    def sig(x):
        h = ti.cast(0.5, T)
        return h * tanh(h * x) + h
    return tanh, sig

