"""Fused scaled-dot-product attention over all heads (Taichi; flat buffers in/out).

Layout: batch B, heads h, head size d, E = h*d; queries L, keys S. Head ``hd`` of query row ``i`` of batch
``b`` is ``Q[q0 + (b*L + i)*qr + hd*d + e]`` (e < d): the rows of a (B*L, qr) projection with the queries in
columns q0..q0+E, so a packed (B*L, 3E) ``[q | k | v]`` projection is read in place (q0, k0, v0 = 0, E, 2E;
qr = kr = vr = 3E) and no head split or merge transpose is ever made. The output O is (B, L, E) with head hd
in columns hd*d..hd*d+d. ``P`` (B, h, L, S) keeps the softmax weights for the backward; the optional
additive mask ``M`` is read at ``b*mb + hd*mh + i*S + j`` (mb, mh = 0 broadcast it), the optional dropout
multipliers ``D`` (B, h, L, S) scale the weights that multiply V.

On CPU in float32 with d a multiple of 4 the kernels load, multiply and add 4-lane vectors along d (``_vec.py``).

Forward: one kernel, a (b, head) pair per parallel iteration: scores, row softmax (NaN-propagating max, as
``softmax.py``), weights times V. Backward: one kernel: dP = dO V^T (times D), dS = P (dP - rowsum(P dP)),
dV = (P D)^T dO, dQ = scale dS K, dK = scale dS^T Q, written into buffers of the inputs' layout.
"""
from . import _common as C
from .. import backend


def _types(dtype, vec):
    """(array annotation of the row arrays, of the scalar arrays, scalar type, horizontal sum func, lanes);
    ``vec``: the lanes of the row arrays' vectors (0 / False: scalars)."""
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    if not vec:
        @ti.func
        def hsum(v):
            return v
        return A, A, T, hsum, 1
    Lq = int(vec)
    AV = ti.types.ndarray(dtype=ti.types.vector(Lq, T), ndim=1)

    @ti.func
    def hsum(v):
        r = v[0]
        for u in ti.static(range(1, Lq)):
            r += v[u]
        return r
    return AV, A, T, hsum, Lq


def _build_fwd(dtype, serial, vec=0):
    """Row arrays (Q, K, V, O) hold units of ``lanes`` values (vectors on CPU float32, else scalars); every
    index and stride below counts units. Each output unit is written once (no zero fill)."""
    ti = C.ti()
    AR, A, T, hsum, _ = _types(dtype, vec)
    from .elementwise import _binary_funcs
    mx = _binary_funcs(dtype)["maximum"]  # NaN-propagating

    @ti.kernel
    def k(Q: AR, K: AR, V: AR, M: A, D: A, O: AR, P: A, BH: ti.i32, h: ti.i32, L: ti.i32, S: ti.i32, d: ti.i32,
          q0: ti.i32, qr: ti.i32, k0: ti.i32, kr: ti.i32, v0: ti.i32, vr: ti.i32, mb: ti.i32, mh: ti.i32,
          scale: T, has_mask: ti.i32, has_drop: ti.i32):
        ti.loop_config(serialize=serial)
        for bh in range(BH):
            b = bh // h
            hd = bh % h
            qb = q0 + b * L * qr + hd * d
            kb = k0 + b * S * kr + hd * d
            vb = v0 + b * S * vr + hd * d
            mbase = b * mb + hd * mh
            pb = bh * L * S
            E = h * d
            ob = b * L * E + hd * d
            for i in range(L):
                qi = qb + i * qr
                pi = pb + i * S
                for j in range(S):
                    kj = kb + j * kr
                    acc = Q[qi] * K[kj]
                    for e in range(1, d):
                        acc += Q[qi + e] * K[kj + e]
                    s = hsum(acc) * scale
                    if has_mask != 0:
                        s += M[mbase + i * S + j]
                    P[pi + j] = s
                m = P[pi]
                for j in range(1, S):
                    m = mx(m, P[pi + j])
                tot = ti.cast(0, T)
                for j in range(S):
                    ex = ti.exp(P[pi + j] - m)
                    P[pi + j] = ex
                    tot += ex
                inv = ti.cast(1, T) / tot
                for j in range(S):
                    P[pi + j] *= inv
                oi = ob + i * E
                for e in range(d):
                    w = P[pi]
                    if has_drop != 0:
                        w *= D[pi]
                    o = w * V[vb + e]
                    for j in range(1, S):
                        w = P[pi + j]
                        if has_drop != 0:
                            w *= D[pi + j]
                        o += w * V[vb + j * vr + e]
                    O[oi + e] = o
    return k


def _build_bwd(dtype, serial, vec=0):
    ti = C.ti()
    AR, A, T, hsum, _ = _types(dtype, vec)

    @ti.kernel
    def k(Q: AR, K: AR, V: AR, D: A, P: A, gO: AR, dS: A, dQ: AR, dK: AR, dV: AR, BH: ti.i32, h: ti.i32,
          L: ti.i32, S: ti.i32, d: ti.i32, q0: ti.i32, qr: ti.i32, k0: ti.i32, kr: ti.i32, v0: ti.i32, vr: ti.i32,
          scale: T, has_drop: ti.i32):
        ti.loop_config(serialize=serial)
        for bh in range(BH):
            b = bh // h
            hd = bh % h
            qb = q0 + b * L * qr + hd * d
            kb = k0 + b * S * kr + hd * d
            vb = v0 + b * S * vr + hd * d
            pb = bh * L * S
            E = h * d
            ob = b * L * E + hd * d
            for i in range(L):  # dS = P (dP - rowsum(P dP)) * scale, dP = dO V^T (times D)
                oi = ob + i * E
                pi = pb + i * S
                rd = ti.cast(0, T)
                for j in range(S):
                    vj = vb + j * vr
                    acc = gO[oi] * V[vj]
                    for e in range(1, d):
                        acc += gO[oi + e] * V[vj + e]
                    dp = hsum(acc)
                    if has_drop != 0:
                        dp *= D[pi + j]
                    dS[pi + j] = dp
                    rd += P[pi + j] * dp
                for j in range(S):
                    dS[pi + j] = P[pi + j] * (dS[pi + j] - rd) * scale
            for j in range(S):  # dV[j] = sum_i (P D)_ij dO[i];  dK[j] = sum_i dS_ij Q[i]
                for e in range(d):
                    w = P[pb + j]
                    if has_drop != 0:
                        w *= D[pb + j]
                    av = w * gO[ob + e]
                    ak = dS[pb + j] * Q[qb + e]
                    for i in range(1, L):
                        w = P[pb + i * S + j]
                        if has_drop != 0:
                            w *= D[pb + i * S + j]
                        av += w * gO[ob + i * E + e]
                        ak += dS[pb + i * S + j] * Q[qb + i * qr + e]
                    dV[vb + j * vr + e] = av
                    dK[kb + j * kr + e] = ak
            for i in range(L):  # dQ[i] = sum_j dS_ij K[j]
                pi = pb + i * S
                for e in range(d):
                    aq = dS[pi] * K[kb + e]
                    for j in range(1, S):
                        aq += dS[pi + j] * K[kb + j * kr + e]
                    dQ[qb + i * qr + e] = aq
    return k


def _lanes(arrays, dtype, d, offs, E):
    """The lanes of the vector kernels when they apply (CPU float32; d, the offsets and strides multiples of the
    lanes; every row array aligned for them): the host's wide vectors if they fit, else 4; else 1 (scalar)."""
    from . import _vec as V
    if not (VECTOR and dtype == "float32" and backend.on_host()):
        return 1
    ptrs = [C.address(a) for a in arrays]
    for L in (V.wide(dtype), V.LANES[dtype]):
        if d % L == 0 and E % L == 0 and all(o % L == 0 for o in offs) and not any(p % (4 * L) for p in ptrs):
            if C.TRACE[0] is not None and L != V.LANES[dtype]:  # a jit replay re-aligns to 16 bytes only
                continue
            return L
    return 1


VECTOR = True  # False: the scalar kernels only (what devices and float64 run)


def forward(Q, K, V, M, D, O, P, B, h, L, S, d, offs, mstrides, scale, dtype):
    """O (B, L, h*d) and P (B, h, L, S) from the layouts in the module doc; ``offs`` = (q0, qr, k0, kr, v0, vr),
    ``mstrides`` = (mb, mh); M, D None when absent."""
    serial = C.launch_mode(B * h * L * S * d, 2)
    has_mask, has_drop = M is not None, D is not None
    arrays = [Q, K, V, M if has_mask else P, D if has_drop else P, O, P]
    u = _lanes([Q, K, V, O], dtype, d, offs, h * d)
    sc = (B * h, h, L, S, d // u) + tuple(o // u for o in offs) + tuple(mstrides) + (scale, int(has_mask),
                                                                                      int(has_drop))
    if u > 1:
        from . import _vec as V_
        lanes = [u, u, u, 1, 1, u, 1]
        vk = V_.cached(("attn_fwd_vec", dtype, serial, u), lambda: _build_fwd(dtype, serial, u), lanes)
        vk(arrays, [C.address(a) for a in arrays], [a.size // n for a, n in zip(arrays, lanes)], sc)
        return
    k = C.cached(("attn_fwd", dtype, serial), lambda: _build_fwd(dtype, serial))
    k(*arrays, *sc)


def backward(Q, K, V, D, P, gO, dQ, dK, dV, B, h, L, S, d, offs, scale, dtype):
    """dQ, dK, dV (in the layouts of Q, K, V: may be one buffer for a packed projection) from gO (B, L, h*d)."""
    serial = C.launch_mode(B * h * L * S * d, 4)
    has_drop = D is not None
    dS = backend.empty(B * h * L * S, dtype)
    arrays = [Q, K, V, D if has_drop else P, P, gO, dS, dQ, dK, dV]
    u = _lanes([Q, K, V, gO, dQ, dK, dV], dtype, d, offs, h * d)
    sc = (B * h, h, L, S, d // u) + tuple(o // u for o in offs) + (scale, int(has_drop))
    if u > 1:
        from . import _vec as V_
        lanes = [u, u, u, 1, 1, u, 1, u, u, u]
        vk = V_.cached(("attn_bwd_vec", dtype, serial, u), lambda: _build_bwd(dtype, serial, u), lanes)
        vk(arrays, [C.address(a) for a in arrays], [a.size // n for a, n in zip(arrays, lanes)], sc)
        return
    k = C.cached(("attn_bwd", dtype, serial), lambda: _build_bwd(dtype, serial))
    k(*arrays, *sc)
