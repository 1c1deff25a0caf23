"""A CPU GEMM for skinny float32 products: C (m, n) = A (m, k) @ W (k, n) with many rows m and a small W
(k <= :data:`MAX_K`, n a multiple of the host's wide lanes up to :data:`MAX_N`): the PINN's (10000 x 32) @
(32 x 32) and (41600 x 32) @ (32 x 32) (issue 18).

OpenBLAS is slow on these shapes: numpy's (10000 x 32) @ (32 x 32) float32 takes ~340-400 us on one thread
here (~55 GFLOP/s), ~185-200 us on two. This kernel keeps a row of C as n / L register vectors of L lanes
(16 float32 lanes with AVX-512), broadcasts each of the row's k values of A in turn and adds it times W's row
(W's rows gathered into vectors once per task of :data:`ROWS` rows), then stores the row.

Measured (one thread, thread CPU time, min of 9 rounds, load average 6.5 from other work): 361-368 us against
OpenBLAS's 399 us on one thread (0.9x its time); compiled without fast math it took 451-458 us. Two threads could
not be measured on this shared machine (the other core was always taken). Hence OFF by default:
``SCIML_SKINNY_GEMM=1`` (or ``ENABLED[0] = True``) turns it on, to be measured on an idle machine against
OpenBLAS's two threads before it becomes the default.

Each element of C is the sum over k in order 0..k-1 per lane (the same loop body whatever the thread split; the
serial and parallel compilations are checked bit for bit in tests/autodiff/test_matmul_paths.py); the bits differ
from BLAS's in the last places (float32). Used only for float32 (float64 keeps BLAS's bits), no transposes, no
accumulation, C 64-byte aligned (sciml's own large buffers are). Devices use the device GEMM.
"""
import os

from . import _common as C
from . import _vec as V

ENABLED = [os.environ.get("SCIML_SKINNY_GEMM", "0").strip() == "1"]  # off by default: see the module doc
MAX_K = 64          # k at most (the sum over k is unrolled)
MAX_N = 64          # n at most (a row of C in n / L registers)
MIN_WORK = 1 << 20  # m * n * k at least (below, BLAS's lower call cost wins)
ROWS = 64           # rows of C per task (W's vectors gathered once per task)


def lanes(m: int, n: int, k: int, ta: bool, tb: bool, dtype: str, accumulate: bool, out):
    """The lanes of the skinny kernel for this product, or None (BLAS)."""
    if (not ENABLED[0] or dtype != "float32" or ta or tb or accumulate or k > MAX_K or n > MAX_N
            or m * n * k < MIN_WORK or not out.flags.c_contiguous):
        return None
    L = V.wide(dtype)
    if L < 16 or n % L:  # AVX-512 hosts only (measured there); n whole vectors
        return None
    if V.lanes_for((C.address(out),), dtype) != L:
        return None
    return L


def matmul(a, w, out, m: int, n: int, k: int, L: int, serial: bool):
    """out[:m*n] = a[:m*k] (m, k) @ w[:k*n] (k, n) (flat float32 buffers; ``lanes`` said yes)."""
    tasks = (m + ROWS - 1) // ROWS
    kern = V.cached(("skinny_gemm", k, n, L, serial), lambda: _build(k, n, L, serial), (1, 1, L))
    ptrs = (C.address(a), C.address(w), C.address(out))
    counts = (m * k, k * n, m * n // L)
    if kern.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        kern.fast(ptrs, counts, (m, tasks))
    else:
        kern((a, w, out), ptrs, counts, (m, tasks))


def _build(K, N, L, serial):
    ti = C.ti()
    f32 = ti.f32
    NV = N // L
    VT = ti.types.vector(L, f32)
    S = ti.types.ndarray(dtype=f32, ndim=1)
    VA = ti.types.ndarray(dtype=VT, ndim=1)
    R = ROWS

    @ti.kernel
    def k(a: S, w: S, c: VA, m: ti.i32, tasks: ti.i32):
        ti.loop_config(serialize=serial)
        for t in range(tasks):
            wv = [VT([w[q // NV * N + q % NV * L + u] for u in ti.static(range(L))]) for q in ti.static(range(K * NV))]
            r0 = t * R
            for r in range(r0, ti.min(r0 + R, m)):
                acc = [VT(0.0) for _ in ti.static(range(NV))]
                for kk in ti.static(range(K)):
                    s = a[r * K + kk]
                    for j in ti.static(range(NV)):
                        acc[j] = acc[j] + s * wv[kk * NV + j]
                for j in ti.static(range(NV)):
                    c[r * NV + j] = acc[j]
    return k
