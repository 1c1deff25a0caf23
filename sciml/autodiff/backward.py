"""Reverse-mode sweep over the tape: topological order, cotangent accumulation, pruning."""
from __future__ import annotations

import contextlib

from ..runtime import ThreadLocal
from .primitive import enable_grad, no_grad, reverse_depth, tangent_only

# per thread (see primitive._state); the sweep reads and writes the thread's dict ``.d`` directly
_needs = ThreadLocal({"mask": None})
_tangent_only = ThreadLocal({"depth": None})  # reverse depth whose sweep may skip the primal of wrt cotangents (hvp)


@contextlib.contextmanager
def tangent_only_results(depth):
    """The sweep at reverse depth ``depth`` (and only it) may return wrt cotangents whose primal
    values are not computed (buffer None): for callers that read only their forward tangents
    (Hessian-vector products: the gradient itself is dead there)."""
    prev = _tangent_only["depth"]
    _tangent_only["depth"] = depth
    try:
        yield
    finally:
        _tangent_only["depth"] = prev


def needs(i: int) -> bool:
    """Inside a VJP rule: whether the cotangent of input ``i`` is wanted (skip work if not)."""
    m = _needs.d["mask"]
    return True if m is None else m[i]


def _toposort(roots, wrt_set, leaves=False):
    """Post-order of the nodes reachable from ``roots`` (inputs before outputs), and the set of
    nodes that lead to a ``wrt`` node (only they get cotangents). Nodes are keys by identity.
    With ``leaves``, every leaf node (``prim`` None) counts as a ``wrt`` node."""
    order, seen, useful = [], set(), set()
    stack = [(n, False) for n in roots if n is not None]
    pop, push, add = stack.pop, stack.append, order.append
    while stack:
        node, done = pop()
        if done:
            add(node)
            if node in wrt_set or leaves and node.prim is None:
                useful.add(node)
            else:
                for x in node.inputs:
                    if x._node in useful:
                        useful.add(node)
                        break
            continue
        if node in seen:
            continue
        seen.add(node)
        push((node, True))
        for x in node.inputs:
            n = x._node
            if n is not None and n not in seen:
                push((n, False))
    return order, useful


def backward_to(roots, seeds, wrt, create_graph=False, _topo=None):
    """Cotangents of ``wrt`` nodes given ``roots`` (Tensors) and ``seeds`` (cotangents or None = 1).

    Returns a list aligned with ``wrt``; an entry is None when ``wrt[i]`` does not influence
    the roots. With ``create_graph`` the sweep is itself recorded, so results can be
    differentiated again; tangents of active forward levels flow through it either way.
    ``_topo``: ``_toposort``'s result for these roots and ``wrt``, when the caller has it already.
    """
    lazy = not create_graph and _tangent_only.d["depth"] == reverse_depth()
    if lazy:
        try:
            return _sweep(roots, seeds, wrt, create_graph, _topo, True)
        except (AttributeError, TypeError, ValueError, _Redo):
            pass  # a rule read a skipped primal value: sweep again, computing everything
    return _sweep(roots, seeds, wrt, create_graph, _topo, False)


def _sweep(roots, seeds, wrt, create_graph, topo, lazy):
    from .tensor import Tensor, ones
    root_nodes = [r._node for r in roots]
    wrt_set = set(wrt)
    order, useful = _toposort(root_nodes, wrt_set) if topo is None else topo
    cot = {}
    for r, s, n in zip(roots, seeds or [None] * len(roots), root_nodes):
        if n is None or n not in useful:
            continue
        g = _ones_like(r, Tensor, ones) if s is None else s
        cot[n] = cot[n] + g if n in cot else g
    make = Tensor._make
    nd = _needs.d
    get = cot.get
    ctx = enable_grad() if create_graph else no_grad()
    pend = {}  # input node -> [(input, g, meta)]: cotangents of strided views, summed when first read
    with ctx:
        for node in reversed(order):
            if node in pend:
                _flush_views(cot, pend.pop(node), lazy and node.prim is None and node in wrt_set)
            g = get(node)
            if g is None:
                continue
            prim = node.prim
            if prim is None:
                continue
            inputs = node.inputs
            mask = tuple([x._node in useful for x in inputs])
            if True not in mask:  # no input leads to a wrt node (a wrt node's own inputs may still: go on)
                continue
            if prim.name == "view" and g._tangents and _views_on():  # tangent-carrying: see ops/unview_sum.py
                pend.setdefault(inputs[0]._node, []).append((inputs[0], g, node.params["meta"]))
                continue
            if prim.vjp is None:
                raise NotImplementedError(f"{prim.name!r} has no VJP rule; it cannot be differentiated.")
            if lazy and g._tangents:
                final = tuple(m and x._node.prim is None and x._node in wrt_set for x, m in zip(inputs, mask))
                if any(final):
                    _sweep_split(cot, node, g, mask, final)
                    continue
            out = make(node.out_buf, node.out_shape, node.out_dtype, node, node.out_tangents)
            nd["mask"] = mask  # what needs(i) answers inside the rule
            try:
                grads = prim.vjp(g, *inputs, out=out, **node.params)
            finally:
                nd["mask"] = None
            _accumulate(cot, node, grads, mask)
        for n, lst in pend.items():  # wrt nodes outside the order's sweep (leaves)
            _flush_views(cot, lst, lazy and n.prim is None and n in wrt_set)
    return [get(n) for n in wrt]


def _views_on():
    from .ops import unview_sum as U
    return U.ON[0]


class _Inputs:
    __slots__ = ("inputs",)

    def __init__(self, x):
        self.inputs = (x,)


def _flush_views(cot, lst, final):
    """The cotangents of strided views of one input (``lst``: (input, g, meta)), in sweep order: disjoint
    views in one ``unview_sum`` (one zeroed buffer, no adds), else one unview each, accumulated as before.
    ``final``: the input is a wrt leaf of a lazy sweep (its primal cotangent is dead when g is tangent-only)."""
    from .ops import unview_sum as U
    from .ops.shape import _unview
    x = lst[0][0]
    gs, metas = [g for _, g, _ in lst], [m for _, _, m in lst]
    tonly = final and all(g._tangents for g in gs)
    with tangent_only() if tonly else contextlib.nullcontext():
        if len(gs) > 1 and U.disjoint(metas) and all(g._buf is not None for g in gs) or \
                tonly and len(gs) > 1 and U.disjoint(metas):
            parts = [U.unview_sum(gs, metas, x.shape)]
        else:
            parts = [_unview(g, meta=m, in_shape=x.shape) for g, m in zip(gs, metas)]
    holder = _Inputs(x)
    for r in parts:
        if tonly:
            with tangent_only():
                _accumulate(cot, holder, (r,), (True,))
        else:
            _accumulate(cot, holder, (r,), (True,))


def _ones_like(r, Tensor, ones):
    """The seed cotangent 1 of a root: for the usual scalar loss on the CPU, outside sm.jit, a host buffer
    holding 1 (no fill kernel launch); else :func:`ones`."""
    from .. import backend
    if r.size == 1 and backend.TRACE[0] is None and backend.on_host():
        return Tensor._make(backend.np.ones(1, backend.NP_DTYPES[r.dtype]), r.shape, r.dtype)
    return ones(r.shape, r.dtype)


def _call_vjp(prim, g, node, mask):
    nd = _needs.d
    nd["mask"] = mask
    try:
        return prim.vjp(g, *node.inputs, out=node.output(), **node.params)
    finally:
        nd["mask"] = None


def _sweep_split(cot, node, g, mask, final):
    """One node's VJP where some inputs are wrt leaves whose primal cotangent is dead: those come
    from a tangent-only call (e.g. a weight gradient's GEMM is skipped, its tangent's GEMMs run).
    A rule that reads a skipped value fails, and :func:`backward_to` sweeps again without this."""
    rest = tuple(m and not f for m, f in zip(mask, final))
    if any(rest):
        _accumulate(cot, node, _call_vjp(node.prim, g, node, rest), rest)
    with tangent_only():
        _accumulate(cot, node, _call_vjp(node.prim, g, node, final), final)


class _Redo(Exception):
    pass


def _accumulate(cot, node, grads, mask):
    for x, gi, m in zip(node.inputs, grads, mask):
        if not m or gi is None:
            continue
        k = x._node
        prev = cot.get(k)
        if prev is None:
            cot[k] = gi
        elif gi._buf is None or prev._buf is None:  # sums of tangent-only cotangents stay tangent-only
            if not (gi._tangents and prev._tangents):
                raise _Redo()
            with tangent_only():
                cot[k] = prev + gi
        else:
            cot[k] = prev + gi
