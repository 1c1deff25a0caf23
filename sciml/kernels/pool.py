"""2-D pooling as direct window loops over (N, C, H, W) planes (Taichi; flat buffers in/out).

One kernel forward (max or mean of each kh x kw window, stride and padding as PyTorch; padding reads -inf
for max and 0 for mean, counted in the mean), one kernel backward. They replace the im2col route (unfold,
a reduction, strided transposes; and in the adjoint a mask, a broadcast and a fold), 5-10 launches.

The window geometry (kernel, stride, padding) is compiled in (one kernel per geometry: the window loops
unroll). The max adjoint recomputes each window's max and the count of cells equal to it from x (no arg-max
buffer) and gives each such cell ``g / count`` (ties split equally, as sciml's ``max``); a NaN window (max NaN,
count 0) gives NaN to every cell of the window, as the composed rule ``g / count * [x == max]`` does. Work
items: one output row each when the windows of different rows never overlap (stride >= kernel height), else
one plane each, so the accumulating adjoint is race-free without atomics; when the windows tile the image
exactly (stride = kernel, no padding, sizes divisible) the adjoint writes each cell once and skips zeroing.
"""
from . import _common as C
from .. import backend

MODES = ("max", "avg")


def _geometry(ti, H_W, k, s, p):
    kh, kw = k
    sh, sw = s
    ph, pw = p

    @ti.func
    def cell(r, c, i, j, H, W):
        """(row, column, inside) of tap (i, j) of output (r, c)."""
        hi = r * sh - ph + i
        wj = c * sw - pw + j
        return hi, wj, (0 <= hi < H) and (0 <= wj < W)
    return kh, kw, cell


def _build_fwd(mode, dtype, serial, k, s, p):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    kh, kw, cell = _geometry(ti, None, k, s, p)
    is_max = mode == "max"
    padded = p[0] > 0 or p[1] > 0
    inv = 1.0 / (kh * kw)

    @ti.kernel
    def kern(x: A, y: A, items: ti.i32, nr: ti.i32, H: ti.i32, W: ti.i32, Ho: ti.i32, Wo: ti.i32, fill: T):
        ti.loop_config(serialize=serial)
        for q in range(items):
            pl = q // nr
            rows = Ho // nr
            r0 = (q % nr) * rows
            for r in range(r0, r0 + rows):
                for c in range(Wo):
                    m = fill
                    for i in ti.static(range(kh)):
                        for j in ti.static(range(kw)):
                            hi, wj, inside = cell(r, c, i, j, H, W)
                            v = fill
                            if ti.static(padded):
                                if inside:
                                    v = x[(pl * H + hi) * W + wj]
                            else:
                                v = x[(pl * H + hi) * W + wj]
                            if ti.static(is_max):
                                m = ti.select(m < v, v, ti.select(m >= v, m, m + v))   # NaN sticks (reduce.py)
                            else:
                                m += v
                    if ti.static(is_max):
                        y[(pl * Ho + r) * Wo + c] = m
                    else:
                        y[(pl * Ho + r) * Wo + c] = m * inv
    return kern


def _build_bwd(mode, dtype, serial, k, s, p, tiles):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    kh, kw, cell = _geometry(ti, None, k, s, p)
    is_max = mode == "max"
    padded = p[0] > 0 or p[1] > 0
    inv = 1.0 / (kh * kw)

    @ti.kernel
    def kern(x: A, g: A, gx: A, nx: ti.i32, items: ti.i32, nr: ti.i32, H: ti.i32, W: ti.i32, Ho: ti.i32,
             Wo: ti.i32, fill: T):
        if ti.static(not tiles):
            ti.loop_config(serialize=serial)
            for i in range(nx):
                gx[i] = ti.cast(0, T)
        ti.loop_config(serialize=serial)
        for q in range(items):
            pl = q // nr
            rows = Ho // nr
            r0 = (q % nr) * rows
            for r in range(r0, r0 + rows):
                for c in range(Wo):
                    go = g[(pl * Ho + r) * Wo + c]
                    share = go * inv
                    m = fill
                    if ti.static(is_max):
                        cnt = ti.cast(0, T)
                        for i in ti.static(range(kh)):
                            for j in ti.static(range(kw)):
                                hi, wj, inside = cell(r, c, i, j, H, W)
                                v = fill
                                if ti.static(padded):
                                    if inside:
                                        v = x[(pl * H + hi) * W + wj]
                                else:
                                    v = x[(pl * H + hi) * W + wj]
                                if v > m:
                                    m = v
                                    cnt = ti.cast(1, T)
                                elif v == m:
                                    cnt += 1
                                elif not v < m:    # a NaN: the window's max is NaN, no cell equals it
                                    m = m + v
                                    cnt = ti.cast(0, T)
                        share = go / cnt
                    for i in ti.static(range(kh)):
                        for j in ti.static(range(kw)):
                            hi, wj, inside = cell(r, c, i, j, H, W)
                            if not ti.static(padded) or inside:
                                ix = (pl * H + hi) * W + wj
                                d = share
                                if ti.static(is_max):
                                    hit = ti.cast(0, T)
                                    if x[ix] == m:
                                        hit = ti.cast(1, T)
                                    d = share * hit
                                if ti.static(tiles):
                                    gx[ix] = d
                                else:
                                    gx[ix] += d
    return kern


def _items(planes, Ho, kh, sh):
    """(work items, items per plane): one output row each when row windows are disjoint, else one plane."""
    nr = Ho if sh >= kh else 1
    return planes * nr, nr


def pool2d(mode, x, y, planes, H, W, Ho, Wo, k, s, p, dtype):
    """y (planes, Ho, Wo) = max / mean of the windows of x (planes, H, W); k, s, p: (kh, kw) pairs."""
    k, s, p = tuple(k), tuple(s), tuple(p)
    items, nr = _items(planes, Ho, k[0], s[0])
    fill = float("-inf") if mode == "max" else 0.0
    serial = C.launch_mode(planes * Ho * Wo * k[0] * k[1], C.CHEAP)
    C.cached(("pool2d", mode, dtype, serial, k, s, p), lambda: _build_fwd(mode, dtype, serial, k, s, p))(
        x, y, items, nr, H, W, Ho, Wo, fill)


def pool2d_vjp(mode, x, g, gx, planes, H, W, Ho, Wo, k, s, p, dtype):
    """gx (planes, H, W) = the adjoint of :func:`pool2d` applied to g (planes, Ho, Wo)."""
    k, s, p = tuple(k), tuple(s), tuple(p)
    items, nr = _items(planes, Ho, k[0], s[0])
    fill = float("-inf") if mode == "max" else 0.0
    tiles = k == s and p == (0, 0) and H == Ho * k[0] and W == Wo * k[1]
    serial = C.launch_mode(planes * Ho * Wo * k[0] * k[1] * 2, C.CHEAP)
    C.cached(("pool2d_vjp", mode, dtype, serial, k, s, p, tiles),
             lambda: _build_bwd(mode, dtype, serial, k, s, p, tiles))(x, g, gx, planes * H * W, items, nr, H, W, Ho,
                                                                      Wo, fill)
