"""Primitives and the tape.

A :class:`Primitive` is defined once: a forward (Taichi kernels via ``sciml.kernels``), a
VJP rule and optionally a JVP rule, both written in sciml ops so that they can be
differentiated again. Applying a primitive records a :class:`Node` on the tape when any
input takes part in reverse-mode differentiation, and pushes forward-mode tangents through
its JVP rule for every active forward level.

Forward levels: each ``jvp`` opens a new level; a tensor carries ``{level: tangent}``. The
tangent at level L is computed from inputs stripped of levels >= L, so tangents of outer
levels flow through inner rules (forward-over-forward and forward-over-reverse are exact).
"""
from __future__ import annotations

import contextlib
import itertools

from ..runtime import ThreadLocal

# per-thread flags (two threads taking grad/hessian at once must not see each other's); hot paths read the
# thread's dict as ``_state.d`` (one C-level attribute lookup, not a Python ``__getitem__`` call)
_state = ThreadLocal({"grad_enabled": True, "reverse_depth": 0, "create_graph": False, "tangent_only": False})
_level_counter = itertools.count(1)
_batched_levels: dict = {}  # level -> [B, elements produced per batch column] (see batched_jvp)
# dispatch hook: while set (by sciml.autodiff.vmap while a vmap runs), every primitive call goes to
# ``hook(prim, inputs, params)`` instead of :func:`apply` (it routes batched inputs to their batching rule)
CALL_HOOK: list = [None]


class Node:
    """One entry of the tape: a primitive application (or a leaf when ``prim`` is None)."""
    __slots__ = ("prim", "inputs", "params", "out_buf", "out_shape", "out_dtype", "out_tangents", "__weakref__")

    def __init__(self, prim, inputs, params, out_buf, out_shape, out_dtype, out_tangents):
        self.prim = prim
        self.inputs = inputs
        self.params = params
        self.out_buf = out_buf
        self.out_shape = out_shape
        self.out_dtype = out_dtype
        self.out_tangents = out_tangents

    def output(self):
        """The node's output as a Tensor that is still connected to the tape."""
        return _tensor_cls()._make(self.out_buf, self.out_shape, self.out_dtype, self, self.out_tangents)


_T: list = []  # the Tensor class, cached (a per-call import costs ~1 us on the hot path)


def _tensor_cls():
    if not _T:
        from .tensor import Tensor
        _T.append(Tensor)
    return _T[0]


def leaf_node(t):
    return Node(None, (), None, t._buf, t.shape, t.dtype, t._tangents)


class Primitive:
    """A differentiable operation.

    Args:
        name: op name, used in errors and reprs.
        forward: ``forward(*inputs, **params) -> (buf, shape, dtype)``; runs the kernel(s).
        order: highest derivative order supported (None = any). Primitives whose VJP is
            Taichi's ``kernel.grad`` use ``order=1``.
    """

    def __init__(self, name, forward, order=None):
        self.name = name
        self.forward = forward
        self.vjp = None
        self.jvp = None
        self.batched_jvp = None
        self.order = order
        self.shape_fn = None  # (inputs, params) -> (shape, dtype) without running the kernels

    def def_vjp(self, rule):
        """Register ``rule(g, *inputs, out=..., **params) -> tuple of cotangents`` (None = zero)."""
        self.vjp = rule
        return rule

    def def_jvp(self, rule):
        """Register ``rule(tangents, *inputs, out=..., **params) -> tangent of out``.
        ``tangents`` holds a Tensor or None (zero) per input."""
        self.jvp = rule
        return rule

    def def_shape(self, fn):
        """Register ``fn(*inputs, **params) -> (shape, dtype)``. In a tangent-only region (the last
        products of :func:`sciml.autodiff.curvature.hvp`, whose primal values are dead) such a
        primitive computes its tangents without running its forward kernels."""
        self.shape_fn = fn
        return fn

    def def_batched_jvp(self, rule):
        """Register the JVP rule for batched tangents: ``rule(tangents, *inputs, out=..., **params)``
        where each tangent has shape ``(B,) + input.shape`` (or is None = zero) and the result must
        have shape ``(B,) + out.shape`` (or be None). Primitives without one use a loop over B."""
        self.batched_jvp = rule
        return rule

    def __repr__(self):
        return f"Primitive({self.name})"

    def __call__(self, *inputs, **params):
        h = CALL_HOOK[0]
        if h is not None:
            return h(self, inputs, params)
        return apply(self, inputs, params)


def apply(prim, inputs, params):
    """Run ``prim`` on Tensors ``inputs``, recording the tape and pushing tangents."""
    Tensor = _T[0] if _T else _tensor_cls()
    st = _state.d
    # one pass over the inputs: does any take part in reverse mode, does any carry forward tangents
    on_tape = tangents_in = False
    for x in inputs:
        if x._node is not None:
            on_tape = True
        if x._tangents:
            tangents_in = True
    if tangents_in and st["tangent_only"] and prim.shape_fn is not None:
        return _apply_tangent_only(prim, inputs, params, Tensor)
    buf, shape, dtype = prim.forward(*inputs, **params)
    if prim.order == 0:  # not differentiable (comparisons): a constant for every transform
        return Tensor._make(buf, shape, dtype)
    if not tangents_in:  # the common case: reverse mode only (or nothing to record)
        if on_tape and st["grad_enabled"]:
            return Tensor._make(buf, shape, dtype, Node(prim, inputs, params, buf, shape, dtype, None))
        return Tensor._make(buf, shape, dtype)
    record = on_tape and st["grad_enabled"]
    levels = set()
    for x in inputs:
        if x._tangents:
            levels |= x._tangents.keys()
    tangents = {}
    node = Node(prim, inputs, params, buf, shape, dtype, tangents) if record else None
    _push(prim, inputs, params, buf, shape, dtype, node, levels, tangents, Tensor)
    if not tangents:
        tangents = None
        if node is not None:
            node.out_tangents = None
    return Tensor._make(buf, shape, dtype, node, tangents)


def _push(prim, inputs, params, buf, shape, dtype, node, levels, tangents, Tensor):
    """Fill ``tangents`` {level: tangent of the output} through the JVP rules, innermost level first
    (the output at level lv carries the tangents of the levels below it)."""
    for lv in sorted(levels):
        out_lv = Tensor._make(buf, shape, dtype, node, dict(tangents) or None)
        t = _jvp_at_level(prim, inputs, params, out_lv, lv)
        if t is not None:
            tangents[lv] = t


def _apply_tangent_only(prim, inputs, params, Tensor):
    """Tangents only: the output's primal buffer is None (it must not be read; see def_shape)."""
    shape, dtype = prim.shape_fn(*inputs, **params)
    levels = set()
    for x in inputs:
        if x._tangents:
            levels |= set(x._tangents)
    tangents = {}
    _state["tangent_only"] = False  # the rules' own ops compute normally
    try:
        _push(prim, inputs, params, None, shape, dtype, None, levels, tangents, Tensor)
    finally:
        _state["tangent_only"] = True
    return Tensor._make(None, shape, dtype, None, tangents or None)


@contextlib.contextmanager
def tangent_only():
    """Within: primitives with a shape rule skip their forward kernels when inputs carry tangents."""
    prev = _state["tangent_only"]
    _state["tangent_only"] = True
    try:
        yield
    finally:
        _state["tangent_only"] = prev


def _jvp_at_level(prim, inputs, params, out, lv):
    ts = tuple(x._tangents.get(lv) if x._tangents else None for x in inputs)
    if all(t is None for t in ts):
        return None
    stripped = tuple(x._strip(lv) for x in inputs)
    if _batched_levels and lv in _batched_levels:
        return _batched_jvp_rule(prim, stripped, ts, params, out, _batched_levels[lv])
    if prim.jvp is not None:
        return prim.jvp(ts, *stripped, out=out, **params)
    return _jvp_by_double_vjp(prim, stripped, ts, params, out)


def _batched_jvp_rule(prim, inputs, ts, params, out, info):
    info[1] += out.size
    if prim.batched_jvp is not None:
        return prim.batched_jvp(ts, *inputs, out=out, **params)
    return _batched_by_loop(prim, inputs, ts, params, out, info[0])


def _batched_by_loop(prim, inputs, ts, params, out, nb):
    """Fallback for a primitive without a batched rule: its unbatched rule once per batch entry."""
    from .ops import getitem, stack
    from .tensor import zeros
    res = []
    for b in range(nb):
        tb = tuple(None if t is None else getitem(t, b) for t in ts)
        if prim.jvp is not None:
            res.append(prim.jvp(tb, *inputs, out=out, **params))
        else:
            res.append(_jvp_by_double_vjp(prim, inputs, tb, params, out))
    if all(r is None for r in res):
        return None
    return stack([zeros(out.shape, out.dtype) if r is None else r for r in res], 0)


def _jvp_by_double_vjp(prim, inputs, ts, params, out):
    """J t = (d/du <vjp(u), t>) : the VJP rule is linear in its cotangent u."""
    from . import backward as B
    from .tensor import zeros
    u = zeros(out.shape, out.dtype)
    u._node = leaf_node(u)
    with enable_grad():
        cots = prim.vjp(u, *inputs, out=out, **params)
        total = None
        for c, t in zip(cots, ts):
            if c is None or t is None:
                continue
            term = (c * t).sum()
            total = term if total is None else total + term
    if total is None:
        return None
    (res,) = B.backward_to([total], None, [u._node], create_graph=True)
    return res


@contextlib.contextmanager
def no_grad():
    """Within this block, operations are not recorded for reverse mode (forward tangents still flow)."""
    st = _state.d
    prev = st["grad_enabled"]
    st["grad_enabled"] = False
    try:
        yield
    finally:
        st["grad_enabled"] = prev


@contextlib.contextmanager
def enable_grad():
    st = _state.d
    prev = st["grad_enabled"]
    st["grad_enabled"] = True
    try:
        yield
    finally:
        st["grad_enabled"] = prev


def is_grad_enabled() -> bool:
    return _state.d["grad_enabled"]


def new_level() -> int:
    return next(_level_counter)


@contextlib.contextmanager
def reverse_scope():
    """Marks a reverse transform in progress; nested ones record their backward pass."""
    _state["reverse_depth"] += 1
    try:
        yield _state["reverse_depth"]
    finally:
        _state["reverse_depth"] -= 1


def reverse_depth() -> int:
    return _state.d["reverse_depth"]
