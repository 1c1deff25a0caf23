"""Boundary, initial and data conditions of a PINN problem.

Each condition is a small class: where its points come from (``on``: a boundary part name
of the geometry, such as ``'boundary'``, ``'left'``, ``'initial'``), which derivatives it
needs, and ``residual(u, pts)``, zero when the condition holds. ``u`` is the network
output on the condition's own points (a Field: ``d(u, 'x')`` works), ``pts`` a
:class:`Points` record (coordinates as numpy, outward normals, precomputed values).

Soft enforcement adds ``weight * mean(residual**2)`` to the loss; ``hard=True`` (Dirichlet
on a box boundary, Initial values) builds the condition into the network output instead
(see problem.py), so it holds exactly.

Values are numbers or functions of the coordinate columns, called with numpy arrays of
shape ``(m,)`` in coordinate order (``Initial``: the spatial ones only), e.g.
``Initial(lambda x: -np.sin(np.pi * x))``.
"""
import math
import numbers

import numpy as np

from ..autodiff.tensor import tensor
from .operators import d


class Points:
    """A condition's points: ``x`` (numpy ``(m, dim)``), ``normal`` (``(m, dim)`` or None),
    ``target`` (a constant ``(m, k)`` Tensor or None) and anything a condition adds."""

    def __init__(self, x, names, normal=None, target=None):
        self.x, self.names, self.normal, self.target = x, tuple(names), normal, target

    def __len__(self):
        return len(self.x)


def _evaluate(value, cols, m, who, names=None):
    """A number or a function of coordinate columns -> numpy (m, k) float64."""
    if callable(value):
        try:
            v = value(*cols)
        except (TypeError, IndexError) as e:   # most often a DeepXDE-style f(X) of an (m, dim) array
            cn = f" {tuple(names)}" if names else ""
            raise ValueError(
                f"{who}: the value function failed on the coordinate columns ({len(cols)} array(s) of "
                f"shape ({m},){cn}): {type(e).__name__}: {e}. A value function takes one (m,) array per "
                f"coordinate, e.g. lambda{' ' + ', '.join(names) if names else ''}: ...; a DeepXDE function "
                "f(X) of an (m, dim) array becomes lambda *c: f(np.stack(c, axis=1)).") from e
        if hasattr(v, "numpy") and not isinstance(v, np.ndarray):
            v = v.numpy()
    elif isinstance(value, numbers.Real) or isinstance(value, (list, tuple, np.ndarray)):
        v = value
    else:
        raise TypeError(f"{who}: value must be a number or a function of the coordinates, got "
                        f"{type(value).__name__}.")
    v = np.asarray(v, dtype=np.float64)
    if v.ndim == 0:
        v = np.full((m, 1), float(v))
    elif v.ndim == 1 and v.shape[0] == m:
        v = v[:, None]
    elif v.ndim == 1 and not callable(value):
        v = np.broadcast_to(v[None, :], (m, v.shape[0]))
    if v.ndim != 2 or v.shape[0] != m:
        raise ValueError(f"{who}: value returned shape {np.shape(v)} for {m} points; expected "
                         f"({m},) or ({m}, k).")
    return np.ascontiguousarray(v)


def square_residual(r, n, who):
    """Refuse an (n, n) residual at n >= 2 points: it is numpy/torch broadcasting of an (n,) column against an
    (n, 1) one (``d(u, x, x) + sin(x).reshape(-1)``), which trains on n^2 entries without a word, not n
    equations. An array of k != n equations is kept; a system of n equations at n points is a list."""
    if n >= 2 and r.ndim == 2 and r.shape[1] == n:
        raise ValueError(f"{who} returned shape {tuple(r.shape)} at {n} points: an (n, n) array is what "
                         "broadcasting an (n,) column against an (n, 1) one gives (u and the coordinates "
                         "are (n, 1) columns: keep them so, e.g. sm.sin(x), not x.reshape(-1)). For a "
                         "system of equations return a list of (n,) / (n, 1) residuals.")


def _select(u, component):
    return u if component is None else u[component]


def _summed(r):
    """A condition's residual with k > 1 columns (several outputs, data columns, a value and a
    derivative), scaled by sqrt(k): the loss term mean(r^2) is then the SUM over the columns of
    each one's mean square, as DeepXDE's one condition per component (a plain mean would weight
    the condition k times less)."""
    k = r.shape[1] if r.ndim == 2 else 1
    return r * math.sqrt(k) if k > 1 else r


def _label(on):
    if isinstance(on, str):
        return on
    if callable(on) and not hasattr(on, "_sdf"):
        return getattr(on, "__name__", "where").replace("<lambda>", "where")
    return repr(on)


class Condition:
    """Base class. Subclasses set ``derivs(names)`` and ``residual(u, pts)``.

    Args:
        on: where the condition holds: a boundary part name (see ``domain.part_names``:
            ``'boundary'``, ``'left'``, ``'x_min'``, ``'edge2'``, ``'initial'``, ...), a
            geometry (the boundary points on that geometry's boundary: ``on=hole`` for the
            hole of ``Rectangle(...) - hole``), or a vectorised predicate of the coordinate
            columns returning a bool mask (``on=lambda x, y: np.isclose(x, 0)``, applied to
            boundary points: DeepXDE's ``boundary(x, on_boundary)``).
        weight: loss weight (soft enforcement).
        points: number of points to sample for this condition (default from ``solve``), or
            the points themselves, an ``(m, dim)`` array (DeepXDE's ``PointSetBC``; then
            ``on`` is not used to sample).
        component: output component the condition applies to (systems), or None for all.
        name: label in the loss history (default: the class name and ``on``).
    """

    hard = False
    on = "boundary"

    def __init__(self, on="boundary", weight=1.0, points=None, component=None, name=None):
        if component is not None and (isinstance(component, bool) or
                                      not isinstance(component, (numbers.Integral, str))):
            raise TypeError(f"{type(self).__name__}(component={component!r}): expected None (every "
                            "output), an output index or an output name, got "
                            f"{type(component).__name__}; for several outputs give one condition each.")
        self.on, self.weight, self.component = on, float(weight), component
        self.given = None
        if points is None or (isinstance(points, numbers.Integral) and not isinstance(points, bool)):
            self.n_points = points
        else:
            x = np.asarray(points.numpy() if hasattr(points, "numpy") else points)
            if x.ndim != 2 or not np.issubdtype(x.dtype, np.number) or len(x) == 0:
                raise ValueError(f"{type(self).__name__}(points=...): expected a point count "
                                 f"or an (m, dim) array of points, got "
                                 f"{type(points).__name__} of shape {np.shape(x)}.")
            self.given, self.n_points = x.astype(np.float64), len(x)
        self._name = name

    @property
    def name(self):
        where = "points" if self.given is not None else _label(self.on)
        return self._name or f"{type(self).__name__.lower()}:{where}{self._comp()}"

    def _comp(self):
        """``[k]`` when the condition holds for output component k only (so that the
        conditions of a system have distinct names in the loss history)."""
        return "" if self.component is None else f"[{self.component}]"

    def derivs(self, names):
        """Multi-indices this condition needs (tuples of coordinate axes)."""
        return {()}

    def resolve_component(self, n_out, output_names=None):
        """Check ``component`` against the problem's outputs and turn a name or a negative index
        into the index (called by Problem before any point is drawn)."""
        c, who = self.component, f"{type(self).__name__}(component={self.component!r})"
        if c is None:
            return
        if isinstance(c, str):
            if not output_names or c not in output_names:
                raise ValueError(f"{who}: no output named {c!r}; the problem's outputs are "
                                 f"{tuple(output_names) if output_names else n_out} "
                                 "(name them with Problem(outputs=('u', 'v', ...))).")
            self.component = tuple(output_names).index(c)
            return
        if not -n_out <= c < n_out:
            raise ValueError(f"{who}: the problem has {n_out} output(s); expected an index in "
                             f"0..{n_out - 1}.")
        self.component = int(c) % n_out

    def constant_value(self) -> bool:
        """True when the condition's value is one number (it then applies to every selected output)."""
        v = getattr(self, "value", None)
        return isinstance(v, numbers.Real) and not isinstance(v, bool)

    def check_columns(self, k, n_out, m=None):
        """Raise a clear ValueError when the condition's values have ``k`` columns but it applies to
        a different number of outputs: numpy's broadcasting would otherwise compare every output with
        one column, or one output with every column, without a word (DeepXDE fixed the same in
        PointSetBC, lululxvi/deepxde#2101). A number applies to every output the condition selects."""
        s = n_out if self.component is None else 1
        if k == s or (k == 1 and self.constant_value()):
            return
        what = "values have" if isinstance(self, PointData) else "value gives"
        where = f" at {m} points" if m is not None else ""
        if s == 1:
            hint = "expected (m,) or (m, 1) values" + ("" if self.component is None else
                                                        f" for output {self.component} (component={self.component})")
        else:   # several outputs: component is None
            hint = (f"component=None means every output. Give component=k for output k alone (DeepXDE's "
                    f"default is component=0), or {s} columns, one per output; a number applies to "
                    "every output")
        raise ValueError(f"{type(self).__name__}(name={self.name!r}): {what} {k} column(s){where}, but the condition applies to "
                         f"{s} output(s); {hint}.")

    def check(self, domain):
        """Raise a clear ValueError if the domain has no boundary part ``self.on`` or the
        given points do not fit it."""
        if self.given is not None:
            if self.given.shape[1] != domain.dim:
                raise ValueError(f"{type(self).__name__}(points=...): points have shape "
                                 f"{self.given.shape}; expected (m, {domain.dim}) with columns "
                                 f"{domain.names}.")
            domain.check_inside(self.given, what=f"{type(self).__name__}(points=...)")
            return
        if isinstance(self.on, str) and self.on not in domain.part_names:
            raise ValueError(f"{type(self).__name__}(on={self.on!r}): the domain {domain!r} has "
                             f"no boundary part {self.on!r}; available: "
                             f"{', '.join(map(repr, domain.part_names))}.")
        if not isinstance(self.on, str) and not callable(self.on) and not hasattr(self.on, "_sdf"):
            raise TypeError(f"{type(self).__name__}(on=...): expected a part name, a geometry "
                            f"or a predicate of the coordinates, got {type(self.on).__name__}.")

    def sample(self, domain, n, rng, method):
        """Points for this condition, a :class:`Points`."""
        if self.given is not None:
            return self.prepare(domain, self.given)
        x = domain.sample_boundary(n, rng, method, part=self.on)
        return self.prepare(domain, x)

    def prepare(self, domain, x):
        pts = Points(x, domain.names)
        pts.target = self._target(domain, pts)
        return pts

    def _target(self, domain, pts):
        return None

    def residual(self, u, pts):
        raise NotImplementedError


class Dirichlet(Condition):
    """u(x) = value(x) where ``on`` selects.

    Args:
        value: number or function of the coordinates.
        on: boundary part (default ``'boundary'``: the whole (lateral) boundary).
        hard: build the condition into the output (``u = g + B(x) N(x)`` with ``B`` vanishing
            on the boundary; a box domain and ``on='boundary'``), instead of a penalty.
    """

    def __init__(self, value=0.0, on="boundary", weight=1.0, points=None, component=None,
                 hard=False, name=None):
        super().__init__(on, weight, points, component, name)
        self.value, self.hard = value, bool(hard)

    def _target(self, domain, pts):
        return _evaluate(self.value, pts.x.T, len(pts), f"Dirichlet(on={self.on!r})", domain.names)

    def residual(self, u, pts):
        return _summed(_select(u, self.component) - pts.target)


class Neumann(Condition):
    """du/dn(x) = value(x) where ``on`` selects (n the outward normal, spatial part)."""

    def __init__(self, value=0.0, on="boundary", weight=1.0, points=None, component=None,
                 name=None):
        super().__init__(on, weight, points, component, name)
        self.value = value

    def derivs(self, names):
        return {()} | {(i,) for i, s in enumerate(names) if s != "t"}

    def prepare(self, domain, x):
        pts = super().prepare(domain, x)
        pts.normal = domain.normal(x)
        return pts

    def _target(self, domain, pts):
        return _evaluate(self.value, pts.x.T, len(pts), f"Neumann(on={self.on!r})", domain.names)

    def _dudn(self, u, pts):
        v = _select(u, self.component)
        out = None
        for i, s in enumerate(pts.names):
            if s == "t" or not np.any(pts.normal[:, i]):
                continue
            term = d(v, s) * pts._normal_t[i]
            out = term if out is None else out + term
        return out if out is not None else v * 0.0

    def residual(self, u, pts):
        return _summed(self._dudn(u, pts) - pts.target)


class Robin(Neumann):
    """a u(x) + b du/dn(x) = value(x) where ``on`` selects."""

    def __init__(self, a, b, value=0.0, on="boundary", weight=1.0, points=None, component=None,
                 name=None):
        super().__init__(value, on, weight, points, component, name)
        self.a, self.b = float(a), float(b)

    def residual(self, u, pts):
        return _summed(self.a * _select(u, self.component) + self.b * self._dudn(u, pts)
                       - pts.target)


class Periodic(Condition):
    """u(x)|_{c = lo} = u(x)|_{c = hi} (and, with ``derivatives=1``, the same for du/dc):
    periodic in coordinate ``c`` of a box-shaped domain."""

    def __init__(self, coordinate="x", derivatives=0, weight=1.0, points=None, component=None,
                 name=None):
        super().__init__(f"{coordinate}_min", weight, points, component, name)
        self.coordinate, self.order = coordinate, int(derivatives)

    @property
    def name(self):
        return self._name or f"periodic:{self.coordinate}{self._comp()}"

    def check(self, domain):
        if self.coordinate not in domain.names:
            raise ValueError(f"Periodic(coordinate={self.coordinate!r}): the domain {domain!r} "
                             f"has coordinates {domain.names}.")
        super().check(domain)

    def derivs(self, names):
        a = names.index(self.coordinate)
        return {()} | ({(a,)} if self.order >= 1 else set())

    def prepare(self, domain, x):
        a = domain.names.index(self.coordinate)
        hi = domain.bbox[1][a]
        x2 = x.copy()
        x2[:, a] = hi
        return Points(np.concatenate([x, x2]), domain.names)

    def residual(self, u, pts):
        v = _select(u, self.component)
        m = len(pts) // 2
        r = v[:m] - v[m:]
        if self.order >= 1:
            g = d(v, self.coordinate)
            from ..autodiff import ops
            r = ops.concat([r, g[:m] - g[m:]], axis=1)
        return _summed(r)


class Initial(Condition):
    """u(x, t0) = value(x), or with ``derivative=1``: du/dt(x, t0) = value(x).

    Args:
        value: number or function of the spatial coordinates.
        derivative: 0 (value) or 1 (time derivative).
        hard: build the value condition into the output (``u = u0(x) + (t - t0) N``).
    """

    def __init__(self, value, derivative=0, weight=1.0, points=None, component=None, hard=False,
                 name=None):
        super().__init__("initial", weight, points, component, name)
        if derivative not in (0, 1):
            raise ValueError(f"Initial: derivative must be 0 (value) or 1 (du/dt), got "
                             f"{derivative!r}.")
        if hard and derivative:
            raise ValueError("Initial(derivative=1, hard=True): only the value can be hard; use "
                             "a soft condition for du/dt.")
        self.value, self.derivative, self.hard = value, derivative, bool(hard)

    @property
    def name(self):
        return self._name or ("initial" if self.derivative == 0 else "initial:u_t") + self._comp()

    def check(self, domain):
        if "t" not in domain.names:
            raise ValueError(f"Initial: the domain {domain!r} has no time coordinate 't'; make "
                             "it space-time with `space * TimeInterval(t0, t1)`.")
        super().check(domain)

    def derivs(self, names):
        return {()} if self.derivative == 0 else {(names.index("t"),)}

    def _target(self, domain, pts):
        cols = [pts.x[:, i] for i, s in enumerate(domain.names) if s != "t"]
        return _evaluate(self.value, cols, len(pts), "Initial",
                         [s for s in domain.names if s != "t"])

    def residual(self, u, pts):
        v = _select(u, self.component)
        if self.derivative:
            v = d(v, "t")
        return _summed(v - pts.target)


class PointData(Condition):
    """u(x_i) = y_i at observation points (data fitting; inverse problems), or, with
    ``derivative='x'`` (or ``('x', 'x')``, ...), du/dx(x_i) = y_i: observations of a
    derivative.

    Args:
        points: observation points, ``(m, dim)``, inside the domain.
        values: observed values, ``(m,)`` or ``(m, k)``.
        derivative: None (the value), a coordinate name or a tuple of names.
    """

    def __init__(self, points, values, weight=1.0, component=None, name="data", derivative=None):
        super().__init__("data", weight, None, component, name)
        x = np.asarray(points.numpy() if hasattr(points, "numpy") else points, dtype=np.float64)
        y = np.asarray(values.numpy() if hasattr(values, "numpy") else values, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError(f"PointData: points has shape {x.shape}; expected (m, dim).")
        if y.ndim == 1:
            y = y[:, None]
        if y.ndim != 2 or y.shape[0] != x.shape[0]:
            raise ValueError(f"PointData: values has shape {np.shape(values)}; expected "
                             f"({x.shape[0]},) or ({x.shape[0]}, k), one row per point.")
        self.x, self.y = x, y
        self.derivative = (derivative,) if isinstance(derivative, str) else \
            tuple(derivative or ())

    def check(self, domain):
        domain.check_inside(self.x, what="PointData points")
        bad = [s for s in self.derivative if s not in domain.names]
        if bad:
            raise ValueError(f"PointData(derivative={self.derivative!r}): unknown coordinate(s) "
                             f"{bad}; the domain's coordinates are {domain.names}.")

    def derivs(self, names):
        return {(), tuple(sorted(names.index(s) for s in self.derivative))}

    def sample(self, domain, n, rng, method):
        return Points(self.x, domain.names, target=self.y)

    def residual(self, u, pts):
        v = _select(u, self.component)
        if self.derivative:
            v = d(v, *self.derivative)
        return _summed(v - pts.target)


class Operator(Condition):
    """residual(u, x, ...) = 0 where ``on`` selects, or at given ``points``: any expression of
    the output and its derivatives on boundary or data points (DeepXDE's ``OperatorBC`` and
    ``PointSetOperatorBC``). Its arguments are matched by name as the PDE residual's are
    (coordinates, parameters, outputs).

    Example:
        >>> Operator(lambda u, x: d(u, x, x) - 2.0, on="right")     # u''(1) = 2
    """

    def __init__(self, residual, on="boundary", weight=1.0, points=None, name=None):
        if not callable(residual):
            raise TypeError(f"Operator: residual must be a function, got "
                            f"{type(residual).__name__}.")
        super().__init__(on, weight, points, None, name)
        self.fn, self._problem = residual, None

    @property
    def name(self):
        where = "points" if self.given is not None else _label(self.on)
        return self._name or f"operator:{where}"

    def bind(self, problem):
        """Match the function's arguments against the problem's names (Problem calls it)."""
        self._problem = problem
        self._args, self._outs = problem.signature(self.fn, "Operator residual")

    def residual(self, u, pts):
        from ..autodiff.tensor import Tensor
        from .operators import Coordinate
        if getattr(pts, "_coord_dtype", None) != u.dtype:
            pts._coords = [Coordinate.wrap(tensor(np.ascontiguousarray(pts.x[:, i:i + 1]),
                                                  u.dtype), s, i)
                           for i, s in enumerate(pts.names)]
            pts._coord_dtype = u.dtype
        kw = self._problem.residual_kwargs(u, pts._coords, self._args, self._outs)
        r = self.fn(**kw)
        if isinstance(r, (list, tuple)):
            from ..autodiff import ops
            parts = [ops.reshape(p, (len(pts), -1)) for p in r]
            for p in parts:
                square_residual(p, len(pts), self.name)
            r = ops.concat(parts, axis=1)
        elif isinstance(r, Tensor) and r.ndim == 2:
            square_residual(r, len(pts), self.name)
        if not isinstance(r, Tensor) or r.shape[0] != len(pts) or r.ndim > 2:
            raise ValueError(f"{self.name}: the residual returned "
                             f"{getattr(r, 'shape', type(r).__name__)}; expected ({len(pts)},) or "
                             f"({len(pts)}, k), one row per point.")
        return _summed(r)


def as_target_tensors(pts, dtype):
    """Turn a Points record's numpy target/normals into constant Tensors of ``dtype``."""
    if pts.target is not None and not hasattr(pts.target, "_buf"):
        pts.target = tensor(np.ascontiguousarray(pts.target), dtype)
    if pts.normal is not None:
        pts._normal_t = [tensor(np.ascontiguousarray(pts.normal[:, i:i + 1]), dtype)
                         for i in range(pts.normal.shape[1])]
    return pts


__all__ = ["Condition", "Dirichlet", "Neumann", "Robin", "Periodic", "Initial", "PointData",
           "Operator", "Points"]
