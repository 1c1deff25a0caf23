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


class Optimizer:
    """Stateful shell: binds a pytree of Parameters and updates them in place on ``step(grads)``.

    Args:
        params: a list / dict pytree of :class:`sciml.models.Parameter` (``model.parameters()`` or
            ``model.params()``), or None to bind later with :meth:`bind`.
        transform: a :class:`Transform` computing updates (new = old + update). The built-in
            optimizers (Adam, SGD, ...) do not need one: they run fused kernels.
    """

    def __init__(self, params=None, transform: Transform | None = None):
        self._transform = transform
        self._leaves = None
        self._treedef = None
        self._names = None
        self.step_count = 0
        self.state = None
        if params is not None:
            self.bind(params)

    # --- binding --------------------------------------------------------------------------
    def bind(self, params):
        """Bind the parameters to update (a pytree of Parameters) and reset the state. Returns self."""
        from ..models.module import Parameter
        if params is None:
            raise ValueError(f"{type(self).__name__}.bind(params): got None; expected model.parameters() or "
                             "model.params().")
        if hasattr(params, "parameters") and callable(params.parameters) and not isinstance(params, (list, dict)):
            params = params.parameters()
        if isinstance(params, tuple) or type(params) is list:
            params = list(params)
        leaves, treedef = flatten(list(params) if isinstance(params, list) else params)
        if not leaves:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list.")
        for i, p in enumerate(leaves):
            if not isinstance(p, Parameter):
                raise TypeError(f"{type(self).__name__}: parameter {i} is a {type(p).__name__}; expected "
                                "sciml.models.Parameter (updated in place). Pass model.parameters() / "
                                "model.params(), or wrap tensors with sciml.models.Parameter(t).")
        self._leaves, self._treedef, self._params = leaves, treedef, params
        self._names = getattr(params, "names", None) if isinstance(params, list) else None
        self.step_count = 0
        self._init_state()
        return self

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
        """Flatten ``grads`` and check it matches the bound params (structure, shapes, dtypes)."""
        name = type(self).__name__
        if grads is None:
            out = []
            for i, p in enumerate(self._leaves):
                if p.grad is None:
                    raise ValueError(f"{name}.step(): parameter {i} has no .grad; call loss.backward() first or "
                                     "pass grads explicitly: opt.step(grads).")
                out.append(p.grad)
            return out
        if isinstance(grads, tuple) and isinstance(self._params, list):
            grads = list(grads)
        if isinstance(grads, dict) and self._names is not None:
            grads = [_lookup(grads, n, name) for n in self._names]   # params()-shaped grads, list-bound optimizer
        leaves, td = flatten(grads)
        if td != self._treedef:
            raise ValueError(f"{name}.step(grads): grads has {len(leaves)} leaves in a "
                             f"{type(grads).__name__}; expected a pytree shaped like the bound params "
                             f"({len(self._leaves)} leaves in a {type(self._params).__name__}).")
        for i, (g, p) in enumerate(zip(leaves, self._leaves)):
            if not isinstance(g, Tensor):
                g = leaves[i] = tensor(np.asarray(g), p.dtype)
            if g.shape != p.shape:
                raise ValueError(f"{name}.step(grads): gradient {i} has shape {g.shape}; expected {p.shape} "
                                 "(the parameter's shape).")
            if g.dtype != p.dtype:
                raise TypeError(f"{name}.step(grads): gradient {i} has dtype {g.dtype}; expected {p.dtype}.")
        return leaves

    def step(self, grads=None):
        """Update the bound parameters in place from ``grads`` (a pytree shaped like them; None ->
        each parameter's ``.grad`` from ``loss.backward()``)."""
        self._require_bound()
        g = self._grad_leaves(grads)
        self._apply(g)
        self.step_count += 1

    def _apply(self, grads):
        from ..kernels import optim as K
        updates, self.state = self._transform.update(list(grads), self.state, list(self._leaves))
        for p, u in zip(self._leaves, updates):
            if p.size:
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
        return {"step": int(self.step_count), "state": self._state_arrays()}

    def load_state_dict(self, sd):
        """Restore a ``state_dict()`` taken from an optimizer of the same kind over the same parameter shapes."""
        self._require_bound("load_state_dict")
        if not isinstance(sd, dict) or "state" not in sd or "step" not in sd:
            raise ValueError(f"{type(self).__name__}.load_state_dict: expected a dict with keys 'step' and 'state' "
                             "(from opt.state_dict()).")
        self._load_state_arrays(sd["state"])
        self.step_count = int(sd["step"])

    def __repr__(self):
        n = "unbound" if self._leaves is None else f"{len(self._leaves)} params"
        return f"{type(self).__name__}({n}, step={self.step_count})"
