"""Fused batch normalisation in training mode and layer normalisation (Taichi; flat buffers in/out).

x is (N, C, S) row-major (S = the product of the spatial sizes, 1 for (N, C) inputs). One iteration per
channel: the forward computes the batch mean and biased variance (two passes), writes
``y = (x - mean) / sqrt(var + eps) * w + b`` and updates the running statistics in place
(``running = (1 - momentum) running + momentum * stat``, the variance unbiased by m / (m - 1)); the
backward computes ``sum g`` and ``sum g xhat`` and writes
``gx = w / sqrt(var + eps) * (g - sum g / m - xhat sum(g xhat) / m)``, ``gw = sum g xhat``, ``gb = sum g``.
With ``relu`` (BatchNorm -> ReLU in one kernel) the forward applies ReLU and the backward first multiplies g by
its step, read from the output y (0 at 0 as PyTorch; NaN stays NaN).
LayerNorm: the same per row of D values (x (R, D)), the affine per column; its backward accumulates the column
sums of ``g xhat`` and ``g`` (atomic adds when the row loop runs in parallel).
"""
from . import _common as C
from .. import backend


def _pool_window(ti, T, relu, kh, kw):
    """The kh x kw window at x[o0 + i W + j] normalised ((x - mu) a + bc), ReLU'd with ``relu``: (its values, its
    max, NaN when a value is NaN). Branch-free (ti.max plus a NaN term): 2-4x faster here than a NaN-keeping
    select chain, whose branches mispredict on real data."""
    @ti.func
    def window(x: ti.template(), o0, W, mu, a, bc):
        zs = ti.Vector([ti.cast(0, T)] * (kh * kw))
        m = ti.cast(-float("inf"), T)
        nz = ti.cast(0, T)
        for i in ti.static(range(kh)):
            for j in ti.static(range(kw)):
                z = (x[o0 + i * W + j] - mu) * a + bc
                nz += ti.select(z <= 0, ti.cast(0, T), ti.select(z > 0, ti.cast(0, T), z))   # NaN: z
                if ti.static(relu):
                    z = ti.max(z, ti.cast(0, T))
                zs[i * kw + j] = z
                m = ti.max(m, z)
        m = m + nz   # NaN when a value is (z != z folds to False under Taichi's fast math)
        return zs, m
    return window


def _build_fwd(dtype, serial, relu=False, pool=None):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    kh, kw = pool or (1, 1)
    pooled = pool is not None

    @ti.func
    def act(z):
        if ti.static(relu):   # max(z, 0) that keeps NaN
            z = ti.select(z > 0, z, ti.select(z <= 0, ti.cast(0, T), z))
        return z

    window = _pool_window(ti, T, relu, kh, kw)

    @ti.kernel
    def k(x: A, w: A, b: A, y: A, mean: A, var: A, rm: A, rv: A, N: ti.i32, Cc: ti.i32, S: ti.i32, eps: T,
          momentum: T, update: ti.i32, W: ti.i32):
        ti.loop_config(serialize=serial)
        for c in range(Cc):
            m = N * S
            s = ti.cast(0, T)
            for n in range(N):
                o = (n * Cc + c) * S
                for j in range(S):
                    s += x[o + j]
            mu = s / m
            v = ti.cast(0, T)
            for n in range(N):
                o = (n * Cc + c) * S
                for j in range(S):
                    d = x[o + j] - mu
                    v += d * d
            var_ = v / m
            r = 1 / ti.sqrt(var_ + eps)
            a = r * w[c]
            if ti.static(not pooled):
                for n in range(N):
                    o = (n * Cc + c) * S
                    for j in range(S):
                        y[o + j] = act((x[o + j] - mu) * a + b[c])
            else:   # the max over kh x kw tiles (a following MaxPool2d), written at the pooled size
                Wo = W // kw
                Ho = S // W // kh
                for n in range(N):
                    o = (n * Cc + c) * S
                    for rr in range(Ho):
                        for cc in range(Wo):
                            zs, mx = window(x, o + rr * kh * W + cc * kw, W, mu, a, b[c])
                            y[((n * Cc + c) * Ho + rr) * Wo + cc] = mx
            mean[c] = mu
            var[c] = var_
            if update:
                rm[c] = (1 - momentum) * rm[c] + momentum * mu
                rv[c] = (1 - momentum) * rv[c] + momentum * var_ * m / (m - 1)
    return k


def _build_bwd(dtype, serial, with_x, relu=False):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.func
    def geff(gv, yv):
        v = gv
        if ti.static(relu):   # g * step(y)
            v = ti.select(yv > 0, v, ti.select(yv <= 0, v * ti.cast(0, T), yv))
        return v

    @ti.kernel
    def k(x: A, g: A, y: A, w: A, mean: A, var: A, gx: A, gw: A, gb: A, N: ti.i32, Cc: ti.i32, S: ti.i32,
          eps: T):
        ti.loop_config(serialize=serial)
        for c in range(Cc):
            m = N * S
            mu = mean[c]
            r = 1 / ti.sqrt(var[c] + eps)
            sg = ti.cast(0, T)
            sgx = ti.cast(0, T)
            for n in range(N):
                o = (n * Cc + c) * S
                for j in range(S):
                    gv = geff(g[o + j], y[o + j])
                    sg += gv
                    sgx += gv * (x[o + j] - mu) * r
            gw[c] = sgx
            gb[c] = sg
            if ti.static(with_x):
                a = w[c] * r
                for n in range(N):
                    o = (n * Cc + c) * S
                    for j in range(S):
                        xh = (x[o + j] - mu) * r
                        gx[o + j] = a * (geff(g[o + j], y[o + j]) - sg / m - xh * sgx / m)
    return k


def _build_bwd_pool(dtype, serial, with_x, relu, kh, kw):
    """The backward of BatchNorm -> (ReLU) -> max over kh x kw tiles: g is (N, C, Ho, Wo); each window's max and
    the count of cells equal to it are recomputed from x (ties share g, a NaN window gives NaN to every cell, as
    kernels/pool.py), the ReLU's step applied, then the BatchNorm adjoint (the pooled adjoint parked in gx)."""
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    window = _pool_window(ti, T, relu, kh, kw)

    @ti.kernel
    def k(x: A, g: A, w: A, b: A, mean: A, var: A, gx: A, gw: A, gb: A, N: ti.i32, Cc: ti.i32, S: ti.i32,
          eps: T, W: ti.i32):
        ti.loop_config(serialize=serial)
        for c in range(Cc):
            m = N * S
            mu = mean[c]
            r = 1 / ti.sqrt(var[c] + eps)
            a = r * w[c]
            Wo = W // kw
            Ho = S // W // kh
            sg = ti.cast(0, T)
            sgx = ti.cast(0, T)
            for n in range(N):
                o = (n * Cc + c) * S
                for rr in range(Ho):
                    for cc in range(Wo):
                        go = g[((n * Cc + c) * Ho + rr) * Wo + cc]
                        o0 = o + rr * kh * W + cc * kw
                        zs, mx = window(x, o0, W, mu, a, b[c])
                        cnt = ti.cast(0, T)
                        for t in ti.static(range(kh * kw)):
                            cnt += ti.select(zs[t] == mx, ti.cast(1, T), ti.cast(0, T))
                        share = go / cnt   # ties share g; a NaN window has no hit: g / 0 * 0 = NaN everywhere
                        for i in ti.static(range(kh)):
                            for j in ti.static(range(kw)):
                                ix = o0 + i * W + j
                                z = zs[i * kw + j]
                                gv = share * ti.select(z == mx, ti.cast(1, T), ti.cast(0, T))
                                if ti.static(relu):   # times step(z)
                                    gv = gv * ti.select(z > 0, ti.cast(1, T), ti.cast(0, T))
                                sg += gv
                                sgx += gv * (x[ix] - mu) * r
                                if ti.static(with_x):
                                    gx[ix] = gv
            gw[c] = sgx
            gb[c] = sg
            if ti.static(with_x):
                for n in range(N):
                    o = (n * Cc + c) * S
                    for j in range(S):
                        xh = (x[o + j] - mu) * r
                        gx[o + j] = a * (gx[o + j] - sg / m - xh * sgx / m)
    return k


def _serial(n):
    return C.launch_mode(n, 2)


def batch_norm_fwd(x, w, b, y, mean, var, rm, rv, N: int, Cc: int, S: int, eps: float, momentum: float,
                   update: bool, dtype: str, relu: bool = False, pool=None, W: int = 1):
    """``pool`` (kh, kw): y is the max over kh x kw tiles of the (S // W, W) planes (a following MaxPool2d whose
    windows tile them), (N, Cc, S // (kh kw)); else None."""
    serial = _serial(N * Cc * S) or Cc < 4
    pool = tuple(pool) if pool is not None else None
    C.cached(("bn_fwd", dtype, serial, relu, pool), lambda: _build_fwd(dtype, serial, relu, pool))(
        x, w, b, y, mean, var, rm, rv, N, Cc, S, eps, momentum, int(update), W)


def batch_norm_bwd_pool(x, g, w, b, mean, var, gx, gw, gb, N: int, Cc: int, S: int, eps: float, dtype: str,
                        with_x: bool, relu: bool, pool, W: int):
    """The adjoint of :func:`batch_norm_fwd` with ``pool``: g (N, Cc, S // (kh kw)) -> gx (N, Cc, S) (skipped
    unless ``with_x``), gw, gb (Cc,)."""
    serial = _serial(N * Cc * S * 2) or Cc < 4
    kh, kw = pool
    C.cached(("bn_bwd_pool", dtype, serial, with_x, relu, kh, kw),
             lambda: _build_bwd_pool(dtype, serial, with_x, relu, kh, kw))(
        x, g, w, b, mean, var, gx, gw, gb, N, Cc, S, eps, W)


def batch_norm_bwd(x, g, w, mean, var, gx, gw, gb, N: int, Cc: int, S: int, eps: float, dtype: str,
                   with_x: bool = True, y=None):
    """``y``: the forward's output when it applied ReLU (g is multiplied by its step), else None."""
    serial = _serial(N * Cc * S) or Cc < 4
    relu = y is not None
    C.cached(("bn_bwd", dtype, serial, with_x, relu), lambda: _build_bwd(dtype, serial, with_x, relu))(
        x, g, y if relu else g, w, mean, var, gx, gw, gb, N, Cc, S, eps)


# --- BatchNorm in eval mode: the running statistics, one pass per (sample, channel) plane ----------------
def _build_eval(dtype, serial, affine, relu):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, w: A, b: A, rm: A, rv: A, y: A, N: ti.i32, Cc: ti.i32, S: ti.i32, eps: T):
        ti.loop_config(serialize=serial)
        for q in range(N * Cc):
            c = q % Cc
            mu = rm[c]
            sd = ti.sqrt(rv[c] + eps)
            for j in range(S):
                z = (x[q * S + j] - mu) / sd   # the composed form's operations and order
                if ti.static(affine):
                    z = z * w[c] + b[c]
                if ti.static(relu):
                    z = ti.select(z > 0, z, ti.select(z <= 0, ti.cast(0, T), z))
                y[q * S + j] = z
    return k


def batch_norm_eval(x, w, b, rm, rv, y, N: int, Cc: int, S: int, eps: float, dtype: str, relu: bool = False):
    """y = (x - rm) / sqrt(rv + eps) * w + b per channel (w, b None: no affine), then ReLU with ``relu``."""
    serial = C.launch_mode(N * Cc * S, C.CHEAP) or N * Cc < 4
    affine = w is not None
    C.cached(("bn_eval", dtype, serial, affine, relu), lambda: _build_eval(dtype, serial, affine, relu))(
        x, w if affine else rm, b if affine else rm, rm, rv, y, N, Cc, S, eps)


# --- LayerNorm: rows of D values (x (R, D) row-major), affine w, b (D,) ------------------------------------
def _build_ln_fwd(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, w: A, b: A, y: A, mean: A, rstd: A, R: ti.i32, D: ti.i32, eps: T):
        ti.loop_config(serialize=serial)
        for r in range(R):
            o = r * D
            s = ti.cast(0, T)
            for j in range(D):
                s += x[o + j]
            mu = s / D
            v = ti.cast(0, T)
            for j in range(D):
                d = x[o + j] - mu
                v += d * d
            rs = 1 / ti.sqrt(v / D + eps)
            for j in range(D):
                y[o + j] = (x[o + j] - mu) * rs * w[j] + b[j]
            mean[r] = mu
            rstd[r] = rs
    return k


def _build_ln_bwd(dtype, serial, with_x):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, g: A, w: A, mean: A, rstd: A, gx: A, gw: A, gb: A, part: A, R: ti.i32, D: ti.i32, rc: ti.i32,
          nch: ti.i32):
        if ti.static(with_x):
            ti.loop_config(serialize=serial)
            for r in range(R):
                o = r * D
                mu = mean[r]
                rs = rstd[r]
                s1 = ti.cast(0, T)
                s2 = ti.cast(0, T)
                for j in range(D):
                    xh = (x[o + j] - mu) * rs
                    gh = g[o + j] * w[j]
                    s1 += gh
                    s2 += gh * xh
                for j in range(D):
                    xh = (x[o + j] - mu) * rs
                    gx[o + j] = rs * (g[o + j] * w[j] - s1 / D - xh * s2 / D)
        # the column sums gw, gb as ordered reductions (no atomic adds, whose order would change the bits from
        # run to run when parallel): partials over chunks of rc rows, one iteration per (chunk, column), then
        # each column's partials in order; with one chunk, the bits of the serial row loop
        ti.loop_config(serialize=serial)
        for t in range(nch * D):
            ch = t // D
            j = t % D
            sw = ti.cast(0, T)
            sb = ti.cast(0, T)
            for r in range(ch * rc, ti.min(R, ch * rc + rc)):
                gv = g[r * D + j]
                sw += gv * ((x[r * D + j] - mean[r]) * rstd[r])
                sb += gv
            part[2 * t] = sw
            part[2 * t + 1] = sb
        ti.loop_config(serialize=serial)
        for j in range(D):
            sw = part[2 * j]
            sb = part[2 * j + 1]
            for ch in range(1, nch):
                sw += part[2 * (ch * D + j)]
                sb += part[2 * (ch * D + j) + 1]
            gw[j] = sw
            gb[j] = sb
    return k


def layer_norm_fwd(x, w, b, y, mean, rstd, R: int, D: int, eps: float, dtype: str):
    serial = _serial(R * D) or R < 4
    C.cached(("ln_fwd", dtype, serial), lambda: _build_ln_fwd(dtype, serial))(x, w, b, y, mean, rstd, R, D, eps)


def layer_norm_bwd(x, g, w, mean, rstd, gx, gw, gb, R: int, D: int, dtype: str, with_x: bool = True):
    serial = _serial(R * D) or R < 4
    rc = C.reduce_chunk()   # rows per partial, fixed per arch: the bits depend on R only
    nch = max(1, -(-R // rc))
    C.cached(("ln_bwd", dtype, serial, with_x), lambda: _build_ln_bwd(dtype, serial, with_x))(
        x, g, w, mean, rstd, gx, gw, gb, C.scratch(2 * nch * D, dtype), R, D, rc, nch)
