"""Host unfold / fold (im2col / col2im) with the window geometry compiled in (CPU; flat buffers in/out).

``conv.py``'s row kernels take the geometry (kernel, stride, padding) at run time, so every tap pays loop
bounds, a bounds test with branches and, in the fold, the stride divisions. Here kh, kw, sh, sw, ph, pw are
static (one kernel per geometry, as the pooling kernels): the taps unroll, out-of-image taps read a clamped
address and are replaced by the pad value with a select, and the fold's stride tests are compile-time.
Same results as the row kernels (the same reads; the fold sums each pixel's taps in the same order).
"""
from . import _common as C

MAX_TAPS = 49   # larger windows: the runtime-geometry row kernels (unrolled code grows with kh * kw)


def _build_unfold(dtype, serial, geom):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)
    kh, kw, sh, sw, ph, pw = geom
    padded = ph > 0 or pw > 0

    @ti.kernel
    def k(x: A, out: A, windows: ti.i32, Cc: ti.i32, H: ti.i32, W: ti.i32, Ho: ti.i32, Wo: ti.i32, pad_value: T):
        ti.loop_config(serialize=serial)
        for o in range(windows):
            ow = o % Wo
            r = o // Wo
            oh = r % Ho
            n = r // Ho
            h0 = oh * sh - ph
            w0 = ow * sw - pw
            q = o * (Cc * kh * kw)
            xb = n * Cc * H * W
            for c in range(Cc):
                for ki in ti.static(range(kh)):
                    h = h0 + ki
                    for kj in ti.static(range(kw)):
                        w = w0 + kj
                        if ti.static(padded):
                            inside = 0 <= h < H and 0 <= w < W
                            hc = ti.min(ti.max(h, 0), H - 1)
                            wc = ti.min(ti.max(w, 0), W - 1)
                            out[q + ki * kw + kj] = ti.select(inside, x[xb + hc * W + wc], pad_value)
                        else:
                            out[q + ki * kw + kj] = x[xb + h * W + w]
                q += kh * kw
                xb += H * W
    return k


def _build_fold(dtype, serial, geom):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)
    kh, kw, sh, sw, ph, pw = geom

    @ti.kernel
    def k(cols: A, out: A, rows: ti.i32, Cc: ti.i32, H: ti.i32, W: ti.i32, Ho: ti.i32, Wo: ti.i32):
        ti.loop_config(serialize=serial)
        for rr in range(rows):   # one image row (n, c, h) per iteration
            h = rr % H
            r = rr // H
            c = r % Cc
            n = r // Cc
            for w in range(W):
                acc = ti.cast(0.0, T)
                for ki in ti.static(range(kh)):
                    t = h + ph - ki
                    oh = t // sh
                    if t >= 0 and t % sh == 0 and oh < Ho:
                        for kj in ti.static(range(kw)):
                            u = w + pw - kj
                            ow = u // sw
                            if u >= 0 and u % sw == 0 and ow < Wo:
                                acc += cols[((((n * Ho + oh) * Wo + ow) * Cc + c) * kh + ki) * kw + kj]
                out[rr * W + w] = acc
    return k


def _geom(meta):
    """(N, Cc, H, W, (kh, kw, sh, sw, ph, pw), Ho, Wo) from a host meta buffer (``ops/conv.py``'s layout), or
    None where the static kernels do not apply."""
    N, Cc, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo = (int(v) for v in meta[:12])
    if kh * kw > MAX_TAPS or Cc == 1:   # one channel: no faster than the row kernel (measured 162 vs 187 us)
        return None
    return N, Cc, H, W, (kh, kw, sh, sw, ph, pw), Ho, Wo


def unfold(x, out, meta, n_out, pad_value, dtype) -> bool:
    """``conv.unfold`` with the geometry compiled in; False (nothing done) where it does not apply."""
    g = _geom(meta)
    if g is None:
        return False
    N, Cc, H, W, geom, Ho, Wo = g
    serial = C.launch_mode(n_out, C.CHEAP)
    C.cached(("unfold_static", dtype, serial, geom), lambda: _build_unfold(dtype, serial, geom))(
        x, out, N * Ho * Wo, Cc, H, W, Ho, Wo, pad_value)
    return True


def fold(cols, out, meta, n_in, dtype) -> bool:
    """``conv.fold`` with the geometry compiled in; False (nothing done) where it does not apply."""
    g = _geom(meta)
    if g is None:
        return False
    N, Cc, H, W, geom, Ho, Wo = g
    serial = C.launch_mode(n_in, C.CHEAP)
    C.cached(("fold_static", dtype, serial, geom), lambda: _build_fold(dtype, serial, geom))(
        cols, out, N * Cc * H, Cc, H, W, Ho, Wo)
    return True
