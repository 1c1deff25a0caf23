"""Dense BFGS (Nocedal & Wright, Alg. 6.1) with a strong-Wolfe line search, for small problems.

Keeps the (n, n) inverse-Hessian approximation H as one flat buffer; per iteration one matvec
kernel gives the direction, one more gives H y, and one fused kernel applies the rank-2 update.
The first update scales H by s.y / y.y (N&W eq. 6.20); ``self_scaling=True`` scales by
s.y / (y.H y) before EVERY update (Oren-Luenberger self-scaling BFGS), which helps badly
scaled problems. Memory is n^2: meant for up to a few thousand parameters.

``update=`` picks the member of the self-scaled Broyden family (Urban, Stefanou & Pons 2024,
"Unveiling the optimization process of PINNs", eqs. 11-23; Al-Baali 1998 / Al-Baali & Khalfan)

    H+ = (1/tau) [H - (H y)(H y)^T / (y.H y) + phi (y.H y) v v^T] + s s^T / (s.y),
    v  = s / (s.y) - H y / (y.H y),

with b = s.B s / s.y (B = H^-1, so s.B s = -t s.g for the step s = t d, d = -H g),
h = y.H y / s.y and a = b h - 1 >= 0:

- ``"bfgs"``: phi = 1, tau = 1 (with ``self_scaling=True``: tau = h, Oren-Luenberger);
- ``"ssbfgs"``: phi = 1, tau = min(1, 1/b) (Al-Baali's self-scaled BFGS, their SSBFGS_AB);
- ``"ssbroyden"``: c = sqrt(a / (1 + a)), rho = min(1, h (1 - c)), theta in
  [(rho - 1) / a, 1 / rho] closest to (1 - b) / b, sigma = 1 + a theta,
  phi = (1 - theta) / sigma, and tau = min(min(1, 1/b) sigma^(1/(1-n)), sigma) if theta <= 0
  else min(1, 1/b) min(sigma^(1/(1-n)), 1/theta) (their SSBroyden2).

With ``'ssbroyden'`` (on sqrt of the loss, the inverse Hessian kept across resamplings) the
float64 Burgers PINN reaches relative L2 errors near 1e-5, where L-BFGS stalls near 5e-3
(docs/pinn.md).

Stopping rules, ``max_iter`` / ``max_eval`` and the never-worse guarantee are those of
:mod:`sciml.optim.lbfgs` (shared loop).
"""
from __future__ import annotations

import math

from .. import backend
from ..kernels import lbfgs as K
from .lbfgs import _options, _run
from .result import CurvatureOptimizer, Flat

TOO_BIG = ("{where}: dense BFGS keeps an n x n matrix; n = {n} parameters would need {gb:.1f} GB. "
           "Use LBFGS for large problems.")


UPDATES = ("bfgs", "ssbfgs", "ssbroyden")


def _check_update(where, update, self_scaling):
    if update not in UPDATES:
        raise ValueError(f"{where}: update must be one of {', '.join(repr(u) for u in UPDATES)}; "
                         f"got {update!r}.")
    if self_scaling and update != "bfgs":
        raise ValueError(f"{where}: self_scaling=True is the Oren-Luenberger scaling of update='bfgs'; "
                         f"update={update!r} has its own scaling (drop self_scaling).")
    return update


def scaling_parameters(update, n, b, h):
    """(tau, phi) of one self-scaled Broyden update (see the module docstring) from
    b = s.B s / s.y, h = y.H y / s.y and the dimension n; H+ = (1/tau)[... phi ...] + s s^T/s.y."""
    if update == "bfgs":
        return 1.0, 1.0
    rb = min(1.0, 1.0 / b)
    if update == "ssbfgs":
        return rb, 1.0
    a = b * h - 1.0
    if not a > 1e-12:                          # y parallel to H y, b h = 1: the family collapses to BFGS
        return rb, 1.0
    c = math.sqrt(a / (1.0 + a))
    rho = min(1.0, h * (1.0 - c))
    theta = max((rho - 1.0) / a, min(1.0 / rho, (1.0 - b) / b))
    sigma = 1.0 + a * theta
    sn = abs(sigma) ** (1.0 / (1.0 - n)) if n > 1 else 1.0
    tau = min(rb * sn, sigma) if theta <= 0 else rb * min(sn, 1.0 / theta)
    return tau, (1.0 - theta) / sigma


class _Dense:
    def __init__(self, n, dt, self_scaling, update="bfgs"):
        self.n, self.dt, self.self_scaling, self.update = n, dt, self_scaling, update
        self.H = None
        self.S = backend.zeros(n, dt)
        self.Y = backend.zeros(n, dt)
        self.Hy = backend.empty(n, dt)
        self.step_size = 1.0                          # set by the loop before each push

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
        first = self.H is None
        if first:                                     # H0 = (s.y / y.y) I, then a plain BFGS update
            import numpy as np
            self.H = backend.from_numpy(np.eye(n).ravel() * (sy / yy), dt)
        else:
            sg = V.dots(self.S, g, g)[0]              # s.g (old gradient): s.B s = -t s.g
        K.matvec(self.H, self.Y, self.Hy, 1.0, n, dt)
        yHy = V.dots(self.Y, self.Hy, self.Hy)[0]
        if not yHy > 0:
            return s_inf
        if self.update == "bfgs" or first:
            tau = sy / yHy if self.self_scaling and not first else 1.0   # kernel scale of H
            K.bfgs_update(self.H, self.S, self.Hy, tau, 1.0 / sy, yHy, n, dt)
            return s_inf
        b = -self.step_size * sg / sy
        if not (b > 0 and math.isfinite(b)):          # not a descent step of this H: plain BFGS
            K.bfgs_update(self.H, self.S, self.Hy, 1.0, 1.0 / sy, yHy, n, dt)
            return s_inf
        tau, phi = scaling_parameters(self.update, n, b, yHy / sy)
        K.bfgs_update(self.H, self.S, self.Hy, 1.0 / tau, 1.0 / sy, yHy, n, dt)
        if phi != 1.0:                                # Broyden-family term (phi - 1)/tau (y.H y) v v^T
            w = V.axpy(self.Hy, -yHy / sy, self.S)    # w = H y - (y.H y / s.y) s = -(y.H y) v
            K.bfgs_update(self.H, w, self._zeros(), 1.0, (phi - 1.0) / (tau * yHy), 0.0, n, dt)
        return s_inf

    def _zeros(self):
        if getattr(self, "_z", None) is None:
            self._z = backend.zeros(self.n, self.dt)
        return self._z


def _check_size(where, n):
    if n > 20000:
        raise ValueError(TOO_BIG.format(where=where, n=n, gb=n * n * 8 / 1e9))


def bfgs(loss_fn, params, *, self_scaling=False, update="bfgs", max_iter=1000, max_eval=None, gtol=1e-7, ftol=1e-12,
         xtol=1e-12, lr=1.0, c1=1e-4, c2=0.9, max_ls=25, callback=None):
    """Minimise ``loss_fn(params)`` by dense BFGS with a strong-Wolfe line search.

    Args:
        loss_fn, params, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls, callback: as in
            :func:`sciml.optim.lbfgs.lbfgs`.
        self_scaling: rescale H by s.y / (y.H y) before every update (Oren-Luenberger).
        update: ``'bfgs'``, ``'ssbfgs'`` (Al-Baali self-scaled BFGS) or ``'ssbroyden'``
            (self-scaled Broyden, SSBroyden2 of Urban et al. 2024); see the module docstring.
    Returns:
        :class:`~sciml.optim.result.Result`.
    Example:
        >>> r = bfgs(lambda x: ((x - 2.0) ** 2).sum(), sm.tensor([0.0, 0.0]))
    """
    o = _options("bfgs", 1, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls)
    update = _check_update("bfgs", update, self_scaling)
    prob = Flat(loss_fn, params, "bfgs")
    _check_size("bfgs", prob.n)
    return _run(prob, o, callback, None, lambda n, dt: _Dense(n, dt, bool(self_scaling), update))[0]


class BFGS(CurvatureOptimizer):
    """Dense BFGS as a stateful optimizer: ``BFGS(params).step(loss_fn)`` runs up to ``max_iter``
    iterations (default 100) and writes the result into the bound parameters; the inverse-Hessian
    approximation carries over between steps. Options as in :func:`bfgs`; ``update='ssbroyden'``
    is the self-scaled Broyden update (SSBroyden) used for high-accuracy PINNs."""

    def __init__(self, params=None, *, self_scaling=False, update="bfgs", max_iter=100, max_eval=None, gtol=1e-7, ftol=1e-12,
                 xtol=1e-12, lr=1.0, c1=1e-4, c2=0.9, max_ls=25, callback=None):
        self._opts = _options("BFGS", 1, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls)
        self._self_scaling, self._callback, self._hist = bool(self_scaling), callback, None
        self._update = _check_update("BFGS", update, self_scaling)
        super().__init__(params)

    def _init_state(self):
        super()._init_state()
        self._hist = None

    def _minimize(self, loss_fn, values):
        prob = Flat(loss_fn, values, "BFGS.step")
        _check_size("BFGS.step", prob.n)
        res, self._hist = _run(prob, self._opts, self._callback, self._hist,
                               lambda n, dt: _Dense(n, dt, self._self_scaling, self._update))
        return res
