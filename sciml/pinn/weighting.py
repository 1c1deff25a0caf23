"""Loss weights of the PINN terms: fixed, or adapted by gradient-norm balancing.

The loss is ``sum_i w_i L_i`` over the terms ``L_pde, L_bc, L_ic, ...``. A poorly scaled
term can dominate the gradient; gradient-norm balancing (Wang, Teng & Perdikaris 2021;
Wang et al. 2023, "An expert's guide to training PINNs", Alg. 1) sets every
``w_i = sum_j ||grad L_j|| / ||grad L_i||`` (so each weighted term contributes a gradient of
the same norm), smoothed by a moving average, recomputed every ``every`` steps of a
first-order stage and frozen during curvature stages (whose objective must stay fixed).
"""
import math

import numpy as np


class Fixed:
    """Constant weights.

    Args:
        weights: dict term name -> weight (``'pde'``, ``'initial'``, ``'dirichlet:boundary'``,
            ...); missing terms use the condition's own ``weight`` (PDE: 1).
    """

    adaptive = False

    def __init__(self, weights=None):
        self.given = dict(weights or {})

    def init(self, names, defaults):
        unknown = set(self.given) - set(names)
        if unknown:
            raise ValueError(f"weights: unknown term(s) {sorted(unknown)}; the loss terms are "
                             f"{names}.")
        self.names = list(names)
        self.w = np.array([float(self.given.get(n, d)) for n, d in zip(names, defaults)])
        return self

    def update(self, step, grads_fn):
        return False

    def state(self):
        return self.w.copy()

    def load(self, w):
        self.w = np.asarray(w, dtype=float).copy()


class GradNorm(Fixed):
    """Gradient-norm balancing of the loss terms (adaptive).

    Args:
        every: recompute the weights every this many first-order steps.
        alpha: moving-average factor (``w <- alpha w + (1 - alpha) w_new``).
        weights: initial weights (as for :class:`Fixed`).
    """

    adaptive = True

    def __init__(self, every=100, alpha=0.9, weights=None):
        super().__init__(weights)
        if not (isinstance(every, int) and every > 0):
            raise ValueError(f"GradNorm: every must be a positive int, got {every!r}.")
        if not 0 <= alpha < 1:
            raise ValueError(f"GradNorm: alpha must be in [0, 1), got {alpha!r}.")
        self.every, self.alpha = every, float(alpha)

    def update(self, step, grads_fn):
        """``grads_fn()`` returns one gradient norm per term; returns True if updated."""
        if step % self.every:
            return False
        norms = np.asarray(grads_fn(), dtype=float)
        norms = np.where(norms > 0, norms, np.nan)
        total = np.nansum(norms)
        if not math.isfinite(total) or total <= 0:
            return False
        new = np.where(np.isnan(norms), self.w, total / np.where(np.isnan(norms), 1.0, norms))
        self.w = self.alpha * self.w + (1 - self.alpha) * new
        return True


def as_weighting(weights):
    """None / dict / 'grad_norm' / a weighting object -> a weighting object."""
    if weights is None or isinstance(weights, dict):
        return Fixed(weights)
    if isinstance(weights, str):
        if weights in ("grad_norm", "gradnorm", "adaptive"):
            return GradNorm()
        if weights == "fixed":
            return Fixed()
        raise ValueError(f"weights={weights!r}: expected a dict, 'fixed', 'grad_norm' or a "
                         "weighting object (Fixed(...), GradNorm(...)).")
    if hasattr(weights, "init") and hasattr(weights, "update"):
        return weights
    raise TypeError(f"weights: expected a dict, a string or a weighting object, got "
                    f"{type(weights).__name__}.")


__all__ = ["Fixed", "GradNorm", "as_weighting"]
