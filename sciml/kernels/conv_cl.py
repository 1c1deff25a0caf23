"""Channel-last unfold / fold (im2col / col2im) with the window geometry compiled in (Taichi; flat buffers in/out).

cols (N, Ho, Wo, kh, kw, C): each window's taps with the channels innermost (``conv.py``'s unfold puts the taps
innermost), so that on CPU a tap's C channels are whole vectors (``_vec.py``): the unfold gathers L channels of a
tap from the (N, C, H, W) image and stores them as one vector; the fold sums each pixel's taps as vectors and
scatters the lanes back to the image. A scalar store costs ~3 ns here (Taichi reloads the ndarray pointers after
each), so the digits CNN's second convolution's unfold (147K taps) and fold go from scalar stores to vector ones.
Scalar kernels (devices, channel counts without lanes, unaligned buffers) give the same values.
"""
from . import _common as C
from . import _vec as V


def _build(dtype, L, geom, fold):
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    kh, kw, sh, sw, ph, pw = geom
    padded = ph > 0 or pw > 0
    if L:
        VT = ti.types.vector(L, T)
        AC = ti.types.ndarray(dtype=VT, ndim=1)
    else:
        VT, AC = None, C.arr(dtype)
    AS = C.arr(dtype)
    serial = L is not None   # vector kernels run serialized (VecLaunch); scalar ones parallel off the host

    if not fold:
        @ti.kernel
        def unfold(x: AS, out: AC, windows: ti.i32, Cc: ti.i32, H: ti.i32, W: ti.i32, Ho: ti.i32, Wo: ti.i32):
            ti.loop_config(serialize=serial)
            for o in range(windows):
                ow = o % Wo
                r = o // Wo
                oh = r % Ho
                n = r // Ho
                for ki in ti.static(range(kh)):
                    for kj in ti.static(range(kw)):
                        h = oh * sh - ph + ki
                        w = ow * sw - pw + kj
                        inside = 1
                        if ti.static(padded):
                            inside = ti.cast(0 <= h < H and 0 <= w < W, ti.i32)
                        t = ki * kw + kj
                        if ti.static(L):
                            cv = Cc // L
                            for jv in range(cv):
                                v = VT(0.0)
                                if inside:
                                    for l in ti.static(range(L)):
                                        v[l] = x[((n * Cc + jv * L + l) * H + h) * W + w]
                                out[(o * (kh * kw) + t) * cv + jv] = v
                        else:
                            for c in range(Cc):
                                v = ti.cast(0, T)
                                if inside:
                                    v = x[((n * Cc + c) * H + h) * W + w]
                                out[(o * (kh * kw) + t) * Cc + c] = v
        return unfold

    @ti.kernel
    def fold_k(cols: AC, out: AS, pixels: ti.i32, Cc: ti.i32, H: ti.i32, W: ti.i32, Ho: ti.i32, Wo: ti.i32):
        ti.loop_config(serialize=serial)
        for px in range(pixels):   # one (n, h, w) pixel each: its taps summed, all channels
            w = px % W
            r = px // W
            h = r % H
            n = r // H
            if ti.static(L):
                cv = Cc // L
                for jv in range(cv):
                    acc = VT(0.0)
                    for ki in ti.static(range(kh)):
                        for kj in ti.static(range(kw)):
                            th = h + ph - ki
                            tw = w + pw - kj
                            oh = th // sh
                            ow = tw // sw
                            if th >= 0 and tw >= 0 and th % sh == 0 and tw % sw == 0 and oh < Ho and ow < Wo:
                                acc = acc + cols[(((n * Ho + oh) * Wo + ow) * (kh * kw) + ki * kw + kj) * cv + jv]
                    for l in ti.static(range(L)):
                        out[((n * Cc + jv * L + l) * H + h) * W + w] = acc[l]
            else:
                for c in range(Cc):
                    acc = ti.cast(0, T)
                    for ki in ti.static(range(kh)):
                        for kj in ti.static(range(kw)):
                            th = h + ph - ki
                            tw = w + pw - kj
                            oh = th // sh
                            ow = tw // sw
                            if th >= 0 and tw >= 0 and th % sh == 0 and tw % sw == 0 and oh < Ho and ow < Wo:
                                acc += cols[(((n * Ho + oh) * Wo + ow) * (kh * kw) + ki * kw + kj) * Cc + c]
                    out[((n * Cc + c) * H + h) * W + w] = acc
    return fold_k


VECTOR = True   # False: the scalar kernels only (tests compare)


def _lanes(arrays, Cc, dtype, vec=None):
    if not (VECTOR and C.backend.on_host()) or dtype not in V.LANES:
        return None
    from .nn_conv import _vec_lanes
    return _vec_lanes(arrays, Cc, dtype, vec)


def unfold(x, out, N, Cc, H, W, Ho, Wo, geom, dtype):
    """out (N, Ho, Wo, kh, kw, Cc) = the windows of x (N, Cc, H, W); taps outside the image read 0."""
    geom = tuple(geom)
    lp = _lanes((x, out), Cc, dtype, (1,))
    sizes = (N, Cc, H, W, Ho, Wo)
    if lp is not None:
        L, ptrs = lp
        V.cached(("unfold_cl_vec", dtype, L, geom), lambda: _build(dtype, L, geom, False), (1, L))(
            (x, out), ptrs, (x.size, out.size // L), (N * Ho * Wo,) + sizes[1:])
        return
    C.cached(("unfold_cl", dtype, geom), lambda: _build(dtype, None, geom, False))(x, out, N * Ho * Wo, *sizes[1:])


def fold(cols, out, N, Cc, H, W, Ho, Wo, geom, dtype):
    """out (N, Cc, H, W) = the adjoint of :func:`unfold` applied to cols (N, Ho, Wo, kh, kw, Cc)."""
    geom = tuple(geom)
    lp = _lanes((cols, out), Cc, dtype, (0,))
    sizes = (N, Cc, H, W, Ho, Wo)
    if lp is not None:
        L, ptrs = lp
        V.cached(("fold_cl_vec", dtype, L, geom), lambda: _build(dtype, L, geom, True), (L, 1))(
            (cols, out), ptrs, (cols.size // L, out.size), (N * H * W,) + sizes[1:])
        return
    C.cached(("fold_cl", dtype, geom), lambda: _build(dtype, None, geom, True))(cols, out, N * H * W, *sizes[1:])
