"""The PINN loss terms as fused regions: each term ``mean(r_i^2)`` (its rows' slices of the derivative
Tensors, the user's residual, the square and the mean) is ONE kernel forward and one for its gradient
(:func:`sciml.fuse_region`), instead of one launch per op, slice and adjoint.

Used by :meth:`sciml.pinn.problem.Loss.terms` (so by ``solve``'s Adam steps and L-BFGS evaluations)
when :func:`enabled`: by default everywhere. On devices (Vulkan, CUDA) the fused sums add in the
unfused kernels' order (the values are the same bits); on the host the unfused sum kernels are
compiled with fast math and LLVM may reorder their additions, so a fused CPU run differs from an
unfused one in the last bits (a 16-step float64 Burgers run: histories equal to 1e-13 relative; the
Burgers main job: rel. L2 2.75e-5 fused, 4.17e-5 unfused). ``SCIML_FUSE_LOSS=0`` / ``1`` (or
``MODE[0] = False / True``) forces it off / on. A term whose residual uses an op a region cannot hold
(a GEMM, ``where``, gathers at point indices) runs unfused; so does every term of a problem with
trainable coefficients.

On devices also: a term's region takes only the derivatives its trace read, and :func:`weighted_total`
(the solver's ``sum_i w_i * term_i``) is one region over the derivative Tensors, whose backward is ONE
kernel for every term (the terms' regions still run forward: the history logs them). Same bits.
"""
from __future__ import annotations

import os

from .. import backend, runtime
from ..autodiff.fuse_region import fuse_region
from ..autodiff import ops
from ..autodiff.tensor import scalar

MODE = [None]  # None: the environment / the arch decides; True / False: forced
_LAST = [None]  # devices: (terms, state, keys, derivative Tensors, term fns) of the latest ``terms`` call
_TOTALS: dict = {}  # number of terms -> the region of sum_i t_i * w_i
runtime.on_shutdown(_TOTALS.clear)
runtime.on_shutdown(lambda: _LAST.__setitem__(0, None))


def enabled() -> bool:
    if MODE[0] is not None:
        return bool(MODE[0])
    env = os.environ.get("SCIML_FUSE_LOSS", "").strip()
    if env in ("0", "1"):
        return env == "1"
    return True


def terms(loss, params):
    """The unweighted loss terms of ``loss`` (a ``Loss``) as fused regions, or None when they cannot
    be (the caller then computes them unfused)."""
    from .problem import Jet, _Missing, _Sliced
    pb, b = loss.problem, loss.batch
    if pb.parameters:   # trainable coefficients: captured Tensors that take part in differentiation
        return None
    derivs = loss.pde_derivs | loss.cond_derivs
    values = loss.derivatives(params["net"], b.X, derivs, b.hard_terms(derivs))
    keys = tuple(sorted(values, key=lambda i: (len(i), i)))
    state = loss.__dict__.get("_fused_terms")
    if state is None or state.get("owner") is not loss:   # (a copy of a Loss, stages.with_batch, has its own)
        state = loss.__dict__["_fused_terms"] = {"owner": loss}
    fns = state.get((b, keys))
    if fns is None:
        state.clear()   # a new batch (resampling) or derivative set: the old regions' captures are stale
        state["owner"] = loss
        fns = state[(b, keys)] = _term_fns(pb, b, keys, Jet, _Sliced)
    try:
        out = [f(*[values[k] for k in ks]) for f, ks, _ in fns]
    except _Missing:   # the residual asked for a derivative not computed yet: the unfused path adds it
        state.pop((b, keys), None)
        return None
    if not backend.on_host():
        # devices: a term takes only the derivatives its trace read (the others' cotangents would be
        # zero buffers, each one an addition launch in the backward sweep; dropping x + 0 keeps the bits)
        for i, (f, ks, seen) in enumerate(fns):
            sub = tuple(k for k in ks if k in seen)
            if sub and sub != ks:
                fns[i] = _term_fns(pb, b, sub, Jet, _Sliced, only=i)[0]
        _LAST[0] = (out, state, keys, [values[k] for k in keys], list(fns))   # for weighted_total
    return out


class _Seen(dict):
    """The derivative dict of a term; records the keys read (a region's trace reads what it uses)."""

    def __init__(self, items, seen):
        super().__init__(items)
        self.seen = seen

    def __getitem__(self, k):
        self.seen.add(k)
        return dict.__getitem__(self, k)

    def __contains__(self, k):   # a key tested (and present) counts as read: the term keeps its branch
        if dict.__contains__(self, k):
            self.seen.add(k)
            return True
        return False


def _term_fns(pb, b, keys, Jet, _Sliced, only=None):
    """[(region, the keys it takes, the set of keys its trace read)] per term (``only``: just term ``only``)."""
    fns = []
    if only in (None, 0):
        seen = set()

        def pde(*vals, seen=seen):
            lo, hi = b.ranges[0]
            jet = Jet(pb.names, b.n, pb.n_out, b.dtype, _Sliced(_Seen(zip(keys, vals), seen), lo, hi,
                                                                  full=len(b.ranges) == 1))
            r = pb.pde_residual(jet, b.coords)
            return ops.mean(r * r)
        fns.append((fuse_region(pde), keys, seen))
    for i, (c, pts, (lo, hi)) in enumerate(zip(pb.soft_conditions, b.cond_points, b.ranges[1:])):
        if only not in (None, i + 1):
            continue
        seen = set()

        def cond(*vals, c=c, pts=pts, lo=lo, hi=hi, seen=seen):
            cj = Jet(pb.names, hi - lo, pb.n_out, b.dtype, _Sliced(_Seen(zip(keys, vals), seen), lo, hi,
                                                                     full=False))
            r = c.residual(cj.field(()), pts)
            return ops.mean(r * r)
        fns.append((fuse_region(cond), keys, seen))
    return fns


def weighted_total(terms, w):
    """``terms[0] * w[0] + terms[1] * w[1] + ...`` (the solver's loss, the unfused expression's order: the
    same bits) as ONE region on devices: 1 launch forward and 1 backward instead of 2m - 1 and m. None on
    the host or when fused terms are off (the caller adds the terms itself)."""
    m = len(terms)
    if backend.on_host() or not enabled() or m < 2 or len(w) != m:
        return None
    last, _LAST[0] = _LAST[0], None
    dt = terms[0].dtype
    if last is not None and len(last[0]) == m and all(a is b for a, b in zip(last[0], terms)):
        tot = _from_streams(last, [scalar(v, dt) for v in w])
        if tot is not None:
            return tot
    f = _TOTALS.get(m)
    if f is None:
        def weighted_total(*a):
            tot = a[0] * a[m]
            for k in range(1, m):
                tot = tot + a[k] * a[m + k]
            return tot
        f = _TOTALS[m] = fuse_region(weighted_total)
    return f(*terms, *[scalar(v, dt) for v in w])   # the cached constants the unfused ``t * w`` uses


def _from_streams(last, ws):
    """The weighted total as ONE region over the network's derivative Tensors (the terms' expressions
    inlined): its backward is one kernel giving each derivative's cotangent, instead of one per term
    plus the additions of their cotangents and of the weights' products. The terms themselves (their
    own regions, already run) stay the values the history logs. None when it cannot be one region."""
    terms, state, keys, vals, fns = last
    key = ("total", keys, tuple(ks for _, ks, _ in fns))
    f = state.get(key)
    if f is None:
        nk = len(keys)

        def loss_total(*a):
            d = dict(zip(keys, a[:nk]))
            tot = None
            for (g, ks, _), wt in zip(fns, a[nk:]):
                t = g.unfused(*[d[k] for k in ks]) * wt
                tot = t if tot is None else tot + t
            return tot
        f = state[key] = fuse_region(loss_total)
    if f is False:
        return None
    tot = f(*vals, *ws)
    if f.fallback is not None:   # it ran op by op: next time add the terms' values instead
        state[key] = False
    return tot
