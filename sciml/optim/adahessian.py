"""AdaHessian (Yao et al., AAAI 2021): Adam whose second moment is built from a Hutchinson
estimate of the Hessian diagonal instead of squared gradients.

Each step: one Hessian-vector product along a seeded Rademacher probe z (forward over reverse;
it also yields the gradient), D = z * (H z); for parameters with >= 3 dimensions (convolution
kernels) |D| is averaged over the last two (spatial) axes ("spatial averaging"); then

    m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) D^2,
    x <- x - lr * ( (m / (1 - b1^t)) / ((v / (1 - b2^t))^(k/2) + eps) + weight_decay * x )

with k = ``hessian_power``, all in one fused Taichi kernel on the flat parameter vector.
"""
from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..kernels import lbfgs as K
from .result import CurvatureOptimizer, Flat, IterInfo, Result, check_nonneg, check_positive_int


def _check(where, lr, betas, eps, weight_decay, hessian_power):
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"{where}: lr must be a finite number > 0; got {lr!r}.")
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2 and all(0 <= b < 1 for b in betas)):
        raise ValueError(f"{where}: betas must be a pair of numbers in [0, 1); got {betas!r}.")
    check_nonneg(where, "eps", eps)
    check_nonneg(where, "weight_decay", weight_decay)
    if not (isinstance(hessian_power, (int, float)) and 0 < hessian_power <= 1):
        raise ValueError(f"{where}: hessian_power must be in (0, 1]; got {hessian_power!r}.")


class _State:
    def __init__(self, n, dt, seed):
        self.m = backend.zeros(n, dt)
        self.v = backend.zeros(n, dt)
        self.t = 0
        self.rng = np.random.default_rng(seed)
        self.n, self.dt = n, dt


def _spatial_avg(prob, D):
    """|D| averaged over the last two axes of leaves with >= 3 dims (sciml ops), as a flat buffer."""
    if all(len(s) < 3 for s in prob.shapes):
        return D
    from ..autodiff.ops import abs as sabs, broadcast_to, mean
    leaves = prob.leaves(D)
    out = [broadcast_to(mean(sabs(l), axis=(-2, -1), keepdims=True), l.shape) if l.ndim >= 3 else l
           for l in leaves]
    return prob.cat(out)


def _one_step(prob, st, x, o):
    z = backend.from_numpy(st.rng.integers(0, 2, size=prob.n) * 2.0 - 1.0, prob.dtype)
    g, Hz = prob.hvp(x, z)
    D = backend.empty(prob.n, prob.dtype)
    K.axpy(Hz, 0.0, Hz, D, prob.n, prob.dtype)
    _mul_inplace(D, z, prob.n, prob.dtype)
    D = _spatial_avg(prob, D)
    st.t += 1
    b1, b2 = o["betas"]
    x_new = backend.empty(prob.n, prob.dtype)
    K.adahessian_update(x, st.m, st.v, g, D, x_new, o["lr"], b1, b2, 1 - b1 ** st.t, 1 - b2 ** st.t, o["eps"],
                        o["hessian_power"], o["weight_decay"], prob.n, prob.dtype)
    return x_new, g


def _mul_inplace(D, z, n, dt):
    # D <- D * z with z = +-1: D * z = D + (z - 1) * D ... done exactly by a tiny sciml op
    from ..autodiff.tensor import Tensor
    r = Tensor._make(D, (n,), dt) * Tensor._make(z, (n,), dt)
    K.axpy(r._buf, 0.0, r._buf, D, n, dt)


def adahessian(loss_fn, params, *, steps=100, lr=0.15, betas=(0.9, 0.999), eps=1e-4, weight_decay=0.0,
               hessian_power=1.0, seed=0, callback=None):
    """Run ``steps`` AdaHessian steps on ``loss_fn(params)``; returns a :class:`Result` whose
    ``loss`` is evaluated at the final parameters (one extra evaluation).

    Example:
        >>> r = adahessian(lambda x: ((x - 1.0) ** 2).sum(), sm.tensor([0.0, 3.0]), steps=200)
    """
    _check("adahessian", lr, betas, eps, weight_decay, hessian_power)
    check_positive_int("adahessian", "steps", steps)
    o = dict(lr=float(lr), betas=tuple(map(float, betas)), eps=float(eps), weight_decay=float(weight_decay),
             hessian_power=float(hessian_power))
    prob = Flat(loss_fn, params, "adahessian")
    return _run(prob, _State(prob.n, prob.dtype, seed), o, steps, callback, "adahessian")


def _run(prob, st, o, steps, callback, where):
    x = prob.x0
    reason = "max_iter"
    it = 0
    gnorm = math.nan
    for it in range(1, steps + 1):
        x_new, g = _one_step(prob, st, x, o)
        gn = math.sqrt(_sq(g, prob))
        if not math.isfinite(gn):
            raise FloatingPointError(f"{where}: the gradient is not finite at step {it}; check the loss for "
                                     "overflow, or lower lr.")
        x, gnorm = x_new, gn
        if callback is not None and callback(IterInfo(it, prob.last_value, gnorm, o["lr"], prob.nfev,
                                                      lambda x=x: prob.tree(x))):
            reason = "callback"
            break
    f = prob.value(x)
    return Result(params=prob.tree(x), loss=f, grad_norm=gnorm, iterations=it, nfev=prob.nfev, ngev=prob.ngev,
                  nhvp=prob.nhvp, reason=reason,
                  message=f"{where}: {it} steps ({reason}); loss {f:.6g}; ||grad|| {gnorm:.3e} at the previous "
                          "iterate.")


def _sq(g, prob):
    out = backend.zeros(5, K.acc_dtype(prob.dtype))
    K.dots(g, g, g, out, prob.n, prob.dtype)
    return float(backend.to_numpy(out, (5,), K.acc_dtype(prob.dtype))[2])


class AdaHessian(CurvatureOptimizer):
    """AdaHessian as a stateful optimizer: ``step(loss_fn)`` performs ONE update (one HVP) of the
    bound parameters and returns its :class:`Result` (``loss`` and ``grad_norm`` are those BEFORE
    the update, which the HVP gives for free); moments carry over between steps.

    Args:
        params: ``model.parameters()``, ``model.params()`` or None (bind later).
        lr, betas, eps, weight_decay, hessian_power: as in the paper (defaults 0.15, (0.9, 0.999),
            1e-4, 0, 1).
        seed: seed of the Rademacher probes.
    """

    def __init__(self, params=None, *, lr=0.15, betas=(0.9, 0.999), eps=1e-4, weight_decay=0.0,
                 hessian_power=1.0, seed=0):
        _check("AdaHessian", lr, betas, eps, weight_decay, hessian_power)
        self._o = dict(lr=float(lr), betas=tuple(map(float, betas)), eps=float(eps),
                       weight_decay=float(weight_decay), hessian_power=float(hessian_power))
        self._seed, self._st = seed, None
        super().__init__(params)

    def _init_state(self):
        super()._init_state()
        self._st = None

    def _minimize(self, loss_fn, values):
        prob = Flat(loss_fn, values, "AdaHessian.step")
        if self._st is None or self._st.n != prob.n or self._st.dt != prob.dtype:
            self._st = _State(prob.n, prob.dtype, self._seed)
        x_new, g = _one_step(prob, self._st, prob.x0, self._o)
        gn = math.sqrt(_sq(g, prob))
        if not math.isfinite(gn):
            raise FloatingPointError("AdaHessian.step: the gradient is not finite; check the loss for overflow, "
                                     "or lower lr.")
        return Result(params=prob.tree(x_new), loss=prob.last_value, grad_norm=gn, iterations=1, nfev=prob.nfev,
                      ngev=prob.ngev, nhvp=prob.nhvp, reason="max_iter",
                      message=f"AdaHessian.step: one update; loss {prob.last_value:.6g} and ||grad|| {gn:.3e} "
                              "before it (not re-evaluated after).")
