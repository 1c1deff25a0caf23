"""Optimizer building blocks: optax-style ``Transform`` s, ``chain``, and the stateful ``Optimizer`` shell.

Functional core (pure, composable; see ``transforms.py`` and ``aliases.py``)::

    tx = chain(clip_by_global_norm(1.0), scale_by_adam(), scale_by_lr(cosine_decay(1e-3, 1000)))
    state = tx.init(params)                       # params: a pytree of Tensors
    updates, state = tx.update(grads, state, params)   # new params = params + updates

Stateful shell (what users write)::

    opt = Adam(model.parameters(), lr=1e-3)       # or Adam(model.params(), ...): any pytree of Parameters
    opt.step(grads)                               # grads: a pytree shaped like the bound params
    # PyTorch style: loss.backward(); opt.step(); opt.zero_grad()

``Optimizer(params, transform)`` wraps any Transform; the built-in first-order optimizers
(``first_order.py``) instead update each parameter with ONE fused in-place Taichi kernel.
An optimizer built without parameters (``Adam(lr=1e-3)``) is bound later: ``opt.bind(params)``.
``state_dict()`` / ``load_state_dict()`` capture everything needed to resume exactly.

Helpers for optimizers whose ``step(loss_fn)`` evaluates the loss several times (second order,
line searches): ``opt._read()`` returns the current parameter values as a pytree of Tensors shaped
like the bound params (copies: later in-place writes do not change them); ``opt._write(values)``
writes such a pytree into the bound Parameters in place. Subclasses that do not use ``step(grads)``
override :meth:`step` and may keep their own state in ``self.state`` (any pytree of Tensors and
Python numbers, which the default ``state_dict`` saves) or override ``_state_arrays`` /
``_load_state_arrays``.
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, NamedTuple

import numpy as np

from .. import backend
from ..autodiff.pytree import flatten, unflatten
from ..autodiff.tensor import Tensor, tensor
from .schedules import as_schedule

__all__ = ["Transform", "chain", "Optimizer", "global_norm", "tree_zeros_like"]


class Transform(NamedTuple):
    """A gradient transformation: ``init(params) -> state``, ``update(grads, state, params=None) ->
    (updates, new_state)`` (pure functions of pytrees of Tensors)."""
    init: Callable
    update: Callable


def chain(*transforms) -> Transform:
    """Apply ``transforms`` in order; the state is the tuple of their states."""
    for i, t in enumerate(transforms):
        if not isinstance(t, Transform):
            raise TypeError(f"chain: argument {i} is a {type(t).__name__}; expected a Transform "
                            "(e.g. scale_by_adam(), clip_by_global_norm(1.0)).")

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(grads, state, params=None):
        new = []
        for t, s in zip(transforms, state):
            grads, s = t.update(grads, s, params)
            new.append(s)
        return grads, tuple(new)
    return Transform(init, update)


def tree_zeros_like(tree):
    from ..autodiff.pytree import tree_map
    from ..autodiff.tensor import zeros
    return tree_map(lambda x: zeros(x.shape, x.dtype), tree)


def global_norm(tensors) -> float:
    """sqrt(sum of squares of every element of every Tensor in the list/pytree), as a Python float
    (one fused Taichi reduction per tensor, into one accumulator)."""
    from ..kernels import optim as K
    leaves = flatten(tensors)[0]
    if not leaves:
        return 0.0
    by_dtype = {}
    for t in leaves:
        by_dtype.setdefault(t.dtype, []).append(t)
    total = 0.0
    for dt, ts in by_dtype.items():
        acc = backend.zeros(1, dt)
        for t in ts:
            if t.size:
                K.sumsq(t._buf, acc, t.size, dt, 0)
        total += float(backend.to_numpy(acc, (1,), dt)[0])
    return math.sqrt(total)


def _lookup(tree, dotted, name):
    node = tree
    for k in dotted.split("."):
        if not isinstance(node, dict) or k not in node:
            raise ValueError(f"{name}.step(grads): grads (a dict) has no entry {dotted!r}; expected a pytree shaped "
                             "like model.params() or like the bound parameter list.")
        node = node[k]
    return node


def _dotted(tree, prefix=""):
    """Dotted names of a pytree's leaves in ``flatten`` order (dict keys sorted), or None if the tree holds
    something other than dicts, lists and leaves."""
    if isinstance(tree, dict):
        out = []
        for k in sorted(tree, key=str):
            sub = _dotted(tree[k], f"{prefix}.{k}" if prefix else str(k))
            if sub is None:
                return None
            out.extend(sub)
        return out
    if isinstance(tree, (list, tuple)):
        return None
    return [prefix]


def _as_leaves(where, params):
    """(leaves, treedef, container, names) of one parameter collection: a Module, a list, or a dict pytree."""
    from ..models.module import Parameter
    if params is None:
        raise ValueError(f"{where}(params): got None; expected model.parameters() or model.params().")
    if hasattr(params, "parameters") and callable(params.parameters) and not isinstance(params, (list, dict)):
        params = params.parameters()
    if isinstance(params, (tuple, list)) and not hasattr(params, "names"):
        params = list(params)
    names = getattr(params, "names", None) if isinstance(params, list) else None
    if isinstance(params, dict):
        names = _dotted(params)
    leaves, treedef = flatten(list(params) if isinstance(params, list) else params)
    if not leaves:
        raise ValueError(f"{where}: got an empty parameter list.")
    for i, p in enumerate(leaves):
        if not isinstance(p, Parameter):
            raise TypeError(f"{where}: parameter {i} is a {type(p).__name__}; expected "
                            "sciml.models.Parameter (updated in place). Pass model.parameters() / "
                            "model.params(), or wrap tensors with sciml.models.Parameter(t).")
    return leaves, treedef, params, names


class Optimizer:
    """Stateful shell: binds a pytree of Parameters and updates them in place on ``step(grads)``.

    Args:
        params: a list / dict pytree of :class:`sciml.models.Parameter` (``model.parameters()`` or
            ``model.params()``), a list of parameter groups (PyTorch style: dicts with a ``"params"``
            entry and per-group options such as ``"lr"``), or None to bind later with :meth:`bind`.
        transform: a :class:`Transform` computing updates (new = old + update). The built-in
            optimizers (Adam, SGD, ...) do not need one: they run fused kernels.

    Parameter groups: ``opt.param_groups`` is a list of dicts, each with ``"params"`` (its Parameters)
    and the group's options (``"lr"`` a number or a schedule, ``"weight_decay"``, ...); changing an entry
    takes effect at the next step, and ``opt.lr = 5e-4`` sets the learning rate of every group.
    Frozen parameters (``p.requires_grad_(False)``) are skipped by every step.
    """
    defaults: dict = {}

    def __init__(self, params=None, transform: Transform | None = None):
        self._transform = transform
        self._leaves = None
        self._treedef = None
        self._names = None
        self.step_count = 0
        self.state = None
        if not hasattr(self, "defaults") or self.defaults is Optimizer.defaults:
            self.defaults = {}
        self.param_groups = []
        if params is not None:
            self.bind(params)

    # --- binding --------------------------------------------------------------------------
    def bind(self, params):
        """Bind the parameters to update (a pytree of Parameters, or a list of parameter groups) and reset
        the state. Returns self."""
        name = type(self).__name__
        is_groups = isinstance(params, (list, tuple)) and len(params) > 0 and all(
            isinstance(g, dict) and "params" in g for g in params)
        if is_groups:
            leaves, names, groups = [], [], []
            for gi, g in enumerate(params):
                unknown = sorted(set(g) - {"params"} - set(self.defaults))
                if unknown:
                    raise ValueError(f"{name}: parameter group {gi} has unknown option(s) {unknown}; expected "
                                     f"'params' and any of {sorted(self.defaults)}.")
                gl, _, _, gn = _as_leaves(f"{name}(param_groups[{gi}])", g["params"])
                group = dict(self.defaults)
                group.update({k: v for k, v in g.items() if k != "params"})
                group["params"] = gl
                self._check_group(group, gi)
                groups.append(group)
                leaves.extend(gl)
                names = None if names is None or gn is None else names + list(gn)
            params = list(leaves)
            treedef = flatten(params)[1]
        else:
            leaves, treedef, params, names = _as_leaves(name, params)
            group = dict(self.defaults)
            group["params"] = list(leaves)
            self._check_group(group, 0)
            groups = [group]
        seen = set()
        for p in leaves:
            if id(p) in seen:
                raise ValueError(f"{name}: a Parameter appears more than once in the parameters / groups; each may "
                                 "be in one group only.")
            seen.add(id(p))
        self.param_groups = groups
        self._group_of = [gi for gi, g in enumerate(groups) for _ in g["params"]]
        self._leaves, self._treedef, self._params = leaves, treedef, params
        self._names = names
        self.step_count = 0
        self._init_state()
        return self

    def _check_group(self, group, i):
        """Validate one group's options (subclasses check their hyper-parameters)."""
        if "lr" in group:
            as_schedule(group["lr"])

    def add_param_group(self, group):
        """Add a parameter group (dict with ``"params"`` and options) to a bound optimizer (PyTorch style);
        the optimizer's state is rebuilt for the new parameter set, the step count kept."""
        self._require_bound("add_param_group")
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{type(self).__name__}.add_param_group: expected a dict with a 'params' entry.")
        old = [dict(g) for g in self.param_groups]
        step = self.step_count
        self.bind(old + [group])
        self.step_count = step
        return self

    # --- learning rate ----------------------------------------------------------------------
    @property
    def lr(self):
        """The learning rate (number or schedule) of the first group; setting it sets every group's."""
        if self.param_groups:
            return self.param_groups[0].get("lr", self.defaults.get("lr"))
        return self.defaults.get("lr")

    @lr.setter
    def lr(self, value):
        if "lr" not in self.defaults:
            raise AttributeError(f"{type(self).__name__}: setting .lr has no effect on this optimizer (its step size "
                                 "is fixed in its transform chain or options); build a new one with the learning "
                                 "rate you want (e.g. a schedule).")
        as_schedule(value)
        self.defaults["lr"] = value
        for g in self.param_groups:
            g["lr"] = value

    def group_lr(self, group) -> float:
        """The learning rate a group's next step uses (its ``"lr"`` evaluated at the step count if a schedule)."""
        lr = group.get("lr", self.defaults.get("lr"))
        return float(lr(self.step_count)) if callable(lr) else float(lr)

    def current_lr(self) -> float:
        """The learning rate the next step will use (of the first group)."""
        return self.group_lr(self.param_groups[0]) if self.param_groups else float(as_schedule(self.lr)(0))

    @property
    def params(self):
        """The bound pytree of Parameters."""
        self._require_bound("params")
        return self._params

    def _require_bound(self, what="step"):
        if self._leaves is None:
            raise RuntimeError(f"{type(self).__name__}.{what}: the optimizer has no parameters yet; build it "
                               f"with {type(self).__name__}(model.parameters(), ...) or call .bind(params) first.")

    def _init_state(self):
        if self._transform is None:
            raise TypeError("Optimizer needs a transform (e.g. sciml.optim.adam(1e-3)) or a subclass "
                            "implementing _init_state/_apply.")
        self.state = self._transform.init(list(self._leaves))

    # --- stepping ---------------------------------------------------------------------------
    def _grad_leaves(self, grads):
        """Flatten ``grads`` and check it matches the bound params (structure, shapes, dtypes). Returns a
        list aligned with the bound Parameters; an entry is None for a parameter to skip (frozen, or with
        no gradient)."""
        name = type(self).__name__
        frozen = [not p.requires_grad for p in self._leaves]
        if grads is None:
            out = [None if f else p.grad for p, f in zip(self._leaves, frozen)]
            if all(g is None for g in out):
                i = next((i for i, f in enumerate(frozen) if not f), 0)
                raise ValueError(f"{name}.step(): parameter {i} has no .grad; call loss.backward() first or "
                                 "pass grads explicitly: opt.step(grads).")
            return self._check_grads(out)
        if isinstance(grads, tuple) and isinstance(self._params, list):
            grads = list(grads)
        if isinstance(grads, dict) and self._names is not None:
            # params()-shaped grads: frozen parameters have no entry (Module.params() omits them)
            from ..models.module import _has_nested
            leaves = [None if f and not _has_nested(grads, n) else _lookup(grads, n, name)
                      for n, f in zip(self._names, frozen)]
            return self._check_grads([None if f else g for g, f in zip(leaves, frozen)])
        if isinstance(grads, list) and len(grads) == len(self._leaves) and any(g is None for g in grads) and all(
                g is None or isinstance(g, Tensor) for g in grads):  # flat, aligned, None = no gradient
            return self._check_grads([None if f else g for g, f in zip(grads, frozen)])
        leaves, td = flatten(grads)
        if td != self._treedef:
            raise ValueError(f"{name}.step(grads): grads has {len(leaves)} leaves in a "
                             f"{type(grads).__name__}; expected a pytree shaped like the bound params "
                             f"({len(self._leaves)} leaves in a {type(self._params).__name__}).")
        return self._check_grads([None if f else g for g, f in zip(leaves, frozen)])

    def _check_grads(self, leaves):
        name = type(self).__name__
        for i, (g, p) in enumerate(zip(leaves, self._leaves)):
            if g is None:
                continue
            if not isinstance(g, Tensor):
                g = leaves[i] = tensor(np.asarray(g), p.dtype)
            if g.shape != p.shape:
                raise ValueError(f"{name}.step(grads): gradient {i} has shape {g.shape}; expected {p.shape} "
                                 "(the parameter's shape).")
            if g.dtype != p.dtype:
                raise TypeError(f"{name}.step(grads): gradient {i} has dtype {g.dtype}; expected {p.dtype}.")
        return leaves

    def step(self, grads=None):
        """Update the bound parameters in place from ``grads`` (a pytree shaped like them, or like
        ``model.params()``; None -> each parameter's ``.grad`` from ``loss.backward()``). Frozen
        parameters and parameters without a gradient are left unchanged."""
        self._require_bound()
        g = self._grad_leaves(grads)
        self._apply(g)
        self.step_count += 1

    def _apply(self, grads):
        from ..kernels import optim as K
        from ..autodiff.tensor import zeros
        full = [zeros(p.shape, p.dtype) if g is None else g for g, p in zip(grads, self._leaves)]
        updates, self.state = self._transform.update(full, self.state, list(self._leaves))
        for p, u, g in zip(self._leaves, updates, grads):
            if p.size and g is not None:
                u = u if u.dtype == p.dtype else u.astype(p.dtype)
                K.axpy(p._buf, u._buf, p.size, p.dtype, 1.0)

    def zero_grad(self):
        """Clear ``.grad`` of every bound parameter (PyTorch style)."""
        if self._leaves is not None:
            for p in self._leaves:
                p.grad = None

    # --- read / write (for optimizers that evaluate the loss several times) ----------------
    def _read(self):
        """Current values as a pytree of new Tensors shaped like the bound params (copies)."""
        from ..kernels import optim as K
        self._require_bound("_read")
        out = []
        for p in self._leaves:
            buf = backend.empty(p.size, p.dtype)
            if p.size:
                K.copy(buf, p._buf, p.size, p.dtype)
            out.append(Tensor._make(buf, p.shape, p.dtype))
        return unflatten(self._treedef, out)

    def _write(self, values):
        """Write ``values`` (a pytree shaped like the bound params) into the Parameters in place."""
        self._require_bound("_write")
        if isinstance(values, tuple) and isinstance(self._params, list):
            values = list(values)
        leaves, td = flatten(values)
        if td != self._treedef:
            raise ValueError(f"{type(self).__name__}._write(values): values has {len(leaves)} leaves; expected a "
                             f"pytree shaped like the bound params ({len(self._leaves)} leaves).")
        for p, v in zip(self._leaves, leaves):
            p._assign(v)

    # --- state ---------------------------------------------------------------------------------
    def _state_arrays(self):
        """Flat {key: numpy array} of the optimizer state (default: the leaves of ``self.state``)."""
        leaves = flatten(self.state)[0]
        return {f"state.{i}": (v.numpy() if isinstance(v, Tensor) else np.asarray(v)) for i, v in enumerate(leaves)}

    def _load_state_arrays(self, arrays):
        leaves, td = flatten(self.state)
        new = []
        for i, old in enumerate(leaves):
            key = f"state.{i}"
            if key not in arrays:
                raise KeyError(f"{type(self).__name__}.load_state_dict: missing {key!r}; the state dict comes from "
                               "a different optimizer or parameter set.")
            a = np.asarray(arrays[key])
            if isinstance(old, Tensor):
                if tuple(a.shape) != old.shape:
                    raise ValueError(f"{type(self).__name__}.load_state_dict: {key!r} has shape {a.shape}; "
                                     f"expected {old.shape}.")
                new.append(tensor(a, old.dtype))
            elif isinstance(old, numbers.Integral):
                new.append(int(a))
            else:
                new.append(float(a))
        self.state = unflatten(td, new)

    def state_dict(self):
        """{'step': int, 'state': {key: numpy array}}: everything needed to resume exactly."""
        self._require_bound("state_dict")
        out = {"step": int(self.step_count), "state": self._state_arrays()}
        groups = [{k: v for k, v in g.items() if k != "params" and isinstance(v, (int, float, bool, tuple))}
                  for g in self.param_groups]
        if any(groups):
            out["param_groups"] = groups
        return out

    def load_state_dict(self, sd):
        """Restore a ``state_dict()`` taken from an optimizer of the same kind over the same parameter shapes."""
        self._require_bound("load_state_dict")
        if not isinstance(sd, dict) or "state" not in sd or "step" not in sd:
            raise ValueError(f"{type(self).__name__}.load_state_dict: expected a dict with keys 'step' and 'state' "
                             "(from opt.state_dict()).")
        self._load_state_arrays(sd["state"])
        self.step_count = int(sd["step"])
        groups = sd.get("param_groups")
        if groups is not None:
            if len(groups) != len(self.param_groups):
                raise ValueError(f"{type(self).__name__}.load_state_dict: the state has {len(groups)} parameter "
                                 f"groups; this optimizer has {len(self.param_groups)}.")
            for g, saved in zip(self.param_groups, groups):
                for k, v in saved.items():
                    if k in g and not callable(g[k]):
                        v = np.asarray(v)
                        g[k] = tuple(v.tolist()) if isinstance(g[k], tuple) else v.item()

    def __repr__(self):
        n = "unbound" if self._leaves is None else f"{len(self._leaves)} params"
        return f"{type(self).__name__}({n}, step={self.step_count})"
