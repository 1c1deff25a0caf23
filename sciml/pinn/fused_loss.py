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
"""
from __future__ import annotations

import os

from ..autodiff.fuse_region import fuse_region
from ..autodiff import ops

MODE = [None]  # None: the environment / the arch decides; True / False: forced


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
    args = [values[k] for k in keys]
    try:
        return [f(*args) for f in fns]
    except _Missing:   # the residual asked for a derivative not computed yet: the unfused path adds it
        state.pop((b, keys), None)
        return None


def _term_fns(pb, b, keys, Jet, _Sliced):
    def pde(*vals):
        lo, hi = b.ranges[0]
        jet = Jet(pb.names, b.n, pb.n_out, b.dtype, _Sliced(dict(zip(keys, vals)), lo, hi,
                                                              full=len(b.ranges) == 1))
        r = pb.pde_residual(jet, b.coords)
        return ops.mean(r * r)
    fns = [fuse_region(pde)]
    for c, pts, (lo, hi) in zip(pb.soft_conditions, b.cond_points, b.ranges[1:]):
        def cond(*vals, c=c, pts=pts, lo=lo, hi=hi):
            cj = Jet(pb.names, hi - lo, pb.n_out, b.dtype, _Sliced(dict(zip(keys, vals)), lo, hi, full=False))
            r = c.residual(cj.field(()), pts)
            return ops.mean(r * r)
        fns.append(fuse_region(cond))
    return fns
