"""Dense BFGS (Nocedal & Wright, Alg. 6.1) with a strong-Wolfe line search, for small problems.

Keeps the (n, n) inverse-Hessian approximation H as one flat buffer; per iteration one matvec
kernel gives the direction, one more gives H y, and one fused kernel applies the rank-2 update.
The first update scales H by s.y / y.y (N&W eq. 6.20); ``self_scaling=True`` scales by
s.y / (y.H y) before EVERY update (Oren-Luenberger self-scaling BFGS), which helps badly
scaled problems. Memory is n^2: meant for up to a few thousand parameters.

Stopping rules, ``max_iter`` / ``max_eval`` and the never-worse guarantee are those of
:mod:`sciml.optim.lbfgs` (shared loop).
"""
from __future__ import annotations

from .. import backend
from ..kernels import lbfgs as K
from .lbfgs import _options, _run
from .result import CurvatureOptimizer, Flat

TOO_BIG = ("{where}: dense BFGS keeps an n x n matrix; n = {n} parameters would need {gb:.1f} GB. "
           "Use LBFGS for large problems.")


class _Dense:
    def __init__(self, n, dt, self_scaling):
        self.n, self.dt, self.self_scaling = n, dt, self_scaling
        self.H = None
        self.S = backend.zeros(n, dt)
        self.Y = backend.zeros(n, dt)
        self.Hy = backend.empty(n, dt)

    def compatible(self, n, dt, o):
        return self.n == n and self.dt == dt

    def ready(self):
        return self.H is not None

    def reset(self):
        self.H = None

    def first_step(self, gnorm, lr, f, f_prev, gtd):
        return lr

    def direction(self, prob, x, g, d):
        K.matvec(self.H, g, d, -1.0, self.n, self.dt)

    def push(self, V, x_new, x, g_new, g):
        n, dt = self.n, self.dt
        K.push_pair(x_new, x, g_new, g, self.S, self.Y, 0, V.out, n, dt)
        sy, yy, _, s_inf = V.read()
        if not (sy > 1e-10 * yy and yy > 0):
            return s_inf                              # skip the update (curvature condition fails)
        if self.H is None:                            # H0 = (s.y / y.y) I, then the update below
            import numpy as np
            self.H = backend.from_numpy(np.eye(n).ravel() * (sy / yy), dt)
            tau = 1.0
        K.matvec(self.H, self.Y, self.Hy, 1.0, n, dt)
        yHy = V.dots(self.Y, self.Hy, self.Hy)[0]
        tau = sy / yHy if self.self_scaling and yHy > 0 else 1.0
        K.bfgs_update(self.H, self.S, self.Hy, tau, 1.0 / sy, yHy, n, dt)
        return s_inf


def _check_size(where, n):
    if n > 20000:
        raise ValueError(TOO_BIG.format(where=where, n=n, gb=n * n * 8 / 1e9))


def bfgs(loss_fn, params, *, self_scaling=False, max_iter=1000, max_eval=None, gtol=1e-7, ftol=1e-12,
         xtol=1e-12, lr=1.0, c1=1e-4, c2=0.9, max_ls=25, callback=None):
    """Minimise ``loss_fn(params)`` by dense BFGS with a strong-Wolfe line search.

    Args:
        loss_fn, params, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls, callback: as in
            :func:`sciml.optim.lbfgs.lbfgs`.
        self_scaling: rescale H by s.y / (y.H y) before every update.
    Returns:
        :class:`~sciml.optim.result.Result`.
    Example:
        >>> r = bfgs(lambda x: ((x - 2.0) ** 2).sum(), sm.tensor([0.0, 0.0]))
    """
    o = _options("bfgs", 1, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls)
    prob = Flat(loss_fn, params, "bfgs")
    _check_size("bfgs", prob.n)
    return _run(prob, o, callback, None, lambda n, dt: _Dense(n, dt, bool(self_scaling)))[0]


class BFGS(CurvatureOptimizer):
    """Dense BFGS as a stateful optimizer: ``BFGS(params).step(loss_fn)`` runs up to ``max_iter``
    iterations (default 100) and writes the result into the bound parameters; the inverse-Hessian
    approximation carries over between steps. Options as in :func:`bfgs`."""

    def __init__(self, params=None, *, self_scaling=False, max_iter=100, max_eval=None, gtol=1e-7, ftol=1e-12,
                 xtol=1e-12, lr=1.0, c1=1e-4, c2=0.9, max_ls=25, callback=None):
        self._opts = _options("BFGS", 1, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls)
        self._self_scaling, self._callback, self._hist = bool(self_scaling), callback, None
        super().__init__(params)

    def _init_state(self):
        super()._init_state()
        self._hist = None

    def _minimize(self, loss_fn, values):
        prob = Flat(loss_fn, values, "BFGS.step")
        _check_size("BFGS.step", prob.n)
        res, self._hist = _run(prob, self._opts, self._callback, self._hist,
                               lambda n, dt: _Dense(n, dt, self._self_scaling))
        return res
