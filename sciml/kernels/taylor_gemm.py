"""One kernel per narrow Taylor layer on CPU: the layer's GEMM and its activation's Taylor rule in one pass.

The fused PINN path (``pinn/fused.py``) ran each hidden layer as one BLAS GEMM over the stacked streams
(Z = H_prev W: (S*n, w_in) @ (w_in, w)) and then one pointwise Taylor kernel (``taylor_vec``) reading Z back.
On the PINN's skinny shapes OpenBLAS is slow: (41,600 x 32) @ (32 x 32) float32 takes ~3 ms on one thread here
(28 GFLOP/s). For narrow layers (w_in, w <= :data:`MAX_WIDTH`, w a multiple of the host's wide lanes) the
kernels below compute, per point r and per task of ``taylor_vec.ROWS`` points:

* forward (:func:`layer_forward`): the pre-activations z of all S streams of r as register vectors
  ``z[st] = sum_k H_prev[st, r, k] * W[k, :]`` (k in order; the rows of W gathered into vectors once per task),
  then exactly ``taylor_vec``'s rule: b added to the value stream, the activation's Taylor coefficients, the
  streams of h written, the derivative streams of z written for the adjoint (the value stream of z only for
  activations whose adjoint reads z), and the fused output layer where ``top`` is given. The first layer reads
  the points (one input stream) and takes its derivative streams from W's rows, as ``taylor_vec`` does.
* adjoint: the cotangent of a layer's h is dZ_next W_next^T, formed the same way inside the layer's adjoint
  kernel; that is ``taylor_vec.layer_backward`` with ``top = (dZ_next, W_next, w_next)`` (see
  ``taylor._vec_lanes``'s ``max_out``), called from ``pinn/fused.py``.

Each lane's sum runs over k in the same order whatever L or the thread split, so the bits depend on neither; they
differ from BLAS's (float32: last bits). Only where every vector buffer is aligned for the host's wide lanes and
w is a multiple of them (the Burgers main job's width 20 is not: it keeps the BLAS path and its bits).
``SCIML_TAYLOR_GEMM=0`` (or ``ENABLED[0] = False``) turns it off. Devices keep the GEMM + Taylor kernel path.
For float32 on Taichi's x64 CPU arch the forward's sums are FMAs (``fma_tile.axpy``, the same k order; measured
on W2/W3's steps: -0.7 to -1.2 ms of ~30 ms); ``SCIML_TAYLOR_GEMM_FMA=0`` (``FMA[0] = False``) turns that off.
"""
import os

from . import _common as C
from . import _vec as V
from . import fma_tile as FT
from . import taylor_vec as TV
from .. import backend

ENABLED = [os.environ.get("SCIML_TAYLOR_GEMM", "1").strip() != "0"]
BACKWARD = [os.environ.get("SCIML_TAYLOR_GEMM_BWD", "0").strip() == "1"]   # the fused adjoint (see module doc)
# the forward's sums with fused multiply-adds (fma_tile.py's axpy) for float32 on Taichi's x64 CPU arch;
# SCIML_TAYLOR_GEMM_FMA=0 turns it off (the multiply-add pairs of Taichi's JIT)
FMA = [os.environ.get("SCIML_TAYLOR_GEMM_FMA", "1").strip() != "0"]
# w_in and w at most: the sum over k is unrolled and W's vectors are hoisted per task, so the compile time grows
# steeply with the width. Measured (fresh Taichi cache, 5 Adam steps, load ~3): a 2-w-w-w-w-1 Burgers net
# compiled in 4.2 / 6.1 s without these kernels at w = 32 / 48 and in 12.2 / 36.2 s with them; DeepXDE's
# Lotka-Volterra net (1-64x6-2) took 227 s with them at 64 and 4.8 s without, for ~10 % more steps/s. Wider
# layers take BLAS + the Taylor kernel.
MAX_WIDTH = 32
# and the unrolled sum's length in vectors (w_in * w / L) at most: float64's vectors hold half as many lanes, so
# the same width unrolls twice as far. Measured (examples/poisson.py, float64, 2-32x4-1, 5 streams, fresh Taichi
# cache): 60 s with these kernels at w = 32 (45 s of it compiling them), 8 s without; warm, 300 Adam steps took
# 11.5-16.0 s with them and 10.3-11.1 s without: no gain to pay the compile for. float32 at w = 32 is 64.
MAX_UNROLL = 64


def lanes(act, w_in: int, w: int, dtype: str, o: int, ptrs):
    """The lanes of the fused GEMM + Taylor kernels for a layer (w_in -> w) whose vector buffers start at
    ``ptrs``, or None (BLAS GEMM + the Taylor kernel)."""
    from . import taylor as TK
    if (not ENABLED[0] or not TK.VEC[0] or act not in TK.VEC_ACTS or not backend.on_host()
            or dtype not in V.LANES or w_in > MAX_WIDTH or w > MAX_WIDTH or o > TK.VEC_MAX_OUT):
        return None
    L = V.wide(dtype)
    if L <= V.LANES[dtype] or w_in * (w // L) > MAX_UNROLL:   # a host without wide vectors, or a long unroll: BLAS
        return None
    if TV.lanes(w, dtype, ptrs) != L:
        return None
    return L


def host_lanes(act, w_in: int, w: int, dtype: str, o: int, *bufs):
    """:func:`lanes` (o >= 0) or :func:`backward_lanes` (o = -1: vectors over w_in, the sum over w) for these
    buffers; None off the host (device buffers have no address)."""
    if not backend.on_host():
        return None
    ptrs = [C.address(a) for a in bufs]
    if o < 0:
        return backward_lanes(act, w_in, w, dtype, ptrs)
    return lanes(act, w_in, w, dtype, o, ptrs)


def layer_forward(L, act, A, WM, b, Z, H, coords, pairs, n: int, w_in: int, w: int, first: bool, dtype: str,
                  top=None):
    """Z/H of one Taylor layer from its input rows A ((S*n, w_in) stacked streams; first: the (n, d) points)
    and its weights WM (w_in, w), b (w): ``taylor.layer_forward`` with the GEMM Z = A WM inside."""
    S = 1 + len(coords) + len(pairs)
    serial, tasks = TV._mode(n, w, S)
    WL, bL, OUT, o = top if top is not None else (b, b, b, 0)
    fma = _fma_ok(dtype, L)
    key = ("taylor_gfwd", act, dtype, L, w_in, w, first, o, serial, tuple(coords) if first else len(coords),
           tuple(pairs), fma)
    k = V.cached(key, lambda: _build_fwd(act, dtype, L, w_in, w // L, first, o, serial, tuple(coords),
                                         tuple(pairs), fma),
                 (1, 1, 1, L, L, 1, 1, 1), exact=True, dynamic=not serial)
    zrows = n if first else S * n
    rows_in = n if first else S * n
    TV._launch(k, (A, WM, b, Z, H, WL, bL, OUT),
               (C.address(A), C.address(WM), C.address(b), C.address(Z), C.address(H), C.address(WL),
                C.address(bL), C.address(OUT)),
               (rows_in * w_in, WM.shape[0], b.shape[0], zrows * w // L, S * n * w // L, WL.shape[0], bL.shape[0],
                OUT.shape[0]),
               (n, tasks))


def _fma_ok(dtype, L):
    """The forward's GEMM sums as FMAs (fma_tile.py): switched on, float32, Taichi's x64 CPU arch."""
    return bool(FMA[0] and dtype == "float32" and L in FT.AXPY_LANES and backend.on_host() and FT.available_once())


def _build_fwd(act, dtype, L, K, NV, first, o, serial, coords, pairs, fma=False):
    ti = C.ti()
    from taichi.lang.impl import expr_init
    T = backend.ti_dtype(dtype)
    VA = ti.types.ndarray(dtype=ti.types.vector(L, T), ndim=1)
    A_ = C.arr(dtype)
    fwd, _ = TV._coeffs(act, dtype, L)
    CL = V.LANES[dtype]
    CV = ti.types.vector(CL, T)
    VL = ti.types.vector(L, T)
    hsum, gather = TV._hsum(ti, CL), TV._gather(ti, T, L)
    n1, n2 = len(coords), len(pairs)
    S = 1 + n1 + n2
    S_in = 1 if first else S
    w = NV * L
    top = o > 0
    store_z = act != "tanh"   # the adjoint of tanh reads t = H instead of z

    @ti.kernel
    def k(A: A_, WM: A_, b: A_, Z: VA, H: VA, WL: A_, bL: A_, OUT: A_, n: ti.i32, tasks: ti.i32):
        if ti.static(serial):
            ti.loop_config(serialize=True)
        else:
            ti.loop_config(block_dim=1)
        for c in range(tasks):
            nv = n * NV
            bs = [expr_init(gather(b, jv * L, 1)) for jv in ti.static(range(NV))]
            wm = [[expr_init(gather(WM, kk * w + jv * L, 1)) for jv in ti.static(range(NV))]
                  for kk in ti.static(range(K))]
            wl = [[expr_init(gather(WL, jv * L * o + kk, o)) for jv in ti.static(range(NV))]
                  for kk in ti.static(range(o))]
            for r in range(c * TV.ROWS, ti.min(c * TV.ROWS + TV.ROWS, n)):
                # the GEMM: z[st] = sum_k A[st, r, k] W[k, :], k in order (every lane alike)
                za = [[expr_init(VL(ti.cast(0, T))) for jv in ti.static(range(NV))] for st in ti.static(range(S_in))]
                for kk in ti.static(range(K)):
                    for st in ti.static(range(S_in)):
                        x = expr_init(A[st * n * K + r * K + kk])
                        for jv in ti.static(range(NV)):
                            if ti.static(kk == 0):
                                za[st][jv] = expr_init(x * wm[kk][jv])
                            elif ti.static(fma):   # one vector FMA (fma_tile.py), same k order
                                FT.axpy(L, za[st][jv], x, wm[kk][jv])
                            else:
                                za[st][jv] = expr_init(za[st][jv] + x * wm[kk][jv])
                acc = [[expr_init(CV(ti.cast(0, T))) for kk in ti.static(range(o))] for st in ti.static(range(S))]
                for jv in ti.static(range(NV)):
                    e = r * NV + jv
                    z = za[0][jv] + bs[jv]
                    if ti.static(store_z):
                        Z[e] = z
                    s0, s1, s2 = fwd(z)
                    H[e] = s0
                    hs = [s0]
                    for q in ti.static(range(n1)):
                        if ti.static(first):
                            hs.append(expr_init(s1 * wm[coords[q]][jv]))
                        else:
                            Z[(1 + q) * nv + e] = za[1 + q][jv]
                            hs.append(expr_init(s1 * za[1 + q][jv]))
                        H[(1 + q) * nv + e] = hs[1 + q]
                    for p in ti.static(range(n2)):
                        a, cc = ti.static(pairs[p][0], pairs[p][1])
                        if ti.static(first):
                            hs.append(expr_init(s2 * wm[coords[a]][jv] * wm[coords[cc]][jv]))
                        else:
                            Z[(1 + n1 + p) * nv + e] = za[1 + n1 + p][jv]
                            hs.append(expr_init(s2 * za[1 + a][jv] * za[1 + cc][jv] + s1 * za[1 + n1 + p][jv]))
                        H[(1 + n1 + p) * nv + e] = hs[1 + n1 + p]
                    if ti.static(top):   # the output layer, as taylor_vec's (the same chunked order)
                        for st in ti.static(range(S)):
                            for kk in ti.static(range(o)):
                                pr = hs[st] * wl[kk][jv]
                                if ti.static(L == CL):
                                    acc[st][kk] = expr_init(acc[st][kk] + pr)
                                else:
                                    for q in ti.static(range(L // CL)):
                                        sub = ti.Vector([pr[q * CL + u] for u in ti.static(range(CL))], dt=T)
                                        acc[st][kk] = expr_init(acc[st][kk] + sub)
                if ti.static(top):
                    for st in ti.static(range(S)):
                        for kk in ti.static(range(o)):
                            v = hsum(acc[st][kk])
                            if ti.static(st == 0):
                                v += bL[kk]
                            OUT[st * n * o + r * o + kk] = v
    return k


def backward_lanes(act, w: int, w_next: int, dtype: str, ptrs):
    """The lanes of a layer's fused adjoint (width w, the next layer's width w_next: its cotangents
    dZ_next W_next^T formed inside) for vector buffers at ``ptrs`` (Z, H, G), or None (BLAS GEMM first)."""
    if not BACKWARD[0]:
        return None
    return lanes(act, w_next, w, dtype, 0, ptrs)   # the vectors run over w; w_next is the sum's length


def layer_backward(L, act, Z, HV, W, G, GN, WN, coords, pairs, n: int, w: int, w_next: int, first: bool,
                   dtype: str):
    """``taylor.layer_backward`` of one layer (width w) whose cotangents of h are GN WN^T (GN: the next
    layer's stacked z cotangents (S*n, w_next), WN: its weights (w, w_next)), formed per point inside the
    kernel: ``taylor_vec.layer_backward`` with the next layer as its fused ``top``. G is written."""
    TV.layer_backward(L, act, Z, HV, W if first else GN, G, coords, pairs, n, w, first, dtype, top=(GN, WN, w_next))


__all__ = ["BACKWARD", "ENABLED", "MAX_UNROLL", "MAX_WIDTH", "backward_lanes", "host_lanes", "lanes", "layer_backward",
           "layer_forward"]
