"""Differential operators on a network's output w.r.t. named inputs: ``d``, ``grad``, ``div``,
``laplacian``.

A residual function receives lazy handles: ``u`` (a :class:`Field`, the network output, or
``u[k]`` for component ``k`` of a system) and the coordinates (``x``, ``t``, ...: each a
:class:`Coordinate`, the column of the points as an ``(n, 1)`` Tensor). ``d(u, x)``,
``d(u, x, x)`` and ``d(u, x, t)`` look up derivatives that were computed *before* the
residual ran, all in one call: the solver first runs the residual once on a few points to
record which multi-indices it asks for, then propagates exactly those through the network
(the fused Taylor-mode kernels when they apply, nested automatic differentiation
otherwise) and hands the residual the results. A residual that uses ``u_x`` twice costs
nothing extra.

Example:
    >>> def residual(u, x, t):                       # Burgers
    ...     return d(u, t) + u * d(u, x) - nu * d(u, x, x)
    >>> def residual(u, x, y):                       # Poisson
    ...     return -laplacian(u) - f(x, y)
"""
import itertools

import numpy as np

from ..autodiff import ops
from ..autodiff.tensor import Tensor, tensor, zeros
from ..autodiff.transforms import jvp
from . import jets

NOT_A_FIELD = ("d(u, ...): u must be the network output handed to the residual, a component "
               "u[k] of it, or a derivative d(u, ...) of those; got {what}. Differentiate the "
               "output first and combine afterwards: write d(u, x) * v, not d(u * v, x).")


class Coordinate(Tensor):
    """A named input coordinate: the column of the points, an ``(n, 1)`` Tensor, plus its name."""
    __slots__ = ("name", "axis")

    @classmethod
    def wrap(cls, t, name, axis):
        c = cls._make(t._buf, t.shape, t.dtype, t._node, t._tangents)
        c.name, c.axis = name, axis
        return c

    def __repr__(self):
        return f"Coordinate({self.name!r}, n={self.shape[0]})"


class Field(Tensor):
    """The network output (or a component, or a derivative of either) at the points, as an
    ``(n, k)`` Tensor that also knows where it came from, so ``d`` can look up its
    derivatives. ``u[k]`` is component ``k`` of a system, shape ``(n, 1)``."""
    __slots__ = ("_jet", "_comp", "_idx")

    @classmethod
    def wrap(cls, t, jet, comp, idx):
        f = cls._make(t._buf, t.shape, t.dtype, t._node, t._tangents)
        f._jet, f._comp, f._idx = jet, comp, idx
        return f

    def __getitem__(self, k):
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            n_out = self._jet.n_out
            if self._comp is not None:
                if k in (0, -1):
                    return self
                raise IndexError(f"u[{k}]: this field is already component {self._comp} (one "
                                 "column); index 0 is the only one.")
            if not -n_out <= k < n_out:
                raise IndexError(f"u[{k}]: the network has {n_out} output(s); expected "
                                 f"0 <= k < {n_out}.")
            return self._jet.field(self._idx, int(k) % n_out)
        return Tensor.__getitem__(self, k)

    def __iter__(self):
        return (self[k] for k in range(self._jet.n_out if self._comp is None else 1))

    def __repr__(self):
        comp = "" if self._comp is None else f"[{self._comp}]"
        idx = "".join(self._jet.names[i] for i in self._idx)
        return f"Field(u{comp}{'_' + idx if idx else ''}, shape={self.shape})"


class Jet:
    """Derivatives of the network output at one set of points.

    ``values`` maps multi-indices (sorted tuples of coordinate axes; ``()`` the value) to
    ``(n, n_out)`` Tensors. In recording mode (``values=None``) every lookup is noted in
    ``wanted`` and answered with zeros: that is the dry run that finds what to compute.
    """

    def __init__(self, names, n, n_out, dtype, values=None, time_name="t"):
        self.names, self.n, self.n_out, self.dtype = tuple(names), n, n_out, dtype
        self.values = values
        self.recording = values is None
        self.wanted = set()
        self.spatial = tuple(i for i, s in enumerate(self.names) if s != time_name)
        self._cache = {}

    def full(self, idx):
        idx = tuple(sorted(idx))
        if self.recording:
            self.wanted.add(idx)
            if idx not in self._cache:
                self._cache[idx] = zeros((self.n, self.n_out), self.dtype)
            return self._cache[idx]
        if idx not in self.values:
            raise _Missing(idx)
        return self.values[idx]

    def field(self, idx, comp=None):
        idx = tuple(sorted(idx))
        key = (idx, comp)
        if key not in self._cache or self.recording:
            t = self.full(idx)
            if comp is not None and self.n_out > 1:
                t = t[:, comp:comp + 1]
            self._cache[key] = Field.wrap(t, self, comp, idx)
        return self._cache[key]

    def axis(self, c):
        """Axis of a coordinate handle or name; a clear error for an unknown one."""
        if isinstance(c, Coordinate):
            name = c.name
        elif isinstance(c, str):
            name = c
        else:
            raise TypeError(f"d(u, ...): coordinates must be the coordinate arguments of the "
                            f"residual (or their names, one of {self.names}); got "
                            f"{type(c).__name__}. A Tensor computed from a coordinate is not "
                            "one: differentiate w.r.t. the coordinate itself.")
        if name not in self.names:
            raise ValueError(f"d(u, {name!r}): unknown coordinate {name!r}; this problem's "
                             f"coordinates are {self.names}.")
        return self.names.index(name)


class _Missing(Exception):
    """A derivative the dry run did not record (data-dependent residual): recompute."""

    def __init__(self, idx):
        super().__init__(idx)
        self.idx = idx


def d(u, *coords):
    """Partial derivative of a network output w.r.t. named coordinates.

    Args:
        u: the output handed to the residual (a :class:`Field`), a component ``u[k]``, or a
            derivative ``d(u, ...)`` (so ``d(d(u, x), x) == d(u, x, x)``).
        *coords: one or more coordinates (the residual's coordinate arguments, or their
            names as strings); repeated for higher order, mixed for mixed partials.
    Returns:
        A :class:`Field` of shape ``(n, k)`` like ``u``.
    Raises:
        ValueError: for an unknown coordinate.
        TypeError: if ``u`` is not a network output (e.g. ``d(u * u, x)``).
    Example:
        >>> d(u, x, t)          # u_xt, shape (n, 1)
    """
    if not isinstance(u, Field):
        what = f"a {type(u).__name__} of shape {getattr(u, 'shape', None)}"
        raise TypeError(NOT_A_FIELD.format(what=what))
    if not coords:
        raise ValueError("d(u): give at least one coordinate, e.g. d(u, x).")
    jet = u._jet
    idx = u._idx + tuple(jet.axis(c) for c in coords)
    return jet.field(idx, u._comp)


def _spatial(u, who):
    if not isinstance(u, Field):
        what = f"a {type(u).__name__} of shape {getattr(u, 'shape', None)}"
        raise TypeError(NOT_A_FIELD.format(what=what).replace("d(u, ...)", who))
    return u._jet.spatial


def grad(u):
    """Spatial gradient (all coordinates except ``t``) of a scalar output: ``(n, dim)``.

    Example:
        >>> g = grad(u)          # columns u_x, u_y
    """
    axes = _spatial(u, "grad(u)")
    if u.shape[1] != 1:
        raise ValueError(f"grad(u): u has {u.shape[1]} components; take one, grad(u[k]), or use "
                         "div for a vector field.")
    parts = [u._jet.field(u._idx + (a,), u._comp) for a in axes]
    return parts[0] if len(parts) == 1 else ops.concat(parts, axis=1)


def div(u):
    """Divergence of a vector output with one component per spatial coordinate: ``(n, 1)``.

    Example:
        >>> div(u)               # d(u[0], x) + d(u[1], y)
    """
    axes = _spatial(u, "div(u)")
    if u._comp is not None or u._jet.n_out < len(axes):
        raise ValueError(f"div(u): needs a vector output with (at least) {len(axes)} components "
                         f"(one per spatial coordinate {[u._jet.names[a] for a in axes]}); got "
                         f"shape {u.shape}.")
    out = None
    for k, a in enumerate(axes):
        term = u._jet.field(u._idx + (a,), k)
        out = term if out is None else out + term
    return out


def laplacian(u):
    """Sum of the second derivatives over the spatial coordinates (all but ``t``): shape
    like ``u``.

    Example:
        >>> laplacian(u)         # u_xx + u_yy
    """
    axes = _spatial(u, "laplacian(u)")
    out = None
    for a in axes:
        term = u._jet.field(u._idx + (a, a), u._comp)
        out = term if out is None else out + term
    return out


# --- computing the derivatives ------------------------------------------------------------
def _unit(x, axis):
    e = np.zeros(x.shape, dtype=np.float64)
    e[:, axis] = 1.0
    return tensor(e, x.dtype)


def autodiff_derivatives(f, x, derivs):
    """Derivatives of ``f(x)`` (rows independent) w.r.t. the columns of ``x`` by nested
    forward mode, for any function built from sciml ops.

    Args:
        f: function mapping an ``(n, d)`` Tensor to an ``(n, k)`` Tensor, row by row.
        x: points, ``(n, d)`` Tensor.
        derivs: multi-indices (sorted tuples of column indices; ``()`` the value).
    Returns:
        dict multi-index -> ``(n, k)`` Tensor (differentiable w.r.t. whatever ``f`` closes
        over).
    """
    derivs = sorted({tuple(sorted(i)) for i in derivs}, key=lambda i: (len(i), i))
    out = {}
    units = {}

    def unit(a):
        if a not in units:
            units[a] = _unit(x, a)
        return units[a]

    def nested(idx):
        """f and its derivatives along idx[0], idx[1], ...: returns a dict sub-index -> value."""
        g = f
        for a in idx:
            g = (lambda h, a: lambda z: jvp(h, (z,), (unit(a),)))(g, a)
        res = g(x)
        flat = {}

        def walk(r, depth, chosen):
            if depth == 0:
                flat[tuple(sorted(chosen))] = r
                return
            prim, tan = r
            walk(prim, depth - 1, chosen)
            walk(tan, depth - 1, chosen + (idx[depth - 1],))
        walk(res, len(idx), ())
        return flat

    for idx in sorted(derivs, key=len, reverse=True):
        if idx in out:
            continue
        for k, v in nested(idx).items():
            out.setdefault(k, v)
    if () in derivs and () not in out:
        out[()] = f(x)
    return {i: out[i] for i in derivs}


def mlp_layers(net, params):
    """``[(W, b), ...]`` of an MLP's parameter pytree, or None if ``net`` is not an MLP the
    derivative kernels understand."""
    layers = getattr(net, "layers", None)
    if layers is None or not hasattr(net, "activation"):
        return None
    p = params.get("layers") if isinstance(params, dict) else params
    if isinstance(p, dict):
        p = [p[k] for k in sorted(p, key=lambda s: int(s) if str(s).isdigit() else s)]
    if not isinstance(p, (list, tuple)) or len(p) != len(layers):
        return None
    out = []
    for lp in p:
        if isinstance(lp, dict) and "weight" in lp and "bias" in lp:
            out.append((lp["weight"], lp["bias"]))
        elif isinstance(lp, (list, tuple)) and len(lp) == 2:
            out.append(tuple(lp))
        else:
            return None
    return out


def _derivative_backend(name):
    try:
        if name == "fused":
            from . import fused as mod
        else:
            from . import generic as mod
    except ImportError:
        return None
    return mod


def network_derivatives(net, params, x, derivs, path="auto"):
    """Value and input derivatives of a network at points ``x``, all in one call.

    Picks the fused Taylor-mode kernels (``sciml.pinn.fused``) for an MLP whose activation
    and derivative orders (<= 4) they support; for a ``Transformed`` network, the transforms on
    Taylor jets (``sciml.pinn.jets``) around the network's own path; above order 2 without fused
    kernels, jets through the layers; else the generic nested-autodiff path for MLPs
    (``sciml.pinn.generic``), else nested forward mode through ``net.apply``.

    Args:
        net: the network (``net.apply(params, x)``).
        params: its parameter pytree (the Tensors being trained).
        x: points, ``(n, d)`` Tensor.
        derivs: multi-indices, e.g. ``{(), (0,), (0, 0), (1,)}``.
        path: ``"auto"``, ``"fused"``, ``"generic"`` or ``"autodiff"`` (the names used:
            also ``"jet"``).
    Returns:
        ``(values, path_used)``: dict multi-index -> ``(n, n_out)`` Tensor, and the name.
    """
    derivs = sorted({tuple(sorted(i)) for i in derivs}, key=lambda i: (len(i), i))
    if path != "autodiff" and type(net).__name__ == "Fields" and hasattr(net, "nets"):
        # one network per field: each one's derivatives on its own path, stacked
        parts = [network_derivatives(n, params[str(k)], x, derivs, path)
                 for k, n in enumerate(net.nets)]
        used = parts[0][1] if len({p[1] for p in parts}) == 1 else "mixed"
        if len(parts) == 1:
            return parts[0][0], used
        return {i: ops.concat([p[0][i] for p in parts], axis=1) for i in derivs}, used
    if path != "autodiff" and type(net).__name__ == "Transformed":
        try:
            return _transformed(net, params, x, derivs, path)
        except jets.Unsupported as e:   # an op without a jet rule: nested forward mode below
            net._path_note = f"jets do not cover this transform ({e})"
            if path != "auto":
                raise ValueError(f"path={path!r}: {net._path_note}; use path='auto'.") from None
    layers = mlp_layers(net, params) if path != "autodiff" else None
    if layers is not None:
        act = net.activation
        if path in ("auto", "fused"):
            fused = _derivative_backend("fused")
            ok = fused is not None and fused.supports(act, derivs)
            if ok:
                return fused.mlp_derivatives(layers, act, x, derivs), "fused"
            if path == "fused":
                raise ValueError(f"path='fused' is not available for activation {act!r} and "
                                 f"derivatives {derivs}; use path='auto'.")
        if path == "auto" and max((len(i) for i in derivs), default=0) > 2:
            try:   # above the fused kernels' order: Taylor jets through the layers, each index once
                return _jet_mlp(layers, act, x, derivs), "jet"
            except jets.Unsupported:
                pass
        if path in ("auto", "generic"):
            generic = _derivative_backend("generic")
            if generic is not None:
                return generic.mlp_derivatives(layers, act, x, derivs), "generic"
    if path in ("fused", "generic"):
        raise ValueError(f"path={path!r} needs an MLP (with .layers and .activation) and "
                         f"sciml.pinn.{path}; got {type(net).__name__}.")
    return autodiff_derivatives(lambda z: net.apply(params, z), x, derivs), "autodiff"


def _jet_mlp(layers, act, x, derivs):
    from . import generic
    spec = jets.closure(derivs)
    u = jets.run(lambda z: generic.mlp(layers, act, z), jets.variables(x, spec))
    return _coeffs(u, derivs, x.shape[0])


def _coeffs(u, derivs, n):
    out = {}
    for i in derivs:
        c = u.coeff_tensor(i)
        out[i] = zeros((n, u.shape[1]), u.dtype) if c is None else c
    return out


def _transformed(net, params, x, derivs, path):
    """Derivatives of ``u = output(x, net(features(x)))`` with the transforms run on Taylor jets
    (:mod:`sciml.pinn.jets`): the network's own derivatives come from its own path (the fused
    Taylor-mode kernels for an MLP), a feature transform's jet is pushed through the network
    (the fused kernels take input streams), the output transform composes the jets."""
    spec = jets.closure(derivs)
    n = x.shape[0]
    if net.features is None:
        N, used = network_derivatives(net.net, params, x, spec, path)
        y = jets.JetTensor.of(dict(N), spec)
    else:
        F = jets.run(net.features, jets.variables(x, spec))
        y, used = _network_on_jet(net.net, params, F, path)
    if net.output is not None:
        y = jets.run(net.output, jets.variables(x, spec), y)
    net._path_note = None
    return _coeffs(y, derivs, n), used


def _network_on_jet(net, params, F, path):
    """The network applied to an input jet ``F``: the fused kernels when they apply, else the
    jet rules through ``net.apply``."""
    layers = mlp_layers(net, params)
    if layers is not None and path in ("auto", "fused"):
        from . import fused
        if fused.supports(net.activation, F.spec) and hasattr(fused, "mlp_jet"):
            return fused.mlp_jet(layers, net.activation, F), "fused"
    if path == "fused":
        raise jets.Unsupported(f"the fused kernels do not take this network ({type(net).__name__})")
    return jets.run(lambda z: net.apply(params, z), F), "jet"


def path_reason(net, params, derivs, path, used):
    """Why :func:`network_derivatives` took the path ``used`` (for ``Result.path_reason``)."""
    order = max((len(i) for i in derivs), default=0)
    if path == used and path != "auto":
        return f"path={path!r} was asked for"
    if type(net).__name__ == "Transformed":
        parts = [w for w, f in (("feature", net.features), ("output", net.output)) if f is not None]
        what = " and ".join(parts) + " transform" + ("s" if len(parts) > 1 else "") if parts else "no transform"
        if used == "autodiff":
            note = getattr(net, "_path_note", None) or "asked for"
            return f"Transformed ({what}): nested forward-mode autodiff through net.apply ({note})"
        inner = {"fused": "the fused Taylor-mode kernels", "jet": "Taylor jets through net.apply",
                 "generic": "nested autodiff through the MLP's layers"}.get(used, used)
        return (f"Transformed ({what}), derivatives up to order {order}: the {what} run on "
                f"truncated Taylor series (jets) of the points, the network's derivatives by {inner}")
    if type(net).__name__ == "Fields":
        return (f"{len(net.nets)} networks, one per field, each on its own path "
                f"({used}); outputs stacked")
    if used == "fused":
        return (f"an MLP with activation {getattr(net.activation, '__name__', net.activation)} "
                f"and derivatives up to order {order}: the fused Taylor-mode kernels")
    if used == "jet":
        act = getattr(net.activation, "__name__", repr(net.activation))
        return (f"derivatives up to order {order} (above the fused kernels' 2): Taylor jets "
                f"through the MLP's layers (activation {act}), each derivative computed once")
    if used == "generic":
        act = getattr(net.activation, "__name__", repr(net.activation))
        return (f"the fused kernels do not cover activation {act} with derivatives up to order "
                f"{order}: nested autodiff through the MLP's layers")
    if mlp_layers(net, params) is None:
        return (f"{type(net).__name__} is not an MLP (no .layers/.activation the kernels "
                "understand: a custom network, a transform or several networks): nested "
                "forward-mode autodiff through net.apply")
    return "nested forward-mode autodiff through net.apply"


__all__ = ["d", "grad", "div", "laplacian", "Field", "Coordinate", "Jet", "path_reason",
           "network_derivatives", "autodiff_derivatives", "mlp_layers"]
