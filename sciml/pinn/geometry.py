"""PINN domains: intervals, boxes, balls, polygons, their CSG combinations and space-time.

Pure numpy: points are float64 arrays of shape ``(n, dim)``, columns in ``geom.names``
order. Combine with ``|`` (union), ``&`` (intersection), ``-`` (difference) and
``* TimeInterval(t0, t1)`` (space-time, see geometry_ops.py).

Example:
    >>> domain = Rectangle((0, 0), (2, 1)) - Disk((1, 0.5), 0.25)
    >>> x = domain.sample_boundary(256, rng=0, method="sobol")
    >>> n = domain.normal(x)                       # (256, 2), unit, outward
    >>> spacetime = Interval(-1, 1) * TimeInterval(0, 1)
    >>> spacetime.names
    ('x', 't')
"""
import numbers
from math import gamma, pi

import numpy as np

from . import sampling
from .geometry_base import Geometry, allocate as _allocate, check_names, fmt
from .geometry_ops import Difference, Intersection, SpaceTime, Union


def _vector(v, who, what):
    try:
        a = np.atleast_1d(np.asarray(v, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"{who}: {what} must be a sequence of numbers, got {v!r}.") from None
    if a.ndim != 1 or not np.all(np.isfinite(a)):
        raise ValueError(f"{who}: {what} must be a finite 1-D sequence of numbers, got {v!r}.")
    return a


def _scalar(v, who, what):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v):
        raise ValueError(f"{who}: {what} must be a finite real number, got {v!r}.")
    return float(v)


class Box(Geometry):
    """The axis-aligned box ``[lo_1, hi_1] x ... x [lo_d, hi_d]`` in R^d.

    Boundary parts: ``'{name}_min'`` and ``'{name}_max'`` for every coordinate name
    (``'x_min'``, ``'x_max'``, ``'y_min'``, ...), and ``'boundary'``.

    Args:
        lo: lower corner, shape ``(d,)``.
        hi: upper corner, shape ``(d,)``, ``hi > lo`` componentwise.
        names: coordinate names (default ``('x', 'y', 'z')[:d]``).
    Example:
        >>> Box([0, 0, 0], [1, 2, 3]).measure
        6.0
    """

    def __init__(self, lo, hi, names=None):
        who = type(self).__name__
        lo, hi = _vector(lo, who, "lo"), _vector(hi, who, "hi")
        if lo.shape != hi.shape or lo.size == 0:
            raise ValueError(f"{who}: lo and hi need the same non-zero length, got "
                             f"{lo.tolist()} and {hi.tolist()}.")
        if not np.all(hi > lo):
            raise ValueError(f"{who}: need lo < hi in every coordinate, got lo={lo.tolist()}, "
                             f"hi={hi.tolist()}.")
        self.lo, self.hi = lo, hi
        self.dim = lo.size
        self.names = check_names(names, self.dim, who)
        self._interior_dims = self._boundary_dims = self.dim

    def __repr__(self):
        return f"Box({[float(v) for v in self.lo]}, {[float(v) for v in self.hi]})"

    @property
    def bbox(self):
        return self.lo.copy(), self.hi.copy()

    @property
    def measure(self):
        return float(np.prod(self.hi - self.lo))

    def _face_areas(self):
        ext = self.hi - self.lo
        return np.repeat([np.prod(np.delete(ext, i)) for i in range(self.dim)], 2)

    @property
    def boundary_measure(self):
        return float(self._face_areas().sum())

    def _sdf(self, x):
        q = np.abs(x - (self.lo + self.hi) / 2) - (self.hi - self.lo) / 2
        outside = np.linalg.norm(np.maximum(q, 0.0), axis=1)
        return outside + np.minimum(q.max(axis=1), 0.0)

    def _normal(self, x):
        c = (self.lo + self.hi) / 2
        q = np.abs(x - c) - (self.hi - self.lo) / 2
        axis = np.argmax(q, axis=1)
        rows = np.arange(len(x))
        out = np.zeros_like(x)
        out[rows, axis] = np.where(x[rows, axis] >= c[axis], 1.0, -1.0)
        return out

    def _map_interior(self, u):
        return self.lo + u * (self.hi - self.lo)

    def _face_points(self, face, v):
        """Points on face ``face`` (axis = face // 2, side = face % 2) from unit-cube
        points ``v`` of shape ``(m, dim - 1)``."""
        axis, side = divmod(int(face), 2)
        u = np.empty((len(v), self.dim))
        u[:, np.arange(self.dim) != axis] = v
        u[:, axis] = side
        return self.lo + u * (self.hi - self.lo)

    def _map_boundary(self, u):
        cum = np.cumsum(self._face_areas())
        face = np.minimum(np.searchsorted(cum / cum[-1], u[:, 0], side="right"), len(cum) - 1)
        x = np.empty((len(u), self.dim))
        for f in np.unique(face):
            rows = face == f
            x[rows] = self._face_points(f, u[rows, 1:])
        return x

    def _grid_boundary(self, n):
        ext = self.hi - self.lo
        counts = _allocate(n, self._face_areas())
        faces = [self._face_points(f, sampling.grid(int(m), self.dim - 1,
                                                    extents=np.delete(ext, f // 2)))
                 for f, m in enumerate(counts) if m > 0]
        return np.concatenate(faces) if faces else np.zeros((0, self.dim))

    def _grid_interior(self, n):
        return self._map_interior(sampling.grid(n, self.dim, extents=self.hi - self.lo))

    def _face_mask(self, axis, side):
        value = (self.lo, self.hi)[side][axis]
        return lambda x, tol: (np.abs(x[:, axis] - value) <= tol) & (self._sdf(x) <= tol)

    def _parts(self):
        return {f"{name}_{end}": self._face_mask(i, s)
                for i, name in enumerate(self.names) for s, end in enumerate(("min", "max"))}


class Interval(Box):
    """The interval ``[a, b]``. Boundary parts: ``'left'`` (x = a), ``'right'`` (x = b).

    Args:
        a: left end.
        b: right end, ``b > a``.
        names: coordinate name (default ``('x',)``).
    Example:
        >>> Interval(-1, 1).sample_boundary(4, rng=0, method="grid")[:, 0]
        array([-1., -1.,  1.,  1.])
    """

    def __init__(self, a, b, names=None):
        who = type(self).__name__
        a, b = _scalar(a, who, "a"), _scalar(b, who, "b")
        if not a < b:
            raise ValueError(f"{who}(a={fmt(a)}, b={fmt(b)}): need a < b.")
        super().__init__([a], [b], names)
        self.a, self.b = a, b

    def __repr__(self):
        return f"{type(self).__name__}({fmt(self.a)}, {fmt(self.b)})"

    def _parts(self):
        return {"left": self._face_mask(0, 0), "right": self._face_mask(0, 1),
                **super()._parts()}


class TimeInterval(Interval):
    """The time interval ``[t0, t1]`` (coordinate ``'t'``); ``geom * TimeInterval(t0, t1)``
    is a space-time domain. Boundary parts: ``'initial'`` (t = t0), ``'final'`` (t = t1).

    Args:
        t0: initial time.
        t1: final time, ``t1 > t0``.
    """

    def __init__(self, t0, t1):
        super().__init__(t0, t1, names=("t",))
        self.t0, self.t1 = self.a, self.b

    def _parts(self):
        return {"initial": self._face_mask(0, 0), "final": self._face_mask(0, 1),
                **super()._parts()}


class Rectangle(Box):
    """The rectangle ``[x0, x1] x [y0, y1]``. Boundary parts: ``'left'`` (x = x0),
    ``'right'`` (x = x1), ``'bottom'`` (y = y0), ``'top'`` (y = y1).

    Args:
        lower: ``(x0, y0)``.
        upper: ``(x1, y1)``, with ``x1 > x0`` and ``y1 > y0``.
        names: coordinate names (default ``('x', 'y')``).
    """

    def __init__(self, lower, upper, names=None):
        lo, hi = _vector(lower, "Rectangle", "lower"), _vector(upper, "Rectangle", "upper")
        if lo.shape != (2,) or hi.shape != (2,):
            raise ValueError(f"Rectangle: lower and upper must be (x, y) pairs, got {lower!r} "
                             f"and {upper!r}; use Box for other dimensions.")
        super().__init__(lo, hi, names)

    def __repr__(self):
        return (f"Rectangle(({fmt(self.lo[0])}, {fmt(self.lo[1])}), "
                f"({fmt(self.hi[0])}, {fmt(self.hi[1])}))")

    def _deepxde_boundary(self, n, rng, method):
        """DeepXDE's ``Rectangle.random_boundary_points``: one 1-D sample of ``n + 2`` in (0, 1)
        walked counter-clockwise along the perimeter from ``(x0, y0)`` (bottom, right, top,
        left), the draws at the corners (x1, y0) and (x0, y1) dropped, the first ``n`` kept."""
        ext = self.hi - self.lo
        per = 2.0 * float(ext.sum())
        l1, l2 = float(ext[0]), float(ext[0] + ext[1])
        l3 = l2 + l1
        u = sampling.sample(method, n + 2, 1, rng)[:, 0]
        near = lambda c: np.isclose(u, c / per, rtol=0.0, atol=1e-6)   # noqa: E731  (DeepXDE: float32 atol)
        s = u[~near(l1) & ~near(l3)][:n] * per
        x0, y0 = self.lo
        x1, y1 = self.hi
        return np.stack([np.select([s < l1, s < l2, s < l3], [x0 + s, np.full_like(s, x1), x1 - (s - l2)], x0),
                         np.select([s < l1, s < l2, s < l3], [np.full_like(s, y0), y0 + (s - l1), np.full_like(s, y1)],
                                   y1 - (s - l3))], axis=1)

    def _parts(self):
        return {"left": self._face_mask(0, 0), "right": self._face_mask(0, 1),
                "bottom": self._face_mask(1, 0), "top": self._face_mask(1, 1),
                **super()._parts()}


class Ball(Geometry):
    """The closed ball ``|x - center| <= radius`` in R^d.

    Interior and boundary sampling map the unit cube onto the ball area-preservingly
    (for d <= 3), so Sobol/LHS stratification carries over.

    Args:
        center: shape ``(d,)``.
        radius: ``radius > 0``.
        names: coordinate names (default ``('x', 'y', 'z')[:d]``).
    Example:
        >>> round(Ball((0, 0, 0), 1).measure, 6)     # 4/3 pi
        4.18879
    """

    def __init__(self, center, radius, names=None):
        who = type(self).__name__
        self.center = _vector(center, who, "center")
        self.radius = _scalar(radius, who, "radius")
        if self.radius <= 0:
            raise ValueError(f"{who}: radius must be > 0, got {fmt(self.radius)}.")
        self.dim = self.center.size
        self.names = check_names(names, self.dim, who)
        d = self.dim
        self._interior_dims = 1 if d == 1 else 1 + sampling.sphere_dims(d)
        self._boundary_dims = 1 if d == 1 else sampling.sphere_dims(d)

    def __repr__(self):
        return f"Ball({[float(v) for v in self.center]}, {fmt(self.radius)})"

    @property
    def bbox(self):
        return self.center - self.radius, self.center + self.radius

    @property
    def measure(self):
        d = self.dim
        return pi ** (d / 2) / gamma(d / 2 + 1) * self.radius ** d

    @property
    def boundary_measure(self):
        d = self.dim
        return 2 * pi ** (d / 2) / gamma(d / 2) * self.radius ** (d - 1)

    def _sdf(self, x):
        return np.linalg.norm(x - self.center, axis=1) - self.radius

    def _normal(self, x):
        v = x - self.center
        norm = np.linalg.norm(v, axis=1, keepdims=True)
        v[norm[:, 0] == 0, 0] = 1.0       # the centre: any direction will do
        return v / np.where(norm > 0, norm, 1.0)

    def _map_interior(self, u):
        if self.dim == 1:
            return self.center + self.radius * (2 * u - 1)
        r = self.radius * u[:, :1] ** (1.0 / self.dim)
        return self.center + r * sampling.unit_sphere(u[:, 1:])

    def _map_boundary(self, u):
        if self.dim == 1:
            return self.center + self.radius * np.where(u < 0.5, -1.0, 1.0)
        return self.center + self.radius * sampling.unit_sphere(u)

    def _grid_boundary(self, n):
        return self._map_boundary(sampling.grid(n, self._boundary_dims))


class Disk(Ball):
    """The closed disk ``|(x, y) - center| <= radius``.

    Args:
        center: ``(x, y)``.
        radius: ``radius > 0``.
        names: coordinate names (default ``('x', 'y')``).
    """

    def __init__(self, center, radius, names=None):
        c = _vector(center, "Disk", "center")
        if c.shape != (2,):
            raise ValueError(f"Disk: center must be an (x, y) pair, got {center!r}; use Ball "
                             "for other dimensions.")
        super().__init__(c, radius, names)

    def __repr__(self):
        return f"Disk(({fmt(self.center[0])}, {fmt(self.center[1])}), {fmt(self.radius)})"


def _segments_cross(p1, p2, q1, q2):
    """Whether closed segments p1p2 and q1q2 (arrays of shape (k, 2)) intersect."""
    def orient(a, b, c):
        return np.sign((b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1])
                       - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0]))
    o1, o2, o3, o4 = orient(p1, p2, q1), orient(p1, p2, q2), orient(q1, q2, p1), orient(q1, q2, p2)
    overlap = np.all((np.maximum(p1, p2) >= np.minimum(q1, q2))
                     & (np.maximum(q1, q2) >= np.minimum(p1, p2)), axis=1)
    return (o1 * o2 <= 0) & (o3 * o4 <= 0) & overlap


class Polygon(Geometry):
    """A simple (non-self-intersecting) polygon in the plane.

    Vertices may be given clockwise or counter-clockwise; a repeated closing vertex is
    dropped. Interior sampling is rejection from the bounding box; boundary sampling is by
    arc length along the perimeter.

    Args:
        vertices: shape ``(m, 2)``, ``m >= 3``.
        names: coordinate names (default ``('x', 'y')``).
    Example:
        >>> Polygon([(0, 0), (2, 0), (0, 1)]).measure
        1.0
    """

    _CHUNK = 2_000_000   # point-edge pairs per vectorised block

    def __init__(self, vertices, names=None):
        v = np.asarray(vertices, dtype=np.float64)
        if v.ndim != 2 or v.shape[1] != 2 or not np.all(np.isfinite(v)):
            raise ValueError(f"Polygon: vertices must be a finite array of shape (m, 2), got "
                             f"shape {v.shape}.")
        if len(v) > 1 and np.array_equal(v[0], v[-1]):
            v = v[:-1]
        if len(v) < 3:
            raise ValueError(f"Polygon: need at least 3 distinct vertices, got {len(v)}.")
        if np.any(np.all(v == np.roll(v, -1, axis=0), axis=1)):
            raise ValueError("Polygon: consecutive vertices must differ (found a repeat).")
        self._check_simple(v)
        area = 0.5 * np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1])
        if abs(area) <= 1e-14 * np.ptp(v, axis=0).prod():
            raise ValueError("Polygon: the vertices enclose zero area (collinear?).")
        self.vertices = v if area > 0 else v[::-1].copy()    # counter-clockwise
        self.dim, self.names = 2, check_names(names, 2, "Polygon")
        a = self.vertices
        self._a, self._e = a, np.roll(a, -1, axis=0) - a
        self._len = np.linalg.norm(self._e, axis=1)
        self._n = np.stack([self._e[:, 1], -self._e[:, 0]], axis=1) / self._len[:, None]
        self._area = abs(area)
        self._boundary_dims = 1

    @staticmethod
    def _check_simple(v):
        m = len(v)
        i, j = np.triu_indices(m, k=2)
        keep = ~((i == 0) & (j == m - 1))                 # first and last edge are adjacent
        i, j = i[keep], j[keep]
        a, b = v, np.roll(v, -1, axis=0)
        bad = _segments_cross(a[i], b[i], a[j], b[j])
        if bad.any():
            k = np.argmax(bad)
            raise ValueError(f"Polygon: edges {i[k]} and {j[k]} intersect; the polygon must be "
                             "simple (list vertices in order around the boundary).")

    def __repr__(self):
        if len(self.vertices) > 6:
            return f"Polygon(<{len(self.vertices)} vertices>)"
        return "Polygon([" + ", ".join(f"({fmt(x)}, {fmt(y)})" for x, y in self.vertices) + "])"

    @property
    def bbox(self):
        return self.vertices.min(axis=0), self.vertices.max(axis=0)

    @property
    def measure(self):
        return float(self._area)

    @property
    def boundary_measure(self):
        return float(self._len.sum())

    def _nearest(self, x):
        """Distance to the boundary, index of the nearest edge, and the even-odd inside
        test, for points of shape (n, 2)."""
        dist = np.empty(len(x))
        edge = np.empty(len(x), dtype=int)
        inside = np.empty(len(x), dtype=bool)
        a, e, b = self._a, self._e, self._a + self._e
        step = max(1, self._CHUNK // len(a))
        for s in range(0, len(x), step):
            p = x[s:s + step, None, :]
            t = np.clip(np.sum((p - a) * e, axis=2) / self._len ** 2, 0.0, 1.0)
            d = np.linalg.norm(p - a - t[..., None] * e, axis=2)
            edge[s:s + step] = np.argmin(d, axis=1)
            dist[s:s + step] = np.min(d, axis=1)
            px, py = p[..., 0], p[..., 1]
            crosses = (a[:, 1] > py) != (b[:, 1] > py)
            dy = np.where(crosses, b[:, 1] - a[:, 1], 1.0)
            xcross = a[:, 0] + (py - a[:, 1]) * (b[:, 0] - a[:, 0]) / dy
            inside[s:s + step] = np.sum(crosses & (px < xcross), axis=1) % 2 == 1
        return dist, edge, inside

    def _sdf(self, x):
        dist, _, inside = self._nearest(x)
        return np.where(inside, -dist, dist)

    def _normal(self, x):
        return self._n[self._nearest(x)[1]].copy()

    def _edge_mask(self, k):
        a, e, n = self._a[k], self._e[k], self._n[k]

        def mask(x, tol):
            t = np.sum((x - a) * e, axis=1) / self._len[k] ** 2
            return (np.abs((x - a) @ n) <= tol) & (t >= -tol) & (t <= 1 + tol)
        return mask

    def _parts(self):
        """``'edge0'``, ``'edge1'``, ...: edge k runs from vertex k to vertex k + 1 (in the
        counter-clockwise order the vertices are stored in, ``self.vertices``)."""
        return {f"edge{k}": self._edge_mask(k) for k in range(len(self._a))}

    def _map_boundary(self, u):
        cum = np.concatenate([[0.0], np.cumsum(self._len)])
        s = u[:, 0] * cum[-1]
        k = np.clip(np.searchsorted(cum, s, side="right") - 1, 0, len(self._len) - 1)
        frac = np.clip((s - cum[k]) / self._len[k], 0.0, 1.0)
        return self._a[k] + frac[:, None] * self._e[k]


__all__ = ["Geometry", "Box", "Interval", "TimeInterval", "Rectangle", "Ball", "Disk",
           "Polygon", "Union", "Intersection", "Difference", "SpaceTime"]
