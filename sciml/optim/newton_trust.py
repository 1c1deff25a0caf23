"""Trust-region Newton-CG (Steihaug-CG, Nocedal & Wright Alg. 4.1 / 7.2): ``newton_cg(...,
globalization="trust_region")``."""
from __future__ import annotations

import math

from .. import backend
from ..kernels import lbfgs as K
from .result import IterInfo, Result, budget_spent


def _steihaug(prob, hvp, x, g, gnorm, delta, cg_max, eta, n, dt):
    """Approximately minimise g.p + 0.5 p.Hp subject to ||p|| <= delta (N&W Alg. 7.2).
    Returns (p, hits_boundary)."""
    acc = K.acc_dtype(dt)
    out = backend.zeros(5, acc)

    def dots(a, b, c):
        K.dots(a, b, c, out, n, dt)
        return backend.to_numpy(out, (5,), acc).astype(float).tolist()

    def to_boundary(z, d):
        zd, zz, dd = dots(z, d, z)[0], dots(z, z, z)[0], dots(d, d, d)[0]
        tau = (-zd + math.sqrt(max(zd * zd - dd * (zz - delta * delta), 0.0))) / dd
        p = backend.empty(n, dt)
        K.axpy(z, tau, d, p, n, dt)
        return p

    z = backend.zeros(n, dt)
    r = backend.empty(n, dt)
    K.axpy(g, 0.0, g, r, n, dt)                            # r = g (gradient of the model at z = 0)
    d = backend.empty(n, dt)
    K.axpy(g, -2.0, g, d, n, dt)                           # d = -g
    rr = gnorm * gnorm
    if rr == 0:
        return z, False
    for _ in range(cg_max):
        Bd = hvp(d)
        dBd = dots(d, Bd, Bd)[0]
        if dBd <= 0:
            return to_boundary(z, d), True
        alpha = rr / dBd
        z_new = backend.empty(n, dt)
        K.axpy(z, alpha, d, z_new, n, dt)
        if math.sqrt(dots(z_new, z_new, z_new)[0]) >= delta:
            return to_boundary(z, d), True
        r_new = backend.empty(n, dt)
        K.axpy(r, alpha, Bd, r_new, n, dt)
        rr_new = dots(r_new, r_new, r_new)[0]
        z, r = z_new, r_new
        if math.sqrt(rr_new) <= eta:
            return z, False
        d_new = backend.empty(n, dt)
        K.axpy(r, -2.0, r, d_new, n, dt)                   # -r
        K.axpy(d_new, rr_new / rr, d, d, n, dt)            # d = -r + beta d
        rr = rr_new
    return z, False


def _trust_region_run(prob, o, callback, cg_max, cg_tol, delta0, delta_max, hessian="products", jit_cache=None):
    where, n, dt = o["where"], prob.n, prob.dtype
    acc = K.acc_dtype(dt)
    out = backend.zeros(5, acc)

    def dots(a, b, c):
        K.dots(a, b, c, out, n, dt)
        return backend.to_numpy(out, (5,), acc).astype(float).tolist()

    x = prob.x0
    f, g = prob.value_and_grad(x)
    prob.check_start(f)
    gnorm = math.sqrt(dots(g, g, g)[2])
    delta = delta0 if delta0 is not None else max(1.0, gnorm) * 0.1
    it, reason = 0, None
    if gnorm <= o["gtol"]:
        reason = "gtol"
    while reason is None:
        reason = budget_spent(it, prob, o)
        if reason is not None:
            break
        eta = cg_tol if cg_tol is not None else min(0.5, math.sqrt(gnorm)) * gnorm
        from .newton import _hvp_operator
        hvp = _hvp_operator(prob, x, hessian, jit_cache)  # one graph (or one dense H) per iteration
        p, boundary = _steihaug(prob, hvp, x, g, gnorm, delta, cg_max, eta, n, dt)
        Hp = hvp(p)
        gp = dots(p, g, g)[0]
        pHp = dots(p, Hp, Hp)[0]
        pred = -(gp + 0.5 * pHp)
        x_new = backend.empty(n, dt)
        K.axpy(x, 1.0, p, x_new, n, dt)
        f_new, g_new = prob.value_and_grad(x_new)
        f_new = f_new if math.isfinite(f_new) else math.inf
        rho = (f - f_new) / pred if pred > 0 else -1.0
        pnorm = math.sqrt(dots(p, p, p)[0])
        if rho < 0.25:
            delta = 0.25 * min(delta, pnorm) if pnorm > 0 else 0.25 * delta
        elif rho > 0.75 and boundary:
            delta = min(2.0 * delta, delta_max)
        it += 1
        if rho > 1e-4 and f_new < f:
            f_old = f
            x, f, g = x_new, f_new, g_new
            st = dots(g, g, g)
            gnorm = math.sqrt(st[2])
            if not math.isfinite(gnorm):
                raise FloatingPointError(f"{where}: the gradient is not finite at iteration {it}.")
            if callback is not None and callback(IterInfo(it, f, gnorm, pnorm, prob.nfev, lambda x=x: prob.tree(x))):
                reason = "callback"
            elif gnorm <= o["gtol"]:
                reason = "gtol"
            elif abs(f_old - f) <= o["ftol"] * max(abs(f_old), abs(f), 1e-300):
                reason = "ftol"
            elif dots(p, p, p)[3] <= o["xtol"]:
                reason = "xtol"
        elif delta < 1e-14 * max(1.0, math.sqrt(dots(x, x, x)[2])):
            reason = "line_search"
    msg = {"gtol": "||grad|| <= gtol", "ftol": "relative loss change <= ftol", "xtol": "max |step| <= xtol",
           "max_iter": "reached max_iter", "max_eval": "reached max_eval", "callback": "the callback asked to stop",
           "line_search": "the trust region shrank to nothing without a decrease"}[reason]
    return Result(params=prob.tree(x), loss=f, grad_norm=gnorm, iterations=it, nfev=prob.nfev, ngev=prob.ngev,
                  nhvp=prob.nhvp, reason=reason,
                  message=f"{where}: stopped after {it} iterations and {prob.nfev} evaluations: {msg}.")
