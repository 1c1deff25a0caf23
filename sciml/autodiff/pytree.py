"""Pytrees: nested dict / list / tuple containers whose leaves are Tensors (or numbers)."""
from __future__ import annotations


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
    if meta is not None:
        return kind(*vals)
    return kind(vals)


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
