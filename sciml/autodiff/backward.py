"""Reverse-mode sweep over the tape: topological order, cotangent accumulation, pruning."""
from __future__ import annotations

from .primitive import enable_grad, no_grad

_needs = {"mask": None}


def needs(i: int) -> bool:
    """Inside a VJP rule: whether the cotangent of input ``i`` is wanted (skip work if not)."""
    m = _needs["mask"]
    return True if m is None else m[i]


def _toposort(roots):
    order, seen = [], set()
    stack = [(n, False) for n in roots if n is not None]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for x in node.inputs:
            if x._node is not None and id(x._node) not in seen:
                stack.append((x._node, False))
    return order  # inputs before outputs


def backward_to(roots, seeds, wrt, create_graph=False):
    """Cotangents of ``wrt`` nodes given ``roots`` (Tensors) and ``seeds`` (cotangents or None = 1).

    Returns a list aligned with ``wrt``; an entry is None when ``wrt[i]`` does not influence
    the roots. With ``create_graph`` the sweep is itself recorded, so results can be
    differentiated again; tangents of active forward levels flow through it either way.
    """
    from .tensor import ones
    root_nodes = [r._node for r in roots]
    order = _toposort(root_nodes)
    wrt_ids = {id(n) for n in wrt}
    useful = set()
    for node in order:
        if id(node) in wrt_ids or any(x._node is not None and id(x._node) in useful for x in node.inputs):
            useful.add(id(node))
    cot = {}
    for r, s, n in zip(roots, seeds or [None] * len(roots), root_nodes):
        if n is None or id(n) not in useful:
            continue
        g = ones(r.shape, r.dtype) if s is None else s
        cot[id(n)] = cot[id(n)] + g if id(n) in cot else g
    ctx = enable_grad() if create_graph else no_grad()
    with ctx:
        for node in reversed(order):
            g = cot.get(id(node))
            if g is None or node.prim is None or id(node) in wrt_ids and not _feeds_other(node, useful, wrt_ids):
                continue
            mask = tuple(x._node is not None and id(x._node) in useful for x in node.inputs)
            if not any(mask):
                continue
            prim = node.prim
            if prim.vjp is None:
                raise NotImplementedError(f"{prim.name!r} has no VJP rule; it cannot be differentiated.")
            _needs["mask"] = mask
            try:
                grads = prim.vjp(g, *node.inputs, out=node.output(), **node.params)
            finally:
                _needs["mask"] = None
            for x, gi, m in zip(node.inputs, grads, mask):
                if not m or gi is None:
                    continue
                k = id(x._node)
                cot[k] = cot[k] + gi if k in cot else gi
    return [cot.get(id(n)) for n in wrt]


def _feeds_other(node, useful, wrt_ids):
    """A wrt node whose inputs also lead to other wrt nodes must still pass cotangents on."""
    return any(x._node is not None and id(x._node) in useful for x in node.inputs)
