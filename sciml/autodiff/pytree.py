"""Pytrees: nested dict / list / tuple containers whose leaves are Tensors (or numbers), plus node types
registered with :func:`register_pytree_node` (and dataclasses with :func:`register_dataclass`)."""
from __future__ import annotations

import dataclasses

_REGISTRY: dict = {}  # type -> (flatten(node) -> (children, aux), unflatten(aux, children) -> node)


def register_pytree_node(nodetype, flatten_fn, unflatten_fn):
    """Make instances of ``nodetype`` pytree nodes (as ``jax.tree_util.register_pytree_node``).

    Args:
        nodetype: a class.
        flatten_fn: ``node -> (children, aux)``; children an iterable of subtrees, aux hashable static data
            (part of the tree structure, so ``sm.jit`` retraces when it changes).
        unflatten_fn: ``(aux, children) -> node``.
    """
    if not isinstance(nodetype, type):
        raise TypeError(f"register_pytree_node: nodetype={nodetype!r}; expected a class.")
    if nodetype in (dict, list, tuple, type(None)):
        raise ValueError(f"register_pytree_node: {nodetype.__name__} is already a pytree node.")
    _REGISTRY[nodetype] = (flatten_fn, unflatten_fn)
    return nodetype


def register_dataclass(cls=None, *, data_fields=None, meta_fields=None):
    """Register a dataclass as a pytree node (usable as a decorator). ``data_fields`` (default: every field
    not in ``meta_fields``) are children; ``meta_fields`` are static (hashable) data.

    Example:
        >>> @sm.tree_util.register_dataclass
        ... @dataclasses.dataclass
        ... class Params:
        ...     w: sm.Tensor
        ...     b: sm.Tensor
        >>> sm.grad(lambda p: (p.w * p.b).sum())(Params(sm.ones(2), sm.ones(2)))   # a Params of gradients
    """
    def wrap(c):
        if not dataclasses.is_dataclass(c):
            raise TypeError(f"register_dataclass: {c.__name__} is not a dataclass (decorate it with "
                            "@dataclasses.dataclass first).")
        names = [f.name for f in dataclasses.fields(c)]
        meta = list(meta_fields or [])
        data = list(data_fields) if data_fields is not None else [n for n in names if n not in meta]
        for n in data + meta:
            if n not in names:
                raise ValueError(f"register_dataclass: {c.__name__} has no field {n!r}.")

        def flat(obj):
            return [getattr(obj, n) for n in data], tuple(getattr(obj, n) for n in meta)

        def unflat(aux, children):
            kw = dict(zip(data, children))
            kw.update(zip(meta, aux))
            obj = object.__new__(c)
            for k, v in kw.items():
                object.__setattr__(obj, k, v)  # frozen dataclasses too; __post_init__ is not rerun
            return obj
        return register_pytree_node(c, flat, unflat)
    return wrap if cls is None else wrap(cls)


def flatten(tree):
    """(leaves, treedef): leaves in a fixed order (dict keys sorted), treedef rebuilds the tree."""
    leaves = []
    return leaves, _flatten(tree, leaves)


def _flatten(t, leaves):  # module-level, not a self-referencing closure: no reference cycle holding leaves
    if isinstance(t, dict):
        keys = sorted(t, key=str)
        return ("dict", keys, [_flatten(t[k], leaves) for k in keys])
    if isinstance(t, (list, tuple)) and not _is_namedtuple(t):
        return (type(t), None, [_flatten(v, leaves) for v in t])
    if _is_namedtuple(t):
        return (type(t), t._fields, [_flatten(v, leaves) for v in t])
    if t is None:
        return ("none", None, None)
    reg = _REGISTRY.get(type(t)) if _REGISTRY else None
    if reg is not None:
        children, aux = reg[0](t)
        return (_Node(type(t)), aux, [_flatten(v, leaves) for v in children])
    leaves.append(t)
    return ("leaf", None, None)


def unflatten(treedef, leaves):
    return _unflatten(treedef, iter(leaves))


def _unflatten(d, it):
    kind, meta, kids = d
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    if kind == "dict":
        return {k: _unflatten(c, it) for k, c in zip(meta, kids)}
    vals = [_unflatten(c, it) for c in kids]
    if isinstance(kind, _Node):
        return _REGISTRY[kind.cls][1](meta, vals)
    if meta is not None:
        return kind(*vals)
    return kind(vals)


class _Node:
    """Marks a registered node type in a treedef (its repr names the class, for jit's cache key)."""
    __slots__ = ("cls",)

    def __init__(self, cls):
        self.cls = cls

    def __repr__(self):
        return f"<pytree node {self.cls.__module__}.{self.cls.__qualname__}>"

    def __eq__(self, other):
        return isinstance(other, _Node) and other.cls is self.cls

    def __hash__(self):
        return hash(self.cls)


def _is_namedtuple(t):
    return isinstance(t, tuple) and hasattr(t, "_fields")


def tree_map(fn, tree, *rest):
    """Apply ``fn`` leafwise to ``tree`` (and matching trees ``rest``)."""
    leaves, td = flatten(tree)
    others = [flatten(r)[0] for r in rest]
    for o in others:
        if len(o) != len(leaves):
            raise ValueError(f"tree_map: trees have {len(leaves)} and {len(o)} leaves; expected the same structure.")
    return unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])


def tree_leaves(tree):
    return flatten(tree)[0]


def tree_structure(tree):
    return flatten(tree)[1]
