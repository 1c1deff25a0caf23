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

Serialized: a vector store per L channels replaces L scalar stores (Taichi reloads the ndarray pointers after
every store here, ~3 ns each). Compiled without fast math (IEEE: NaN is found with z != z).
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

    if not backward:
        @ti.kernel
        def fwd(y: AV, cb: AV, w: AV, b: AV, out: AS, mean: AV, var: AV, rm: AV, rv: AV, N: ti.i32, H: ti.i32,
                W: ti.i32, cv: ti.i32, eps: T, momentum: T, update: ti.i32):
            ti.loop_config(serialize=True)
            for jv in range(cv):
                M = N * H * W
                inv = ti.cast(1, T) / ti.cast(M, T)
                s = VT(0.0)
                for r in range(M):
                    s = s + y[r * cv + jv]
                cbv = cb[jv]
                mu = s * inv + cbv
                v = VT(0.0)
                for r in range(M):
                    d = y[r * cv + jv] + cbv - mu
                    v = v + d * d
                vr = v * inv
                mean[jv] = mu
                var[jv] = vr
                if update:
                    rm[jv] = rm[jv] * (1 - momentum) + mu * momentum
                    rv[jv] = rv[jv] * (1 - momentum) + vr * (momentum * ti.cast(M, T) / ti.cast(M - 1, T))
            ti.loop_config(serialize=True)
            for q in range(N * (H // kh)):
                Ho = H // kh
                Wo = W // kw
                n = q // Ho
                r = q % Ho
                for c in range(Wo):
                    r0 = n * H * W + r * kh * W + c * kw
                    for jv in range(cv):
                        a = w[jv] / ti.sqrt(var[jv] + eps)
                        m = window(y, r0, W, cv, jv, cb[jv], mean[jv], a, b[jv])
                        for l in ti.static(range(L)):
                            out[((n * cv + jv) * L + l) * Ho * Wo + r * Wo + c] = m[l]
        return fwd

    @ti.kernel
    def bwd(g: AS, y: AV, cb: AV, w: AV, b: AV, mean: AV, var: AV, gy: AV, gcb: AV, gw: AV, gb: AV, N: ti.i32,
            H: ti.i32, W: ti.i32, cv: ti.i32, eps: T):
        ti.loop_config(serialize=True)
        for jv in range(cv):
            gw[jv] = VT(0.0)
            gb[jv] = VT(0.0)
            gcb[jv] = VT(0.0)
        ti.loop_config(serialize=True)
        for q in range(N * (H // kh)):   # the pooled, rectified adjoint d (parked in gy) and its sums
            Ho = H // kh
            Wo = W // kw
            n = q // Ho
            r = q % Ho
            for c in range(Wo):
                r0 = n * H * W + r * kh * W + c * kw
                for jv in range(cv):
                    rs = VT(1.0) / ti.sqrt(var[jv] + eps)
                    a = w[jv] * rs
                    cbv, mu, bv = cb[jv], mean[jv], b[jv]
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
                            gb[jv] += d
                            gw[jv] += d * ((y[row * cv + jv] + cbv - mu) * rs)
        ti.loop_config(serialize=True)
        for row in range(N * H * W):   # the BatchNorm adjoint, in place, and the conv bias's sums
            inv = ti.cast(1, T) / ti.cast(N * H * W, T)
            for jv in range(cv):
                rs = VT(1.0) / ti.sqrt(var[jv] + eps)
                xh = (y[row * cv + jv] + cb[jv] - mean[jv]) * rs
                v = w[jv] * rs * (gy[row * cv + jv] - gb[jv] * inv - xh * (gw[jv] * inv))
                gy[row * cv + jv] = v
                gcb[jv] += v
    return bwd


def lanes(arrays, O, dtype):
    """(lanes, pointers) for the vector kernels over these host arrays with O channels, or None (scalar path)."""
    from .nn_conv import _vec_lanes
    return _vec_lanes(arrays, O, dtype) if dtype in V.LANES else None


def conv_bn_pool(lp, y, cb, w, b, out, mean, var, rm, rv, N, H, W, O, k, eps, momentum, update, dtype, relu):
    """The forward (see the module docstring); ``lp`` = :func:`lanes` of (y, cb, w, b, out, mean, var, rm, rv)."""
    L, ptrs = lp
    kh, kw = k
    cv, n = O // L, N * H * W * O // L
    V.cached(("conv_bn_pool", dtype, L, relu, kh, kw), lambda: _build(dtype, L, relu, kh, kw, False),
             (L, L, L, L, 1, L, L, L, L), exact=True)(
        (y, cb, w, b, out, mean, var, rm, rv), ptrs, (n, cv, cv, cv, out.size, cv, cv, cv, cv),
        (N, H, W, cv, eps, momentum, int(update)))


def conv_bn_pool_vjp(lp, g, y, cb, w, b, mean, var, gy, gcb, gw, gb, N, H, W, O, k, eps, dtype, relu):
    """The backward; ``lp`` = :func:`lanes` of (g, y, cb, w, b, mean, var, gy, gcb, gw, gb)."""
    L, ptrs = lp
    kh, kw = k
    cv, n = O // L, N * H * W * O // L
    V.cached(("conv_bn_pool_vjp", dtype, L, relu, kh, kw), lambda: _build(dtype, L, relu, kh, kw, True),
             (1, L, L, L, L, L, L, L, L, L, L), exact=True)(
        (g, y, cb, w, b, mean, var, gy, gcb, gw, gb), ptrs, (g.size, n, cv, cv, cv, cv, cv, n, cv, cv, cv),
        (N, H, W, cv, eps))
