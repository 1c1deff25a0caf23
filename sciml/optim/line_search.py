"""Strong-Wolfe line search (Nocedal & Wright, Numerical Optimization, Alg. 3.5 / 3.6, with
safeguarded cubic interpolation as in minFunc and torch.optim.LBFGS).

Finds a step ``t`` along a descent direction ``d`` with

    f(x + t d) <= f(x) + c1 t g.d          (sufficient decrease)
    |g(x + t d).d| <= c2 |g.d|            (curvature)

using at most ``max_evals`` evaluations of ``phi(t) -> (f, gtd, state)`` (``state`` is whatever
the caller needs back for the chosen point, e.g. the trial point and its gradient). A non-finite
loss at a trial step is treated as +inf, so the search backs off from overflow.
"""
from __future__ import annotations

import math


def cubic_min(x1, f1, g1, x2, f2, g2, bounds=None):
    """Minimiser of the cubic through (x1, f1, g1), (x2, f2, g2), clamped to ``bounds``
    (default: the interval); the midpoint when the cubic has no minimum or data are not finite."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    mid = 0.5 * (lo + hi)
    if not all(math.isfinite(v) for v in (x1, f1, g1, x2, f2, g2)) or x1 == x2:
        return mid
    d1 = g1 + g2 - 3.0 * (f1 - f2) / (x1 - x2)
    d2sq = d1 * d1 - g1 * g2
    if d2sq < 0 or not math.isfinite(d2sq):
        return mid
    d2 = math.sqrt(d2sq)
    if x1 <= x2:
        den = g2 - g1 + 2.0 * d2
        t = x2 - (x2 - x1) * ((g2 + d2 - d1) / den) if den != 0 else mid
    else:
        den = g1 - g2 + 2.0 * d2
        t = x1 - (x1 - x2) * ((g1 + d2 - d1) / den) if den != 0 else mid
    if not math.isfinite(t):
        return mid
    return min(max(t, lo), hi)


def strong_wolfe(phi, f0, gtd0, t, d_norm, *, c1=1e-4, c2=0.9, tol_change=1e-9, max_evals=25, state0=None,
                 torch=False):
    """Strong-Wolfe search from step ``t``.

    Args:
        phi: ``phi(t) -> (f, gtd, state)``; ``f`` may be inf (non-finite losses are mapped to inf).
        f0, gtd0: loss and directional derivative at t = 0 (gtd0 < 0).
        t: the first trial step.
        d_norm: max |d|, for the interval-width stopping test ``|t_hi - t_lo| * d_norm < tol_change``.
        max_evals: evaluation budget (never exceeded; >= 1).
        state0: the state at t = 0 (returned when no step decreased the loss).
        torch: ``torch.optim.lbfgs._strong_wolfe``'s variant: ``f(t_i) >= f(t_{i-1})`` brackets
            from the third trial on (Alg. 3.5: the second), and when the budget ends while
            extrapolating, the lower of t = 0 and the last trial (not the last but one).
    Returns:
        ``(t, f, gtd, state, evals, satisfied)`` for the best bracketed point; ``satisfied`` tells
        whether both Wolfe conditions hold there.
    """
    f_new, gtd_new, st_new = phi(t)
    evals = 1
    t_prev, f_prev, gtd_prev, st_prev = 0.0, f0, gtd0, state0
    done = False
    bracket = None
    while evals < max_evals:
        if f_new > f0 + c1 * t * gtd0 or (evals > (2 if torch else 1) and f_new >= f_prev):
            bracket = [[t_prev, f_prev, gtd_prev, st_prev], [t, f_new, gtd_new, st_new]]
            break
        if abs(gtd_new) <= -c2 * gtd0:
            bracket = [[t, f_new, gtd_new, st_new]]
            done = True
            break
        if gtd_new >= 0:
            bracket = [[t_prev, f_prev, gtd_prev, st_prev], [t, f_new, gtd_new, st_new]]
            break
        lo, hi = t + 0.01 * (t - t_prev), t * 10.0          # extrapolate
        t_next = cubic_min(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(lo, hi))
        t_prev, f_prev, gtd_prev, st_prev = t, f_new, gtd_new, st_new
        t = t_next
        f_new, gtd_new, st_new = phi(t)
        evals += 1
    if bracket is None and torch:   # torch: the bracket [0, t], its lower end
        if f0 <= f_new:
            return 0.0, f0, gtd0, state0, evals, False
        return t, f_new, gtd_new, st_new, evals, f_new <= f0 + c1 * t * gtd0 and abs(gtd_new) <= -c2 * gtd0
    if bracket is None:  # budget spent while extrapolating (or only one evaluation allowed)
        if f_new <= f0 + c1 * t * gtd0 and abs(gtd_new) <= -c2 * gtd0:
            return t, f_new, gtd_new, st_new, evals, True
        if f_new < f_prev or (f_new <= f0 and t_prev == 0.0):
            return t, f_new, gtd_new, st_new, evals, False
        return t_prev, f_prev, gtd_prev, st_prev, evals, False
    if done:
        b = bracket[0]
        return b[0], b[1], b[2], b[3], evals, True

    low, high = (0, 1) if bracket[0][1] <= bracket[1][1] else (1, 0)
    insuf = False
    while evals < max_evals:
        a, b = bracket[0], bracket[1]
        if abs(b[0] - a[0]) * d_norm < tol_change:
            break
        t = cubic_min(a[0], a[1], a[2], b[0], b[1], b[2])
        bmax, bmin = max(a[0], b[0]), min(a[0], b[0])
        eps = 0.1 * (bmax - bmin)
        if min(bmax - t, t - bmin) < eps:                 # too close to an end: move inward
            if insuf or t >= bmax or t <= bmin:
                t = bmax - eps if abs(t - bmax) < abs(t - bmin) else bmin + eps
                insuf = False
            else:
                insuf = True
        else:
            insuf = False
        f_new, gtd_new, st_new = phi(t)
        evals += 1
        if f_new > f0 + c1 * t * gtd0 or f_new >= bracket[low][1]:
            bracket[high] = [t, f_new, gtd_new, st_new]
            low, high = (0, 1) if bracket[0][1] <= bracket[1][1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd0:
                done = True
            elif gtd_new * (bracket[high][0] - bracket[low][0]) >= 0:
                bracket[high] = bracket[low]
            bracket[low] = [t, f_new, gtd_new, st_new]
            if done:
                break
    b = bracket[low]
    return b[0], b[1], b[2], b[3], evals, done


def backtracking(phi_value, f0, gtd0, t, *, c1=1e-4, shrink=0.5, max_evals=30):
    """Armijo backtracking: the first ``t * shrink**k`` with ``f <= f0 + c1 t gtd0``.

    ``phi_value(t) -> (f, state)``. Returns ``(t, f, state, evals, satisfied)``; on failure the
    best point tried (which may not decrease the loss: the caller must check).
    """
    best = None
    evals = 0
    while evals < max_evals:
        f, st = phi_value(t)
        evals += 1
        if best is None or f < best[1]:
            best = (t, f, st)
        if f <= f0 + c1 * t * gtd0:
            return t, f, st, evals, True
        t *= shrink
    return best[0], best[1], best[2], evals, False
