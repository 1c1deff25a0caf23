"""Vector-lane forms of the order-2 fused Taylor kernels (``taylor.layer_forward`` / ``layer_backward``) on CPU.

The scalar kernels in :mod:`sciml.kernels.taylor` run one element at a time: Taichi reloads every ndarray's
data pointer after each store, so LLVM does not vectorise them (docs/perf.md, "CPU code generation"). Here
the stacked streams (Z, H, G: flat (S*n, w) row-major buffers) are passed as ndarrays of
``ti.types.vector(L, T)``: a row of w units is V = w / L vectors, and every stream update, the rational
float32 tanh and its derivative coefficients run on whole vectors (16 float32 lanes in zmm registers on
AVX-512, 8 on AVX2; kernels/_vec.py). The small operands (the bias b, the first layer's weight rows W[c, :],
the fused output layer's W_out) stay scalar ndarrays: their vectors are gathered once per task of ROWS
rows (hoisted out of the row loop), not per row. A launch runs the tasks on idle threads in turn
(``_vec.VecLaunch(dynamic=True)``), or serialized when the loop is small or the host busy.

The kernels are compiled without fast math (``exact=True``: IEEE arithmetic, no reassociation), so the
serialized and the parallel kernel give the same bits and the host's load (``_common.busy``) only picks
the faster of two identical paths. With fast math, LLVM reassociated the fused output layer's sum over the
w units differently in the two compilations (2,018 of 32,768 float32 outputs differed in the last bits at
n = 8192), and the float32 Burgers main job's end point moved with the machine's load (rel. L2 2.7e-5 vs
3.8e-5). Measured here (n = 8192, w = 20, S = 4, forward + backward of the output layer): no slower.

Chosen per call by :func:`lanes`: the widest L (host width down to 16 bytes) that divides w and every
stream buffer's address is aligned for; None (w odd, a misaligned buffer, a device arch): the scalar
kernels run. Results equal the scalar kernels' elementwise (same formulas, same order); the fused output
layer's sum over the w units is taken in an order that does not depend on L: the products in chunks of
CL = ``_vec.LANES`` units (4 float32, 2 float64; every L is a multiple), the chunks added in unit order
into a CL-lane accumulator, then its lanes in order, then the bias. So the host's vector width (AVX2,
AVX-512) and the buffers' alignment (which pick L) do not change the bits; they differ from the scalar
kernels' in the last bits (float32). (Summed as L-lane vectors and then across the L lanes, as before,
the order moved with L.)

Used for tanh (``taylor.VEC_ACTS``), the PINN activation: the rational float32 tanh on vectors, float64's
``ti.tanh`` lane by lane. The kernels also take the other activations (``taylor._act`` lane by lane), but their
libm calls per element gain little and gelu's unrolled lanes compile for minutes, so those run the scalar kernels.
"""
import warnings

from . import _common as C
from . import _vec as V
from . import elementwise as E
from . import taylor as TK
from .. import backend

ROWS = 32   # rows per task (w = 32, S = 4 float32: 16 KB of each of Z and H)


def lanes(w: int, dtype: str, ptrs):
    """Lanes for streams of width ``w`` whose buffers start at ``ptrs``, or None (scalar kernels)."""
    if not backend.on_host() or dtype not in V.LANES:
        return None
    item = 4 if dtype == "float32" else 8
    acc = 0
    for p in ptrs:
        acc |= p
    L = V.wide(dtype)
    while L >= V.LANES[dtype]:
        if w % L == 0 and not acc & (L * item - 1):
            return L
        L //= 2
    return None


def _mode(n, w, S):
    serial = C.launch_mode(n * w * S) or C.busy()
    return serial, (n + ROWS - 1) // ROWS


def layer_forward(L, act, Z, b, W, H, coords, pairs, n: int, w: int, first: bool, dtype: str, top=None):
    """``taylor.layer_forward`` with L lanes (Z, H aligned for L; w % L == 0)."""
    S = 1 + len(coords) + len(pairs)
    serial, tasks = _mode(n, w, S)
    WL, bL, OUT, o = top if top is not None else (b, b, b, 0)
    key = ("taylor_vfwd", act, dtype, L, w, first, o, serial, tuple(coords) if first else len(coords), tuple(pairs))
    k = V.cached(key, lambda: _build_fwd(act, dtype, L, w // L, first, o, serial, tuple(coords), tuple(pairs)),
                 (L, 1, 1, L, 1, 1, 1), exact=True, dynamic=not serial)
    Wf = W if first else b
    rows = n if first else S * n
    _launch(k, (Z, b, Wf, H, WL, bL, OUT),
      (C.address(Z), C.address(b), C.address(Wf), C.address(H), C.address(WL), C.address(bL), C.address(OUT)),
      (rows * w // L, b.shape[0], Wf.shape[0], S * n * w // L, WL.shape[0], bL.shape[0], OUT.shape[0]),
      (n, tasks))


def layer_backward(L, act, Z, HV, W, G, coords, pairs, n: int, w: int, first: bool, dtype: str, top=None):
    """``taylor.layer_backward`` with L lanes (Z, HV, G aligned for L; w % L == 0)."""
    S = 1 + len(coords) + len(pairs)
    serial, tasks = _mode(n, w, S)
    GOUT, WL, o = top if top is not None else (G, G, 0)
    key = ("taylor_vbwd", act, dtype, L, w, first, o, serial, tuple(coords) if first else len(coords), tuple(pairs))
    k = V.cached(key, lambda: _build_bwd(act, dtype, L, w // L, first, o, serial, tuple(coords), tuple(pairs)),
                 (L, L, 1, L, 1, 1), exact=True, dynamic=not serial)
    Wf = W if first else GOUT
    rows = n if first else S * n
    _launch(k, (Z, HV, Wf, G, GOUT, WL),
      (C.address(Z), C.address(HV), C.address(Wf), C.address(G), C.address(GOUT), C.address(WL)),
      (rows * w // L, S * n * w // L, Wf.shape[0], S * n * w // L, GOUT.shape[0], WL.shape[0]),
      (n, tasks))


def _launch(k, arrays, ptrs, counts, scalars):
    if k.fast is not None or C.TRACE[0] is not None:
        return k(arrays, ptrs, counts, scalars)
    with warnings.catch_warnings():   # the first call compiles: the kernels build their unrolled lists of
        warnings.simplefilter("ignore", SyntaxWarning)   # vectors with list.append, which Taichi warns about
        return k(arrays, ptrs, counts, scalars)


def _coeffs(act, dtype, L):
    """ti.func z -> (s, s', s'') as three L-vectors (forward), and t -> (s', s'', s''') for tanh's adjoint."""
    ti = C.ti()
    T = backend.ti_dtype(dtype)
    fast = act == "tanh" and dtype == "float32"
    tanh_v = E.exp_funcs(L)["tanh"] if fast else None
    f = TK._act(act, dtype)

    @ti.func
    def fwd(z):
        one, m2 = ti.cast(1, T), ti.cast(-2, T)
        s0, s1, s2 = z, z, z
        if ti.static(fast):
            s0 = tanh_v(z)
            s1 = one - s0 * s0
            s2 = m2 * s0 * s1
        else:
            for u in ti.static(range(L)):
                c = f(z[u])
                s0[u] = c[0]
                s1[u] = c[1]
                s2[u] = c[2]
        return s0, s1, s2

    @ti.func
    def bwd_t(t):   # tanh: the coefficients from t = tanh(z) (taylor._coeffs_from_tanh)
        one, m2, two = ti.cast(1, T), ti.cast(-2, T), ti.cast(2, T)
        s1 = one - t * t
        return s1, m2 * t * s1, m2 * s1 * (s1 - two * t * t)

    @ti.func
    def bwd_z(z):
        s1, s2, s3 = z, z, z
        for u in ti.static(range(L)):
            c = f(z[u])
            s1[u] = c[1]
            s2[u] = c[2]
            s3[u] = c[3]
        return s1, s2, s3
    return fwd, (bwd_t if act == "tanh" else bwd_z)


def _hsum(ti, L):
    @ti.func
    def hsum(v):
        acc = v[0]
        for u in ti.static(range(1, L)):
            acc += v[u]
        return acc
    return hsum


def _gather(ti, T, L):
    @ti.func
    def gather(a: ti.template(), base, stride: ti.template()):
        return ti.Vector([a[base + u * stride] for u in ti.static(range(L))], dt=T)
    return gather


def _build_fwd(act, dtype, L, NV, first, o, serial, coords, pairs):
    ti = C.ti()
    from taichi.lang.impl import expr_init
    T = backend.ti_dtype(dtype)
    VA = ti.types.ndarray(dtype=ti.types.vector(L, T), ndim=1)
    A = C.arr(dtype)
    fwd, _ = _coeffs(act, dtype, L)
    CL = V.LANES[dtype]   # the chunk of the output layer's sum: the narrowest lanes, which every L is a multiple of
    CV = ti.types.vector(CL, T)
    hsum, gather = _hsum(ti, CL), _gather(ti, T, L)
    n1, n2 = len(coords), len(pairs)
    S = 1 + n1 + n2
    w = NV * L
    top = o > 0
    store_z = act != "tanh"   # the adjoint of tanh reads t = H instead of z

    @ti.kernel
    def k(Z: VA, b: A, W: A, H: VA, WL: A, bL: A, OUT: A, n: ti.i32, tasks: ti.i32):
        if ti.static(serial):
            ti.loop_config(serialize=True)
        else:
            ti.loop_config(block_dim=1)
        for c in range(tasks):
            nv = n * NV
            bs = [expr_init(gather(b, jv * L, 1)) for jv in ti.static(range(NV))]
            ws = [[expr_init(gather(W, coords[q] * w + jv * L, 1)) for jv in ti.static(range(NV))]
                  for q in ti.static(range(n1 if first else 0))]
            wl = [[expr_init(gather(WL, jv * L * o + kk, o)) for jv in ti.static(range(NV))]
                  for kk in ti.static(range(o))]
            for r in range(c * ROWS, ti.min(c * ROWS + ROWS, n)):
                acc = [[expr_init(CV(ti.cast(0, T))) for kk in ti.static(range(o))] for st in ti.static(range(S))]
                for jv in ti.static(range(NV)):
                    e = r * NV + jv
                    z = Z[e] + bs[jv]
                    if ti.static(store_z):
                        Z[e] = z
                    s0, s1, s2 = fwd(z)
                    H[e] = s0
                    hs = [s0]
                    for q in ti.static(range(n1)):   # list entries are fresh variables (expr_init), never names
                        if ti.static(first):
                            hs.append(expr_init(s1 * ws[q][jv]))
                        else:
                            hs.append(expr_init(s1 * Z[(1 + q) * nv + e]))
                        H[(1 + q) * nv + e] = hs[1 + q]
                    for p in ti.static(range(n2)):
                        a, cc = ti.static(pairs[p][0], pairs[p][1])
                        if ti.static(first):
                            hs.append(expr_init(s2 * ws[a][jv] * ws[cc][jv]))
                        else:
                            hs.append(expr_init(s2 * Z[(1 + a) * nv + e] * Z[(1 + cc) * nv + e]
                                                + s1 * Z[(1 + n1 + p) * nv + e]))
                        H[(1 + n1 + p) * nv + e] = hs[1 + n1 + p]
                    if ti.static(top):   # the sum over the w units in a fixed order of CL-lane chunks (module doc)
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


def _build_bwd(act, dtype, L, NV, first, o, serial, coords, pairs):
    ti = C.ti()
    from taichi.lang.impl import expr_init
    T = backend.ti_dtype(dtype)
    VA = ti.types.ndarray(dtype=ti.types.vector(L, T), ndim=1)
    A = C.arr(dtype)
    _, bwd = _coeffs(act, dtype, L)
    gather = _gather(ti, T, L)
    from_t = act == "tanh"
    n1, n2 = len(coords), len(pairs)
    S = 1 + n1 + n2
    w = NV * L
    top = o > 0

    @ti.kernel
    def k(Z: VA, HV: VA, W: A, G: VA, GOUT: A, WL: A, n: ti.i32, tasks: ti.i32):
        if ti.static(serial):
            ti.loop_config(serialize=True)
        else:
            ti.loop_config(block_dim=1)
        for c in range(tasks):
            nv = n * NV
            ws = [[expr_init(gather(W, coords[q] * w + jv * L, 1)) for jv in ti.static(range(NV))]
                  for q in ti.static(range(n1 if first else 0))]
            wl = [[expr_init(gather(WL, jv * L * o + kk, o)) for jv in ti.static(range(NV))]
                  for kk in ti.static(range(o))]
            for r in range(c * ROWS, ti.min(c * ROWS + ROWS, n)):
                for jv in ti.static(range(NV)):
                    e = r * NV + jv
                    s1, s2, s3 = bwd(HV[e] if ti.static(from_t) else Z[e])
                    g = []   # the cotangents of the S streams of h, read before any is overwritten
                    for st in ti.static(range(S)):
                        if ti.static(top):
                            v = [GOUT[st * n * o + r * o] * wl[0][jv]]
                            for kk in ti.static(range(1, o)):
                                v[0] = v[0] + GOUT[st * n * o + r * o + kk] * wl[kk][jv]
                            g.append(expr_init(v[0]))
                        else:
                            g.append(expr_init(G[st * nv + e]))
                    zs = []
                    for q in ti.static(range(n1)):
                        if ti.static(first):
                            zs.append(ws[q][jv])
                        else:
                            zs.append(expr_init(Z[(1 + q) * nv + e]))
                    g0 = g[0] * s1
                    for q in ti.static(range(n1)):
                        g0 += g[1 + q] * zs[q] * s2
                    gv = [g[1 + q] * s1 for q in ti.static(range(n1))]
                    for p in ti.static(range(n2)):
                        a, cc = ti.static(pairs[p][0], pairs[p][1])
                        gp = g[1 + n1 + p]
                        za, zc = zs[a], zs[cc]
                        gv[a] = expr_init(gv[a] + gp * s2 * zc)
                        gv[cc] = expr_init(gv[cc] + gp * s2 * za)
                        if ti.static(first):
                            g0 += gp * s3 * za * zc
                        else:
                            g0 += gp * (s3 * za * zc + s2 * Z[(1 + n1 + p) * nv + e])
                        G[(1 + n1 + p) * nv + e] = gp * s1
                    for q in ti.static(range(n1)):
                        G[(1 + q) * nv + e] = gv[q]
                    G[e] = g0
    return k
