"""The primitives behind :mod:`sciml.fft`: DFTs and complex contractions on interleaved complex Tensors.

A complex array of shape S is a real Tensor of shape ``S + (2,)`` holding (re, im) pairs side by side: numpy's
own complex layout, so on CPU scipy.fft and numpy read and write it without conversion, a transform runs along
any axis without moving axes, and a batch axis in front (vmap, batched tangents) needs no rule of its own.

- ``dft(x, axis, inverse, scale)``: ``scale * sum_j x_j exp(-+2 pi i j k / n)`` along ``axis`` (unnormalised).
  Linear; its adjoint is the transform of opposite sign (same scale): the VJP.
- ``rdft(x, axis, m, adj, scale)``: the real DFT of a real x along ``axis``, only its m lowest frequencies
  (``rfft(x)[:m]``: the truncation of spectral layers costs nothing), times weights ``scale`` (adj False) or
  ``scale c_k / n`` (adj True), c_k = 1 at k = 0 and k = n/2, else 2.
- ``irdft(y, axis, n, adj, scale)``: ``irfft(y * d, n)`` (numpy's irfft, m <= n//2 + 1 frequencies in, missing ones
  zero) with d = ``scale`` (adj False) or ``scale n h_k`` (adj True), h_k = 1 / c_k.
  With these weights the four maps are transposes of each other: rdft(s, a)^T = irdft(s, not a) and
  irdft(s, a)^T = rdft(s, not a), so every derivative rule is one transform (and second order just works).
- ``ceinsum(a, b, spec, ca, cb)``: the complex contraction ``einsum(spec, conj?(a), conj?(b))`` for specs whose
  every index appears in two of the three terms (batch indices in all three): numpy's batched complex GEMM
  on CPU, one Taichi kernel on devices. Its VJPs are ceinsums with the conjugation flags of PyTorch's
  convention (the gradient of a real loss is dL/dRe + i dL/dIm): for out = a b, grad_a = g conj(b).
- ``cpack(re, im)`` / ``cpart(z, which)``: between (re, im) Tensors and the interleaved form.

CPU: scipy.fft / numpy in host calls (replayed by ``sm.jit``, as the BLAS GEMM), unless
``sciml.fft.use_scipy(False)`` picks the Taichi kernels (``kernels/fft.py``), which devices always use.
"""
from __future__ import annotations

import math

import numpy as np

from . import backend
from .autodiff.primitive import Primitive
from .autodiff.tensor import zeros
from .kernels import _common as C
from .kernels import fft as KF

_scipy = {"enabled": None}
_CDT = {"float32": np.complex64, "float64": np.complex128}
_weights: dict = {}


def use_host() -> bool:
    return backend.on_host() and _scipy["enabled"] is not False


def _split_axis(shape, axis):
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _cview(buf, shape, dtype):
    """The interleaved buffer as a numpy complex array of ``shape`` (zero copy)."""
    return buf[:2 * math.prod(shape)].view(_CDT[dtype]).reshape(shape)


def _bshape(ndim, axis, m):
    return (1,) * axis + (m,) + (1,) * (ndim - axis - 1)


def _rweights(n, m, adj, scale, ndim, axis, dtype, inverse):
    """The per-frequency weights of rdft (inverse False) / irdft (True) for the host path, or None when 1."""
    key = (n, m, adj, scale, ndim, axis, dtype, inverse)
    w = _weights.get(key)
    if w is None:
        k = np.arange(m)
        c = np.where((k == 0) | (2 * k == n), 1.0, 2.0)
        if not adj:
            v = np.full(m, 1.0 if inverse else scale)  # irdft applies a plain scale itself
        elif inverse:
            v = scale / c           # n h_k with norm="forward" (no 1/n): h_k = 1 / c_k
        else:
            v = scale * c / n
        w = None if np.all(v == 1.0) else v.astype(backend.NP_DTYPES[dtype]).reshape(_bshape(ndim, axis, m))
        if len(_weights) > 256:
            _weights.clear()
        _weights[key] = w
    return w


# --- dft ---------------------------------------------------------------------------------------------------
def _dft_forward(x, axis, inverse, scale):
    shape = x.shape[:-1]
    out = backend.empty(x.size, x.dtype)
    if x.size:
        if use_host():
            C.host_call(_host_dft, x._buf, out, shape, axis, inverse, scale, x.dtype)
        else:
            pre, n, post = _split_axis(shape, axis)
            KF.dft(x._buf, out, pre, n, post, inverse, scale, x.dtype)
    return out, x.shape, x.dtype


def _host_dft(xb, ob, shape, axis, inverse, scale, dtype):
    import scipy.fft as sf
    z = _cview(xb, shape, dtype)
    r = sf.ifft(z, axis=axis, norm="forward") if inverse else sf.fft(z, axis=axis)
    o = _cview(ob, shape, dtype)
    if scale != 1.0:
        np.multiply(r, scale, out=o)
    else:
        o[...] = r


dft = Primitive("dft", _dft_forward)
dft.def_vjp(lambda g, x, out, axis, inverse, scale: (dft(g, axis=axis, inverse=not inverse, scale=scale),))
dft.def_jvp(lambda ts, x, out, axis, inverse, scale: dft(ts[0], axis=axis, inverse=inverse, scale=scale))
dft.def_batched_jvp(lambda ts, x, out, axis, inverse, scale: dft(ts[0], axis=axis + 1, inverse=inverse,
                                                                   scale=scale))
dft.def_shape(lambda x, axis, inverse, scale: (x.shape, x.dtype))


# --- rdft / irdft ---------------------------------------------------------------------------------------------
def _rdft_shape(x, axis, m, adj, scale):
    return x.shape[:axis] + (m,) + x.shape[axis + 1:] + (2,), x.dtype


def _rdft_forward(x, axis, m, adj, scale):
    shape, dtype = _rdft_shape(x, axis, m, adj, scale)
    out = backend.empty(math.prod(shape), dtype)
    if math.prod(shape):
        if use_host():
            C.host_call(_host_rdft, x._buf, out, x.shape, axis, m, adj, scale, dtype)
        else:
            pre, n, post = _split_axis(x.shape, axis)
            KF.rdft(x._buf, out, pre, n, post, m, adj, scale, dtype)
    return out, shape, dtype


def _host_rdft(xb, ob, shape, axis, m, adj, scale, dtype):
    import scipy.fft as sf
    x = xb[:math.prod(shape)].reshape(shape)
    n = shape[axis]
    r = sf.rfft(x, axis=axis)
    if m < r.shape[axis]:
        r = r[(slice(None),) * axis + (slice(0, m),)]
    o = _cview(ob, shape[:axis] + (m,) + shape[axis + 1:], dtype)
    w = _rweights(n, m, adj, scale, len(shape), axis, dtype, False)
    if w is None:
        o[...] = r
    else:
        np.multiply(r, w, out=o)


def _irdft_shape(y, axis, n, adj, scale):
    s = y.shape[:-1]
    return s[:axis] + (n,) + s[axis + 1:], y.dtype


def _irdft_forward(y, axis, n, adj, scale):
    shape, dtype = _irdft_shape(y, axis, n, adj, scale)
    out = backend.empty(math.prod(shape), dtype)
    if math.prod(shape):
        m = y.shape[axis]
        if m == 0:
            C.host_call(_fill0, out) if backend.on_host() else None  # device buffers start zeroed
        elif use_host():
            C.host_call(_host_irdft, y._buf, out, y.shape[:-1], axis, n, adj, scale, dtype)
        else:
            pre, _, post = _split_axis(shape, axis)
            KF.irdft(y._buf, out, pre, n, post, m, adj, scale, dtype)
    return out, shape, dtype


def _fill0(b):
    b.fill(0)


def _host_irdft(yb, ob, yshape, axis, n, adj, scale, dtype):
    import scipy.fft as sf
    y = _cview(yb, yshape, dtype)
    w = _rweights(n, yshape[axis], adj, scale, len(yshape), axis, dtype, True)
    if adj:
        r = sf.irfft(y if w is None else y * w, n, axis=axis, norm="forward")
    else:
        r = sf.irfft(y, n, axis=axis)
        if scale != 1.0:
            r *= scale
    oshape = yshape[:axis] + (n,) + yshape[axis + 1:]
    ob[:math.prod(oshape)].reshape(oshape)[...] = r


rdft = Primitive("rdft", _rdft_forward)
irdft = Primitive("irdft", _irdft_forward)
rdft.def_vjp(lambda g, x, out, axis, m, adj, scale: (irdft(g, axis=axis, n=x.shape[axis], adj=not adj,
                                                           scale=scale),))
irdft.def_vjp(lambda g, y, out, axis, n, adj, scale: (rdft(g, axis=axis, m=y.shape[axis], adj=not adj,
                                                           scale=scale),))
rdft.def_jvp(lambda ts, x, out, axis, m, adj, scale: rdft(ts[0], axis=axis, m=m, adj=adj, scale=scale))
irdft.def_jvp(lambda ts, y, out, axis, n, adj, scale: irdft(ts[0], axis=axis, n=n, adj=adj, scale=scale))
rdft.def_batched_jvp(lambda ts, x, out, axis, m, adj, scale: rdft(ts[0], axis=axis + 1, m=m, adj=adj,
                                                                  scale=scale))
irdft.def_batched_jvp(lambda ts, y, out, axis, n, adj, scale: irdft(ts[0], axis=axis + 1, n=n, adj=adj,
                                                                    scale=scale))
rdft.def_shape(_rdft_shape)
irdft.def_shape(_irdft_shape)


# --- cpack / cpart -------------------------------------------------------------------------------------------
def _pack_forward(re, im):
    out = backend.empty(2 * re.size, re.dtype)
    if re.size:
        KF.pack(re._buf, im._buf, out, re.size, re.dtype)
    return out, re.shape + (2,), re.dtype


def _part_forward(z, which):
    n = z.size // 2
    out = backend.empty(n, z.dtype)
    if n:
        KF.part(z._buf, out, n, which, z.dtype)
    return out, z.shape[:-1], z.dtype


cpack = Primitive("cpack", _pack_forward)
cpart = Primitive("cpart", _part_forward)
cpack.def_vjp(lambda g, re, im, out: (cpart(g, which=0), cpart(g, which=1)))
cpart.def_vjp(lambda g, z, out, which: (cpack(g, zeros(g.shape, g.dtype)) if which == 0 else
                                       cpack(zeros(g.shape, g.dtype), g),))
cpart.def_jvp(lambda ts, z, out, which: cpart(ts[0], which=which))
cpart.def_batched_jvp(lambda ts, z, out, which: cpart(ts[0], which=which))
cpack.def_shape(lambda re, im: (re.shape + (2,), re.dtype))
cpart.def_shape(lambda z, which: (z.shape[:-1], z.dtype))


def _zero_like(t, x, lead=()):
    return t if t is not None else zeros(lead + x.shape, x.dtype)


@cpack.def_jvp
def _pack_jvp(ts, re, im, out):
    return cpack(_zero_like(ts[0], re), _zero_like(ts[1], im))


@cpack.def_batched_jvp
def _pack_bjvp(ts, re, im, out):
    nb = (ts[0] if ts[0] is not None else ts[1]).shape[0]
    return cpack(_zero_like(ts[0], re, (nb,)), _zero_like(ts[1], im, (nb,)))


# --- ceinsum ------------------------------------------------------------------------------------------------
def parse_simple(spec, sa, sb):
    """(ins_a, ins_b, out) if ``spec`` is a two-operand einsum that ceinsum takes (no '...', no repeated index
    within a term, every index in exactly two terms or in all three, equal sizes), else None."""
    if "..." in spec or "->" not in spec:
        return None
    lhs, out = spec.replace(" ", "").split("->")
    ins = lhs.split(",")
    if len(ins) != 2:
        return None
    a, b = ins
    if len(a) != len(sa) or len(b) != len(sb) or not (a + b + out).isalpha():
        return None
    if len(set(a)) != len(a) or len(set(b)) != len(b) or len(set(out)) != len(out):
        return None
    size = {}
    for sub, sh in ((a, sa), (b, sb)):
        for c, n in zip(sub, sh):
            if size.setdefault(c, n) != n:
                return None
    for c in set(a) | set(b) | set(out):
        if (c in a) + (c in b) + (c in out) < 2:
            return None
    return a, b, out


_plans: dict = {}


def _plan(spec, sa, sb):
    key = (spec, sa, sb)
    p = _plans.get(key)
    if p is not None:
        return p
    a, b, o = parse_simple(spec, sa, sb)
    size = dict(zip(a, sa))
    size.update(zip(b, sb))
    batch = [c for c in o if c in a and c in b]
    af = [c for c in o if c in a and c not in b]
    bf = [c for c in o if c in b and c not in a]
    con = [c for c in a if c in b and c not in o]
    prod = lambda cs: math.prod(size[c] for c in cs)
    pa = [a.index(c) for c in batch + af + con]
    pb = [b.index(c) for c in batch + con + bf]
    mid = batch + af + bf
    po = [mid.index(c) for c in o]
    oshape = tuple(size[c] for c in o)
    st = lambda sub, sh: {c: math.prod(sh[i + 1:]) for i, c in enumerate(sub)}
    stA, stB = st(a, sa), st(b, sb)
    meta = (len(o), len(con)) + oshape + tuple(stA.get(c, 0) for c in o) + tuple(stB.get(c, 0) for c in o) \
        + tuple(size[c] for c in con) + tuple(stA[c] for c in con) + tuple(stB[c] for c in con)
    p = dict(pa=pa, pb=pb, po=po, oshape=oshape, bt=prod(batch), M=prod(af), K=prod(con), N=prod(bf),
             mid=tuple(size[c] for c in mid), meta=meta, ident=po == list(range(len(o))))
    if len(_plans) > 512:
        _plans.clear()
    _plans[key] = p
    return p


def _cein_shape(a, b, spec, ca, cb):
    return _plan(spec, a.shape[:-1], b.shape[:-1])["oshape"] + (2,), a.dtype


def _cein_forward(a, b, spec, ca, cb):
    p = _plan(spec, a.shape[:-1], b.shape[:-1])
    shape = p["oshape"] + (2,)
    n = math.prod(shape)
    out = backend.empty(n, a.dtype)
    if n:
        if p["K"] == 0:
            C.host_call(_fill0, out) if backend.on_host() else None
        elif use_host():
            C.host_call(_host_cein, a._buf, b._buf, out, a.shape[:-1], b.shape[:-1], spec, ca, cb, a.dtype)
        else:
            KF.cein(a._buf, b._buf, out, n // 2, p["meta"], ca, cb, a.dtype)
    return out, shape, a.dtype


def _host_cein(ab, bb, ob, sa, sb, spec, ca, cb, dtype):
    p = _plan(spec, sa, sb)
    A = _cview(ab, sa, dtype).transpose(p["pa"])
    B = _cview(bb, sb, dtype).transpose(p["pb"])
    if ca:
        A = np.conjugate(A, order="C")
    if cb:
        B = np.conjugate(B, order="C")
    A = A.reshape(p["bt"], p["M"], p["K"])
    B = B.reshape(p["bt"], p["K"], p["N"])
    o = _cview(ob, p["oshape"], dtype)
    if p["ident"]:
        np.matmul(A, B, out=o.reshape(p["bt"], p["M"], p["N"]))
    else:
        o[...] = np.matmul(A, B).reshape(p["mid"]).transpose(p["po"])


ceinsum = Primitive("ceinsum", _cein_forward)
ceinsum.def_shape(_cein_shape)


def _swap(spec):
    """(spec of grad wrt a, spec of grad wrt b) for 'a,b->o': 'o,b->a' and 'a,o->b'."""
    lhs, o = spec.split("->")
    a, b = lhs.split(",")
    return f"{o},{b}->{a}", f"{a},{o}->{b}"


@ceinsum.def_vjp
def _cein_vjp(g, a, b, out, spec, ca, cb):
    sa, sb = _swap(spec)
    # out = ca(a) cb(b): grad_a = einsum(g^{ca}, b^{cb xor not ca}); grad_b = einsum(a^{ca xor not cb}, g^{cb})
    return (ceinsum(g, b, spec=sa, ca=ca, cb=cb != (not ca)),
            ceinsum(a, g, spec=sb, ca=ca != (not cb), cb=cb))


@ceinsum.def_jvp
def _cein_jvp(ts, a, b, out, spec, ca, cb):
    r = None
    if ts[0] is not None:
        r = ceinsum(ts[0], b, spec=spec, ca=ca, cb=cb)
    if ts[1] is not None:
        t = ceinsum(a, ts[1], spec=spec, ca=ca, cb=cb)
        r = t if r is None else r + t
    return r


def _fresh_letter(spec):
    return next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA" if c not in spec)


def batched_spec(spec, fa, fb):
    """The spec with a new leading batch index on the batched operand(s) and on the output."""
    z = _fresh_letter(spec)
    lhs, o = spec.split("->")
    a, b = lhs.split(",")
    return f"{z + a if fa else a},{z + b if fb else b}->{z + o}"


@ceinsum.def_batched_jvp
def _cein_bjvp(ts, a, b, out, spec, ca, cb):
    r = None
    if ts[0] is not None:
        r = ceinsum(ts[0], b, spec=batched_spec(spec, True, False), ca=ca, cb=cb)
    if ts[1] is not None:
        t = ceinsum(a, ts[1], spec=batched_spec(spec, False, True), ca=ca, cb=cb)
        r = t if r is None else r + t
    return r


# --- vmap rules (physical operands carry the batch axis first) -------------------------------------------------
def _vmap_rules():
    from .autodiff import vmap as V

    def axis_rule(prim, xs, flags, params, nb):
        return prim(xs[0], **{**params, "axis": params["axis"] + 1})

    def pack_rule(prim, xs, flags, params, nb):
        return prim(*V._bcast_all(xs, flags, nb))

    def part_rule(prim, xs, flags, params, nb):
        return prim(xs[0], **params)

    def cein_rule(prim, xs, flags, params, nb):
        return prim(xs[0], xs[1], spec=batched_spec(params["spec"], flags[0], flags[1]), ca=params["ca"],
                    cb=params["cb"])
    V.RULES.update({"dft": axis_rule, "rdft": axis_rule, "irdft": axis_rule, "cpack": pack_rule,
                    "cpart": part_rule, "ceinsum": cein_rule})


_vmap_rules()
