"""DeepXDE's point draws for CSG domains, for ``Problem.deepxde_points``.

DeepXDE's ``CSGDifference`` / ``CSGIntersection`` / ``CSGUnion`` (``deepxde/geometry/csg.py``)
do not split a boundary pool by length. ``random_boundary_points(n)`` draws ``n`` points on
EACH operand's boundary, keeps those of ``a`` that lie outside ``b`` (difference, union) or in
``b`` (intersection) and those of ``b`` that lie in ``a`` (difference, intersection) or outside
``a`` (union), concatenates them, shuffles with ``np.random.permutation`` and keeps the first
``n`` (repeating while fewer than ``n`` survive). For ``Rectangle - Disk`` with the hole inside
the square that is about half the pool on the hole, whatever the lengths. ``random_points(n)``
of a difference or intersection draws ``n`` points of ``a`` and keeps those outside (in) ``b``,
again and again until ``n`` survive; with the Hammersley set every draw is the same set, so the
first points that survive repeat (``Rectangle(-0.5, 0.5)^2 - Disk(0, 0.25)``, 225 points: 181
distinct, 44 of them twice). A union's interior is ``np.random.rand`` in the bounding box,
kept where it lies in either operand (pseudo-random whatever the sampler).

``inside`` is DeepXDE's: closed operands with no tolerance (a point on the hole's circle is in
the disk, so not in the difference's interior), composed with and/or/and-not.

Operands are drawn as DeepXDE draws them where sciml knows how (``Rectangle``'s perimeter walk,
``Disk``/``Box`` maps of the unit square, nested CSG), else by the operand's own
``sample_boundary`` / ``sample_interior``. The draws that DeepXDE takes from NumPy's global
state (the shuffles, a union's interior) come from ``legacy``, a ``np.random.RandomState``:
``legacy_state(seed)`` seeds it with ``seed`` as ``dde.config.set_random_seed(seed)`` seeds
NumPy, so with the Hammersley sampler the pool is DeepXDE's pool for that seed, point for point
(up to DeepXDE's float32 rounding).
"""
import numpy as np

from .geometry import Ball, Box
from .geometry_ops import Difference, Intersection, Union

CSG = (Difference, Intersection, Union)


def legacy_state(seed):
    """The ``np.random.RandomState`` standing in for DeepXDE's global NumPy state: seeded with
    ``seed`` when it is an int (as ``dde.config.set_random_seed(seed)``), else from the
    Generator ``seed``."""
    if isinstance(seed, np.random.Generator):
        return np.random.RandomState(int(seed.integers(2 ** 32)))
    return np.random.RandomState(int(seed))


def inside(geom, x):
    """DeepXDE's ``inside``: the closed domain, no tolerance, composed like DeepXDE's CSG."""
    if isinstance(geom, Difference):
        return inside(geom.a, x) & ~inside(geom.b, x)
    if isinstance(geom, Intersection):
        return inside(geom.a, x) & inside(geom.b, x)
    if isinstance(geom, Union):
        return inside(geom.a, x) | inside(geom.b, x)
    if isinstance(geom, Box):
        return np.all(x >= geom.lo, axis=1) & np.all(x <= geom.hi, axis=1)
    if isinstance(geom, Ball):
        return np.linalg.norm(x - geom.center, axis=1) <= geom.radius
    return geom._sdf(x) <= 0.0


def _keep_masks(geom, xa, xb):
    """Which of ``a``'s and ``b``'s boundary points lie on the CSG boundary (DeepXDE's test)."""
    a, b = geom.a, geom.b
    if isinstance(geom, Difference):
        return ~inside(b, xa), inside(a, xb)
    if isinstance(geom, Intersection):
        return inside(b, xa), inside(a, xb)
    return ~inside(b, xa), ~inside(a, xb)


def _fill(n, draw, what, geom):
    """DeepXDE's ``while i < n`` loop: concatenate draws until ``n`` points, keep ``n``. A
    draw with no survivors would loop forever in DeepXDE (the Hammersley set repeats): raise."""
    out, have = [], 0
    while have < n:
        x = draw()
        if len(x) == 0:
            raise ValueError(f"deepxde_points: none of the {what} points drawn for {geom!r} "
                             f"survive (DeepXDE would loop forever); is the domain empty, or "
                             f"an operand's boundary entirely inside the other?")
        out.append(x[:n - have])
        have += len(out[-1])
    return np.concatenate(out)


def boundary(geom, n, rng, method, legacy):
    """``n`` points as DeepXDE's ``geom.random_boundary_points(n)`` draws them (see the
    module's docstring); ``rng`` feeds sciml's samplers, ``legacy`` DeepXDE's shuffles."""
    if isinstance(geom, CSG):
        def draw():
            xa = boundary(geom.a, n, rng, method, legacy)
            xb = boundary(geom.b, n, rng, method, legacy)
            ka, kb = _keep_masks(geom, xa, xb)
            x = np.concatenate([xa[ka], xb[kb]])
            return x[legacy.permutation(len(x))]
        return _fill(n, draw, "boundary", geom)
    walk = getattr(geom, "_deepxde_boundary", None)      # Rectangle: DeepXDE's perimeter walk
    return walk(n, rng, method) if walk is not None else geom.sample_boundary(n, rng, method)


def interior(geom, n, rng, method, legacy):
    """``n`` points as DeepXDE's ``geom.random_points(n)`` draws them (see the module's
    docstring; a difference's or intersection's Hammersley points repeat)."""
    if isinstance(geom, Union):
        lo, hi = geom.bbox

        def draw():
            x = legacy.rand(n, geom.dim) * (hi - lo) + lo
            return x[inside(geom, x)]
        return _fill(n, draw, "interior", geom)
    if isinstance(geom, (Difference, Intersection)):
        def draw():
            x = interior(geom.a, n, rng, method, legacy)
            keep = inside(geom.b, x)
            return x[~keep if isinstance(geom, Difference) else keep]
        return _fill(n, draw, "interior", geom)
    return geom.sample_interior(n, rng, method)
