"""Convolution epilogue (Taichi; flat buffers in/out): the im2col GEMM's output rows (N*P, O) (P = Ho*Wo)
become the (N, O, P) image layout with the bias added, in one pass (instead of a bias kernel and a strided
transpose); the adjoint transposes the cotangent back and sums it per channel for the bias, in one pass.
With ``relu`` the forward also applies ReLU (conv -> ReLU in one epilogue) and the adjoint multiplies by its
step, read from the output (0 at 0 as PyTorch; NaN stays NaN).

With a max-pool tail (Conv2d -> ReLU -> MaxPool2d whose windows tile the image) the epilogue writes the pooled
images; on CPU, when the channel count allows, forward and adjoint run on rows of channel vectors (``_vec.py``):
one vector load/store per L channels instead of L scalar ones (a scalar store costs ~3 ns here, Taichi reloading
the array pointers after each), e.g. the digits CNN's first block's adjoint 700 -> 80 us (64x16x8x8, float32).
"""
from . import _common as C
from . import _vec as V


def _build_fwd(dtype, serial, relu=False):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(y: A, b: A, out: A, N: ti.i32, P: ti.i32, O: ti.i32):
        ti.loop_config(serialize=serial)
        for n in range(N):
            for o in range(O):
                bo = b[o]
                for p in range(P):
                    z = y[(n * P + p) * O + o] + bo
                    if ti.static(relu):   # max(z, 0) that keeps NaN
                        z = ti.select(z > 0, z, ti.select(z <= 0, ti.cast(0, T), z))
                    out[(n * O + o) * P + p] = z
    return k


def _build_bwd(dtype, serial, with_y, relu=False):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(g: A, out: A, gy: A, gb: A, N: ti.i32, P: ti.i32, O: ti.i32):
        ti.loop_config(serialize=serial)
        for o in range(O):
            s = g[0] * 0
            for n in range(N):
                for p in range(P):
                    v = g[(n * O + o) * P + p]
                    if ti.static(relu):   # g * step(out): 0 where out <= 0, NaN where out is NaN
                        yv = out[(n * O + o) * P + p]
                        v = ti.select(yv > 0, v, ti.select(yv <= 0, v * ti.cast(0, T), yv))
                    if ti.static(with_y):
                        gy[(n * P + p) * O + o] = v
                    s += v
            gb[o] = s
    return k


def conv_epilogue(y, b, out, N: int, P: int, O: int, dtype: str, relu: bool = False):
    """out (N, O, P) = y (N*P, O) transposed per sample, + b (O,) (then ReLU with ``relu``)."""
    serial = C.launch_mode(N * P * O, C.CHEAP) or N < 4
    C.cached(("conv_epi", dtype, serial, relu), lambda: _build_fwd(dtype, serial, relu))(y, b, out, N, P, O)


def conv_epilogue_vjp(g, gy, gb, N: int, P: int, O: int, dtype: str, out=None):
    """gy (N*P, O) = g (N, O, P) transposed back (skipped when gy is None); gb (O,) = sums of g per channel.
    ``out``: the forward's output when it applied ReLU (g is multiplied by its step first)."""
    serial = C.launch_mode(N * P * O, C.CHEAP) or O < 4
    with_y, relu = gy is not None, out is not None
    C.cached(("conv_epi_vjp", dtype, serial, with_y, relu), lambda: _build_bwd(dtype, serial, with_y, relu))(
        g, out if relu else g, gy if with_y else gb, gb, N, P, O)


# --- the epilogue with a max-pool tail: Conv2d -> ReLU -> MaxPool2d(k) in one pass (windows tiling the image) -----
# Branch-free window max: ti.max plus a NaN term (a window holding a NaN gives NaN), 3-4x faster here than the
# NaN-keeping select chain of kernels/pool.py on random data (mispredicted branches). The adjoint recomputes the
# max, counts the cells equal to it (ties share g; a NaN window has none, so g / 0 * 0 gives NaN to every cell,
# as the composed rule) and multiplies by the ReLU's step.
def _pool_tools(ti, T, relu, kh, kw):
    @ti.func
    def window(y: ti.template(), b0, r0, W, O, o, bo):
        """(kh*kw values of the window at row offset b0 + r0 (after bias and ReLU), its max or NaN)."""
        zs = ti.Vector([ti.cast(0, T)] * (kh * kw))
        m = ti.cast(-float("inf"), T)
        nz = ti.cast(0, T)
        for i in ti.static(range(kh)):
            for j in ti.static(range(kw)):
                z = y[(b0 + r0 + i * W + j) * O + o] + bo
                nz += ti.select(z <= 0, ti.cast(0, T), ti.select(z > 0, ti.cast(0, T), z))   # NaN: z
                if ti.static(relu):
                    z = ti.max(z, ti.cast(0, T))
                zs[i * kw + j] = z
                m = ti.max(m, z)
        m = m + nz   # NaN when a value is (z != z folds to False under Taichi's fast math)
        return zs, m
    return window


def _build_pool_fwd(dtype, serial, relu, kh, kw):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)
    window = _pool_tools(ti, T, relu, kh, kw)

    @ti.kernel
    def k(y: A, b: A, out: A, N: ti.i32, W: ti.i32, O: ti.i32, Ho: ti.i32, Wo: ti.i32):
        ti.loop_config(serialize=serial)
        for q in range(N * O):   # one (sample, channel) plane each
            n = q // O
            o = q % O
            bo = b[o]
            base = n * Ho * kh * W
            for r in range(Ho):
                for c in range(Wo):
                    zs, m = window(y, base, r * kh * W + c * kw, W, O, o, bo)
                    out[(q * Ho + r) * Wo + c] = m
    return k


def _build_pool_bwd(dtype, serial, relu, kh, kw):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)
    window = _pool_tools(ti, T, relu, kh, kw)

    @ti.kernel
    def k(g: A, y: A, b: A, gy: A, gb: A, N: ti.i32, W: ti.i32, O: ti.i32, Ho: ti.i32, Wo: ti.i32):
        ti.loop_config(serialize=serial)
        for q in range(N * Ho):   # one row of windows of one sample each; channels innermost (gy rows written
            n = q // Ho           # contiguously: strided stores cost ~10x here)
            r = q % Ho
            base = n * Ho * kh * W
            for c in range(Wo):
                r0 = r * kh * W + c * kw
                for o in range(O):
                    zs, m = window(y, base, r0, W, O, o, b[o])
                    cnt = ti.cast(0, T)
                    for t in ti.static(range(kh * kw)):
                        cnt += ti.select(zs[t] == m, ti.cast(1, T), ti.cast(0, T))
                    share = g[((n * O + o) * Ho + r) * Wo + c] / cnt
                    for i in ti.static(range(kh)):
                        for j in ti.static(range(kw)):
                            z = zs[i * kw + j]
                            d = share * ti.select(z == m, ti.cast(1, T), ti.cast(0, T))
                            if ti.static(relu):   # times step(z) (a NaN window is NaN already)
                                d = d * ti.select(z > 0, ti.cast(1, T), ti.cast(0, T))
                            gy[(base + r0 + i * W + j) * O + o] = d
        ti.loop_config(serialize=serial)
        for o in range(O):        # the bias gradient: column sums of gy
            s = ti.cast(0, T)
            for row in range(N * Ho * kh * W):
                s += gy[row * O + o]
            gb[o] = s
    return k


VECTOR = True   # False: the scalar kernels only (what devices run; tests compare)


def conv_epilogue_pool(y, b, out, N: int, H: int, W: int, O: int, k, dtype: str, relu: bool):
    """out (N, O, H / kh, W / kw) = the max over kh x kw tiles of the epilogue (y (N*H*W, O) + b, then ReLU with
    ``relu``) laid out as images; H, W divisible by kh, kw."""
    kh, kw = k
    lp = _vec_lanes((y, b, out), O, dtype, (0,))
    if lp is not None:
        L, ptrs = lp
        V.cached(("conv_epi_pool_vec", dtype, L, relu, kh, kw), lambda: _build_pool_fwd_vec(dtype, L, relu, kh, kw),
                 (L, 1, 1), exact=True)((y, b, out), ptrs, (N * H * W * O // L, O, out.size),
                                        (N, W, O // L, H // kh, W // kw))
        return
    serial = C.launch_mode(N * H * W * O, C.CHEAP) or N * O < 4
    C.cached(("conv_epi_pool", dtype, serial, relu, kh, kw), lambda: _build_pool_fwd(dtype, serial, relu, kh, kw))(
        y, b, out, N, W, O, H // kh, W // kw)


def conv_epilogue_pool_vjp(g, y, b, gy, gb, N: int, H: int, W: int, O: int, k, dtype: str, relu: bool):
    """gy (N*H*W, O) (always written: the bias gradient sums it) and gb (O,): the adjoint of
    :func:`conv_epilogue_pool` applied to g (N, O, H / kh, W / kw); the pooling's maxima are recomputed from y and
    b (no arg-max buffer)."""
    kh, kw = k
    lp = _vec_lanes((g, y, b, gy, gb), O, dtype, (1, 3))
    if lp is not None:
        L, ptrs = lp
        cv, n = O // L, N * H * W * O // L
        V.cached(("conv_epi_pool_vjp_vec", dtype, L, relu, kh, kw),
                 lambda: _build_pool_bwd_vec(dtype, L, relu, kh, kw), (1, L, 1, L, 1), exact=True)(
            (g, y, b, gy, gb), ptrs, (g.size, n, O, n, O), (N, W, cv, H // kh, W // kw))
        return
    serial = C.launch_mode(N * H * W * O * 2, C.CHEAP) or O < 4
    C.cached(("conv_epi_pool_vjp", dtype, serial, relu, kh, kw), lambda: _build_pool_bwd(dtype, serial, relu, kh, kw))(
        g, y, b, gy, gb, N, W, O, H // kh, W // kw)


def _build_pool_bwd_vec(dtype, L, relu, kh, kw):
    """:func:`_build_pool_bwd` on rows of cv = O / L vectors of L lanes (channels), serialized: one vector store
    per L channels (a scalar store costs ~3 ns here: Taichi reloads the array pointers after each). One channel
    vector at a time (the outer loop), its bias read and its bias gradient summed in registers, so only y and gy
    need the wide vectors' alignment. IEEE arithmetic (compiled without fast math): NaN is found with z != z."""
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    VT = ti.types.vector(L, T)
    AV = ti.types.ndarray(dtype=VT, ndim=1)
    AS = ti.types.ndarray(dtype=T, ndim=1)

    @ti.func
    def load(y: ti.template(), row, cv, jv, bo):
        z = y[row * cv + jv] + bo
        nz = ti.select(z == z, VT(0.0), z)   # NaN where z is NaN, else 0
        if ti.static(relu):
            z = ti.max(z, VT(0.0))
        return z, nz

    @ti.kernel
    def k(g: AS, y: AV, b: AS, gy: AV, gb: AS, N: ti.i32, W: ti.i32, cv: ti.i32, Ho: ti.i32, Wo: ti.i32):
        ti.loop_config(serialize=True)
        for jv in range(cv):
            bo = VT(0.0)
            for l in ti.static(range(L)):
                bo[l] = b[jv * L + l]
            acc = VT(0.0)
            for q in range(N * Ho):
                n = q // Ho
                r = q % Ho
                base = n * Ho * kh * W
                for c in range(Wo):
                    r0 = base + r * kh * W + c * kw
                    m = VT(-float("inf"))
                    nz = VT(0.0)
                    for i in ti.static(range(kh)):
                        for j in ti.static(range(kw)):
                            z, nzt = load(y, r0 + i * W + j, cv, jv, bo)
                            m = ti.max(m, z)
                            nz = nz + nzt
                    m = m + nz   # a NaN window's max is NaN: no cell equals it, g / 0 * 0 is NaN everywhere
                    cnt = VT(0.0)
                    for i in ti.static(range(kh)):
                        for j in ti.static(range(kw)):
                            z, nzt = load(y, r0 + i * W + j, cv, jv, bo)
                            cnt = cnt + ti.select(z == m, VT(1.0), VT(0.0))
                    gv = VT(0.0)
                    for l in ti.static(range(L)):
                        gv[l] = g[((n * cv + jv) * L + l) * Ho * Wo + r * Wo + c]
                    share = gv / cnt
                    for i in ti.static(range(kh)):
                        for j in ti.static(range(kw)):
                            z, nzt = load(y, r0 + i * W + j, cv, jv, bo)
                            d = share * ti.select(z == m, VT(1.0), VT(0.0))
                            if ti.static(relu):
                                d = d * ti.select(z > 0, VT(1.0), VT(0.0))
                            gy[(r0 + i * W + j) * cv + jv] = d
                            acc = acc + d
            for l in ti.static(range(L)):
                gb[jv * L + l] = acc[l]
    return k


def _build_pool_fwd_vec(dtype, L, relu, kh, kw):
    """:func:`_build_pool_fwd` on rows of cv = O / L channel vectors, serialized, IEEE arithmetic."""
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    VT = ti.types.vector(L, T)
    AV = ti.types.ndarray(dtype=VT, ndim=1)
    AS = ti.types.ndarray(dtype=T, ndim=1)

    @ti.kernel
    def k(y: AV, b: AS, out: AS, N: ti.i32, W: ti.i32, cv: ti.i32, Ho: ti.i32, Wo: ti.i32):
        ti.loop_config(serialize=True)
        for jv in range(cv):
            bo = VT(0.0)
            for l in ti.static(range(L)):
                bo[l] = b[jv * L + l]
            for q in range(N * Ho):
                n = q // Ho
                r = q % Ho
                for c in range(Wo):
                    r0 = n * Ho * kh * W + r * kh * W + c * kw
                    m = VT(-float("inf"))
                    nz = VT(0.0)
                    for i in ti.static(range(kh)):
                        for j in ti.static(range(kw)):
                            z = y[(r0 + i * W + j) * cv + jv] + bo
                            nz = nz + ti.select(z == z, VT(0.0), z)
                            if ti.static(relu):
                                z = ti.max(z, VT(0.0))
                            m = ti.max(m, z)
                    m = m + nz
                    for l in ti.static(range(L)):
                        out[((n * cv + jv) * L + l) * Ho * Wo + r * Wo + c] = m[l]
    return k


def _vec_lanes(arrays, O, dtype, vec=None):
    """(lanes, pointers of ``arrays``) for the channel-vector kernels, or None (the scalar kernels): every array
    16-byte aligned, the lanes the widest whose vectors the arrays ``vec`` (indices; default all) are aligned for and
    that divide O."""
    if not (VECTOR and C.backend.on_host()) or dtype not in V.LANES:
        return None
    ptrs = V.pointers(arrays)
    if ptrs is None:
        return None
    L = V.lanes_for([ptrs[i] for i in vec] if vec is not None else ptrs, dtype)
    while L and O % L:   # the widest lanes that divide O, down to 16 bytes
        L = L // 2 if L > V.LANES[dtype] else None
    return (L, ptrs) if L else None
