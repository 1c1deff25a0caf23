"""Fused Taylor-stream kernels for MLP input derivatives (the PINN fast path).

Streams are stacked row blocks of one flat (S*n, w) buffer: block 0 the value, blocks
1..n1 the first derivatives d/dx_c (c = coords[q]), blocks n1+1..n1+n2 the second derivatives
d2/dx_a dx_c for the pairs (a, c) of first-order stream positions. The structure (coords,
pairs) is compiled into each kernel (``ti.static`` loops), one kernel per structure.

Per activation layer, one pointwise kernel applies the activation to the pre-activations z of
every stream: h = s(z), h_q = s'(z) z_q, h_p = s''(z) z_a z_c + s'(z) z_p; its hand-written
adjoint maps the cotangents of h to those of z in place. The first layer reads its
first-order streams straight from W (z_q = W[coord_q, :]; z_p = 0); the last activation layer
also applies the linear output layer (``top``), forward and adjoint. One parallel iteration
handles a row of w elements (TAICHI-NOTES: rows of >= 32 elements per iteration pay off).
float32 tanh is the rational form of ``elementwise._F32_TANH``; the derivative coefficients
come from the identities (1 - t^2, ...) applied to it, as sciml's tanh rule does, and the
adjoint reads t from the saved activations instead of evaluating tanh again.
``first_finish`` uses metadata ``[n1, n2, coord_0 .. coord_{n1-1}, ...]`` (int32).
"""
import math

from . import _common as C
from . import elementwise as E
from .. import backend

ACTIVATIONS = ("tanh", "sin", "softplus", "gelu")


def _act(name, dtype):
    """A ti.func z -> Vector(s(z), s'(z), s''(z), s'''(z))."""
    ti = C.ti()
    T = backend.ti_dtype(dtype)
    fs = E._funcs(dtype)
    tanh_f, sigmoid_f, softplus_f = fs["tanh"], fs["sigmoid"], fs["softplus"]

    @ti.func
    def tanh_c(z):
        t = tanh_f(z)
        s1 = 1.0 - t * t
        return ti.Vector([t, s1, -2.0 * t * s1, -2.0 * s1 * (s1 - 2.0 * t * t)], dt=T)

    @ti.func
    def sin_c(z):
        s = ti.sin(z)
        c = ti.cos(z)
        return ti.Vector([s, c, -s, -c], dt=T)

    @ti.func
    def softplus_c(z):
        p = sigmoid_f(z)
        s2 = p * (1.0 - p)
        return ti.Vector([softplus_f(z), p, s2, s2 * (1.0 - 2.0 * p)], dt=T)

    erfc_f = fs["erfc"]
    r2, rpi = 1.0 / math.sqrt(2.0), 1.0 / math.sqrt(2.0 * math.pi)

    @ti.func
    def gelu_c(z):  # exact gelu z Phi(z) (sm.gelu's default): Phi' = phi, phi' = -z phi
        cdf = 0.5 * erfc_f(-z * r2)  # erfc: accurate for z << 0 too
        pdf = rpi * ti.exp(-0.5 * z * z)
        return ti.Vector([z * cdf, cdf + z * pdf, pdf * (2.0 - z * z), z * pdf * (z * z - 4.0)], dt=T)

    return dict(tanh=tanh_c, sin=sin_c, softplus=softplus_c, gelu=gelu_c)[name]


def _coeffs_from_tanh(dtype):
    """(t, 1 - t^2, ...) from t = tanh(z) itself: the adjoint reads t from the saved
    activations instead of evaluating tanh again (tanh is most of a layer's cost here)."""
    ti = C.ti()
    T = backend.ti_dtype(dtype)

    @ti.func
    def f(t):
        s1 = 1.0 - t * t
        return ti.Vector([t, s1, -2.0 * t * s1, -2.0 * s1 * (s1 - 2.0 * t * t)], dt=T)
    return f


def layer_forward(act, Z, b, W, H, coords, pairs, n: int, w: int, first: bool, dtype: str, top=None):
    """Adds b to the value block of Z in place and writes the stacked activations H.

    first: Z holds only the value block (n, w) and the derivative streams come from W.
    top: None, or (W_out, b_out, OUT, o) for the last activation layer: the linear output
    layer OUT = H @ W_out (+ b_out on the value block) is fused in (one row of H at a time).
    The stream structure (coords, pairs) is compiled in (unrolled): one kernel per structure.
    """
    S = 1 + len(coords) + len(pairs)
    serial = C.launch_mode(n * w * S)
    WL, bL, OUT, o = top if top is not None else (b, b, b, 0)
    key = ("taylor_fwd", act, dtype, first, o, serial, tuple(coords) if first else len(coords), tuple(pairs))
    k = C.cached(key, lambda: _build_fwd(act, dtype, first, o, serial, tuple(coords), tuple(pairs)))
    k(Z, b, W if first else b, H, WL, bL, OUT, n, w)


def layer_backward(act, Z, HV, W, G, coords, pairs, n: int, w: int, first: bool, dtype: str, top=None):
    """Maps the stacked cotangents of H (in G) to those of Z, in place. HV: the layer's saved
    activations (their value block gives tanh's coefficients without evaluating tanh again).

    top: None, or (GOUT, W_out, o): the cotangents of H are GOUT @ W_out^T, formed on the fly
    (the output layer's dH GEMM fused in); G is then written, not read.
    """
    S = 1 + len(coords) + len(pairs)
    serial = C.launch_mode(n * w * S)
    GOUT, WL, o = top if top is not None else (G, G, 0)
    key = ("taylor_bwd", act, dtype, first, o, serial, tuple(coords) if first else len(coords), tuple(pairs))
    k = C.cached(key, lambda: _build_bwd(act, dtype, first, o, serial, tuple(coords), tuple(pairs)))
    k(Z, HV, W if first else Z, G, GOUT, WL, n, w)


def _build_fwd(act, dtype, first, o, serial, coords, pairs):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    f = _act(act, dtype)
    n1, n2 = len(coords), len(pairs)
    S = 1 + n1 + n2
    top = o > 0

    @ti.kernel
    def k(Z: A, b: A, W: A, H: A, WL: A, bL: A, OUT: A, n: ti.i32, w: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(n):
            nw = n * w
            for j in range(w):
                e = r * w + j
                z = Z[e] + b[j]
                if ti.static(act != "tanh"):   # the adjoint of tanh reads t = H instead of z
                    Z[e] = z
                s = f(z)
                H[e] = s[0]
                for q in ti.static(range(n1)):
                    if ti.static(first):
                        H[(1 + q) * nw + e] = s[1] * W[coords[q] * w + j]
                    else:
                        H[(1 + q) * nw + e] = s[1] * Z[(1 + q) * nw + e]
                for p in ti.static(range(n2)):
                    a, c = ti.static(pairs[p][0], pairs[p][1])
                    if ti.static(first):
                        H[(1 + n1 + p) * nw + e] = s[2] * W[coords[a] * w + j] * W[coords[c] * w + j]
                    else:
                        H[(1 + n1 + p) * nw + e] = (s[2] * Z[(1 + a) * nw + e] * Z[(1 + c) * nw + e]
                                                    + s[1] * Z[(1 + n1 + p) * nw + e])
            if ti.static(top):
                for kk in ti.static(range(o)):
                    acc = ti.Vector.zero(T, S)
                    for j in range(w):
                        wl = WL[j * o + kk]
                        for st in ti.static(range(S)):
                            acc[st] += H[st * nw + r * w + j] * wl
                    for st in ti.static(range(S)):
                        v = acc[st]
                        if ti.static(st == 0):
                            v += bL[kk]
                        OUT[st * n * o + r * o + kk] = v
    return k


def _build_bwd(act, dtype, first, o, serial, coords, pairs):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    from_t = act == "tanh"
    f = _coeffs_from_tanh(dtype) if from_t else _act(act, dtype)
    top = o > 0
    n1, n2 = len(coords), len(pairs)
    m = max(n1, 1)

    @ti.func
    def zq_(Z: ti.template(), W: ti.template(), q: ti.template(), nw, e, j, w):
        r = Z[e]
        if ti.static(first):
            r = W[coords[q] * w + j]
        else:
            r = Z[(1 + q) * nw + e]
        return r

    @ti.func
    def gin(G: ti.template(), GOUT: ti.template(), WL: ti.template(), st: ti.template(), nw, e, n, r, j):
        v = G[0] * 0.0
        if ti.static(top):
            for kk in ti.static(range(o)):
                v += GOUT[st * n * o + r * o + kk] * WL[j * o + kk]
        else:
            v = G[st * nw + e]
        return v

    @ti.kernel
    def k(Z: A, HV: A, W: A, G: A, GOUT: A, WL: A, n: ti.i32, w: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(n):
            nw = n * w
            for j in range(w):
                e = r * w + j
                s = f(HV[e]) if ti.static(from_t) else f(Z[e])
                g0 = gin(G, GOUT, WL, 0, nw, e, n, r, j) * s[1]
                gv = ti.Vector.zero(T, m)
                for q in ti.static(range(n1)):
                    gq = gin(G, GOUT, WL, 1 + q, nw, e, n, r, j)
                    g0 += gq * zq_(Z, W, q, nw, e, j, w) * s[2]
                    gv[q] = gq * s[1]
                for p in ti.static(range(n2)):
                    a, c = ti.static(pairs[p][0], pairs[p][1])
                    ip = (1 + n1 + p) * nw + e
                    gp = gin(G, GOUT, WL, 1 + n1 + p, nw, e, n, r, j)
                    za = zq_(Z, W, a, nw, e, j, w)
                    zc = zq_(Z, W, c, nw, e, j, w)
                    gv[a] += gp * s[2] * zc
                    gv[c] += gp * s[2] * za
                    if ti.static(first):
                        g0 += gp * s[3] * za * zc
                    else:
                        g0 += gp * (s[3] * za * zc + s[2] * Z[ip])
                    G[ip] = gp * s[1]
                for q in ti.static(range(n1)):
                    G[(1 + q) * nw + e] = gv[q]
                G[e] = g0
    return k


def add_bias_rows(out, b, n: int, w: int, dtype: str):
    """out[r, j] += b[j] for the first n rows of width w (the value block)."""
    serial = C.launch_mode(n * w)
    k = C.cached(("taylor_bias", dtype, serial), lambda: _build_bias(dtype, serial))
    k(out, b, n, w)


def _build_bias(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def k(out: A, b: A, n: ti.i32, w: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(n):
            for j in range(w):
                out[r * w + j] = out[r * w + j] + b[j]
    return k


def first_finish(cs, dW, db, meta, w: int, dtype: str):
    """From column sums cs (1 + n1 blocks of w): db = cs[0]; dW[coord_q] += cs[1 + q]."""
    k = C.cached(("taylor_finish", dtype), lambda: _build_finish(dtype))
    k(cs, dW, db, meta, w)


def _build_finish(dtype):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")

    @ti.kernel
    def k(cs: A, dW: A, db: A, meta: I, w: ti.i32):
        ti.loop_config(serialize=True)
        for j in range(w):
            db[j] = cs[j]
            for q in range(meta[0]):
                i = meta[2 + q] * w + j
                dW[i] = dW[i] + cs[(1 + q) * w + j]
    return k


def copy(src, so: int, dst, do: int, n: int, dtype: str):
    """dst[do + i] = src[so + i] for i < n."""
    serial = C.launch_mode(n)
    k = C.cached(("taylor_copy", dtype, serial), lambda: _build_copy(dtype, serial))
    k(src, so, dst, do, n)


def _build_copy(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def k(src: A, so: ti.i32, dst: A, do: ti.i32, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            dst[do + i] = src[so + i]
    return k
