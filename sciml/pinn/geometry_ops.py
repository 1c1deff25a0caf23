"""Constructive solid geometry (``|``, ``&``, ``-``) and space-time domains (``* TimeInterval``).

CSG domains combine their parts' signed distances (union: min, intersection: max,
difference: max(a, -b)), which is exact in sign and zero set, so ``inside``,
``on_boundary`` and ``normal`` work for any nesting. Interior points are drawn by rejection
from the bounding box; boundary points are drawn from the parts' boundaries and kept where
they lie on the result's boundary, with each part's share proportional to the boundary
measure it contributes. ``measure`` and ``boundary_measure`` of a CSG domain are
quasi-Monte-Carlo estimates (2^16 Sobol points, fixed seed, about 3 digits).
"""
import numpy as np

from . import sampling
from .geometry_base import Geometry, allocate as _allocate

_ESTIMATE_SEED = 20240601
_ESTIMATE_POINTS = 2 ** 16


class _CSG(Geometry):
    """Base of Union, Intersection and Difference of two geometries ``a`` and ``b``."""

    _op = "?"

    def __init__(self, a, b):
        self.a, self.b = a, b
        self.dim, self.names = a.dim, a.names
        self._cache = {}

    def __repr__(self):
        return f"({self.a!r} {self._op} {self.b!r})"

    def _combine(self, sa, sb):
        raise NotImplementedError

    def _sdf(self, x):
        return self._combine(self.a._sdf(x), self.b._sdf(x))

    @property
    def measure(self):
        """Volume, estimated by quasi-Monte-Carlo over the bounding box."""
        if "measure" not in self._cache:
            lo, hi = self.bbox
            u = sampling.sobol(_ESTIMATE_POINTS, self.dim, _ESTIMATE_SEED)
            frac = np.mean(self._sdf(lo + u * (hi - lo)) <= 0)
            self._cache["measure"] = float(frac * np.prod(hi - lo))
        return self._cache["measure"]

    def _part_shares(self):
        """Boundary measure each part contributes to the result's boundary, estimated."""
        if "shares" not in self._cache:
            shares = []
            for part in (self.a, self.b):
                x = part.sample_boundary(_ESTIMATE_POINTS // 4, _ESTIMATE_SEED, method="sobol")
                shares.append(part.boundary_measure * float(np.mean(self._keep(x))))
            self._cache["shares"] = np.array(shares)
        return self._cache["shares"]

    @property
    def boundary_measure(self):
        """Boundary length/area, estimated from the parts' boundaries."""
        return float(self._part_shares().sum())

    def _keep(self, x, tol=None):
        return np.abs(self._sdf(x)) <= (self.tol if tol is None else tol)

    def _sample_boundary(self, n, rng, method):
        rng = sampling.as_rng(rng, f"{self!r}.sample_boundary")
        shares = self._part_shares()
        if not shares.sum() > 0:
            raise ValueError(f"{self!r}: no boundary points found; is the domain empty?")
        out = []
        for part, m in zip((self.a, self.b), _allocate(n, shares)):
            if m > 0:
                def propose(k, part=part):
                    return part.sample_boundary(k, rng, method)
                out.append(self._rejection(int(m), rng, method, accept=self._keep,
                                           propose=propose, what="boundary"))
        x = np.concatenate(out) if out else np.zeros((0, self.dim))
        return x[rng.permutation(len(x))]

    def _grid_boundary(self, n):
        shares = self._part_shares()
        out = []
        for part, m, share in zip((self.a, self.b), _allocate(n, shares), shares):
            if m > 0:
                frac = share / part.boundary_measure
                x = part.sample_boundary(int(np.ceil(m / frac)), method="grid")
                out.append(x[self._keep(x)])
        return np.concatenate(out) if out else np.zeros((0, self.dim))

    def _parts(self):
        """The parts' named boundary pieces that survive on this domain's boundary."""
        parts = {}
        for child in (self.a, self.b):
            for name, fn in child._parts().items():
                if name not in parts:
                    parts[name] = (lambda f: lambda x, tol: f(x, tol) & self._keep(x, tol))(fn)
        return parts


class Union(_CSG):
    """Points in ``a`` or ``b`` (``a | b``)."""

    _op = "|"

    @property
    def bbox(self):
        (la, ha), (lb, hb) = self.a.bbox, self.b.bbox
        return np.minimum(la, lb), np.maximum(ha, hb)

    def _combine(self, sa, sb):
        return np.minimum(sa, sb)

    def _normal(self, x):
        use_a = self.a._sdf(x) <= self.b._sdf(x)
        return np.where(use_a[:, None], self.a._normal(x), self.b._normal(x))


class Intersection(_CSG):
    """Points in both ``a`` and ``b`` (``a & b``)."""

    _op = "&"

    def __init__(self, a, b):
        super().__init__(a, b)
        lo, hi = self.bbox
        if np.any(lo > hi):
            raise ValueError(f"{self!r} is empty: the bounding boxes of the two parts do not "
                             "overlap.")

    @property
    def bbox(self):
        (la, ha), (lb, hb) = self.a.bbox, self.b.bbox
        return np.maximum(la, lb), np.minimum(ha, hb)

    def _combine(self, sa, sb):
        return np.maximum(sa, sb)

    def _normal(self, x):
        use_a = self.a._sdf(x) >= self.b._sdf(x)
        return np.where(use_a[:, None], self.a._normal(x), self.b._normal(x))


class Difference(_CSG):
    """Points in ``a`` and not in the interior of ``b`` (``a - b``); on the part of the
    boundary that comes from ``b`` the outward normal is ``b``'s inward normal."""

    _op = "-"

    @property
    def bbox(self):
        return self.a.bbox

    def _combine(self, sa, sb):
        return np.maximum(sa, -sb)

    def _normal(self, x):
        use_a = self.a._sdf(x) >= -self.b._sdf(x)
        return np.where(use_a[:, None], self.a._normal(x), -self.b._normal(x))


class SpaceTime(Geometry):
    """A space-time domain ``space x [t0, t1]``, made by ``space * TimeInterval(t0, t1)``.

    Coordinates are ``space.names + ('t',)``. Its ``'boundary'`` is the lateral boundary
    (spatial boundary x time), where boundary conditions hold; ``'initial'`` is the slice
    t = t0 and ``'final'`` the slice t = t1. The space's named parts (``'left'``, ...)
    are available too, times the time interval. Normals are the spatial outward normals
    with a zero t-component.

    Args:
        space: a spatial Geometry.
        time: a TimeInterval.
    Example:
        >>> from sciml.pinn.geometry import Interval, TimeInterval
        >>> domain = Interval(-1, 1) * TimeInterval(0, 1)
        >>> domain.sample_initial(4, rng=0).shape
        (4, 2)
    """

    def __init__(self, space, time):
        if "t" in space.names:
            raise ValueError(f"{space!r} * {time!r}: the space already has a coordinate 't'.")
        self.space, self.time = space, time
        self.t0, self.t1 = time.t0, time.t1
        self.dim = space.dim + 1
        self.names = tuple(space.names) + tuple(time.names)

    def __repr__(self):
        return f"{self.space!r} * {self.time!r}"

    @property
    def bbox(self):
        lo, hi = self.space.bbox
        return np.append(lo, self.t0), np.append(hi, self.t1)

    @property
    def measure(self):
        return self.space.measure * (self.t1 - self.t0)

    @property
    def boundary_measure(self):
        """Measure of the lateral boundary: space.boundary_measure * (t1 - t0)."""
        return self.space.boundary_measure * (self.t1 - self.t0)

    def _t_sdf(self, t):
        return np.maximum(self.t0 - t, t - self.t1)

    def _sdf(self, x):
        return np.maximum(self.space._sdf(x[:, :-1]), self._t_sdf(x[:, -1]))

    def _normal(self, x):
        return np.concatenate([self.space._normal(x[:, :-1]), np.zeros((len(x), 1))], axis=1)

    def on_boundary(self, pts, tol=None):
        """Mask of points on the lateral boundary (spatial boundary x [t0, t1]).

        Args:
            pts: points, shape ``(n, dim)``.
            tol: absolute tolerance; default ``self.tol``.
        Returns:
            Bool array of shape ``(n,)``.
        """
        x, tol = self._points(pts, "on_boundary"), self._tol_or_default(tol)
        return (np.abs(self.space._sdf(x[:, :-1])) <= tol) & (self._t_sdf(x[:, -1]) <= tol)

    def _slice_mask(self, t):
        def mask(x, tol):
            return (np.abs(x[:, -1] - t) <= tol) & (self.space._sdf(x[:, :-1]) <= tol)
        return mask

    def _parts(self):
        parts = {"initial": self._slice_mask(self.t0), "final": self._slice_mask(self.t1)}
        for name, fn in self.space._parts().items():
            parts.setdefault(name, (lambda f: lambda x, tol: f(x[:, :-1], tol)
                                    & (self._t_sdf(x[:, -1]) <= tol))(fn))
        return parts

    def _with_time(self, xs, t):
        return np.concatenate([xs, np.reshape(t, (-1, 1))], axis=1)

    def _product(self, xs, nt):
        t = self.t0 + (self.t1 - self.t0) * (np.arange(nt) + 0.5) / nt
        return self._with_time(np.repeat(xs, nt, axis=0), np.tile(t, len(xs)))

    def _space_time(self, n, rng, method, space_dims, space_map, space_sample):
        """Joint unit-cube sample when the space has a map (keeps stratification in all
        coordinates), else space and time sampled separately and paired at random."""
        T = self.t1 - self.t0
        rng = sampling.as_rng(rng, f"{self!r} sampler")
        if space_dims is not None:
            u = sampling.sample(method, n, space_dims + 1, rng)
            return self._with_time(space_map(u[:, :-1]), self.t0 + T * u[:, -1])
        xs = space_sample(n, rng, method)
        t = self.t0 + T * sampling.sample(method, n, 1, rng)[:, 0]
        return self._with_time(xs, rng.permutation(t))

    def sample_interior(self, n, rng=None, method="uniform"):
        """Points in space x time, shape ``(n, dim)`` (about n for ``method="grid"``)."""
        n, method = sampling.check_count(n), sampling.check_method(method)
        if method == "grid":
            T = self.t1 - self.t0
            h = (self.space.measure * T / max(n, 1)) ** (1.0 / self.dim)
            nt = max(1, int(round(T / h)))
            return self._product(self.space.sample_interior(max(1, round(n / nt)),
                                                             method="grid"), nt)
        return self._space_time(n, rng, method, self.space._interior_dims,
                                getattr(self.space, "_map_interior", None),
                                self.space.sample_interior)

    def sample_boundary(self, n, rng=None, method="uniform", part=None):
        """Points on the lateral boundary (spatial boundary x time), distributed by
        measure, shape ``(n, dim)``; ``part`` as in ``Geometry.sample_boundary``
        (``'initial'``/``'final'`` give the time slices)."""
        n, method = sampling.check_count(n), sampling.check_method(method)
        if part in ("initial", "final"):
            return self._slice(n, rng, method, self.t0 if part == "initial" else self.t1)
        if part is not None and part != "boundary":
            return self._sample_part(n, rng, method, part)
        if method == "grid":
            T, d = self.t1 - self.t0, self.space.dim
            h = (self.space.boundary_measure * T / max(n, 1)) ** (1.0 / d)
            nt = max(1, int(round(T / h)))
            return self._product(self.space.sample_boundary(max(1, round(n / nt)),
                                                            method="grid"), nt)
        return self._space_time(n, rng, method, self.space._boundary_dims,
                                getattr(self.space, "_map_boundary", None),
                                self.space.sample_boundary)

    def _slice(self, n, rng, method, t):
        xs = self.space.sample_interior(n, rng, method)
        return self._with_time(xs, np.full(len(xs), float(t)))

    def sample_initial(self, n, rng=None, method="uniform"):
        """Points of the initial slice t = t0, shape ``(n, dim)``."""
        return self._slice(sampling.check_count(n), rng, sampling.check_method(method), self.t0)

    def sample_final(self, n, rng=None, method="uniform"):
        """Points of the final slice t = t1, shape ``(n, dim)``."""
        return self._slice(sampling.check_count(n), rng, sampling.check_method(method), self.t1)


__all__ = ["Union", "Intersection", "Difference", "SpaceTime"]
