"""Module and Parameter: objects for people, pure functions for transforms.

A :class:`Module` declares :class:`Parameter` s, buffers (:class:`Buffer`) and submodules as
attributes in ``__init__`` (directly, or inside lists, tuples and dicts) and computes in
``forward``. They are found automatically:

    >>> net = sm.models.MLP([2, 16, 1], seed=0)
    >>> [n for n, _ in net.named_parameters()]
    ['layers.0.weight', 'layers.0.bias', 'layers.1.weight', 'layers.1.bias']
    >>> params = net.params()                 # nested dict {'layers': {'0': {'weight': ..}}}
    >>> y = net.apply(params, x)              # pure: uses only `params`
    >>> grads = sm.grad(lambda p: ((net.apply(p, x) - y0) ** 2).mean())(params)   # shaped like params

A Parameter is a Tensor whose buffer optimizers overwrite in place (one fused Taichi kernel per
step): after ``opt.step(grads)``, ``model(x)`` sees the new values. ``params()`` returns the live
Parameters (no copy); ``state_dict()`` returns numpy copies.
"""
from __future__ import annotations

import os
import weakref
from collections import OrderedDict

import numpy as np

from .. import backend, runtime
from ..autodiff import primitive as P
from ..autodiff.primitive import leaf_node
from ..autodiff.tensor import Tensor, tensor
from ._module_io import STALE_AFTER_S, _atomic_save, _lock, _resolve_load_path, load_state  # noqa: F401

__all__ = ["Parameter", "Buffer", "Module"]


class Parameter(Tensor):
    """A trainable Tensor that optimizers update in place.

    A Parameter requires gradients from birth (as in PyTorch): ``net(x)`` records the tape through
    the module's trainable Parameters, so ``loss.backward()`` fills each ``p.grad`` without a
    ``requires_grad_()`` call (a bare Parameter used outside any Module records directly).
    ``p.requires_grad_(False)`` freezes it on every path: ``backward()`` leaves its ``.grad`` None,
    :meth:`Module.params` omits it (so ``sm.grad(loss)(net.params())`` has no entry for it and
    :meth:`Module.apply` uses its current value as a constant), and optimizers skip it.
    ``requires_grad_(True)`` unfreezes it.

    How: a Parameter held by a Module carries no tape node itself (so ``sm.jit`` and the transforms
    see a plain constant input, and traced functions of ``net.params()`` replay); ``Module.__call__``
    and ``Module.apply`` (outside transforms, with gradients enabled) substitute each trainable
    Parameter with an alias sharing its buffer and a persistent leaf node whose gradient
    ``backward()`` accumulates into the Parameter's ``.grad``.

    Args:
        data: a Tensor or array-like; its values are copied into a new buffer owned by the Parameter.
        dtype: float dtype (default: the data's, or sciml's default float dtype).
        requires_grad: start trainable (default True).
    """
    __slots__ = ("_trainable", "_leaf", "_owned")

    def __init__(self, data, dtype=None, requires_grad=True):
        src = data if isinstance(data, Tensor) and (dtype is None or data.dtype == dtype) else tensor(data, dtype)
        if src.dtype not in ("float32", "float64"):
            raise TypeError(f"Parameter(data): got dtype {src.dtype}; expected float32 or float64.")
        self._buf = backend.from_numpy(src.numpy(), src.dtype)
        self.shape, self.dtype = src.shape, src.dtype
        self._node, self._tangents, self.grad = None, None, None
        self._trainable, self._leaf, self._owned = False, None, False
        if requires_grad:
            self.requires_grad_(True)

    @property
    def requires_grad(self) -> bool:
        return self._trainable

    def requires_grad_(self, flag: bool = True):
        """Make the Parameter trainable (True, the default state) or frozen (False). Returns self."""
        if flag:
            self._trainable = True
            if self._leaf is None:
                self._leaf = leaf_node(self)
                _register_grad_sink(self)
            if not self._owned:
                self._node = self._leaf
        else:
            self._trainable = False
            self._node = None
            self.grad = None
        return self

    def _own(self):
        """Called when a Module finds this Parameter: from now on the tape goes through aliases."""
        self._owned = True
        self._node = None

    def _alias(self):
        """A Tensor sharing this Parameter's buffer, on the tape as its persistent leaf."""
        return Tensor._make(self._buf, self.shape, self.dtype, self._leaf)

    def _assign(self, value):
        """Overwrite the values in place with ``value`` (Tensor or array of the same shape)."""
        from ..kernels import optim as K
        if not isinstance(value, Tensor):
            value = tensor(np.asarray(value), self.dtype)
        if value.shape != self.shape:
            raise ValueError(f"Parameter._assign: got shape {value.shape}; expected {self.shape}.")
        if value.dtype != self.dtype:
            value = value.astype(self.dtype)
        if self.size:
            K.copy(self._buf, value._buf, self.size, self.dtype)

    def __repr__(self):
        return "Parameter" + Tensor.__repr__(self)[len("Tensor"):]


class _GradSink:
    """Receives ``.grad`` for a Parameter from ``Tensor.backward`` while holding it only weakly
    (the tape's owner table would otherwise keep every Parameter alive forever)."""
    __slots__ = ("ref",)

    def __init__(self, p):
        self.ref = weakref.ref(p)

    @property
    def grad(self):
        p = self.ref()
        return None if p is None else p.grad

    @grad.setter
    def grad(self, g):
        p = self.ref()
        if p is not None and p._trainable:  # frozen meanwhile: stays without a gradient
            p.grad = g


def _register_grad_sink(p):
    from ..autodiff.tensor import _LEAF_OWNERS
    key = id(p._leaf)
    _LEAF_OWNERS[key] = _GradSink(p)
    weakref.finalize(p._leaf, _LEAF_OWNERS.pop, key, None)


def _taping():
    """Whether a module call should record the tape through its Parameters: gradients enabled, outside
    the transforms (which differentiate their own inputs) and outside an ``sm.jit`` trace."""
    st = P._state.d
    return st["grad_enabled"] and st["reverse_depth"] == 0 and backend.TRACE[0] is None


# ids of the modules whose Parameters the running Module.__call__ (of this thread) has substituted: a submodule
# among them, called from its parent's forward, has nothing left to substitute and skips its own walk
_CALL = runtime.ThreadLocal({"done": None})


class Buffer(Parameter):
    """Non-trainable module state saved in ``state_dict`` (e.g. BatchNorm running statistics)."""
    __slots__ = ()

    def __init__(self, data, dtype=None, requires_grad=False):
        super().__init__(data, dtype, requires_grad=False)

    def __repr__(self):
        return "Buffer" + Tensor.__repr__(self)[len("Tensor"):]


class ParameterList(list):
    """A list of Parameters that also carries their dotted names (``names``)."""

    def __init__(self, params=(), names=None):
        super().__init__(params)
        self.names = list(names) if names is not None else None


_LEAF = frozenset((int, float, complex, str, bytes, bool, type(None), type(len), type(lambda: 0)))


def _walk(obj, prefix, out_params, out_buffers, out_modules, seen):
    """Collect (name, obj) of Parameters, Buffers and Modules found in containers."""
    if type(obj) in _LEAF:  # numbers, strings, functions: nothing inside (most attributes; a fast exit)
        return
    if isinstance(obj, Buffer):
        out_buffers.append((prefix, obj))
    elif isinstance(obj, Parameter):
        if not obj._owned:
            obj._own()
        out_params.append((prefix, obj))
    elif isinstance(obj, Module):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        out_modules.append((prefix, obj))
        for k, v in obj.__dict__.items():
            if k.startswith("_") or type(v) in _LEAF:
                continue
            _walk(v, f"{prefix}.{k}" if prefix else k, out_params, out_buffers, out_modules, seen)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            if type(v) not in _LEAF:
                _walk(v, f"{prefix}.{i}" if prefix else str(i), out_params, out_buffers, out_modules, seen)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if type(v) not in _LEAF:
                _walk(v, f"{prefix}.{k}" if prefix else str(k), out_params, out_buffers, out_modules, seen)


def _trainable_slots(root):
    """([(holder, key, Parameter)], ids of the modules visited) for every place under ``root`` (found as
    :func:`_walk` finds them) that holds a trainable Parameter: ``holder[key]`` is the Parameter, ``holder`` a
    module's ``__dict__``, a list or a dict. The list ends with None if a Parameter sits in a tuple (which
    cannot be substituted). The
    per-call path of ``Module.__call__``: no dotted names are built (measured: ~3x cheaper than
    ``_collect`` + ``_aliases`` + ``_substituted`` on the bench_nn MLP)."""
    out, seen, in_tuple = [], set(), []
    leaf_types, P, B, M = _LEAF, Parameter, Buffer, Module

    def visit(holder, key, obj):
        if isinstance(obj, P):
            if isinstance(obj, B):
                return
            if not obj._owned:
                obj._own()
            if obj._trainable:
                if holder is None:
                    in_tuple.append(obj)
                else:
                    out.append((holder, key, obj))
        elif isinstance(obj, M):
            if id(obj) in seen:
                return
            seen.add(id(obj))
            d = obj.__dict__
            for k, v in d.items():
                if type(v) not in leaf_types and not k.startswith("_"):
                    visit(d, k, v)
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                if type(v) not in leaf_types:
                    visit(obj, i, v)
        elif isinstance(obj, tuple):
            for v in obj:
                if type(v) not in leaf_types:
                    visit(None, None, v)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                if type(v) not in leaf_types:
                    visit(obj, k, v)
    visit(None, None, root)
    if in_tuple:
        out.append(None)
    return out, seen


def _substitute(slots):
    """Put each slot's alias (one per Parameter, shared where a Parameter sits in several places) in
    place; returns [(holder, key, old value)] for restoring in reverse order."""
    saved, made = [], {}
    for holder, key, p in slots:
        a = made.get(id(p))
        if a is None:
            a = made[id(p)] = p._alias()
        saved.append((holder, key, holder[key]))
        holder[key] = a
    return saved


def _set_nested(tree, dotted, value):
    keys = dotted.split(".")
    for k in keys[:-1]:
        tree = tree.setdefault(k, {})
    tree[keys[-1]] = value


def _has_nested(tree, dotted):
    node = tree
    for k in dotted.split("."):
        if not isinstance(node, dict) or k not in node:
            return False
        node = node[k]
    return True


def _get_nested(tree, dotted, where):
    node = tree
    for k in dotted.split("."):
        if not isinstance(node, dict) or k not in node:
            raise KeyError(f"{where}: params has no entry {dotted!r} (missing key {k!r}); expected a nested dict "
                           "shaped like model.params().")
        node = node[k]
    return node


class Module:
    """Base class of layers and models: subclass it, create parameters in ``__init__``, compute in ``forward``.

    Attributes whose names start with ``_`` are private and not searched for parameters.
    """
    training = True

    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined.")

    def __call__(self, *inputs, **kw):
        if _taping():
            call = _CALL.d
            done = call["done"]
            if done is not None and id(self) in done:  # a submodule its parent's call has substituted
                return self.forward(*inputs, **kw)
            slots, seen = _trainable_slots(self)
            if slots:
                if slots[-1] is None:  # a Parameter inside a tuple: the by-name path raises its error
                    with _substituted(self, _aliases(self._collect()[0])):
                        return self.forward(*inputs, **kw)
                saved = _substitute(slots)
                call["done"] = seen if done is None else seen | done
                try:
                    return self.forward(*inputs, **kw)
                finally:
                    call["done"] = done
                    for holder, key, old in reversed(saved):
                        holder[key] = old
        return self.forward(*inputs, **kw)

    # --- discovery ----------------------------------------------------------------------
    def _collect(self):
        ps, bs, ms = [], [], []
        _walk(self, "", ps, bs, ms, set())
        return ps, bs, ms

    def named_parameters(self):
        """[(dotted name, Parameter)] in declaration order (a shared Parameter is listed once)."""
        out, seen = [], set()
        for n, p in self._collect()[0]:
            if id(p) not in seen:
                seen.add(id(p))
                out.append((n, p))
        return out

    def parameters(self):
        """The trainable Parameters, in ``named_parameters`` order (pass them to an optimizer).

        The list remembers the dotted names (``.names``), so an optimizer bound to it also accepts
        gradients shaped like ``params()`` (the nested dict from ``grad(...)(model.params())``)."""
        named = self.named_parameters()
        return ParameterList([p for _, p in named], [n for n, _ in named])

    def named_buffers(self):
        return self._collect()[1]

    def named_modules(self):
        """[(dotted name, Module)] including self (name '')."""
        return self._collect()[2]

    def modules(self):
        return [m for _, m in self.named_modules()]

    def children(self):
        """Direct submodules (attributes, or inside lists/dicts held by attributes)."""
        return [m for k, v in self.__dict__.items() if not k.startswith("_") for _, m in _module_items(k, v)]

    def params(self):
        """The trainable parameters as a nested dict pytree {name: {...: Parameter}} (live Parameters,
        no copy). Frozen parameters (``requires_grad_(False)``) are left out, so
        ``grad(loss)(model.params())`` returns gradients with the same structure and none for them.
        """
        tree = {}
        for n, p in self.named_parameters():
            if p.requires_grad:
                _set_nested(tree, n, p)
        return tree

    def requires_grad_(self, flag: bool = True):
        """Unfreeze (True) or freeze (False) every parameter of the module. Returns self."""
        for p in self.parameters():
            p.requires_grad_(flag)
        return self

    def zero_grad(self):
        """Clear ``.grad`` of every parameter (PyTorch style)."""
        for p in self.parameters():
            p.grad = None

    def num_parameters(self) -> int:
        return sum(p.size for p in self.parameters())

    # --- pure application ---------------------------------------------------------------
    def apply(self, params, *inputs, **kw):
        """``forward(*inputs)`` computed with the Tensors in ``params`` (a pytree shaped like
        ``self.params()``) in place of the module's own parameters: a pure function of ``params``.

        Args:
            params: nested dict {name: Tensor} as returned by ``params()`` (values may be any Tensors,
                e.g. ones being differentiated).
        Example:
            >>> y = net.apply(net.params(), x)          # equals net(x)
        """
        if not isinstance(params, dict):
            raise TypeError(f"apply(params, ...): got params of type {type(params).__name__}; expected the nested "
                            "dict returned by model.params().")
        named = self.named_parameters()
        subs = []
        for n, p in named:
            if not p.requires_grad and not _has_nested(params, n):
                continue  # frozen: left out of params(); the module's own value is used as a constant
            v = _get_nested(params, n, "apply")
            if not isinstance(v, Tensor):
                raise TypeError(f"apply: params[{n!r}] is a {type(v).__name__}; expected a Tensor.")
            if v.shape != p.shape:
                raise ValueError(f"apply: params[{n!r}] has shape {v.shape}; expected {p.shape}.")
            subs.append((n, v._alias() if isinstance(v, Parameter) and v._trainable and v._owned and _taping()
                         else v))
        with _substituted(self, subs):
            return self.forward(*inputs, **kw)

    # --- modes ----------------------------------------------------------------------------
    def train(self, mode: bool = True):
        """Training mode (Dropout active, BatchNorm uses and updates batch statistics). Returns self."""
        for m in self.modules():
            m.training = bool(mode)
        return self

    def eval(self):
        """Evaluation mode (Dropout off, BatchNorm uses running statistics). Returns self."""
        return self.train(False)

    # --- state ------------------------------------------------------------------------------
    def state_dict(self):
        """OrderedDict {dotted name: numpy array (a copy)} of parameters and buffers."""
        out = OrderedDict()
        for n, p in self.named_parameters():
            out[n] = p.numpy()
        for n, b in self.named_buffers():
            out[n] = b.numpy()
        return out

    def load_state_dict(self, state, strict: bool = True):
        """Copy values from ``state`` (name -> array or Tensor) into the parameters and buffers, in place.

        Args:
            strict: if True (default), missing or unexpected keys raise KeyError. Shape mismatches
                always raise ValueError.
        Returns:
            (missing_keys, unexpected_keys) as lists.
        """
        own = OrderedDict(self.named_parameters())
        own.update(self.named_buffers())
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict({type(self).__name__}): missing keys {missing}, unexpected keys "
                           f"{unexpected}. Use strict=False to load the matching keys only.")
        for k, p in own.items():
            if k not in state:
                continue
            v = state[k]
            shape = tuple(v.shape)
            if shape != p.shape:
                raise ValueError(f"load_state_dict({type(self).__name__}): {k!r} has shape {shape} in the state "
                                 f"dict; the model expects {p.shape}.")
        for k, p in own.items():
            if k in state:
                v = state[k]
                p._assign(v if isinstance(v, Tensor) else np.asarray(v))
        return missing, unexpected

    def save(self, path):
        """Write ``state_dict()`` to ``path``: ``.safetensors`` or ``.npz`` (a path with another
        suffix gets ``.npz`` appended, as ``np.savez`` does). Neither format executes code when loaded.

        The write is atomic: the data goes to a temporary file ``.<name>.*.tmp<suffix>`` in the same
        folder, which is fsynced and renamed over ``path``, so a crash or kill during the write leaves
        the previous file intact. A temporary file left by a writer that was killed is removed by the
        next successful save of the same path. Returns the path written.
        """
        from .._io import check_output_path
        path = os.fspath(path)
        if not path.endswith((".safetensors", ".npz")):
            path += ".npz"
        path = check_output_path(path, arg=f"{type(self).__name__}.save(path=...)")
        sd = self.state_dict()
        if path.endswith(".safetensors"):
            from safetensors.numpy import save as _st_bytes
            data = _st_bytes({k: np.ascontiguousarray(v) for k, v in sd.items()})
            _atomic_save(path, lambda f: f.write(data))
        else:
            _atomic_save(path, lambda f: np.savez(f, **sd))
        return path

    def load(self, path, strict: bool = True, allow_nonfinite: bool = False):
        """Load parameters saved with :meth:`save` (no code is executed: npz is read with
        allow_pickle=False). Returns self.

        Raises (each message names the file):
            FileNotFoundError: no such file.
            ValueError: the file is not a complete checkpoint (junk, truncated), holds NaN or
                infinite values (unless ``allow_nonfinite=True``), or an array's shape does not fit.
            KeyError: keys are missing or unexpected (``strict=True``).
        """
        path = _resolve_load_path(path)
        state = load_state(path, allow_nonfinite=allow_nonfinite)
        try:
            self.load_state_dict(state, strict=strict)
        except (KeyError, ValueError) as e:
            msg = e.args[0] if e.args else str(e)
            raise type(e)(f"{type(self).__name__}.load({path!r}): {msg}") from None
        return self

    # --- repr -----------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        lines = []
        for k, v in self.__dict__.items():
            if k.startswith("_"):
                continue
            items = _module_items(k, v)
            for name, m in items:
                sub = repr(m).replace("\n", "\n  ")
                lines.append(f"  ({name}): {sub}")
        own = sum(p.size for k, p in self.__dict__.items() if isinstance(p, Parameter) and not isinstance(p, Buffer))
        head = f"{type(self).__name__}({self.extra_repr()})"
        total = self.num_parameters()
        if not lines:
            return head + (f"  # {_count(own)} params" if own else "")
        return f"{type(self).__name__}({self.extra_repr()}\n" + "\n".join(lines) + f"\n)  # {_count(total)} params"


def _aliases(named):
    """[(dotted name, alias)] for every occurrence of a trainable Parameter (a shared one gets one alias)."""
    out, made = [], {}
    for n, p in named:
        if p._trainable:
            a = made.get(id(p))
            if a is None:
                a = made[id(p)] = p._alias()
            out.append((n, a))
    return out


def _count(n):
    return f"{n:,}"


def _module_items(k, v):
    if isinstance(v, Module):
        return [(k, v)]
    if isinstance(v, (list, tuple)):
        return [(f"{k}.{i}", m) for i, m in enumerate(v) if isinstance(m, Module)]
    if isinstance(v, dict):
        return [(f"{k}.{kk}", m) for kk, m in v.items() if isinstance(m, Module)]
    return []


class _substituted:
    """Temporarily replace each named Parameter with a Tensor (restored on exit)."""

    def __init__(self, root, subs):
        self.root, self.subs, self.saved = root, subs, []

    def __enter__(self):
        for name, v in self.subs:
            holder, key = _locate(self.root, name)
            self.saved.append((holder, key, _get(holder, key)))
            _put(holder, key, v)

    def __exit__(self, *exc):
        for holder, key, old in reversed(self.saved):
            _put(holder, key, old)
        return False


def _locate(root, dotted):
    keys = dotted.split(".")
    obj = root
    for k in keys[:-1]:
        obj = _get(obj, k)
    return obj, keys[-1]


def _get(obj, k):
    if isinstance(obj, Module):
        return obj.__dict__[k]
    if isinstance(obj, (list, tuple)):
        return obj[int(k)]
    return obj[k] if k in obj else obj[_dict_key(obj, k)]


def _put(obj, k, v):
    if isinstance(obj, Module):
        obj.__dict__[k] = v
    elif isinstance(obj, list):
        obj[int(k)] = v
    elif isinstance(obj, tuple):
        raise TypeError("apply: parameters inside a tuple cannot be substituted; store them in a list.")
    else:
        obj[k if k in obj else _dict_key(obj, k)] = v


def _dict_key(d, k):
    for kk in d:
        if str(kk) == k:
            return kk
    raise KeyError(k)
