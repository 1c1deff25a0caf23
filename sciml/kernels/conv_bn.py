"""Conv2d -> BatchNorm2d (training) -> ReLU -> MaxPool2d on the convolution's GEMM rows, in one kernel forward and
one backward (CPU vector kernels; Taichi, flat buffers in/out).

y (N*H*W, O) are the im2col GEMM's output rows (channels contiguous), cb (O,) the conv bias. The forward computes
each channel's batch mean and biased variance of y + cb (lane-wise over L channels at a time: ``_vec.py``), updates
the running statistics, and writes ``max over kh x kw tiles of relu((y + cb - mean) w / sqrt(var + eps) + b)`` as
images (N, O, H / kh, W / kw); the backward recomputes each window's max and the count of cells equal to it (ties
share g; a NaN window gives NaN to every cell), applies the ReLU's step, and the BatchNorm adjoint
``gx = w / sqrt(var + eps) (d - sum d / m - xhat sum(d xhat) / m)`` with gw = sum d xhat, gb = sum d and the
conv bias's gradient sum gx (zero up to rounding). The scalar path (devices, odd channel counts) is the chain of
``nn_conv.conv_epilogue`` and ``norm.batch_norm_fwd(pool=...)``: the caller falls back to it.

Serialized, one vector of L channels at a time (the outer loop): a vector store per L channels replaces L scalar
stores (Taichi reloads the ndarray pointers after every store here, ~3 ns each), and the per-channel arrays (conv
bias, w, b, statistics, gradients) are read and written lane by lane, so only the rows y and gy need the wide
vectors' 64-byte alignment (sciml's large host buffers have it). Compiled without fast math (IEEE: NaN is found
with z != z).
"""
from . import _common as C
from . import _vec as V


def _build(dtype, L, relu, kh, kw, backward):
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    VT = ti.types.vector(L, T)
    AV = ti.types.ndarray(dtype=VT, ndim=1)
    AS = ti.types.ndarray(dtype=T, ndim=1)

    @ti.func
    def window(y: ti.template(), r0, W, cv, jv, cbv, mu, a, bv):
        """The window's max of relu((y + cb - mu) a + b), NaN when a value is NaN."""
        m = VT(-float("inf"))
        nz = VT(0.0)
        for i in ti.static(range(kh)):
            for j in ti.static(range(kw)):
                z = (y[(r0 + i * W + j) * cv + jv] + cbv - mu) * a + bv
                nz = nz + ti.select(z == z, VT(0.0), z)
                if ti.static(relu):
                    z = ti.max(z, VT(0.0))
                m = ti.max(m, z)
        return m + nz

    @ti.func
    def cell(y: ti.template(), row, cv, jv, cbv, mu, a, bv):
        z = (y[row * cv + jv] + cbv - mu) * a + bv
        if ti.static(relu):
            z = ti.max(z, VT(0.0))
        return z

    @ti.func
    def vec(a: ti.template(), jv):
        v = VT(0.0)
        for l in ti.static(range(L)):
            v[l] = a[jv * L + l]
        return v

    if not backward:
        @ti.kernel
        def fwd(y: AV, cb: AS, w: AS, b: AS, out: AS, mean: AS, var: AS, rm: AS, rv: AS, N: ti.i32, H: ti.i32,
                W: ti.i32, cv: ti.i32, eps: T, momentum: T, update: ti.i32):
            ti.loop_config(serialize=True)
            for jv in range(cv):   # one vector of L channels at a time: its statistics, then its pooled outputs
                M = N * H * W
                inv = ti.cast(1, T) / ti.cast(M, T)
                cbv = vec(cb, jv)
                s = VT(0.0)
                for r in range(M):
                    s = s + y[r * cv + jv]
                mu = s * inv + cbv
                v = VT(0.0)
                for r in range(M):
                    d = y[r * cv + jv] + cbv - mu
                    v = v + d * d
                vr = v * inv
                for l in ti.static(range(L)):
                    c = jv * L + l
                    mean[c] = mu[l]
                    var[c] = vr[l]
                    if update:
                        rm[c] = rm[c] * (1 - momentum) + mu[l] * momentum
                        rv[c] = rv[c] * (1 - momentum) + vr[l] * (momentum * ti.cast(M, T) / ti.cast(M - 1, T))
                a = vec(w, jv) * (VT(1.0) / ti.sqrt(vr + eps))
                bv = vec(b, jv)
                Ho = H // kh
                Wo = W // kw
                for q in range(N * Ho):
                    n = q // Ho
                    r = q % Ho
                    for c in range(Wo):
                        r0 = n * H * W + r * kh * W + c * kw
                        m = window(y, r0, W, cv, jv, cbv, mu, a, bv)
                        for l in ti.static(range(L)):
                            out[((n * cv + jv) * L + l) * Ho * Wo + r * Wo + c] = m[l]
        return fwd

    @ti.kernel
    def bwd(g: AS, y: AV, cb: AS, w: AS, b: AS, mean: AS, var: AS, gy: AV, gcb: AS, gw: AS, gb: AS, N: ti.i32,
            H: ti.i32, W: ti.i32, cv: ti.i32, eps: T):
        ti.loop_config(serialize=True)
        for jv in range(cv):
            cbv, mu, bv = vec(cb, jv), vec(mean, jv), vec(b, jv)
            rs = VT(1.0) / ti.sqrt(vec(var, jv) + eps)
            a = vec(w, jv) * rs
            sg = VT(0.0)
            sgx = VT(0.0)
            Ho = H // kh
            Wo = W // kw
            for q in range(N * Ho):   # the pooled, rectified adjoint d (parked in gy) and its sums
                n = q // Ho
                r = q % Ho
                for c in range(Wo):
                    r0 = n * H * W + r * kh * W + c * kw
                    m = window(y, r0, W, cv, jv, cbv, mu, a, bv)
                    cnt = VT(0.0)
                    for i in ti.static(range(kh)):
                        for j in ti.static(range(kw)):
                            z = cell(y, r0 + i * W + j, cv, jv, cbv, mu, a, bv)
                            cnt = cnt + ti.select(z == m, VT(1.0), VT(0.0))
                    gv = VT(0.0)
                    for l in ti.static(range(L)):
                        gv[l] = g[((n * cv + jv) * L + l) * Ho * Wo + r * Wo + c]
                    share = gv / cnt
                    for i in ti.static(range(kh)):
                        for j in ti.static(range(kw)):
                            row = r0 + i * W + j
                            z = cell(y, row, cv, jv, cbv, mu, a, bv)
                            d = share * ti.select(z == m, VT(1.0), VT(0.0))
                            if ti.static(relu):
                                d = d * ti.select(z > 0, VT(1.0), VT(0.0))
                            gy[row * cv + jv] = d
                            sg = sg + d
                            sgx = sgx + d * ((y[row * cv + jv] + cbv - mu) * rs)
            inv = ti.cast(1, T) / ti.cast(N * H * W, T)
            scb = VT(0.0)
            for row in range(N * H * W):   # the BatchNorm adjoint, in place, and the conv bias's sum
                xh = (y[row * cv + jv] + cbv - mu) * rs
                v = a * (gy[row * cv + jv] - sg * inv - xh * (sgx * inv))
                gy[row * cv + jv] = v
                scb = scb + v
            for l in ti.static(range(L)):
                gw[jv * L + l] = sgx[l]
                gb[jv * L + l] = sg[l]
                gcb[jv * L + l] = scb[l]
    return bwd


def lanes(arrays, O, dtype, vec=None):
    """(lanes, pointers) for the vector kernels over these host arrays with O channels, or None (scalar path)."""
    from .nn_conv import _vec_lanes
    return _vec_lanes(arrays, O, dtype, vec) if dtype in V.LANES else None


def conv_bn_pool(lp, y, cb, w, b, out, mean, var, rm, rv, N, H, W, O, k, eps, momentum, update, dtype, relu):
    """The forward (see the module docstring); ``lp`` = :func:`lanes` of (y, cb, w, b, out, mean, var, rm, rv)."""
    L, ptrs = lp
    kh, kw = k
    cv, n = O // L, N * H * W * O // L
    V.cached(("conv_bn_pool", dtype, L, relu, kh, kw), lambda: _build(dtype, L, relu, kh, kw, False),
             (L, 1, 1, 1, 1, 1, 1, 1, 1), exact=True)(
        (y, cb, w, b, out, mean, var, rm, rv), ptrs, (n, O, O, O, out.size, O, O, O, O),
        (N, H, W, cv, eps, momentum, int(update)))


def conv_bn_pool_vjp(lp, g, y, cb, w, b, mean, var, gy, gcb, gw, gb, N, H, W, O, k, eps, dtype, relu):
    """The backward; ``lp`` = :func:`lanes` of (g, y, cb, w, b, mean, var, gy, gcb, gw, gb)."""
    L, ptrs = lp
    kh, kw = k
    cv, n = O // L, N * H * W * O // L
    V.cached(("conv_bn_pool_vjp", dtype, L, relu, kh, kw), lambda: _build(dtype, L, relu, kh, kw, True),
             (1, L, 1, 1, 1, 1, 1, L, 1, 1, 1), exact=True)(
        (g, y, cb, w, b, mean, var, gy, gcb, gw, gb), ptrs, (g.size, n, O, O, O, O, O, n, O, O, O),
        (N, H, W, cv, eps))
