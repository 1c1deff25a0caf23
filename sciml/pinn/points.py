"""The points a ``solve`` trains on: interior and condition points from the ``points`` argument
(counts, a dict of counts per condition, or given interior points), each MPI rank's share, and
DeepXDE's ``pde_on_boundary`` semantics. Used by solver.py (the first batch and every
resampling) and by tests that build a :class:`Batch` without training."""
import numpy as np

from .. import distributed as dist
from . import sampling
from .conditions import PointData
from .problem import Batch


def _point_counts(problem, points):
    conds = problem.conditions
    if isinstance(points, dict):
        known = {"interior", "boundary"} | {c.name for c in conds} | \
            {c.on for c in conds if isinstance(c.on, str)}
        bad = set(points) - known
        if bad:
            raise ValueError(f"solve(points=...): unknown key(s) {sorted(bad)}; expected "
                             f"'interior', 'boundary' or a condition name {sorted(known)}.")
        n_int = points.get("interior", 4096)
        default_b = points.get("boundary", max(64, n_int // 20))
        per = [points.get(c.name, points.get(c.on, c.n_points or default_b)
                          if isinstance(c.on, str) else c.n_points or default_b) for c in conds]
    else:
        n_int = points
        per = [c.n_points or max(64, int(points) // 20) if not isinstance(points, bool) else 0
               for c in conds]
    n_int = sampling.check_count(n_int, "solve(points=...): the number of interior points")
    if n_int == 0:
        raise ValueError("solve(points=...): need at least one interior point.")
    return n_int, [sampling.check_count(int(n), "solve(points=...)") for n in per]


def _given_interior(problem, points):
    """User-given interior points (an (n, dim) array, or under 'interior' in a dict), checked
    to lie in the domain; None when only counts are given."""
    arr = points.get("interior") if isinstance(points, dict) else points
    if isinstance(arr, (int, np.integer)) or arr is None:
        return None, points
    x = problem.domain.check_inside(arr, what="solve(points=...)")
    n = len(x)
    if isinstance(points, dict):
        points = {**points, "interior": n}
    else:
        points = n
    return x, points


def sample_batch(problem, points, rng, method, dtype, pde_on_boundary=False):
    """Sample interior and condition points (a :class:`Batch`). ``points`` as in ``solve``;
    the interior points may also be given as an ``(n, dim)`` array (checked to lie inside).
    ``pde_on_boundary``: the PDE residual also holds on the conditions' boundary and initial
    points (they join the interior points; DeepXDE's semantics)."""
    given, points = _given_interior(problem, points)
    n_int, per = _point_counts(problem, points)
    n_int, per = dist.local_count(n_int), [dist.local_count(n) for n in per]  # this rank's share (MPI)
    interior = given if given is not None else problem.domain.sample_interior(n_int, rng, method)
    cond_pts = [c.sample(problem.domain, n, rng, method)
                for c, n in zip(problem.conditions, per) if not c.hard]
    for c, p in zip(problem.soft_conditions, cond_pts):   # a value's columns against the outputs
        if p.target is not None and not hasattr(p.target, "_buf"):
            c.check_columns(np.shape(p.target)[1], problem.n_out, len(p))
    if pde_on_boundary:
        # a periodic condition's points are boundary points at both ends (DeepXDE draws them
        # from its boundary pool, on which the PDE holds too): all of them join
        extra = [p.x for c, p in zip(problem.soft_conditions, cond_pts)
                 if c.given is None and not isinstance(c, PointData)]
        # hard conditions have no points of their own: draw them as DeepXDE would
        extra += [c.sample(problem.domain, n, rng, method).x
                  for c, n in zip(problem.conditions, per) if c.hard]
        interior = np.concatenate([interior] + extra) if extra else interior
    return Batch(problem, interior, cond_pts, dtype)
