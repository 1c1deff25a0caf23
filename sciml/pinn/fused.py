"""Fused input derivatives of an MLP: Taylor streams, one GEMM per layer, hand-written adjoint.

``mlp_derivatives(layers, activation, x, derivs)`` computes the value and the requested input
derivatives (order <= 4) of an MLP (tanh, sin, softplus or gelu) at the points ``x``. The
value, the needed first-derivative streams and the needed second-derivative streams are
stacked as one (S*n, width) matrix, so each layer is ONE GEMM (BLAS on CPU, Taichi GEMM on
devices) followed by ONE fused pointwise Taichi kernel (``sciml.kernels.taylor``) applying the
activation and its derivative coefficients to every stream.

The whole computation is one sciml Primitive (inputs x and every W, b; output the stacked
(S, n, out) streams, split into the result dict by zero-copy blocks). Its VJP is a second
Primitive, the hand-written adjoint: per layer one fused pointwise adjoint kernel, then GEMMs
dW = H^T G (summed over streams), db = column sums of the value block, dH = G W^T. Taichi's own
autodiff is never used (TAICHI-NOTES.md: wrong, 17x slower, or hours to compile). The
derivative rules of the adjoint (and the forward primitive's JVP) differentiate the same
computation written in sciml ops (``generic.taylor_streams``): correct at any order, fast at
first order, which is what Adam/L-BFGS/LM need.

Derivatives of order 3 and 4 (any closed set of multi-indices) use the general stream
kernels (``taylor.layer_forward_k`` / ``layer_backward_k``: Faa di Bruno per stream, unrolled);
``mlp_jet`` takes an input jet (a feature transform's Taylor series) instead of the points.

Interface shared with :mod:`sciml.pinn.generic`; ``supports(activation, derivs)`` tells the
solver whether this path applies.
"""
from __future__ import annotations

import weakref

import numpy as np

from .. import backend
from ..autodiff.backward import needs
from ..autodiff import ops as _ops
from ..autodiff.ops.reduce import reshape
from ..autodiff.primitive import Primitive
from ..autodiff.tensor import zeros
from ..autodiff.transforms import jvp, vjp
from ..kernels import taylor as TK
from ..kernels import taylor_gemm as _TG
from ..kernels.taylor_split import SPLIT_MAX as _SPLIT_MAX
from . import generic
from .fused_gemm import _THREADS, _gemm  # noqa: F401  (GEMMs and their threading; tests reach _THREADS here)
from .fused_blocks import _acc_done, _block, _disjoint, _presplit, _split, _unblock  # noqa: F401

MAX_ORDER = 4   # orders 3 and 4: the general stream kernels (taylor.layer_forward_k)
_SAVED: dict = {}   # id(output buffer) -> (Zs, Hs): residuals for the adjoint
_ONES: dict = {}
_POOL: dict = {}    # (size, dtype) -> free scratch buffers (residuals return here when their output dies)
_POOL_MAX = 16
_POOL_CAP = 1 << 26   # elements held in the pool at most (256 MB of float32)
_POOL_SIZE = [0]
stats = {"calls": 0, "adjoint_calls": 0}


def supports(activation, derivs) -> bool:
    """True if the fused path handles ``activation`` and the multi-indices ``derivs`` (order <= 4)."""
    if generic.activation_name(activation) is None:
        return False
    try:
        return all(len((m,) if isinstance(m, int) else tuple(m)) <= MAX_ORDER for m in derivs)
    except TypeError:
        return False


# --- helpers ------------------------------------------------------------------------------


def _flush(jobs, dtype):
    """Run the column sums gathered in ``jobs`` (device path; None on the host) and empty the list."""
    if jobs:
        from ..kernels import colsum as _cs
        _cs.run(jobs, dtype)
        jobs.clear()


def _ones(count, dtype):
    buf = _ONES.get(dtype)
    if buf is None or _ONES[dtype + "_n"] < count:
        size = max(count, 1024)
        buf = _ONES[dtype] = backend.from_numpy(np.ones(size), dtype)
        _ONES[dtype + "_n"] = size
    return buf


def _take(size, dtype):
    """A scratch buffer from the pool (fresh large numpy buffers cost page faults: ~0.5 ms per 5 MB)."""
    lst = _POOL.get((size, dtype))
    if lst:
        _POOL_SIZE[0] -= size
        return lst.pop()
    if backend.on_host() and backend.TRACE[0] is None:   # 64-byte aligned at every size (the vector-lane
        return backend.aligned_empty(size, dtype)            # Taylor kernels run on it); traced: always aligned
    return backend.empty(size, dtype)


def _give(bufs, dtype):
    for b in bufs:
        size = b.shape[0]
        lst = _POOL.setdefault((size, dtype), [])
        if len(lst) < _POOL_MAX:
            lst.append(b)
            _POOL_SIZE[0] += size
    if _POOL_SIZE[0] > _POOL_CAP:   # sizes change (resampling, evaluation grids): keep the pool bounded
        _POOL.clear()
        _POOL_SIZE[0] = 0


def _release(key, dtype):
    saved = _SAVED.pop(key, None)
    if saved is not None:
        _give(saved[0] + saved[1], dtype)


def _meta(coords, pairs):
    return backend.meta((len(coords), len(pairs)) + tuple(coords) + tuple(i for p in pairs for i in p))


def _sub(flat, off, size, dtype, pending):
    """A writable region [off, off+size) of ``flat``: a view on CPU, a new buffer copied later on devices."""
    if backend.on_host():
        return flat[off:off + size]
    buf = backend.empty(size, dtype)
    pending.append((buf, off, size))
    return buf


def _layers_of(params):
    return [(params[2 * k], params[2 * k + 1]) for k in range(len(params) // 2)]


# --- the forward primitive ----------------------------------------------------------------
def _forward(x, *params, act, coords, pairs, high=(), jin=False):
    with _THREADS:
        return _forward_impl(x, *params, act=act, coords=coords, pairs=pairs, high=high, jin=jin)


def _streams(coords, pairs, high):
    """The full stream structure (multi-indices over coordinate positions) for the general kernels."""
    return ((),) + tuple((q,) for q in range(len(coords))) + tuple(pairs) + tuple(high)


def _layer_fwd(act, Z, b, W, H, coords, pairs, high, n, w, first, dtype, top):
    if high:
        TK.layer_forward_k(act, Z, b, W, H, coords, _streams(coords, pairs, high), n, w, first, dtype, top=top)
    else:
        TK.layer_forward(act, Z, b, W, H, coords, pairs, n, w, first, dtype, top=top)


def _layer_bwd(act, Z, HV, W, G, coords, pairs, high, n, w, first, dtype, top):
    if high:
        TK.layer_backward_k(act, Z, HV, W, G, coords, _streams(coords, pairs, high), n, w, first, dtype, top=top)
    else:
        TK.layer_backward(act, Z, HV, W, G, coords, pairs, n, w, first, dtype, top=top)


def _forward_impl(x, *params, act, coords, pairs, high=(), jin=False):
    stats["calls"] += 1
    dtype = x.dtype
    n, d = x.shape
    L = len(params) // 2
    n1, n2 = len(coords), len(pairs)
    S = 1 + n1 + n2 + len(high)
    if jin:   # x holds the S stacked input streams (a feature transform's jet)
        n //= S
    WL, bL = params[-2], params[-1]
    o = WL.shape[1]
    out = backend.empty(S * n * o, dtype)
    top = (WL._buf, bL._buf, out, o)   # the linear output layer, fused into the last activation layer
    if not high and not backend.on_host() and backend.TRACE[0] is None and S <= _SPLIT_MAX:
        outs = [backend.empty(n * o, dtype) for _ in range(S)]   # devices: each stream its own buffer,
        top = (WL._buf, bL._buf, outs, o)                        # handed out by _block without a copy
        _presplit(out, {s * n * o: outs[s] for s in range(S)})
    W, b = params[0], params[1]
    w = W.shape[1]
    rows = S * n if jin else n
    Z = _take(rows * w, dtype)
    H = _take(S * n * w, dtype)
    tk = top if L == 2 else None
    lg = None if jin or high else _TG.host_lanes(act, d, w, dtype, tk[3] if tk else 0, Z, H)
    if lg:   # narrow layers on CPU: the GEMM inside the Taylor kernel (kernels/taylor_gemm.py)
        _TG.layer_forward(lg, act, x._buf, W._buf, b._buf, Z, H, coords, pairs, n, d, w, True, dtype, tk)
    else:
        _gemm(x._buf, W._buf, Z, rows, w, d, dtype=dtype)
        _layer_fwd(act, Z, b._buf, W._buf, H, coords, pairs, high, n, w, not jin, dtype, tk)
    Zs, Hs = [Z], [H]
    for k in range(1, L - 1):
        W, b = params[2 * k], params[2 * k + 1]
        w_in, w = w, W.shape[1]
        Z = _take(S * n * w, dtype)
        Hn = _take(S * n * w, dtype)
        tk = top if k == L - 2 else None
        lg = None if high else _TG.host_lanes(act, w_in, w, dtype, tk[3] if tk else 0, Z, Hn)
        if lg:
            _TG.layer_forward(lg, act, H, W._buf, b._buf, Z, Hn, coords, pairs, n, w_in, w, False, dtype, tk)
        else:
            _gemm(H, W._buf, Z, S * n, w, w_in, dtype=dtype)
            _layer_fwd(act, Z, b._buf, None, Hn, coords, pairs, high, n, w, False, dtype, tk)
        H = Hn
        Zs.append(Z)
        Hs.append(H)
    key = id(out)
    _SAVED[key] = (Zs, Hs)
    weakref.finalize(out, _release, key, dtype)
    return out, (S, n, o), dtype


_fused = Primitive("mlp_taylor", _forward)


def _composite(x, *params, act, coords, pairs, high=(), jin=False):
    if jin:
        return _jet_streams(_layers_of(params), act, x, coords, _streams(coords, pairs, high), jin=True)
    if high:
        return _jet_streams(_layers_of(params), act, x, coords, _streams(coords, pairs, high))
    return generic.taylor_streams(_layers_of(params), act, x, coords, pairs)


def _jet_streams(layers, act, x, coords, streams, jin=False):
    """The stacked streams of a general structure in sciml ops (Taylor jets through the layers);
    ``jin``: x holds the stacked input streams (S*n, d) instead of the points."""
    from . import jets
    canon = [tuple(sorted(coords[p] for p in m)) for m in streams]
    spec = jets.closure(canon)
    actf = getattr(_ops, act) if isinstance(act, str) else act
    n, o = x.shape[0], layers[-1][0].shape[1]
    if jin:
        n //= len(streams)
        z = jets.JetTensor.of({m: x[k * n:(k + 1) * n] for k, m in enumerate(canon)}, spec)
    else:
        z = jets.variables(x, spec)
    u = jets.run(lambda z_: generic.mlp(layers, actf, z_), z)
    from ..autodiff.ops.shape import stack
    return stack([u.coeff_tensor(m) if u.coeff(m) is not None else zeros((n, o), x.dtype) for m in canon], 0)


@_fused.def_vjp
def _fused_vjp(g, x, *params, out, act, coords, pairs, high=(), jin=False):
    _acc_done(out)
    want_x = needs(0)
    flat = _adjoint(g, out, x, *params, act=act, coords=coords, pairs=pairs, want_x=want_x, high=high, jin=jin)
    shapes = ([x.shape] if want_x else []) + [p.shape for p in params]
    parts = _split(flat, shapes)
    return tuple(parts) if want_x else (None,) + tuple(parts)


@_fused.def_jvp
def _fused_jvp(ts, x, *params, out, act, coords, pairs, high=(), jin=False):
    prim = (x,) + params
    tans = tuple(zeros(p.shape, p.dtype) if t is None else t for p, t in zip(prim, ts))
    return jvp(lambda *a: _composite(*a, act=act, coords=coords, pairs=pairs, high=high, jin=jin), prim, tans)[1]


# --- the adjoint primitive ----------------------------------------------------------------
def _adjoint_forward(g, fout, x, *params, act, coords, pairs, want_x, high=(), jin=False):
    """Cotangents [dx (if want_x), dW1, db1, ..., dWL, dbL] flattened into one buffer."""
    with _THREADS:
        return _adjoint_impl(g, fout, x, *params, act=act, coords=coords, pairs=pairs, want_x=want_x, high=high,
                             jin=jin)


def _adjoint_impl(g, fout, x, *params, act, coords, pairs, want_x, high=(), jin=False):
    stats["adjoint_calls"] += 1
    dtype = x.dtype
    saved = _SAVED.get(id(fout._buf))
    if saved is None:  # not produced by _forward in this process: recompute the residuals
        buf, _, _ = _forward_impl(x, *params, act=act, coords=coords, pairs=pairs, high=high, jin=jin)
        saved = _SAVED[id(buf)]
    Zs, Hs = saved
    n, d = x.shape
    L = len(params) // 2
    n1, n2 = len(coords), len(pairs)
    S = 1 + n1 + n2 + len(high)
    if jin:
        n //= S
    meta = _meta(coords, pairs)
    sizes = ([x.size] if want_x else []) + [p.size for p in params]
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    total = int(offs[-1])
    flat = backend.empty(total, dtype)
    pending = []
    base = 1 if want_x else 0
    parts = None
    if not backend.on_host() and backend.TRACE[0] is None:   # devices: one buffer per cotangent, no copies
        parts = [backend.empty(size, dtype) for size in sizes]
        _presplit(flat, {int(offs[i]): parts[i] for i in range(len(sizes))})

    def region(i):
        return parts[i] if parts is not None else _sub(flat, int(offs[i]), sizes[i], dtype, pending)

    def into(i):  # a GEMM's output region: on devices written in place (dW1/db1 stay regions: first_finish)
        if parts is not None:
            return (parts[i], 0)
        return region(i) if backend.on_host() else (flat, int(offs[i]))

    G = g._buf
    W = params[-2]
    w, o = W.shape
    ones = _ones(max(n * (1 + n1), n), dtype)
    # devices: a layer's weight-gradient column sums (o = 1, or split-K partials) and bias column sums
    # run two per launch (colsum.run; distinct workspace levels; each sum in its own order: same bits)
    dfr = [] if parts is not None else None
    _gemm(Hs[-1], G, into(base + 2 * L - 2), w, o, S * n, ta=True, dtype=dtype, defer=dfr, lvl=0)     # dW_L
    _gemm(ones, G, into(base + 2 * L - 1), 1, o, n, dtype=dtype, defer=dfr, lvl=2)                    # db_L
    _flush(dfr, dtype)
    top = (G, W._buf, o)   # dH = G W_L^T is formed inside the last activation layer's adjoint kernel
    dH = _take(S * n * w, dtype)
    done = False   # dH already holds the cotangents of layer k's z (its adjoint ran fused with dH's GEMM)
    for k in range(L - 2, 0, -1):
        W = params[2 * k]
        w_in, w = W.shape
        if not done:
            _layer_bwd(act, Zs[k], Hs[k], None, dH, coords, pairs, high, n, w, False, dtype,
                       top if k == L - 2 else None)
        _gemm(Hs[k - 1], dH, into(base + 2 * k), w_in, w, S * n, ta=True, dtype=dtype, defer=dfr, lvl=0)
        _gemm(ones, dH, into(base + 2 * k + 1), 1, w, n, dtype=dtype, defer=dfr, lvl=2)
        _flush(dfr, dtype)
        dH_in = _take(S * n * w_in, dtype)
        lg = None if jin or high else _TG.host_lanes(act, w_in, w, dtype, -1, Zs[k - 1], Hs[k - 1], dH_in)
        if lg:   # narrow layers on CPU: layer k-1's adjoint forms its input cotangents dH W_k^T itself
            _TG.layer_backward(lg, act, Zs[k - 1], Hs[k - 1], params[0]._buf if k == 1 else None, dH_in, dH,
                               W._buf, coords, pairs, n, w_in, w, k == 1, dtype)
        else:
            _gemm(dH, W._buf, dH_in, S * n, w_in, w, tb=True, dtype=dtype)
        done = bool(lg)
        _give([dH], dtype)
        dH = dH_in
    W = params[0]
    w = W.shape[1]
    if not done:
        _layer_bwd(act, Zs[0], Hs[0], W._buf, dH, coords, pairs, high, n, w, not jin, dtype,
                   top if L == 2 else None)
    dW1 = region(base)
    if jin:   # input streams: dW1 = X^T dZ over every stream, db1 from the value block, dX = dZ W1^T
        _gemm(x._buf, dH, dW1, d, w, S * n, ta=True, dtype=dtype)
        _gemm(ones, dH, region(base + 1), 1, w, n, dtype=dtype)
        if want_x:
            _gemm(dH, W._buf, into(0), S * n, d, w, tb=True, dtype=dtype)
        _give([dH], dtype)
        for buf, off, size in pending:
            TK.copy(buf, 0, flat, off, size, dtype)
        return flat, (total,), dtype
    if parts is not None and n1 and tuple(coords) == tuple(range(coords[0], coords[0] + n1)):
        # db1 = the value block's column sums, dW1[coords] += the first-derivative blocks' (first_finish's
        # work) as two column sums split as the batched one was, launched with dW1's GEMM's partial sums
        _gemm(x._buf, dH, into(base), d, w, n, ta=True, dtype=dtype, defer=dfr, lvl=0)
        pb = dict(weights=ones, plan_batch=1 + n1, row_stride=w, x_batch=n * w, w_batch=n)
        from ..kernels import colsum as _cs
        _cs.colsum(dH, region(base + 1), 1, n, w, dtype, level=2, defer=dfr, **pb)
        acc = []
        _cs.colsum(dH, dW1, n1, n, w, dtype, level=4, accumulate=True, x_off=n * w, out_off=coords[0] * w,
                   defer=acc, **pb)
        if dfr[:-1] and _cs.plan(1 + n1, n, w)[1] == 1:   # dW1's pending sum and dW1 += ... in one launch: no
            _flush(dfr, dtype)
        _flush(dfr + acc, dtype)
        if want_x:
            _gemm(dH, W._buf, into(0), n, d, w, tb=True, dtype=dtype)
        _give([dH], dtype)
        return flat, (total,), dtype
    _gemm(x._buf, dH, dW1, d, w, n, ta=True, dtype=dtype)
    cs = backend.empty((1 + n1) * w, dtype)
    _gemm(ones, dH, cs, 1, w, n, dtype=dtype, batch=1 + n1)
    TK.first_finish(cs, dW1, region(base + 1), meta, w, dtype)
    if want_x:
        _gemm(dH, W._buf, into(0), n, d, w, tb=True, dtype=dtype)
    _give([dH], dtype)
    for buf, off, size in pending:
        TK.copy(buf, 0, flat, off, size, dtype)
    return flat, (total,), dtype


_adjoint = Primitive("mlp_taylor_adjoint", _adjoint_forward)


def _adjoint_composite(g, x, *params, act, coords, pairs, want_x, high=(), jin=False):
    _, pull = vjp(lambda *a: _composite(*a, act=act, coords=coords, pairs=pairs, high=high, jin=jin), x, *params)
    cts = pull(g)
    if not want_x:
        cts = cts[1:]
    from ..autodiff.ops.shape import concat
    return concat([reshape(c, (c.size,)) for c in cts], 0)


@_adjoint.def_vjp
def _adjoint_vjp(ga, g, fout, x, *params, out, act, coords, pairs, want_x, high=(), jin=False):
    _acc_done(out)
    f = lambda g_, x_, *p: _adjoint_composite(g_, x_, *p, act=act, coords=coords, pairs=pairs,  # noqa: E731
                                               want_x=want_x, high=high, jin=jin)
    cts = vjp(f, g, x, *params)[1](ga)
    return (cts[0], None) + tuple(cts[1:])


@_adjoint.def_jvp
def _adjoint_jvp(ts, g, fout, x, *params, out, act, coords, pairs, want_x, high=(), jin=False):
    prim = (g, x) + params
    tl = (ts[0],) + tuple(ts[2:])
    tans = tuple(zeros(p.shape, p.dtype) if t is None else t for p, t in zip(prim, tl))
    f = lambda g_, x_, *p: _adjoint_composite(g_, x_, *p, act=act, coords=coords, pairs=pairs,  # noqa: E731
                                               want_x=want_x, high=high, jin=jin)
    return jvp(f, prim, tans)[1]


# --- public API ---------------------------------------------------------------------------
def mlp_jet(layers, activation, F):
    """The MLP applied to an input jet ``F`` (a :class:`sciml.pinn.jets.JetTensor` of shape (n, d),
    e.g. a feature transform of the points): the output jet, by the fused kernels with the
    input's derivative streams stacked into the first layer's GEMM."""
    from . import jets
    act = generic.activation_name(activation)
    layers = generic.normalize_layers(layers, "fused.mlp_jet")
    spec = F.spec
    if max((len(m) for m in spec), default=0) > 2:
        coords, pairs, high, index = plan_k(list(spec))
    else:
        (coords, pairs, index), high = generic.plan(list(spec), F.shape[1]), ()
    order = sorted(index, key=index.get)
    n, d = F.shape
    from ..autodiff.ops.shape import concat
    X = concat([F.coeff_tensor(m) if F.coeff(m) is not None else zeros((n, d), F.dtype) for m in order], 0)
    params = tuple(t for W, b in layers for t in (W, b))
    if len(layers) == 1 or n == 0:
        stacked = _jet_streams(layers, act, X, coords, _streams(coords, pairs, high), jin=True)
    else:
        stacked = _fused(X, *params, act=act, coords=coords, pairs=pairs, high=high, jin=True)
    o = stacked.shape[2]
    blocks = {m: _block(stacked, off=index[m] * n * o, shape=(n, o)) for m in order}
    _disjoint(stacked)
    return jets.JetTensor.of(blocks, spec)



def plan_k(canon):
    """Streams for derivatives of any order: the closure of ``canon`` under sub-multi-indices,
    as (coords, pairs, high, index); pairs and high are multi-indices over positions in coords."""
    from .jets import closure
    spec = closure(canon)
    coords = sorted({i for m in spec for i in m})
    pos = {c: k for k, c in enumerate(coords)}
    pairs = tuple(tuple(pos[i] for i in m) for m in spec if len(m) == 2)
    high = tuple(tuple(pos[i] for i in m) for m in spec if len(m) > 2)
    index = {(): 0}
    for k, c in enumerate(coords):
        index[(c,)] = 1 + k
    for k, m in enumerate(pairs + high):
        index[tuple(coords[p] for p in m)] = 1 + len(coords) + k
    return tuple(coords), pairs, high, index



def mlp_derivatives(layers, activation, x, derivs):
    """Value and input derivatives (order <= 4) of an MLP at the points ``x``, fused.

    Args:
        layers: list of (W, b) Tensor pairs (or objects with ``.weight``/``.bias``), W of shape
            (in, out); y = h @ W + b; ``activation`` after every layer but the last.
        activation: ``sm.tanh``, ``sm.sin``, ``sm.softplus`` or ``sm.gelu`` (or their names).
        x: (n, d) Tensor of points (float32 or float64, the dtype of the parameters).
        derivs: iterable of multi-indices: ``()`` value, ``(i,)`` d/dx_i, ``(i, j)`` d2/dx_i dx_j.
    Returns:
        dict multi-index -> (n, out) Tensor, differentiable w.r.t. every W, b and x (first order
        through the hand-written adjoint, higher orders through the sciml-ops composite).
    Example:
        >>> r = fused.mlp_derivatives(layers, sm.tanh, X, [(), (1,), (0,), (0, 0)])
        >>> res = r[(1,)] + r[()] * r[(0,)] - nu * r[(0, 0)]
    """
    act = generic.activation_name(activation)
    if act is None:
        raise ValueError(f"fused.mlp_derivatives: activation {activation!r} is not supported by the fused path; "
                         f"expected one of sm.tanh, sm.sin, sm.softplus, sm.gelu (use sciml.pinn.generic "
                         "for other activations).")
    layers = generic.normalize_layers(layers, "fused.mlp_derivatives")
    x = generic.check_input(x, layers, "fused.mlp_derivatives")
    items = generic.normalize_derivs(derivs, x.shape[1], MAX_ORDER, "fused.mlp_derivatives")
    canon = [m for _, m in items]
    if max((len(m) for m in canon), default=0) > 2:
        coords, pairs, high, index = plan_k(canon)
    else:
        (coords, pairs, index), high = generic.plan(canon, x.shape[1]), ()
    params = tuple(t for W, b in layers for t in (W, b))
    if high and (len(layers) == 1 or x.shape[0] == 0):
        stacked = _jet_streams(layers, act, x, coords, _streams(coords, pairs, high))
    elif len(layers) == 1 or x.shape[0] == 0:
        stacked = generic.taylor_streams(layers, act, x, coords, pairs)
    elif high:
        stacked = _fused(x, *params, act=act, coords=coords, pairs=pairs, high=high)
    else:
        stacked = _fused(x, *params, act=act, coords=coords, pairs=pairs)
    S, n, o = stacked.shape
    out, views = {}, {}
    for key, m in items:
        s = index[m]
        if s not in views:
            views[s] = _block(stacked, off=s * n * o, shape=(n, o))
        out[key] = views[s]
    _disjoint(stacked)
    return out
