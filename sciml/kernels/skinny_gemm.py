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

The FMA kernel (opt-in: ``SCIML_SKINNY_FMA=1`` or ``FMA[0] = True``; on an idle machine the W2 step took 23.5-25.9 ms
with it against 19.7-20.7 ms with the fused path's split BLAS, same process conditions, 2026-11-28 15:25 UTC, load
0.1-0.9, while under load 4.6 it was ~10 % faster: see docs/perf.md "FMA tiles for the PINN GEMMs"): Taichi's JIT
forms no FMA, so the sums above cost a multiply and an add per lane; ``fma_tile.axpy`` (LLVM bitcode linked into
the kernel, one ``llvm.fma`` on locals: no raw addresses, so sciml.jit's replays rebind the arrays as for any
kernel) does both in one instruction, and a register tile of RB rows (RB_SUMS = 12 independent vector sums) hides
its latency. float32, k and n <= :data:`FMA_MAX` (32), also ``tb`` (C = A W^T, W's columns gathered per task).
Measured (2026-11-28, load 4.5-5.5, one thread, thread CPU time, min of 5-7, interleaved with numpy): (41600 x
32) @ (32 x 32) 1.00-1.17 ms against OpenBLAS's 1.59-1.79 ms (~85 against ~55 GFLOP/s), A W^T 1.16-1.27 ms, (10400
x 32) @ (32 x 32) 331 against 342 us. It runs where BLAS runs on one thread, and on the fused PINN path
(``pinn/fused_gemm._gemm``: there it replaces the split of two single-threaded BLAS calls); beside OpenBLAS's own
threads it stays BLAS (not measured faster on this shared machine). :func:`run_tn` is the weight gradient H^T G
(k = 41,600 rows: 1.34-1.67 ms against OpenBLAS's 2.2-2.4 ms on one thread), on the fused path only.

Each element of C is the sum over k in order 0..k-1 per lane (the same loop body whatever the thread split; the
serial and parallel compilations are checked bit for bit in tests/autodiff/test_matmul_paths.py and
test_skinny_fma.py); the bits differ from BLAS's in the last places (float32). Used only for float32 (float64 keeps
BLAS's bits), no transposed A, no accumulation, C 64-byte aligned (sciml's own large buffers are). Devices use the
device GEMM.
"""
import os
import warnings

from .. import backend
from . import _common as C
from . import _vec as V
from . import fma_tile as FT

# the unrolled sum over k (up to MAX_K terms) is meant: Taichi's compile-time warning is noise here
warnings.filterwarnings("ignore", message=r"\s*You are unrolling more than", category=SyntaxWarning)

ENABLED = [os.environ.get("SCIML_SKINNY_GEMM", "0").strip() == "1"]  # off by default: see the module doc
# the FMA kernel (fma_tile.py's axpy, RB-row register tiles) where available; SCIML_SKINNY_FMA=1 turns it on
FMA = [os.environ.get("SCIML_SKINNY_FMA", "0").strip() == "1"]  # opt-in: slower than split BLAS on an idle machine
MAX_K = 64          # k at most (the sum over k is unrolled)
MAX_N = 64          # n at most (a row of C in n / L registers)
MIN_WORK = 1 << 20  # m * n * k at least (below, BLAS's lower call cost wins)
ROWS = 64           # rows of C per task (W's vectors gathered once per task)
FMA_ROWS = 256      # rows per task of the FMA kernel (its gather of W is a larger share of a task)
FMA_MAX = 32        # k and n at most for the FMA kernel (measured at 32: 64 x 64 was within 10 % of BLAS, 40 s to compile)
RB_SUMS = 12        # vector sums per register tile of the FMA kernel: RB = RB_SUMS // (n / L) rows (8: ~15 % slower)


def fma_ok(dtype="float32") -> bool:
    """The FMA kernel can run: switched on, float32, Taichi's x64 CPU arch with the bitcode (fma_tile.py)."""
    return bool(FMA[0] and dtype == "float32" and V.wide(dtype) in FT.AXPY_LANES and backend.on_host()
                and FT.available_once())


def _fma_for(k, n, dtype, allow=True):
    return bool(allow and fma_ok(dtype) and k <= FMA_MAX and n <= FMA_MAX)


def lanes(m: int, n: int, k: int, ta: bool, tb: bool, dtype: str, accumulate: bool, out, fma_allowed=True):
    """The lanes of the skinny kernel for this product, or None (BLAS). ``tb`` (C = A W^T, W stored (n, k))
    with the FMA kernel only; ``fma_allowed`` False: the opt-in kernel without FMA only."""
    fma = _fma_for(k, n, dtype, fma_allowed)
    if (not (ENABLED[0] or fma) or dtype != "float32" or ta or (tb and not fma) or accumulate or k > MAX_K
            or n > MAX_N or m * n * k < MIN_WORK or not out.flags.c_contiguous):
        return None
    L = V.wide(dtype)
    if L < 16 or n % L:  # AVX-512 hosts only (measured there); n whole vectors
        return None
    if V.lanes_for((C.address(out),), dtype) != L:
        return None
    return L


def run(a, w, out, m: int, n: int, k: int, tb: bool, dtype: str, serial: bool, parallel_fma: bool = False) -> bool:
    """out = a @ w (``tb``: a @ w^T) with this kernel where :func:`lanes` allows (True), else nothing (False):
    the hook of ``kernels/linalg.matmul`` and of the fused PINN path's ``_gemm``. The FMA kernel runs serial
    (where BLAS runs on one thread: measured 1.2-1.5x its speed) or where the caller says ``parallel_fma`` (the
    fused path, where it replaces two single-threaded BLAS halves); against OpenBLAS's own threads it was not
    measured faster (they fight Taichi's pool on this shared machine), so there it stays BLAS."""
    if not backend.on_host():
        return False
    fma = serial or parallel_fma
    L = lanes(m, n, k, False, tb, dtype, False, out, fma)
    if L is None:
        return False
    matmul(a, w, out, m, n, k, L, serial, tb, _fma_for(k, n, dtype, fma))
    return True


TN_CHUNK = 1024   # rows of the reduction per task of the weight-gradient kernel (fixed: the bits)
TN_KB = 8         # rows of C per register tile of that kernel (TN_KB * n / L sums over the chunk's rows)
TN_MIN_K = 16384  # reduction length at least (at 5,000 numpy's BLAS won)


def run_tn(h, g, out, m: int, n: int, k: int, dtype: str, serial: bool) -> bool:
    """out (m, n) = h^T g with h (k, m), g (k, n) and k long (a layer's weight gradient H^T G) with the FMA
    kernel where it applies (True), else nothing (False). The reduction runs in fixed chunks of
    :data:`TN_CHUNK` rows (partial sums, k in order inside a chunk), then the partials are added in chunk order:
    the same bits whatever the thread split."""
    if not (backend.on_host() and fma_ok(dtype)) or m > FMA_MAX or n > FMA_MAX or k < TN_MIN_K:
        return False
    L = V.wide(dtype)
    if n % L or V.lanes_for((C.address(g),), dtype) != L:
        return False
    tasks = (k + TN_CHUNK - 1) // TN_CHUNK
    part = backend.aligned_empty(tasks * m * n, dtype)
    kt = V.cached(("skinny_gemm_tn", m, n, L, serial), lambda: _build_tn(m, n, L, serial), (1, L, L))
    kr = V.cached(("skinny_gemm_tn_sum", m, n, L), lambda: _build_tn_sum(m, n, L), (L, 1))
    kt((h, g, part), (C.address(h), C.address(g), C.address(part)), (k * m, k * n // L, tasks * m * n // L),
       (k, tasks))
    kr((part, out), (C.address(part), C.address(out)), (tasks * m * n // L, m * n), (tasks,))
    return True


def _build_tn(M, N, L, serial):
    ti = C.ti()
    from taichi.lang.impl import expr_init
    VT = ti.types.vector(L, ti.f32)
    S = ti.types.ndarray(dtype=ti.f32, ndim=1)
    VA = ti.types.ndarray(dtype=VT, ndim=1)
    NV = N // L
    blocks = [(i0, min(TN_KB, M - i0)) for i0 in range(0, M, TN_KB)]

    @ti.kernel
    def kt(h: S, g: VA, part: VA, k: ti.i32, tasks: ti.i32):
        ti.loop_config(serialize=serial)
        for t in range(tasks):
            r0 = t * TN_CHUNK
            r1 = ti.min(r0 + TN_CHUNK, k)
            for bi in ti.static(range(len(blocks))):
                i0, nb = ti.static(blocks[bi])
                acc = [[expr_init(VT(0.0)) for _j in ti.static(range(NV))] for _i in ti.static(range(nb))]
                for r in range(r0, r1):
                    gv = [expr_init(g[r * NV + j]) for j in ti.static(range(NV))]
                    for i in ti.static(range(nb)):
                        s = expr_init(h[r * M + i0 + i])
                        for j in ti.static(range(NV)):
                            FT.axpy(L, acc[i][j], s, gv[j])
                for i in ti.static(range(nb)):
                    for j in ti.static(range(NV)):
                        part[(t * M + i0 + i) * NV + j] = acc[i][j]
    return kt


def _build_tn_sum(M, N, L):
    ti = C.ti()
    VT = ti.types.vector(L, ti.f32)
    S = ti.types.ndarray(dtype=ti.f32, ndim=1)
    VA = ti.types.ndarray(dtype=VT, ndim=1)
    E = M * N // L

    @ti.kernel
    def kr(part: VA, out: S, tasks: ti.i32):
        ti.loop_config(serialize=True)
        for e in range(E):
            v = part[e]
            for t in range(1, tasks):   # the chunks' partial sums in order
                v += part[t * E + e]
            for u in ti.static(range(L)):
                out[e * L + u] = v[u]
    return kr


def matmul(a, w, out, m: int, n: int, k: int, L: int, serial: bool, tb: bool = False, fma=None):
    """out[:m*n] = a[:m*k] (m, k) @ w[:k*n] (k, n) (``tb``: w (n, k), its transpose) (flat float32 buffers;
    ``lanes`` said yes; ``fma``: the FMA kernel, None: where it can run)."""
    if fma is None:
        fma = _fma_for(k, n, "float32")
    R = FMA_ROWS if fma else ROWS
    tasks = (m + R - 1) // R
    kern = V.cached(("skinny_gemm", k, n, L, serial, fma, tb), lambda: _build(k, n, L, serial, fma, tb), (1, 1, L))
    ptrs = (C.address(a), C.address(w), C.address(out))
    counts = (m * k, k * n, m * n // L)
    if kern.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        kern.fast(ptrs, counts, (m, tasks))
    else:
        kern((a, w, out), ptrs, counts, (m, tasks))


def _build(K, N, L, serial, fma=False, tb=False):
    ti = C.ti()
    from taichi.lang.impl import expr_init
    f32 = ti.f32
    NV = N // L
    VT = ti.types.vector(L, f32)
    S = ti.types.ndarray(dtype=f32, ndim=1)
    VA = ti.types.ndarray(dtype=VT, ndim=1)
    R = FMA_ROWS if fma else ROWS
    RB = max(1, RB_SUMS // NV)   # (more would spill; the compile time grows with RB * NV * K, ~80 s at 16 * 64)

    if fma:
        @ti.kernel
        def kf(a: S, w: S, c: VA, m: ti.i32, tasks: ti.i32):
            ti.loop_config(serialize=serial)
            for t in range(tasks):
                # W's row kk, lanes j L .. j L + L (tb: column kk of the stored (N, K))
                wv = [expr_init(VT([w[(q % NV * L + u) * K + q // NV] if ti.static(tb) else w[q // NV * N + q % NV * L + u]
                                    for u in ti.static(range(L))])) for q in ti.static(range(K * NV))]
                r0 = t * R
                r1 = ti.min(r0 + R, m)
                nb = (r1 - r0) // RB
                for bt in range(nb + r1 - r0 - nb * RB):
                    # the RB-row register tiles, then the task's last rows one at a time (nr = 1)
                    for nr in ti.static((RB, 1)):
                        if (bt < nb) == ti.static(nr == RB):
                            r = r0 + bt * RB if ti.static(nr == RB) else r0 + nb * RB + bt - nb
                            acc = [[expr_init(VT(0.0)) for _j in ti.static(range(NV))] for _i in ti.static(range(nr))]
                            for kk in ti.static(range(K)):  # k in order (the first term a product)
                                for i in ti.static(range(nr)):
                                    s = expr_init(a[(r + i) * K + kk])
                                    for j in ti.static(range(NV)):
                                        if ti.static(kk == 0):
                                            acc[i][j] = expr_init(s * wv[j])
                                        else:
                                            FT.axpy(L, acc[i][j], s, wv[kk * NV + j])
                            for i in ti.static(range(nr)):
                                for j in ti.static(range(NV)):
                                    c[(r + i) * NV + j] = acc[i][j]
        return kf

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
