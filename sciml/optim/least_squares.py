"""Gauss-Newton and Levenberg-Marquardt for least-squares losses ``0.5 * ||r(params)||^2``.

``residual(params)`` returns one Tensor of residuals (any shape). Two ways to solve the
damped normal equations ``(J^T J + lam D) p = -J^T r`` each iteration:

- ``solver="dense"`` (``"auto"`` picks it when n <= 2000 and min(n, m) <= 300, m residuals; it
  works for a few thousand parameters when asked): J is formed by forward mode (one JVP per
  parameter, or one VJP per residual when there are fewer residuals), ``J^T J`` and ``J^T r`` by
  sciml matmuls, and the small (n, n) system is solved with numpy.linalg (LAPACK Cholesky) on
  CPU. D = diag(J^T J) (Marquardt's scaling, as MINPACK), so the method is invariant to the
  scale of each parameter.
- ``solver="cg"``: matrix-free conjugate gradient on ``J^T (J v) + lam v``, D = I; for many
  parameters. The residual graph is recorded once per linearisation
  (``sciml.autodiff.curvature.gauss_newton_operator``): each product is two backward passes, no
  forward re-run.

Damping is adapted by the gain ratio rho = actual / predicted decrease (Nielsen's rule:
``lam *= max(1/3, 1 - (2 rho - 1)^3)`` after a successful step, ``lam *= nu; nu *= 2`` after a
rejected one). Gauss-Newton is the undamped method with an Armijo backtracking line search.

Stopping: ``gtol`` on ||J^T r||_2, ``ftol`` on the relative decrease of the loss, ``xtol`` on
max |step|, ``max_iter`` (iterations, rejected LM trials included), ``max_eval`` (residual
evaluations at trial points; the linearisations are counted in ``ngev``). A step is accepted only
if it lowers the loss.
"""
from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..autodiff.pytree import flatten
from ..autodiff.tensor import Tensor
from ..kernels import lbfgs as K
from .result import CurvatureOptimizer, Flat, IterInfo, Result, check_nonneg, check_positive_int, budget_spent

SOLVERS = ("auto", "dense", "cg")
DENSE_MAX_N = 2000        # "auto" picks the dense path up to this many parameters ...
DENSE_MAX_PASSES = 300    # ... when the Jacobian costs at most this many JVP / VJP passes


class _LSQ:
    """A residual function on the flat view of ``params``; counts evaluations."""

    def __init__(self, residual, params, where):
        if not callable(residual):
            raise TypeError(f"{where}: residual must be callable (params -> Tensor of residuals); got "
                            f"{type(residual).__name__}.")
        self.residual, self.where = residual, where
        self.flat = Flat(lambda p: 0.5 * (self._r(p) ** 2).sum(), params, where)
        self.nfev = self.njev = 0

    def _r(self, p):
        r = self.residual(p)
        if not isinstance(r, Tensor):
            raise TypeError(f"{self.where}: residual must return a Tensor; got {type(r).__name__}.")
        if r.dtype != self.flat.dtype:
            raise TypeError(f"{self.where}: residual returned dtype {r.dtype}; expected {self.flat.dtype} "
                            "(the params' dtype).")
        return r

    def r(self, x):
        from ..autodiff import no_grad
        with no_grad():
            r = self._r(self.flat.tree(x))
        self.nfev += 1
        return r

    def jacobian(self, x):
        """Dense J (m, n) as a Tensor, by forward mode over the flat vector (or reverse if m < n)."""
        from ..autodiff import transforms as T
        from ..autodiff.curvature import _flat_fn
        from ..autodiff.ops import reshape
        fl = self.flat
        g, xt = _flat_fn(lambda p: reshape(self._r(p), (-1,)), fl.tree(x), self.where)
        m = self.r(x).size
        self.nfev -= 1
        J = (T.jacfwd if fl.n <= m else T.jacrev)(g)(xt)
        self.njev += 1
        return J.detach()

    def linearize(self, x):
        """(J^T r as a flat buffer, v -> J^T J v on flat buffers) at x, recording the residual graph once."""
        from ..autodiff.curvature import gauss_newton_operator
        fl = self.flat
        r, op, jt = gauss_newton_operator(self._r, fl.tree(x))
        self.njev += 1   # the linearisation (its forward re-runs r at x; counted with the Jacobians)
        g = fl.cat(flatten(jt(r))[0])

        def apply(v):
            self.njev += 1
            return fl.cat(flatten(op(fl.tree(v)))[0])
        return g, apply

    def gn_product(self, x, v):
        from ..autodiff.curvature import gauss_newton_product
        fl = self.flat
        out = gauss_newton_product(self._r, fl.tree(x), fl.tree(v))
        self.njev += 1
        return fl.cat(flatten(out)[0])

    def grad(self, x, r):
        from ..autodiff.curvature import residual_vjp
        fl = self.flat
        _, g = residual_vjp(self._r, fl.tree(x), r)
        return fl.cat(flatten(g)[0])


def _options(where, solver, lam, max_iter, max_eval, gtol, ftol, xtol, cg_max, cg_tol):
    if solver not in SOLVERS:
        raise ValueError(f"{where}: solver={solver!r}; expected one of {SOLVERS}.")
    if not (isinstance(lam, (int, float)) and lam >= 0 and math.isfinite(lam)):
        raise ValueError(f"{where}: lam (initial damping) must be a finite number >= 0; got {lam!r}.")
    check_positive_int(where, "max_iter", max_iter)
    check_positive_int(where, "max_eval", max_eval, allow_none=True)
    for name, v in (("gtol", gtol), ("ftol", ftol), ("xtol", xtol), ("cg_tol", cg_tol)):
        check_nonneg(where, name, v)
    check_positive_int(where, "cg_max", cg_max, allow_none=True)
    return dict(where=where, solver=solver, lam=float(lam), max_iter=max_iter,
                max_eval=max_eval if max_eval is not None else 10 * max_iter + 10, gtol=gtol, ftol=ftol,
                xtol=xtol, cg_max=cg_max, cg_tol=cg_tol)


def _cg(apply_A, b, n, dt, maxiter, rtol):
    """Solve A p = b (A symmetric positive definite, given as a product) by CG from p = 0."""
    acc = K.acc_dtype(dt)
    out = backend.zeros(5, acc)
    p = backend.zeros(n, dt)
    r = backend.empty(n, dt)
    K.axpy(b, 0.0, b, r, n, dt)
    q = backend.empty(n, dt)
    K.axpy(b, 0.0, b, q, n, dt)
    K.dots(b, b, b, out, n, dt)
    rr = float(backend.to_numpy(out, (5,), acc)[2])
    tol = rtol * math.sqrt(rr)
    for _ in range(maxiter):
        if math.sqrt(rr) <= tol or rr == 0:
            break
        Aq = apply_A(q)
        K.dots(q, Aq, Aq, out, n, dt)
        qAq = float(backend.to_numpy(out, (5,), acc)[0])
        if qAq <= 0:
            break
        K.cg_step(p, r, q, Aq, rr / qAq, out, n, dt)
        rr_new = float(backend.to_numpy(out, (5,), acc)[0])
        K.axpy(r, rr_new / rr, q, q, n, dt)
        rr = rr_new
    return p


def _stats(b, n, dt):
    acc = K.acc_dtype(dt)
    out = backend.zeros(5, acc)
    K.dots(b, b, b, out, n, dt)
    return backend.to_numpy(out, (5,), acc).astype(float).tolist()


def _run(prob: _LSQ, o, callback, damped=True):
    fl, where = prob.flat, o["where"]
    n, dt = fl.n, fl.dtype
    solver = o["solver"]
    x = fl.x0
    r = prob.r(x)
    if solver == "auto":   # dense costs min(n, m) passes per linearisation; CG ~2 per product
        solver = "dense" if n <= DENSE_MAX_N and min(n, r.size) <= DENSE_MAX_PASSES else "cg"
    rb = r._buf
    f = 0.5 * _stats(rb, r.size, dt)[2]
    fl.check_start(f if math.isfinite(f) else math.nan)
    lam, nu = o["lam"], 2.0
    it, reason, gnorm = 0, None, math.nan
    need_lin = True
    while reason is None:
        if need_lin:                                   # linearise at x: J (dense) or g = J^T r (cg)
            if solver == "dense":
                from ..autodiff.ops import matmul, reshape
                J = prob.jacobian(x)
                rv = reshape(r, (-1, 1))
                A = matmul(J, J, transpose_a=True).numpy().astype(np.float64)
                gnp = matmul(J, rv, transpose_a=True).numpy().astype(np.float64).ravel()
                g = backend.from_numpy(gnp, dt)
                diag = np.maximum(np.diag(A).copy(), 1e-300)   # Marquardt: lam scales diag(J^T J)
            else:
                g, gn_apply = prob.linearize(x)
            st = _stats(g, n, dt)
            gnorm = math.sqrt(st[2])
            need_lin = False
            if gnorm <= o["gtol"]:
                reason = "gtol"
                break
        reason = budget_spent(it, prob, o)
        if reason is not None:
            break
        # --- step -----------------------------------------------------------------------------
        if solver == "dense":
            M = A + (lam * np.diag(diag) if damped else 1e-14 * diag.max() * np.eye(n))
            try:
                L = np.linalg.cholesky(M)
                pnp = -np.linalg.solve(L.T, np.linalg.solve(L, gnp))
            except np.linalg.LinAlgError:
                pnp = -np.linalg.lstsq(M, gnp, rcond=None)[0]
            gp = float(gnp @ pnp)
            pred = -(gp + 0.5 * pnp @ (A @ pnp))
            p = backend.from_numpy(pnp, dt)
        else:
            lam_ = lam if damped else 0.0
            negg = backend.empty(n, dt)
            K.axpy(g, -2.0, g, negg, n, dt)

            def apply_A(v, lam_=lam_, gn_apply=gn_apply):
                out = gn_apply(v)
                res = backend.empty(n, dt)
                K.axpy(out, lam_, v, res, n, dt)
                return res
            p = _cg(apply_A, negg, n, dt, o["cg_max"] or min(n, 100), o["cg_tol"] or 1e-10)
            Ap = apply_A(p)
            out = backend.zeros(5, K.acc_dtype(dt))
            K.dots(p, g, Ap, out, n, dt)
            gp, pAp = backend.to_numpy(out, (5,), K.acc_dtype(dt))[:2].astype(float)
            pred = -(gp + 0.5 * (pAp - lam_ * _stats(p, n, dt)[2]))
        t = 1.0
        accepted = False
        while True:
            x_new = backend.empty(n, dt)
            K.axpy(x, t, p, x_new, n, dt)
            r_new = prob.r(x_new)
            f_new = 0.5 * _stats(r_new._buf, r_new.size, dt)[2]
            if not math.isfinite(f_new):
                f_new = math.inf
            if damped:
                break
            if f_new <= f + 1e-4 * t * min(gp, 0.0) or prob.nfev >= o["max_eval"]:
                break
            t *= 0.5
            if t < 1e-10:
                break
        it += 1
        step_inf = t * _stats(p, n, dt)[3]
        if f_new < f:
            accepted = True
            rho = (f - f_new) / pred if pred > 0 else 0.0
            f_old = f
            x, r, f = x_new, r_new, f_new
            need_lin = True
            if damped:
                lam *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
                nu = 2.0
        else:
            if damped:
                lam = lam * nu if lam > 0 else 1e-6
                nu *= 2.0
            else:
                reason = "line_search"
        if callback is not None and callback(IterInfo(it, f, gnorm if not accepted else math.nan, t, prob.nfev,
                                                      lambda x=x: fl.tree(x))):
            reason = "callback"
        if reason is None and accepted:
            if abs(f_old - f) <= o["ftol"] * max(abs(f_old), abs(f), 1e-300):
                reason = "ftol"
            elif step_inf <= o["xtol"]:
                reason = "xtol"
        if reason is None and not accepted and damped and not math.isfinite(lam):
            reason = "line_search"
    if need_lin and reason != "gtol":
        g = prob.grad(x, r)
        gnorm = math.sqrt(_stats(g, n, dt)[2])
    msgs = {"gtol": f"||J^T r|| = {gnorm:.3e} <= gtol", "ftol": "relative loss change <= ftol",
            "xtol": "max |step| <= xtol", "max_iter": f"reached max_iter = {o['max_iter']}",
            "max_eval": f"reached max_eval = {o['max_eval']}", "callback": "the callback asked to stop",
            "line_search": "no step lowered the loss"}
    return Result(params=fl.tree(x), loss=f, grad_norm=gnorm, iterations=it, nfev=prob.nfev, ngev=prob.njev,
                  nhvp=prob.njev, reason=reason,
                  message=f"{where}: stopped after {it} iterations and {prob.nfev} residual evaluations: "
                          f"{msgs[reason]}.")


def levenberg_marquardt(residual, params, *, solver="auto", lam=1e-3, max_iter=100, max_eval=None, gtol=1e-10,
                        ftol=1e-15, xtol=1e-15, cg_max=None, cg_tol=1e-10, callback=None):
    """Minimise ``0.5 * ||residual(params)||^2`` by Levenberg-Marquardt.

    Args:
        residual: function of a pytree shaped like ``params`` returning a Tensor of residuals.
        params: pytree of float Tensors (or a Module): the start.
        solver: "dense", "cg" or "auto" (dense when n <= 2000 and min(n, m) <= 300).
        lam: initial damping (relative to diag(J^T J) for the dense solver).
        max_iter, max_eval, gtol, ftol, xtol: see the module docstring.
        cg_max, cg_tol: CG iterations per step (default min(n, 100)) and relative residual tolerance.
        callback: ``callback(IterInfo)`` per iteration; return True to stop.
    Returns:
        :class:`~sciml.optim.result.Result`; ``loss`` is ``0.5 ||r||^2``; ``ngev`` counts Jacobian
        evaluations (dense) or Gauss-Newton products (cg).
    Example:
        >>> t = sm.tensor(np.linspace(0, 1, 20)); y = 2.0 * sm.exp(-3.0 * t)
        >>> r = levenberg_marquardt(lambda p: p[0] * sm.exp(-p[1] * t) - y, sm.tensor([1.0, 1.0]))
    """
    o = _options("levenberg_marquardt", solver, lam, max_iter, max_eval, gtol, ftol, xtol, cg_max, cg_tol)
    return _run(_LSQ(residual, params, "levenberg_marquardt"), o, callback, damped=True)


def gauss_newton(residual, params, *, solver="auto", max_iter=100, max_eval=None, gtol=1e-10, ftol=1e-15,
                 xtol=1e-15, cg_max=None, cg_tol=1e-10, callback=None):
    """Minimise ``0.5 * ||residual(params)||^2`` by Gauss-Newton with Armijo backtracking
    (arguments as :func:`levenberg_marquardt`, without damping)."""
    o = _options("gauss_newton", solver, 0.0, max_iter, max_eval, gtol, ftol, xtol, cg_max, cg_tol)
    return _run(_LSQ(residual, params, "gauss_newton"), o, callback, damped=False)


class LevenbergMarquardt(CurvatureOptimizer):
    """Levenberg-Marquardt as a stateful optimizer: ``step(residual_fn)`` takes the RESIDUAL
    function (params pytree -> Tensor of residuals), runs up to ``max_iter`` iterations (default
    20) and writes the result into the bound parameters. Options as in :func:`levenberg_marquardt`."""

    def __init__(self, params=None, *, solver="auto", lam=1e-3, max_iter=20, max_eval=None, gtol=1e-10,
                 ftol=1e-15, xtol=1e-15, cg_max=None, cg_tol=1e-10, callback=None):
        self._opts = _options(type(self).__name__, solver, lam, max_iter, max_eval, gtol, ftol, xtol, cg_max,
                              cg_tol)
        self._callback = callback
        super().__init__(params)

    def _minimize(self, residual, values):
        return _run(_LSQ(residual, values, f"{type(self).__name__}.step"), self._opts, self._callback,
                    damped=not isinstance(self, GaussNewton))


class GaussNewton(LevenbergMarquardt):
    """Gauss-Newton (undamped, Armijo backtracking) as a stateful optimizer; ``step(residual_fn)``."""

    def __init__(self, params=None, *, solver="auto", max_iter=20, max_eval=None, gtol=1e-10, ftol=1e-15,
                 xtol=1e-15, cg_max=None, cg_tol=1e-10, callback=None):
        super().__init__(params, solver=solver, lam=0.0, max_iter=max_iter, max_eval=max_eval, gtol=gtol,
                         ftol=ftol, xtol=xtol, cg_max=cg_max, cg_tol=cg_tol, callback=callback)
