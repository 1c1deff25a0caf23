"""Fused Taylor-stream kernels for MLP input derivatives (the PINN fast path).

Streams are stacked row blocks of one flat (S*n, w) buffer: block 0 the value, blocks
1..n1 the first derivatives d/dx_c, blocks n1+1..n1+n2 the second derivatives d2/dx_a dx_c.
Metadata (int32): ``[n1, n2, coord_0 .. coord_{n1-1}, a_0, c_0, a_1, c_1, ...]`` where
``coord_q`` is the input coordinate of first-order stream q and ``(a_p, c_p)`` are the
first-order streams a second-order stream p combines.

Per hidden layer, one pointwise kernel applies the activation to the pre-activations z of
every stream: h = s(z), h_q = s'(z) z_q, h_p = s''(z) z_a z_c + s'(z) z_p, and its hand-written
adjoint maps the cotangents of h to those of z in place. The first layer reads its
first-order streams straight from W (z_q = W[coord_q, :]; z_p = 0). One parallel iteration
handles a row of w elements (TAICHI-NOTES: rows of >= 32 elements per iteration pay off).
float32 tanh is the rational form of ``elementwise._F32_TANH``; the derivative coefficients
come from the identities (1 - t^2, ...) applied to it, as sciml's tanh rule does.
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
    gc, ga = math.sqrt(2.0 / math.pi), 0.044715

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

    @ti.func
    def gelu_c(z):
        u1 = gc * (1.0 + 3.0 * ga * z * z)
        u2 = (6.0 * ga * gc) * z
        u3 = 6.0 * ga * gc
        t = tanh_f(gc * (z + ga * z * z * z))
        s = 1.0 - t * t
        a = u2 - 2.0 * t * u1 * u1
        s0 = 0.5 * z * (1.0 + t)
        s1 = 0.5 * (1.0 + t) + 0.5 * z * s * u1
        s2 = s * u1 + 0.5 * z * s * a
        s3 = 1.5 * s * a + 0.5 * z * s * (u3 - 2.0 * t * u1 * a - 2.0 * s * u1 * u1 * u1 - 4.0 * t * u1 * u2)
        return ti.Vector([s0, s1, s2, s3], dt=T)

    return dict(tanh=tanh_c, sin=sin_c, softplus=softplus_c, gelu=gelu_c)[name]


def layer_forward(act, Z, b, W, H, meta, n: int, w: int, streams: int, first: bool, dtype: str):
    """Adds b to the value block of Z in place and writes the stacked activations H.

    first: Z holds only the value block (n, w) and the derivative streams come from W.
    """
    serial = C.launch_mode(n * w * streams)
    k = C.cached(("taylor_fwd", act, dtype, first, serial), lambda: _build_fwd(act, dtype, first, serial))
    if first:
        k(Z, b, W, H, meta, n, w)
    else:
        k(Z, b, H, meta, n, w)


def layer_backward(act, Z, W, G, meta, n: int, w: int, streams: int, first: bool, dtype: str):
    """Maps the stacked cotangents of H (in G) to those of Z, in place."""
    serial = C.launch_mode(n * w * streams)
    k = C.cached(("taylor_bwd", act, dtype, first, serial), lambda: _build_bwd(act, dtype, first, serial))
    if first:
        k(Z, W, G, meta, n, w)
    else:
        k(Z, G, meta, n, w)


def _build_fwd(act, dtype, first, serial):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")
    f = _act(act, dtype)

    @ti.func
    def body(Z: ti.template(), b: ti.template(), W: ti.template(), H: ti.template(), meta: ti.template(),
             n, w, r):
        n1 = meta[0]
        n2 = meta[1]
        nw = n * w
        po = 2 + n1
        for j in range(w):
            e = r * w + j
            z = Z[e] + b[j]
            Z[e] = z
            s = f(z)
            H[e] = s[0]
            for q in range(n1):
                zq = Z[e]
                if ti.static(first):
                    zq = W[meta[2 + q] * w + j]
                else:
                    zq = Z[(1 + q) * nw + e]
                H[(1 + q) * nw + e] = s[1] * zq
            for p in range(n2):
                a = meta[po + 2 * p]
                c = meta[po + 2 * p + 1]
                v = Z[e]
                if ti.static(first):
                    v = s[2] * W[meta[2 + a] * w + j] * W[meta[2 + c] * w + j]
                else:
                    v = s[2] * Z[(1 + a) * nw + e] * Z[(1 + c) * nw + e] + s[1] * Z[(1 + n1 + p) * nw + e]
                H[(1 + n1 + p) * nw + e] = v

    if first:
        @ti.kernel
        def k1(Z: A, b: A, W: A, H: A, meta: I, n: ti.i32, w: ti.i32):
            ti.loop_config(serialize=serial)
            for r in range(n):
                body(Z, b, W, H, meta, n, w, r)
        return k1

    @ti.kernel
    def k(Z: A, b: A, H: A, meta: I, n: ti.i32, w: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(n):
            body(Z, b, b, H, meta, n, w, r)
    return k


def _build_bwd(act, dtype, first, serial):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")
    f = _act(act, dtype)

    @ti.func
    def body(Z: ti.template(), W: ti.template(), G: ti.template(), meta: ti.template(), n, w, r):
        n1 = meta[0]
        n2 = meta[1]
        nw = n * w
        po = 2 + n1
        for j in range(w):
            e = r * w + j
            s = f(Z[e])
            g0 = G[e] * s[1]
            for q in range(n1):
                zq = Z[e]
                if ti.static(first):
                    zq = W[meta[2 + q] * w + j]
                else:
                    zq = Z[(1 + q) * nw + e]
                gq = G[(1 + q) * nw + e]
                g0 += gq * zq * s[2]
                G[(1 + q) * nw + e] = gq * s[1]
            for p in range(n2):
                a = meta[po + 2 * p]
                c = meta[po + 2 * p + 1]
                za = Z[e]
                zc = Z[e]
                if ti.static(first):
                    za = W[meta[2 + a] * w + j]
                    zc = W[meta[2 + c] * w + j]
                else:
                    za = Z[(1 + a) * nw + e]
                    zc = Z[(1 + c) * nw + e]
                ip = (1 + n1 + p) * nw + e
                gp = G[ip]
                ia = (1 + a) * nw + e
                G[ia] = G[ia] + gp * s[2] * zc
                ic = (1 + c) * nw + e
                G[ic] = G[ic] + gp * s[2] * za
                if ti.static(first):
                    g0 += gp * s[3] * za * zc
                else:
                    g0 += gp * (s[3] * za * zc + s[2] * Z[ip])
                G[ip] = gp * s[1]
            G[e] = g0

    if first:
        @ti.kernel
        def k1(Z: A, W: A, G: A, meta: I, n: ti.i32, w: ti.i32):
            ti.loop_config(serialize=serial)
            for r in range(n):
                body(Z, W, G, meta, n, w, r)
        return k1

    @ti.kernel
    def k(Z: A, G: A, meta: I, n: ti.i32, w: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(n):
            body(Z, Z, G, meta, n, w, r)
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
