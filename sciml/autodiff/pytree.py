"""Pytrees: nested dict / list / tuple containers whose leaves are Tensors (or numbers)."""
from __future__ import annotations


def flatten(tree):
    """(leaves, treedef): leaves in a fixed order (dict keys sorted), treedef rebuilds the tree."""
    leaves = []

    def rec(t):
        if isinstance(t, dict):
            keys = sorted(t, key=str)
            return ("dict", keys, [rec(t[k]) for k in keys])
        if isinstance(t, (list, tuple)) and not _is_namedtuple(t):
            return (type(t), None, [rec(v) for v in t])
        if _is_namedtuple(t):
            return (type(t), t._fields, [rec(v) for v in t])
        if t is None:
            return ("none", None, None)
        leaves.append(t)
        return ("leaf", None, None)
    return leaves, rec(tree)


def unflatten(treedef, leaves):
    it = iter(leaves)

    def rec(d):
        kind, meta, kids = d
        if kind == "leaf":
            return next(it)
        if kind == "none":
            return None
        if kind == "dict":
            return {k: rec(c) for k, c in zip(meta, kids)}
        vals = [rec(c) for c in kids]
        if meta is not None:
            return kind(*vals)
        return kind(vals)
    return rec(treedef)


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
