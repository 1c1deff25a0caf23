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
import os

from . import _common as C
from . import elementwise as E
from .. import backend

ACTIVATIONS = ("tanh", "sin", "softplus", "gelu")
# CPU: the order-2 layer kernels run on vector lanes (kernels/taylor_vec.py) where the width and the stream
# buffers' alignment allow; SCIML_TAYLOR_VEC=0 keeps the scalar kernels (also the fallback and the device path)
VEC = [os.environ.get("SCIML_TAYLOR_VEC", "1").strip() != "0"]
VEC_MAX_OUT = 4   # the fused output layer's width at most (its W_out columns are hoisted into registers)


VEC_ACTS = ("tanh",)   # others evaluate libm per element: lane by lane they gain little and compile slowly (gelu)


def _vec_lanes(act, w, dtype, o, *bufs):
    if not VEC[0] or act not in VEC_ACTS or o > VEC_MAX_OUT or not backend.on_host():
        return None
    from . import taylor_vec
    return taylor_vec.lanes(w, dtype, [C.address(a) for a in bufs])


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
    o = top[3] if top is not None else 0
    L = _vec_lanes(act, w, dtype, o, Z, H)
    if L:
        from . import taylor_vec
        return taylor_vec.layer_forward(L, act, Z, b, W, H, coords, pairs, n, w, first, dtype, top)
    S = 1 + len(coords) + len(pairs)
    serial = C.launch_mode(n * w * S)
    WL, bL, OUT, o = top if top is not None else (b, b, b, 0)
    if isinstance(OUT, (list, tuple)):   # one output buffer per stream (the device path: no copies out of OUT)
        from .taylor_split import SPLIT_MAX
        if len(OUT) != S or S > SPLIT_MAX:
            raise ValueError(f"taylor.layer_forward: {len(OUT)} output buffers for {S} streams (at most {SPLIT_MAX})")
        key = ("taylor_fwd_split", act, dtype, first, o, serial, tuple(coords) if first else len(coords),
               tuple(pairs))
        from .taylor_split import build_fwd_split
        k = C.cached(key, lambda: build_fwd_split(act, dtype, first, o, serial, tuple(coords), tuple(pairs)))
        outs = list(OUT) + [OUT[0]] * (SPLIT_MAX - S)
        k(Z, b, W if first else b, H, WL, bL, *outs, n, w)
        return
    key = ("taylor_fwd", act, dtype, first, o, serial, tuple(coords) if first else len(coords), tuple(pairs))
    k = C.cached(key, lambda: _build_fwd(act, dtype, first, o, serial, tuple(coords), tuple(pairs)))
    k(Z, b, W if first else b, H, WL, bL, OUT, n, w)


def layer_backward(act, Z, HV, W, G, coords, pairs, n: int, w: int, first: bool, dtype: str, top=None):
    """Maps the stacked cotangents of H (in G) to those of Z, in place. HV: the layer's saved
    activations (their value block gives tanh's coefficients without evaluating tanh again).

    top: None, or (GOUT, W_out, o): the cotangents of H are GOUT @ W_out^T, formed on the fly
    (the output layer's dH GEMM fused in); G is then written, not read.
    """
    o = top[2] if top is not None else 0
    L = _vec_lanes(act, w, dtype, o, Z, HV, G)
    if L:
        from . import taylor_vec
        return taylor_vec.layer_backward(L, act, Z, HV, W, G, coords, pairs, n, w, first, dtype, top)
    S = 1 + len(coords) + len(pairs)
    serial = C.launch_mode(n * w * S)
    GOUT, WL, o = top if top is not None else (G, G, 0)
    key = ("taylor_bwd", act, dtype, first, o, serial, tuple(coords) if first else len(coords), tuple(pairs))
    k = C.cached(key, lambda: _build_bwd(act, dtype, first, o, serial, tuple(coords), tuple(pairs)))
    k(Z, HV, W if first else Z, G, GOUT, WL, n, w)


def _out_layer(T, S, o):
    """ti.func: the last (linear) layer fused into a forward kernel: OUT[st, r, :] = H[st, r, :] @ WL (+ bL for
    the value stream st = 0), for the S Taylor streams of row r."""
    ti = C.ti()

    @ti.func
    def out_layer(H: ti.template(), WL: ti.template(), bL: ti.template(), OUT: ti.template(), r, n, w):
        nw = n * w
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
    return out_layer


def _grad_in(o):
    """ti.func: the cotangent of stream st at (row r, unit j) entering a backward kernel: G itself, or, when the
    last linear layer is fused in (o > 0), GOUT[st, r, :] @ WL[j, :]."""
    ti = C.ti()
    top = o > 0

    @ti.func
    def gin(G: ti.template(), GOUT: ti.template(), WL: ti.template(), st: ti.template(), nw, e, n, r, j):
        v = G[0] * 0.0
        if ti.static(top):
            for kk in ti.static(range(o)):
                v += GOUT[st * n * o + r * o + kk] * WL[j * o + kk]
        else:
            v = G[st * nw + e]
        return v
    return gin


def _hidden_row(act, dtype, first, coords, pairs):
    """ti.func: row r of a hidden Taylor layer: z = Z + b (kept in Z unless tanh), the activation's value
    and the first/second-derivative streams written into H (shared by ``_build_fwd`` and
    ``taylor_split.build_fwd_split``)."""
    ti = C.ti()
    f = _act(act, dtype)
    n1, n2 = len(coords), len(pairs)

    @ti.func
    def hidden_row(Z: ti.template(), b: ti.template(), W: ti.template(), H: ti.template(), r, nw, w):
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

    return hidden_row


def _build_fwd(act, dtype, first, o, serial, coords, pairs):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    n1, n2 = len(coords), len(pairs)
    S = 1 + n1 + n2
    top = o > 0
    out_layer = _out_layer(T, S, o)
    hidden_row = _hidden_row(act, dtype, first, coords, pairs)

    @ti.kernel
    def k(Z: A, b: A, W: A, H: A, WL: A, bL: A, OUT: A, n: ti.i32, w: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(n):
            nw = n * w
            hidden_row(Z, b, W, H, r, nw, w)
            if ti.static(top):
                out_layer(H, WL, bL, OUT, r, n, w)
    return k


def _build_bwd(act, dtype, first, o, serial, coords, pairs):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    from_t = act == "tanh"
    f = _coeffs_from_tanh(dtype) if from_t else _act(act, dtype)
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

    gin = _grad_in(o)

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


# --- general stream structures: derivatives of any order (Faa di Bruno) --------------------
# ``streams``: the multi-indices (over positions in ``coords``) of the stacked blocks, closed
# under sub-multi-indices: streams[0] = (), streams[1..n1] = (0,) .. (n1-1,), then the rest.
# Stream m of a layer's activations is h_m = sum over the set partitions of m of
# s^(#blocks)(z) * prod_blocks z_block (Faa di Bruno), grouped by equal block multisets.
def _terms(streams):
    """Per stream: ((j, block stream numbers, multiplicity), ...) for Faa di Bruno."""
    from collections import Counter
    pos = {m: k for k, m in enumerate(streams)}

    def parts(items):
        if not items:
            yield []
            return
        for p in parts(items[1:]):
            for k in range(len(p)):
                yield p[:k] + [[items[0]] + p[k]] + p[k + 1:]
            yield [[items[0]]] + p
    out = [()]
    for m in streams[1:]:
        cnt = Counter()
        for p in parts(list(range(len(m)))):
            cnt[tuple(sorted(pos[tuple(sorted(m[i] for i in b))] for b in p))] += 1
        out.append(tuple(sorted((len(b), b, c) for b, c in cnt.items())))
    return tuple(out)


def _poly_table(first, base, K):
    """Coefficients (low to high) of P_1 .. P_K with P_1 = first, P_{j+1} = P_j' * base."""
    import numpy.polynomial.polynomial as npp
    P = [None, [float(c) for c in first]]
    for _ in range(K - 1):
        P.append([float(c) for c in npp.polymul(npp.polyder(P[-1]), base)])
    return P


def _act_k(name, dtype, K, from_t=False):
    """A ti.func -> Vector(s(z), s'(z), ..., s^(K)(z)); ``from_t``: tanh's from t = tanh(z)."""
    ti = C.ti()
    T = backend.ti_dtype(dtype)
    fs = E._funcs(dtype)
    tanh_f, sigmoid_f, softplus_f, erfc_f = fs["tanh"], fs["sigmoid"], fs["softplus"], fs["erfc"]
    TP = _poly_table([1.0, 0.0, -1.0], [1.0, 0.0, -1.0], K)   # tanh^(j) = P_j(t)
    SP = _poly_table([0.0, 1.0, -1.0], [0.0, 1.0, -1.0], K)   # sigmoid^(j) = P_j(p)
    GR = [None, None, [2.0, 0.0, -1.0]]                        # gelu^(j) = phi(z) R_j(z), j >= 2
    import numpy.polynomial.polynomial as npp
    for _ in range(K):
        GR.append([float(c) for c in npp.polysub(npp.polyder(GR[-1]), npp.polymul(GR[-1], [0.0, 1.0]))])
    r2, rpi = 1.0 / math.sqrt(2.0), 1.0 / math.sqrt(2.0 * math.pi)

    def poly_func(table):
        lens = tuple(len(c) if c is not None else 0 for c in table)

        @ti.func
        def h(t, jj: ti.template()):
            cs = ti.static(table[jj])
            acc = t * 0.0 + cs[lens[jj] - 1]
            for i in ti.static(range(lens[jj] - 2, -1, -1)):
                acc = acc * t + cs[i]
            return acc
        return h
    tp, sp, gr = poly_func(TP), poly_func(SP), poly_func(GR)

    @ti.func
    def tanh_t(t):
        v = ti.Vector.zero(T, K + 1)
        v[0] = t
        for j in ti.static(range(1, K + 1)):
            v[j] = tp(t, j)
        return v

    @ti.func
    def tanh_z(z):
        return tanh_t(tanh_f(z))

    @ti.func
    def sin_z(z):
        s, c = ti.sin(z), ti.cos(z)
        v = ti.Vector.zero(T, K + 1)
        for j in ti.static(range(K + 1)):
            v[j] = ti.static((1.0, 1.0, -1.0, -1.0)[j % 4]) * (s if ti.static(j % 2 == 0) else c)
        return v

    @ti.func
    def softplus_z(z):
        p = sigmoid_f(z)
        v = ti.Vector.zero(T, K + 1)
        v[0] = softplus_f(z)
        v[1] = p
        for j in ti.static(range(2, K + 1)):
            v[j] = sp(p, j - 1)
        return v

    @ti.func
    def gelu_z(z):
        cdf = 0.5 * erfc_f(-z * r2)
        pdf = rpi * ti.exp(-0.5 * z * z)
        v = ti.Vector.zero(T, K + 1)
        v[0] = z * cdf
        v[1] = cdf + z * pdf
        for j in ti.static(range(2, K + 1)):
            v[j] = pdf * gr(z, j)
        return v

    if from_t:
        return tanh_t
    return dict(tanh=tanh_z, sin=sin_z, softplus=softplus_z, gelu=gelu_z)[name]


def layer_forward_k(act, Z, b, W, H, coords, streams, n: int, w: int, first: bool, dtype: str, top=None):
    """:func:`layer_forward` for a general closed stream structure (any order)."""
    S = len(streams)
    serial = C.launch_mode(n * w * S * 2)
    WL, bL, OUT, o = top if top is not None else (b, b, b, 0)
    key = ("taylor_fwd_k", act, dtype, first, o, serial, tuple(coords) if first else len(coords), tuple(streams))
    k = C.cached(key, lambda: _build_fwd_k(act, dtype, first, o, serial, tuple(coords), tuple(streams)))
    k(Z, b, W if first else b, H, WL, bL, OUT, n, w)


def layer_backward_k(act, Z, HV, W, G, coords, streams, n: int, w: int, first: bool, dtype: str, top=None):
    """:func:`layer_backward` for a general closed stream structure (any order)."""
    S = len(streams)
    serial = C.launch_mode(n * w * S * 3)
    GOUT, WL, o = top if top is not None else (G, G, 0)
    key = ("taylor_bwd_k", act, dtype, first, o, serial, tuple(coords) if first else len(coords), tuple(streams))
    k = C.cached(key, lambda: _build_bwd_k(act, dtype, first, o, serial, tuple(coords), tuple(streams)))
    k(Z, HV, W if first else Z, G, GOUT, WL, n, w)


def _live(streams, first):
    """Terms per stream, without those that vanish in the first layer (z_m = 0 for |m| >= 2)."""
    terms = _terms(streams)
    if not first:
        return terms
    return tuple(tuple(t for t in ts if all(len(streams[b]) == 1 for b in t[1])) for ts in terms)


def _build_fwd_k(act, dtype, first, o, serial, coords, streams):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    S = len(streams)
    K = max(len(m) for m in streams)
    f = _act_k(act, dtype, K)
    terms = _live(streams, first)
    top = o > 0
    out_layer = _out_layer(T, S, o)

    @ti.kernel
    def k(Z: A, b: A, W: A, H: A, WL: A, bL: A, OUT: A, n: ti.i32, w: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(n):
            nw = n * w
            for j in range(w):
                e = r * w + j
                z = Z[e] + b[j]
                if ti.static(act != "tanh"):
                    Z[e] = z
                s = f(z)
                zv = ti.Vector.zero(T, S)
                for st in ti.static(range(1, S)):
                    if ti.static(first):
                        if ti.static(len(streams[st]) == 1):
                            zv[st] = W[coords[streams[st][0]] * w + j]
                    else:
                        zv[st] = Z[st * nw + e]
                H[e] = s[0]
                for st in ti.static(range(1, S)):
                    acc = s[0] * 0.0
                    for t in ti.static(range(len(terms[st]))):
                        jj, blocks, c = ti.static(terms[st][t][0], terms[st][t][1], terms[st][t][2])
                        p = s[jj] * ti.static(float(c))
                        for q in ti.static(range(len(blocks))):
                            p = p * zv[blocks[q]]
                        acc += p
                    H[st * nw + e] = acc
            if ti.static(top):
                out_layer(H, WL, bL, OUT, r, n, w)
    return k


def _build_bwd_k(act, dtype, first, o, serial, coords, streams):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    from_t = act == "tanh"
    S = len(streams)
    K = max(len(m) for m in streams)
    f = _act_k(act, dtype, K + 1, from_t=from_t)
    terms = _live(streams, first)
    # streams whose z cotangent is needed: all (first layer: the value and first order only)
    out_streams = tuple(st for st in range(S) if not first or len(streams[st]) <= 1)

    gin = _grad_in(o)

    @ti.kernel
    def k(Z: A, HV: A, W: A, G: A, GOUT: A, WL: A, n: ti.i32, w: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(n):
            nw = n * w
            for j in range(w):
                e = r * w + j
                s = f(HV[e]) if ti.static(from_t) else f(Z[e])
                zv = ti.Vector.zero(T, S)
                for st in ti.static(range(1, S)):
                    if ti.static(first):
                        if ti.static(len(streams[st]) == 1):
                            zv[st] = W[coords[streams[st][0]] * w + j]
                    else:
                        zv[st] = Z[st * nw + e]
                g = ti.Vector.zero(T, S)
                for st in ti.static(range(S)):
                    g[st] = gin(G, GOUT, WL, st, nw, e, n, r, j)
                gz = ti.Vector.zero(T, S)
                gz[0] = g[0] * s[1]
                for st in ti.static(range(1, S)):
                    for t in ti.static(range(len(terms[st]))):
                        jj, blocks, c = ti.static(terms[st][t][0], terms[st][t][1], terms[st][t][2])
                        gc = g[st] * ti.static(float(c))
                        p = gc * s[jj + 1]
                        for q in ti.static(range(len(blocks))):
                            p = p * zv[blocks[q]]
                        gz[0] += p
                        for i in ti.static(range(len(blocks))):
                            if ti.static(blocks[i] in out_streams):
                                pi = gc * s[jj]
                                for q in ti.static(range(len(blocks))):
                                    if ti.static(q != i):
                                        pi = pi * zv[blocks[q]]
                                gz[blocks[i]] += pi
                for st in ti.static(out_streams):
                    G[st * nw + e] = gz[st]
    return k
