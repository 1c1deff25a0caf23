"""The `Geometry` base class: the API every PINN domain shares (pure numpy, no Tensor).

A geometry is a closed set in R^d described by a signed distance-like function ``sdf``
(negative inside, zero on the boundary, positive outside), an outward ``normal`` on its
boundary, and samplers. Subclasses (geometry.py, geometry_ops.py) provide:

- ``_sdf(x)``: shape ``(n,)`` for points ``x`` of shape ``(n, dim)``;
- ``_normal(x)``: shape ``(n, dim)``, unit outward normal of the nearest boundary piece;
- ``bbox``, ``measure`` (length/area/volume), ``boundary_measure``;
- optionally maps from the unit cube (``_interior_dims``/``_map_interior``,
  ``_boundary_dims``/``_map_boundary``) so Sobol/LHS stratification carries over;
  without them interior sampling is rejection from the bounding box;
- optionally named boundary parts (``_parts``: name -> mask function).
"""
import numpy as np

from . import sampling

_MAX_REJECTION_DRAWS = 5_000_000


def default_names(dim):
    """Coordinate names: ('x',), ('x', 'y'), ('x', 'y', 'z'), else ('x1', ..., 'xd')."""
    return ("x", "y", "z")[:dim] if dim <= 3 else tuple(f"x{i + 1}" for i in range(dim))


def check_names(names, dim, who):
    """Validate coordinate names: ``dim`` distinct strings. Returns a tuple."""
    if names is None:
        return default_names(dim)
    names = (names,) if isinstance(names, str) else tuple(names)
    if len(names) != dim or not all(isinstance(s, str) for s in names) \
            or len(set(names)) != dim:
        raise ValueError(f"{who}: names must be {dim} distinct strings, got {names!r}.")
    return names


def fmt(v):
    """Short number formatting for reprs: 1.0 -> '1', 0.5 -> '0.5'."""
    return f"{float(v):g}"


def allocate(n, weights):
    """Split ``n`` into integer counts proportional to ``weights`` (largest remainder)."""
    w = np.asarray(weights, dtype=float)
    share = n * w / w.sum()
    counts = np.floor(share).astype(int)
    counts[np.argsort(-(share - counts), kind="stable")[: n - counts.sum()]] += 1
    return counts


class Geometry:
    """A closed domain in R^dim with boundary normals and samplers.

    Attributes:
        dim: number of coordinates.
        names: coordinate names, e.g. ``('x', 'y')``; ``'t'`` last for space-time.
        bbox: ``(lo, hi)``, two arrays of shape ``(dim,)``.
        tol: default absolute tolerance of ``inside``/``on_boundary``/``select``
            (``1e-6`` times the bounding-box diagonal unless set).
    """

    dim = 0
    names = ()
    _interior_dims = None   # unit-cube dims of _map_interior, or None: rejection sampling
    _boundary_dims = None   # unit-cube dims of _map_boundary, or None: subclass samples
    _tol = None

    # ---- subclass interface --------------------------------------------------------
    @property
    def bbox(self):
        raise NotImplementedError

    @property
    def measure(self):
        """Length (1-D), area (2-D) or volume of the domain."""
        raise NotImplementedError

    @property
    def boundary_measure(self):
        """Measure of the boundary: point count (1-D), perimeter (2-D), surface area."""
        raise NotImplementedError

    def _sdf(self, x):
        raise NotImplementedError

    def _normal(self, x):
        raise NotImplementedError

    def _parts(self):
        return {}

    # ---- common API ----------------------------------------------------------------
    @property
    def tol(self):
        if self._tol is None:
            lo, hi = self.bbox
            return 1e-6 * max(float(np.linalg.norm(hi - lo)), 1e-12)
        return self._tol

    @tol.setter
    def tol(self, value):
        self._tol = float(value)

    def _points(self, pts, who):
        """Validate ``pts`` as an (n, dim) float array; raise a ValueError that says what
        was seen and what is expected."""
        if hasattr(pts, "numpy") and not isinstance(pts, np.ndarray):
            pts = pts.numpy()
        x = np.asarray(pts)
        if x.ndim != 2 or x.shape[1] != self.dim:
            hint = " (use pts[:, None] for 1-D points)" if x.ndim == 1 and self.dim == 1 else ""
            raise ValueError(f"{self!r}.{who}: pts has shape {x.shape}; expected (n, {self.dim}) "
                             f"with columns {self.names}{hint}.")
        if not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
            raise ValueError(f"{self!r}.{who}: pts has dtype {x.dtype}; expected real numbers.")
        return x.astype(np.float64, copy=False)

    def _tol_or_default(self, tol):
        return self.tol if tol is None else float(tol)

    def signed_distance(self, pts):
        """Signed distance to the boundary: negative inside, zero on it, positive outside.

        Exact for boxes and balls; for polygons the exact distance with sign; for CSG a
        min/max combination of the parts' values, exact in sign and zero set.

        Args:
            pts: points, shape ``(n, dim)``.
        Returns:
            Array of shape ``(n,)``.
        """
        return self._sdf(self._points(pts, "signed_distance"))

    def inside(self, pts, tol=None):
        """Mask of points in the closed domain (boundary included, within ``tol``).

        Args:
            pts: points, shape ``(n, dim)``.
            tol: absolute tolerance; default ``self.tol``.
        Returns:
            Bool array of shape ``(n,)``.
        """
        return self._sdf(self._points(pts, "inside")) <= self._tol_or_default(tol)

    def on_boundary(self, pts, tol=None):
        """Mask of points within ``tol`` of the boundary.

        Args:
            pts: points, shape ``(n, dim)``.
            tol: absolute tolerance; default ``self.tol``.
        Returns:
            Bool array of shape ``(n,)``.
        """
        return np.abs(self._sdf(self._points(pts, "on_boundary"))) <= self._tol_or_default(tol)

    def normal(self, pts):
        """Unit outward normals at boundary points (for other points: the normal of the
        nearest boundary piece; at corners, that of one of the faces meeting there).

        Args:
            pts: boundary points, shape ``(n, dim)``.
        Returns:
            Array of shape ``(n, dim)``, rows of norm 1.
        """
        return self._normal(self._points(pts, "normal"))

    @property
    def part_names(self):
        """Names of the boundary parts ``select`` knows, ``'boundary'`` first."""
        return ("boundary",) + tuple(self._parts())

    def select(self, name, pts, tol=None):
        """Mask of the points on the named boundary part.

        Args:
            name: a boundary part, one of ``self.part_names`` (e.g. ``'boundary'``,
                ``'left'``; space-time domains also have ``'initial'``).
            pts: points, shape ``(n, dim)``.
            tol: absolute tolerance; default ``self.tol``.
        Returns:
            Bool array of shape ``(n,)``.
        Raises:
            ValueError: for an unknown name, listing the names available.
        """
        mask_fn = self.boundary_part(name)
        return mask_fn(pts, tol)

    def boundary_part(self, name):
        """The mask function ``f(pts, tol=None) -> (n,) bool`` of a boundary part.

        Args:
            name: a part name (``self.part_names``); a geometry (the points of this
                boundary that lie on that geometry's boundary, e.g. the hole of a CSG
                difference; a spatial geometry of a space-time domain acts on the space
                coordinates); or a vectorised predicate of the coordinate columns returning a
                mask, e.g. ``lambda x, y: np.isclose(x, 0)`` (applied to boundary points).
        Raises:
            ValueError: for an unknown name, listing the names available.
        """
        if isinstance(name, Geometry):
            g = name
            if g.dim > self.dim:
                raise ValueError(f"on={g!r}: a {g.dim}-D geometry cannot select points of the "
                                 f"{self.dim}-D {self!r}.")
            return lambda pts, tol=None: self.on_boundary(pts, tol) & (np.abs(g._sdf(
                self._points(pts, "select")[:, :g.dim])) <= g._tol_or_default(tol))
        if callable(name):
            def mask(pts, tol=None):
                x = self._points(pts, "select")
                m = np.asarray(name(*x.T))
                if m.shape != (len(x),) or m.dtype != bool:
                    raise ValueError(f"on={getattr(name, '__name__', name)}: the predicate "
                                     f"returned {m.dtype} of shape {m.shape} for {len(x)} points;"
                                     f" expected a bool mask of shape ({len(x)},) (called with "
                                     f"the coordinate columns {self.names}).")
                return self.on_boundary(x, tol) & m
            return mask
        parts = self._parts()
        if name == "boundary":
            return lambda pts, tol=None: self.on_boundary(pts, tol)
        if name not in parts:
            raise ValueError(f"{self!r} has no boundary part {name!r}; available: "
                             f"{', '.join(map(repr, self.part_names))}.")
        fn = parts[name]
        return lambda pts, tol=None: fn(self._points(pts, f"select({name!r})"),
                                        self._tol_or_default(tol))

    def check_inside(self, pts, what="points", tol=None):
        """Raise a ValueError if any point lies outside the (closed) domain.

        Args:
            pts: points, shape ``(n, dim)``.
            what: the argument's name, for the message (e.g. ``"observations"``).
            tol: absolute tolerance; default ``self.tol``.
        Returns:
            The points as a float64 array of shape ``(n, dim)``.
        """
        x = self._points(pts, f"check_inside({what!r})")
        bad = ~(self._sdf(x) <= self._tol_or_default(tol))
        if bad.any():
            example = tuple(float(v) for v in x[np.argmax(bad)])
            raise ValueError(f"{what}: {int(bad.sum())} of {len(x)} points lie outside {self!r}, "
                             f"e.g. {dict(zip(self.names, example))}; expected points in the "
                             f"domain (bounding box {self._bbox_str()}).")
        return x

    def _bbox_str(self):
        lo, hi = self.bbox
        return " x ".join(f"[{fmt(a)}, {fmt(b)}]" for a, b in zip(lo, hi))

    # ---- sampling ------------------------------------------------------------------
    def sample_interior(self, n, rng=None, method="uniform"):
        """Points in the domain, distributed by volume.

        Args:
            n: number of points (approximate for ``method="grid"``).
            rng: ``np.random.Generator`` or int seed (not needed for ``"grid"``).
            method: ``"uniform"``, ``"lhs"``, ``"sobol"`` or ``"grid"``.
        Returns:
            Array of shape ``(n, dim)``.
        Example:
            >>> from sciml.pinn.geometry import Disk
            >>> Disk((0, 0), 1).sample_interior(100, rng=0, method="sobol").shape
            (100, 2)
        """
        n, method = sampling.check_count(n), sampling.check_method(method)
        if method == "grid":
            return self._grid_interior(n)
        rng = sampling.as_rng(rng, f"{self!r}.sample_interior")
        if self._interior_dims is not None:
            return self._map_interior(sampling.sample(method, n, self._interior_dims, rng))
        return self._rejection(n, rng, method)

    def sample_boundary(self, n, rng=None, method="uniform", part=None):
        """Points on the boundary, distributed by boundary measure (length/area).

        Args:
            n: number of points (approximate for ``method="grid"``).
            rng: ``np.random.Generator`` or int seed (not needed for ``"grid"``).
            method: ``"uniform"``, ``"lhs"``, ``"sobol"`` or ``"grid"``.
            part: optional boundary part name (see ``part_names``): sample only there.
        Returns:
            Array of shape ``(n, dim)``.
        """
        n, method = sampling.check_count(n), sampling.check_method(method)
        if method != "grid":
            rng = sampling.as_rng(rng, f"{self!r}.sample_boundary")
        if part is not None and part != "boundary":
            return self._sample_part(n, rng, method, part)
        if method == "grid":
            return self._grid_boundary(n)
        if self._boundary_dims is not None:
            return self._map_boundary(sampling.sample(method, n, self._boundary_dims, rng))
        return self._sample_boundary(n, rng, method)

    def _sample_boundary(self, n, rng, method):
        raise NotImplementedError

    def _grid_interior(self, n):
        lo, hi = self.bbox
        if not self.measure > 0:
            raise ValueError(f"{self!r}: method='grid' found no points inside; is the domain "
                             "empty or of zero measure?")
        scale = np.prod(hi - lo) / self.measure
        u = sampling.grid(int(np.ceil(n * scale)), self.dim, extents=hi - lo)
        x = lo + u * (hi - lo)
        return x[self._sdf(x) <= self.tol]

    def _grid_boundary(self, n):
        if self._boundary_dims == 1:
            return self._map_boundary(sampling.grid(n, 1))
        raise NotImplementedError(f"{self!r}: method='grid' on the boundary is not available; "
                                  "use 'sobol' or 'lhs'.")

    def _rejection(self, n, rng, method, accept=None, propose=None, what="interior"):
        """Draw until ``n`` proposals are accepted; keeps the proposals' order."""
        lo, hi = self.bbox
        if accept is None:
            def accept(x):
                return self._sdf(x) <= self.tol
        if propose is None:
            draw = sampling.stream(method, self.dim, rng)

            def propose(m):
                return lo + draw(m) * (hi - lo)
        out, have, drawn, batch = [], 0, 0, max(64, 2 * n)
        while have < n:
            if drawn >= _MAX_REJECTION_DRAWS:
                raise ValueError(f"{self!r}: only {have} of {drawn} points drawn from its "
                                 f"{'bounding box' if what == 'interior' else 'parts'} lie in "
                                 f"its {what}; is it empty or of zero measure?")
            x = propose(batch)
            x = x[accept(x)]
            drawn, have = drawn + batch, have + len(x)
            out.append(x)
            rate = max(have / drawn, 1e-4)
            batch = min(int((n - have) / rate * 1.2) + 64, _MAX_REJECTION_DRAWS)
        return np.concatenate(out)[:n] if out else np.zeros((0, self.dim))

    def _sample_part(self, n, rng, method, part):
        mask = self.boundary_part(part)
        if method == "grid":
            probe = self._grid_boundary(max(n, 64))
            frac = max(mask(probe).mean(), 1e-3)
            x = self._grid_boundary(int(np.ceil(n / frac)))
            return x[mask(x)]
        rng = sampling.as_rng(rng, f"{self!r}.sample_boundary")
        return self._rejection(n, rng, method, accept=mask, what=f"boundary part {part!r}",
                               propose=lambda m: self.sample_boundary(m, rng, method))

    # ---- constructive solid geometry and space-time --------------------------------
    def _csg(self, other, op, cls_name):
        if not isinstance(other, Geometry):
            return NotImplemented
        if other.dim != self.dim or other.names != self.names:
            raise ValueError(f"{self!r} {op} {other!r}: both need the same coordinates; got "
                             f"{self.names} and {other.names}.")
        from . import geometry_ops
        return getattr(geometry_ops, cls_name)(self, other)

    def __or__(self, other):
        return self._csg(other, "|", "Union")

    def __and__(self, other):
        return self._csg(other, "&", "Intersection")

    def __sub__(self, other):
        return self._csg(other, "-", "Difference")

    def __mul__(self, other):
        from .geometry import TimeInterval
        from .geometry_ops import SpaceTime
        if isinstance(other, TimeInterval):
            return SpaceTime(self, other)
        if isinstance(self, TimeInterval) and isinstance(other, Geometry):
            raise TypeError(f"{self!r} * {other!r}: write the space first, "
                            f"{other!r} * {self!r}.")
        if isinstance(other, Geometry):
            raise TypeError(f"{self!r} * {other!r}: a geometry can only be multiplied by a "
                            "TimeInterval (space x time); for a box use Rectangle or Box.")
        return NotImplemented
