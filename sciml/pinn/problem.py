"""A PINN problem: a domain, a PDE residual, conditions, optional reference and trainable
PDE coefficients; and the loss it defines on a set of points.

Example (Burgers):
    >>> def residual(u, x, t):
    ...     return d(u, t) + u * d(u, x) - nu * d(u, x, x)
    >>> problem = Problem(Interval(-1, 1) * TimeInterval(0, 1), residual,
    ...                   conditions=[Dirichlet(0.0), Initial(lambda x: -np.sin(np.pi * x))])

The residual's arguments are matched by name: coordinates (``x``, ``t``, ... as in
``domain.names``), trainable coefficients (``Problem(parameters={'nu': Parameter(0.05)})``)
and the network output(s) (any other name: one argument ``u`` for the whole output, or one
per component for a system, e.g. ``def residual(u, v, x, y)``).
"""
import inspect
import math

import numpy as np

from ..autodiff import ops
from ..autodiff.tensor import Tensor, tensor
from .conditions import Condition, Dirichlet, Initial, PointData, as_target_tensors, square_residual as _square
from .operators import Coordinate, Jet, _Missing, network_derivatives, path_reason
from . import fused_loss  # noqa: E402  (Loss.terms' fused regions)

BAD_RESIDUAL_SHAPE = ("residual returned shape {shape}; expected ({n},) or ({n}, k): one row per "
                      "interior point (n = {n}). Return the pointwise residual, not a reduction such "
                      "as its mean; for a system return a list of (n,) / (n, 1) residuals.")


class Parameter:
    """A trainable PDE coefficient (inverse problems), fitted with the network.

    Use it in the residual either through an argument of the same name or directly from a
    closure (``nu * d(u, x, x)``; arithmetic works, or take ``nu.value``).

    Args:
        value: initial guess (a number).
        name: its name in the results (set from the ``parameters`` dict key if omitted).
        log: if True, optimise log(value) (keeps it positive; good for viscosities).
    """

    def __init__(self, value, name=None, log=False):
        value = float(value)
        if log and value <= 0:
            raise ValueError(f"Parameter(log=True): value must be > 0, got {value}.")
        self.init, self.name, self.log = value, name, bool(log)
        self._current = None

    def raw_init(self):
        return math.log(self.init) if self.log else self.init

    def transform(self, raw):
        return ops.exp(raw) if self.log else raw

    @property
    def value(self):
        """The coefficient as a scalar Tensor (the one being trained, inside the loss)."""
        if self._current is None:
            return tensor(self.init)
        return self._current

    def __float__(self):
        return float(self.value)

    def __repr__(self):
        return f"Parameter({self.name or ''}={float(self):.6g})"

    def __add__(self, o): return self.value + o
    def __radd__(self, o): return o + self.value
    def __sub__(self, o): return self.value - o
    def __rsub__(self, o): return o - self.value
    def __mul__(self, o): return self.value * o
    def __rmul__(self, o): return o * self.value
    def __truediv__(self, o): return self.value / o
    def __rtruediv__(self, o): return o / self.value
    def __neg__(self): return -self.value
    def __pow__(self, o): return self.value ** o


class Problem:
    """A forward or inverse PINN problem.

    Args:
        domain: a sciml.pinn geometry; its ``names`` are the coordinates.
        residual: ``residual(u, x, ...) -> Tensor (n,) or (n, k)`` (or a list of them for a
            system), zero where the PDE holds; see the module docstring for the arguments.
        conditions: list of conditions (Dirichlet, Neumann, Robin, Periodic, Initial,
            PointData).
        reference: optional exact solution ``ref(points (n, dim)) -> (n,)`` or ``(n, k)``, or
            data ``(points (m, dim), values (m,) or (m, k))`` (e.g. a finite-difference or
            spectral solution on a grid); then the solver reports the relative L2 error.
        parameters: dict name -> :class:`Parameter` of trainable coefficients.
        outputs: number of network outputs, or their names (a system: ``('u', 'v')``).
        name: label for progress lines and plots.
    Raises:
        ValueError: a condition on a boundary part the domain lacks; a residual argument
            that is neither a coordinate, a parameter nor an output.
    """

    def __init__(self, domain, residual, conditions=(), reference=None, parameters=None,
                 outputs=1, name=None):
        if not hasattr(domain, "names") or not hasattr(domain, "sample_interior"):
            raise TypeError(f"Problem: domain must be a sciml.pinn geometry, got "
                            f"{type(domain).__name__}.")
        if not callable(residual):
            raise TypeError(f"Problem: residual must be a function, got {type(residual).__name__}.")
        self.domain, self.residual, self.reference = domain, residual, reference
        self.names = tuple(domain.names)
        self.conditions = list(conditions)
        for c in self.conditions:
            if not isinstance(c, Condition):
                raise TypeError(f"Problem: conditions must be Condition objects (Dirichlet, ...), "
                                f"got {type(c).__name__}.")
            c.check(domain)
        self.parameters = dict(parameters or {})
        for k, p in self.parameters.items():
            if not isinstance(p, Parameter):
                raise TypeError(f"Problem: parameters[{k!r}] must be a sciml.pinn.Parameter, got "
                                f"{type(p).__name__}.")
            p.name = p.name or k
        if isinstance(outputs, int):
            self.n_out, self.output_names = outputs, None
        else:
            self.output_names = tuple(outputs)
            self.n_out = len(self.output_names)
        for c in self.conditions:   # components against the outputs; data columns too (no broadcasting)
            c.resolve_component(self.n_out, self.output_names)
            if isinstance(c, PointData):
                c.check_columns(c.y.shape[1], self.n_out, len(c.y))
        self.name = name or getattr(residual, "__name__", "problem")
        self.reference = _check_reference(domain, reference)
        self._bind_signature()
        for c in self.conditions:
            if hasattr(c, "bind"):
                c.bind(self)
        self._check_hard()

    # --- DeepXDE's point sets -----------------------------------------------------------------
    def deepxde_points(self, num_domain, num_boundary=0, num_initial=0, *, anchors=None,
                       method="hammersley", seed=0):
        """DeepXDE's point sets (``dde.data.PDE`` / ``TimePDE``), for ``solve``:
        ``problem2, points = problem.deepxde_points(16, 2)`` then ``solve(problem2, net,
        points=points)``.

        DeepXDE draws ``num_domain`` interior points, one pool of ``num_boundary`` points on the
        (lateral) boundary, ``num_initial`` points on t = t0, and appends the ``anchors``; the
        PDE residual holds on all of them, and every boundary or initial condition keeps the
        points of that whole set that lie where it holds (its ``on``), so the conditions share
        the pool. Here the same: ``points`` is that whole set (the PDE points) and ``problem2``
        a copy of the problem whose soft conditions carry their points of it (a condition
        given its own points, a hard condition or data keep theirs). The default sampler is
        DeepXDE's default ``train_distribution``, the Hammersley set (deterministic; another
        ``method`` takes ``seed``). The points are fixed for the run, as in DeepXDE (with
        ``solve(resample=...)`` only the interior points are redrawn). A Rectangle's pool is
        DeepXDE's perimeter walk; a CSG domain's (``outer - hole``, ``&``, ``|``) is drawn as
        DeepXDE's CSG classes draw it (geometry_deepxde.py): ``num_boundary`` points on each
        operand, the surviving ones shuffled and the first ``num_boundary`` kept (about half on
        a hole inside a square, whatever the lengths), and the interior re-drawn from the first
        operand until enough survive (with Hammersley, some points twice). DeepXDE shuffles
        with NumPy's global state; here a ``np.random.RandomState(seed)`` does, so
        ``seed=s`` gives the pool DeepXDE gives after ``dde.config.set_random_seed(s)``.

        Args:
            num_domain: interior points.
            num_boundary: the shared pool on the boundary (space-time: the lateral boundary).
            num_initial: points on the initial slice (space-time domains only).
            anchors: extra PDE points, an ``(m, dim)`` array (checked to lie in the domain);
                conditions also take those of them that lie where they hold, as in DeepXDE.
            method: ``'hammersley'`` (default), ``'lhs'``, ``'sobol'``, ``'uniform'``.
            seed: seeds the samplers that are random and a CSG pool's shuffle (an int or a
                ``np.random.Generator``).
        Returns:
            ``(problem2, points)``: the copy of the problem, and the ``(n, dim)`` PDE points.
        Raises:
            ValueError: a soft condition that none of the points satisfy (DeepXDE would train
                on an empty term), naming it and the counts to raise.
        """
        import copy
        from . import geometry_deepxde as dx, sampling
        n_dom = sampling.check_count(num_domain, "deepxde_points(num_domain=...)")
        n_bnd = sampling.check_count(num_boundary, "deepxde_points(num_boundary=...)")
        n_ini = sampling.check_count(num_initial, "deepxde_points(num_initial=...)")
        method = sampling.check_method(method)
        rng = sampling.as_rng(seed, "deepxde_points(seed=...)")
        dom = self.domain
        sets = []
        if method != "grid" and isinstance(dom, dx.CSG):
            # DeepXDE's train_points order (interior, then boundary) for its NumPy draws
            legacy = dx.legacy_state(seed)
            inner = dx.interior(dom, n_dom, rng, method, legacy) if n_dom else None
            if n_bnd:
                sets.append(dx.boundary(dom, n_bnd, rng, method, legacy))
            if n_dom:
                sets.append(inner)
        else:
            if n_bnd:
                sets.append(dx.boundary(dom, n_bnd, rng, method, None) if method != "grid"
                            else dom.sample_boundary(n_bnd, rng, method))
            if n_dom:
                sets.append(dom.sample_interior(n_dom, rng, method))
        if n_ini:
            if not hasattr(dom, "sample_initial"):
                raise ValueError(f"deepxde_points(num_initial={n_ini}): the domain {dom!r} has no "
                                 "time; num_initial needs a space-time domain (geom * TimeInterval).")
            sets.append(dom.sample_initial(n_ini, rng, method))
        if anchors is not None:
            a = np.asarray(anchors.numpy() if hasattr(anchors, "numpy") else anchors, np.float64)
            sets.append(dom.check_inside(a, what="deepxde_points(anchors=...)"))
        if not sets:
            raise ValueError("deepxde_points: all counts are 0 and no anchors; need PDE points.")
        x = np.concatenate(sets)
        conditions = []
        for c in self.conditions:
            if getattr(c, "hard", False) or c.given is not None or not hasattr(c, "sample") \
                    or c.on == "data":
                conditions.append(c)
                continue
            mask = dom.boundary_part(c.on)(x)
            if not mask.any():
                raise ValueError(f"deepxde_points: none of the {len(x)} points lies where "
                                 f"{type(c).__name__} {c.name!r} holds (on={c.on!r}); raise "
                                 f"num_boundary (now {n_bnd}) or num_initial (now {n_ini}).")
            c2 = copy.copy(c)
            c2._name = c.name                    # keep its label in the loss history
            c2.given, c2.n_points = np.ascontiguousarray(x[mask]), int(mask.sum())
            conditions.append(c2)
        out = copy.copy(self)
        out.conditions = conditions
        for c in conditions:
            if hasattr(c, "bind"):
                c.bind(out)
        out._check_hard()
        return out, x

    # --- residual arguments -------------------------------------------------------------------
    def signature(self, fn, who="residual"):
        """``(args, outs)`` of a function of outputs, coordinates and parameters, checked."""
        sig = inspect.signature(fn)
        args = [p.name for p in sig.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        outs = [a for a in args if a not in self.names and a not in self.parameters]
        if self.output_names is not None and set(outs) - set(self.output_names) and len(outs) != 1:
            raise ValueError(f"{who}{sig}: arguments {outs} are neither coordinates "
                             f"{self.names}, parameters {tuple(self.parameters)} nor outputs "
                             f"{self.output_names}.")
        if len(outs) not in (1, self.n_out):
            raise ValueError(f"{who}{sig}: takes {len(outs)} output argument(s) {outs} but the "
                             f"problem has {self.n_out} output(s); the other arguments must be "
                             f"coordinates {self.names} or parameters {tuple(self.parameters)}.")
        return args, outs

    def _bind_signature(self):
        self._args, self._outs = self.signature(self.residual)

    def _check_hard(self):
        hard = [c for c in self.conditions if getattr(c, "hard", False)]
        for c in hard:
            if isinstance(c, Dirichlet):
                space = getattr(self.domain, "space", self.domain)
                if c.on != "boundary" or not hasattr(space, "lo") or callable(c.value):
                    raise ValueError(f"Dirichlet(hard=True, on={c.on!r}): hard enforcement needs "
                                     "on='boundary' of a box-shaped (Interval/Rectangle/Box) space "
                                     "and a constant value; use a soft condition otherwise.")
        self.hard = hard
        self.soft_conditions = [c for c in self.conditions if not getattr(c, "hard", False)]

    def residual_kwargs(self, u_field, coords, args=None, outs=None):
        """Keyword arguments for the residual (or another function with ``args`` of which
        ``outs`` are outputs) from the output field and coordinate handles."""
        args = self._args if args is None else args
        outs = self._outs if outs is None else outs
        kw = {}
        single = len(outs) == 1
        for k, a in enumerate(outs):
            if single:
                kw[a] = u_field
            elif self.output_names is not None:
                kw[a] = u_field[self.output_names.index(a)]
            else:
                kw[a] = u_field[k]
        for a in args:
            if a in self.names:
                kw[a] = coords[self.names.index(a)]
            elif a in self.parameters:
                kw[a] = self.parameters[a].value
        return kw

    def pde_residual(self, jet, coords, loss_scale=True):
        """The residual ``(n, k)``, one column per equation. With ``loss_scale`` (what the loss
        terms use) a system's columns are multiplied by sqrt(k), so that the PDE term
        ``mean(r^2)`` over all n k entries is the SUM over the equations of each one's mean
        square, as in DeepXDE (one loss term per equation; a plain mean over the k columns
        would weight a system's PDE k times less against its conditions)."""
        r = self._raw_pde_residual(jet, coords)
        k = r.shape[1]
        return r * math.sqrt(k) if loss_scale and k > 1 else r

    def _raw_pde_residual(self, jet, coords):
        r = self.residual(**self.residual_kwargs(jet.field(()), coords))
        listed = isinstance(r, (list, tuple))
        if listed:
            parts = [ops.reshape(p, (p.shape[0], -1)) if isinstance(p, Tensor) and p.ndim in (1, 2)
                     else p for p in r]
            for p in parts:
                if not isinstance(p, Tensor) or p.shape[0] != jet.n:
                    shape = getattr(p, "shape", type(p).__name__)
                    raise ValueError(BAD_RESIDUAL_SHAPE.format(shape=shape, n=jet.n))
                _square(p, jet.n, "residual")
            r = parts[0] if len(parts) == 1 else ops.concat(parts, axis=1)
        if not isinstance(r, Tensor):
            raise TypeError(f"residual returned a {type(r).__name__}; expected a Tensor of shape "
                            f"({jet.n},) built from u and the coordinates.")
        if r.ndim == 1 and r.shape[0] == jet.n:
            r = ops.reshape(r, (jet.n, 1))
        if r.ndim != 2 or r.shape[0] != jet.n:
            raise ValueError(BAD_RESIDUAL_SHAPE.format(shape=r.shape, n=jet.n))
        if not listed:   # a list's parts were checked one by one (their columns may add up to n)
            _square(r, jet.n, "residual")
        return r

    # --- hard constraints: u = A(x) + B(x) N(x) -------------------------------------------------
    def hard_transform(self, x):
        """``(A, B)`` as numpy functions of the points, or None without hard conditions."""
        if not self.hard:
            return None
        names, dom = self.names, self.domain
        space = getattr(dom, "space", dom)
        has_t = "t" in names
        A_parts, B_parts = [], []
        for c in self.hard:
            if isinstance(c, Initial):
                A_parts.append(("initial", c))
            else:
                A_parts.append(("dirichlet", c))
        def A(x):
            out = np.zeros((len(x), 1))
            ini = [c for k, c in A_parts if k == "initial"]
            dirs = [c for k, c in A_parts if k == "dirichlet"]
            if ini:
                cols = [x[:, i] for i, s in enumerate(names) if s != "t"]
                v = ini[0].value(*cols) if callable(ini[0].value) else ini[0].value
                out = out + np.reshape(np.asarray(v, dtype=np.float64), (len(x), -1))
            elif dirs:
                out = out + float(dirs[0].value)
            return out

        def B(x):
            out = np.ones((len(x), 1))
            if any(k == "dirichlet" for k, _ in A_parts):
                lo, hi = space.lo, space.hi
                for i in range(len(lo)):
                    out[:, 0] *= (x[:, i] - lo[i]) * (hi[i] - x[:, i]) / ((hi[i] - lo[i]) / 2) ** 2
            if any(k == "initial" for k, _ in A_parts) and has_t:
                t = x[:, names.index("t")]
                out[:, 0] *= (t - dom.t0) / (dom.t1 - dom.t0)
            return out
        return A, B


def _check_reference(domain, ref):
    """None, a function of the points, or data ``(points (m, dim), values (m,) or (m, k))``."""
    if ref is None or callable(ref):
        return ref
    if isinstance(ref, (tuple, list)) and len(ref) == 2:
        pts = domain._points(ref[0], "Problem(reference=(points, values))")
        vals = np.asarray(ref[1].numpy() if hasattr(ref[1], "numpy") else ref[1], dtype=np.float64)
        vals = vals[:, None] if vals.ndim == 1 else vals
        if vals.ndim != 2 or len(vals) != len(pts):
            raise ValueError(f"Problem(reference=(points, values)): values has shape "
                             f"{np.shape(ref[1])}; expected ({len(pts)},) or ({len(pts)}, k), one "
                             "row per point.")
        return (pts, vals)
    raise TypeError(f"Problem(reference=...): expected a function of the points or a pair "
                    f"(points, values), got {type(ref).__name__}.")


def fd_jet(f, x, derivs, h=1e-3):
    """Derivatives of a numpy function ``f(x (m, d)) -> (m, k)`` by 5-point central
    differences in float64 (for the known functions of hard constraints)."""
    out = {}
    for idx in derivs:
        if len(idx) == 0:
            out[idx] = f(x)
        elif len(idx) == 1:
            e = np.zeros(x.shape[1]); e[idx[0]] = h
            out[idx] = (-f(x + 2 * e) + 8 * f(x + e) - 8 * f(x - e) + f(x - 2 * e)) / (12 * h)
        elif len(idx) == 2:
            i, j = idx
            ei = np.zeros(x.shape[1]); ei[i] = h
            ej = np.zeros(x.shape[1]); ej[j] = h
            if i == j:
                out[idx] = (-f(x + 2 * ei) + 16 * f(x + ei) - 30 * f(x) + 16 * f(x - ei)
                            - f(x - 2 * ei)) / (12 * h * h)
            else:
                out[idx] = (f(x + ei + ej) - f(x + ei - ej) - f(x - ei + ej)
                            + f(x - ei - ej)) / (4 * h * h)
        else:
            raise ValueError(f"hard constraints support derivatives up to order 2, got {idx}.")
    return out


def _subindices(idx):
    """All sub-multi-indices of a sorted multi-index (for the product rule)."""
    import itertools
    subs = set()
    for r in range(len(idx) + 1):
        for c in itertools.combinations(range(len(idx)), r):
            subs.add(tuple(idx[k] for k in c))
    return subs


def apply_transform(N, AB, derivs):
    """u = A + B N with Leibniz' rule up to order 2; ``AB`` maps idx -> (A_idx, B_idx) Tensors."""
    out = {}
    for idx in derivs:
        A_i, B_i = AB[idx]
        if len(idx) == 0:
            u = A_i + B_i * N[()]
        elif len(idx) == 1:
            u = A_i + B_i * N[()] + AB[()][1] * N[idx]
        else:
            i, j = idx
            u = (A_i + B_i * N[()] + AB[(i,)][1] * N[(j,)] + AB[(j,)][1] * N[(i,)]
                 + AB[()][1] * N[idx])
        out[idx] = u
    return out


class _Sliced(dict):
    """Lazy row slices ``values[idx][lo:hi]`` of the derivative dict."""

    def __init__(self, values, lo, hi, full):
        super().__init__()
        self._v, self._lo, self._hi, self._full = values, lo, hi, full

    def __contains__(self, idx):
        return idx in self._v

    def __getitem__(self, idx):
        if not dict.__contains__(self, idx):
            if idx not in self._v:
                raise _Missing(idx)
            v = self._v[idx]
            dict.__setitem__(self, idx, v if self._full else v[self._lo:self._hi])
        return dict.__getitem__(self, idx)


class Batch:
    """The collocation points of one stage: interior points and each condition's points,
    stacked into one ``(N, dim)`` Tensor so all derivatives come from one network call."""

    def __init__(self, problem, interior, cond_points, dtype):
        self.problem, self.dtype = problem, dtype
        self.interior = np.ascontiguousarray(interior, dtype=np.float64)
        self.cond_points = [as_target_tensors(p, dtype) for p in cond_points]
        blocks = [self.interior] + [p.x for p in self.cond_points]
        self.ranges, lo = [], 0
        for b in blocks:
            self.ranges.append((lo, lo + len(b)))
            lo += len(b)
        self.x_np = np.concatenate(blocks, axis=0)
        self.X = tensor(np.ascontiguousarray(self.x_np), dtype)
        n = len(self.interior)
        self.coords = [Coordinate.wrap(tensor(np.ascontiguousarray(self.interior[:, i:i + 1]),
                                              dtype), s, i)
                       for i, s in enumerate(problem.names)]
        self.n = n
        self.AB = None

    def hard_terms(self, derivs):
        tf = self.problem.hard_transform(None)
        if tf is None:
            return None
        A, B = tf
        need = set()
        for idx in derivs:
            need |= _subindices(idx)
        if self.AB is None or not need <= set(self.AB):
            fa = fd_jet(A, self.x_np, need)
            fb = fd_jet(B, self.x_np, need)
            self.AB = {i: (tensor(np.ascontiguousarray(fa[i]), self.dtype),
                           tensor(np.ascontiguousarray(fb[i]), self.dtype)) for i in need}
        return self.AB


class Loss:
    """The PINN loss of a problem on a batch: ``sum_i w_i mean(r_i^2)`` over the PDE residual
    and each condition (a system's PDE term: the sum over its equations of each one's mean
    square, see ``Problem.pde_residual``); the derivatives the terms need are found by a dry run of the residual
    and computed in one call per evaluation."""

    def __init__(self, problem, net, batch, path="auto"):
        self.problem, self.net, self.batch, self.path = problem, net, batch, path
        self.term_names = ["pde"] + [c.name for c in problem.soft_conditions]
        names = problem.names
        self.cond_derivs = set()
        for c in problem.soft_conditions:
            self.cond_derivs |= {tuple(sorted(i)) for i in c.derivs(names)}
        self.pde_derivs = self._dry_run()
        self.path_used = None

    def _dry_run(self):
        b, pb = self.batch, self.problem
        m = min(8, b.n)
        jet = Jet(pb.names, m, pb.n_out, b.dtype, values=None)
        coords = [Coordinate.wrap(c[:m], c.name, c.axis) for c in b.coords]
        for p in pb.parameters.values():   # the coefficients in the points' dtype
            p._current = tensor(p.init, b.dtype)
        try:
            pb.pde_residual(jet, coords)
        finally:
            self._bind_params(None)
        return set(jet.wanted) | {()}

    def _bind_params(self, pde_params):
        for k, p in self.problem.parameters.items():
            p._current = None if pde_params is None else p.transform(pde_params[k])

    def derivatives(self, net_params, x, derivs, AB=None):
        derivs = sorted(derivs, key=lambda i: (len(i), i))
        need = set(derivs)
        if AB is not None:
            for idx in derivs:
                need |= _subindices(idx)
        N, used = network_derivatives(self.net, net_params, x, need, self.path)
        if used != self.path_used or not getattr(self, "path_reason", ""):
            self.path_used = used
            self.path_reason = path_reason(self.net, net_params, need, self.path, used)
        return N if AB is None else apply_transform(N, AB, derivs)

    def terms(self, params, with_residual=False):
        """List of scalar loss terms (unweighted), aligned with ``term_names``."""
        if not with_residual and fused_loss.enabled():   # one kernel per term (pinn/fused_loss.py)
            out = fused_loss.terms(self, params)
            if out is not None:
                return out
        rs = self.residuals(params)
        out = [ops.mean(r * r) for r in rs]
        return (out, rs[0]) if with_residual else out

    def residual_vector(self, params, weights):
        """All residuals stacked into one vector ``v`` with ``0.5 ||v||^2`` = the weighted loss
        ``sum_i w_i mean(r_i^2)`` (for least-squares optimizers: Levenberg–Marquardt)."""
        parts = []
        for r, w in zip(self.residuals(params), weights):
            if w:
                parts.append(ops.reshape(r, (-1,)) * math.sqrt(2.0 * w / max(r.size, 1)))
        return parts[0] if len(parts) == 1 else ops.concat(parts, axis=0)

    def residuals(self, params):
        """List of pointwise residuals ``(n_i, k_i)``, aligned with ``term_names``."""
        pb, b = self.problem, self.batch
        self._bind_params(params.get("pde"))
        try:
            while True:
                derivs = self.pde_derivs | self.cond_derivs
                AB = b.hard_terms(derivs)
                values = self.derivatives(params["net"], b.X, derivs, AB)
                try:
                    lo, hi = b.ranges[0]
                    jet = Jet(pb.names, b.n, pb.n_out, b.dtype,
                              _Sliced(values, lo, hi, full=len(b.ranges) == 1))
                    out = [pb.pde_residual(jet, b.coords)]
                    for c, pts, (lo, hi) in zip(pb.soft_conditions, b.cond_points, b.ranges[1:]):
                        cj = Jet(pb.names, hi - lo, pb.n_out, b.dtype,
                                 _Sliced(values, lo, hi, full=False))
                        out.append(c.residual(cj.field(()), pts))
                    return out
                except _Missing as miss:   # the residual asked for something new: recompute
                    self.pde_derivs = self.pde_derivs | {miss.idx}
        finally:
            self._bind_params(None)

    def residual_at(self, params, pts):
        """|PDE residual| at extra points (numpy (m, dim)), no gradient: for resampling."""
        from ..autodiff.primitive import no_grad
        pb = self.problem
        sub = Batch(pb, pts, [], self.batch.dtype)
        with no_grad():
            self._bind_params(params.get("pde"))
            try:
                AB = sub.hard_terms(self.pde_derivs)
                values = self.derivatives(params["net"], sub.X, self.pde_derivs, AB)
                jet = Jet(pb.names, sub.n, pb.n_out, sub.dtype, _Sliced(values, 0, sub.n, True))
                r = pb.pde_residual(jet, sub.coords, loss_scale=False).numpy()
            finally:
                self._bind_params(None)
        return np.sqrt(np.sum(r * r, axis=1))

    def predict(self, params, pts):
        """Network output (with hard constraints applied) at numpy points: numpy ``(m, k)``."""
        from ..autodiff.primitive import no_grad
        sub = Batch(self.problem, pts, [], self.batch.dtype)
        with no_grad():
            AB = sub.hard_terms({()})
            return self.derivatives(params["net"], sub.X, {()}, AB)[()].numpy()


__all__ = ["Problem", "Parameter", "Batch", "Loss"]
