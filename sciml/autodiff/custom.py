"""User-defined derivative rules: ``custom_vjp`` and ``custom_jvp`` (JAX's API), and ``checkpoint``.

Each turns one call of a user function into one primitive application on the tape, whose inputs are
the Tensor leaves of the arguments and whose output is the function's result (several result leaves
are packed into one buffer and unpacked by views). The rule is the user's (or, for ``checkpoint``, the
function's own VJP recomputed from the inputs). Rules run on Tensors that stay on the tape, so they
differentiate again: second derivatives through a custom rule work when the rule is written in sciml ops.

Only the explicit arguments are differentiated: Tensors a function closes over are constants to these
transforms (pass parameters as arguments).
"""
from __future__ import annotations

import functools
import math

from . import primitive as P
from .pytree import flatten, unflatten
from .tensor import Tensor, zeros


def _active(leaves):
    return any(isinstance(x, Tensor) and (x._node is not None or x._tangents) for x in leaves)


def _diff_positions(leaves):
    return [i for i, x in enumerate(leaves) if isinstance(x, Tensor) and x.dtype in ("float32", "float64")]


def _detach(x):
    return Tensor._make(x._buf, x.shape, x.dtype) if isinstance(x, Tensor) else x


class _Packing:
    """The result pytree of a function: one leaf is kept as is; several are packed into one flat
    buffer (they must share a float dtype) and unpacked by differentiable views."""

    def __init__(self, name, tree):
        leaves, self.tdef = flatten(tree)
        if not leaves:
            raise ValueError(f"{name}: the function returned no Tensor.")
        for o in leaves:
            if not isinstance(o, Tensor) or o.dtype not in ("float32", "float64"):
                seen = o.dtype if isinstance(o, Tensor) else type(o).__name__
                raise TypeError(f"{name}: the function returned a leaf of type {seen}; expected float Tensors "
                                "(return integer or static data through a closure instead).")
            if o.dtype != leaves[0].dtype:
                raise TypeError(f"{name}: the function's outputs have dtypes {leaves[0].dtype} and {o.dtype}; "
                                "expected one float dtype.")
        self.shapes = [o.shape for o in leaves]
        self.dtype = leaves[0].dtype
        self.single = len(leaves) == 1
        if self.single:
            self.buf, self.shape = leaves[0]._buf, leaves[0].shape
        else:
            from .ops import concat, reshape
            with P.no_grad():
                packed = concat([reshape(_detach(o), (-1,)) for o in leaves], 0)
            self.buf, self.shape = packed._buf, packed.shape

    def pack(self, tree_or_leaves, like=None):
        """A packed Tensor of per-leaf values (None = zeros)."""
        leaves = tree_or_leaves if isinstance(tree_or_leaves, list) else flatten(tree_or_leaves)[0]
        if len(leaves) != len(self.shapes):
            raise ValueError(f"custom rule returned {len(leaves)} output leaves; the function has "
                             f"{len(self.shapes)}.")
        leaves = [zeros(s, self.dtype) if v is None else v for v, s in zip(leaves, self.shapes)]
        if self.single:
            return leaves[0]
        from .ops import concat, reshape
        return concat([reshape(v, (-1,)) for v in leaves], 0)

    def unpack_leaves(self, t):
        if self.single:
            return [t]
        from .ops import getitem, reshape
        res, off = [], 0
        for s in self.shapes:
            n = math.prod(s)
            res.append(reshape(getitem(t, slice(off, off + n)), s))
            off += n
        return res

    def unpack(self, t):
        return unflatten(self.tdef, self.unpack_leaves(t))


def _primitive_call(name, inputs, packing, vjp_rule, jvp_rule=None):
    """Apply a one-off primitive to ``inputs`` whose value is ``packing``'s buffer; returns the output tree.
    ``vjp_rule(g_leaves, inputs) -> cotangent per input``; ``jvp_rule(ts, inputs) -> output tangent leaves``."""
    buf, shape, dtype = packing.buf, packing.shape, packing.dtype
    prim = P.Primitive(name, lambda *xs: (buf, shape, dtype))
    prim.def_vjp(lambda g, *xs, out: tuple(vjp_rule(packing.unpack_leaves(g), xs)))
    if jvp_rule is not None:
        prim.def_jvp(lambda ts, *xs, out: packing.pack(list(jvp_rule(ts, xs))))
    return packing.unpack(prim(*inputs))


def _rebuild(tdef, leaves, pos, values):
    full = list(leaves)
    for p, v in zip(pos, values):
        full[p] = v
    return unflatten(tdef, full)


class custom_vjp:
    """A function with a user-given reverse-mode rule (``jax.custom_vjp``).

    Example:
        >>> @sm.custom_vjp
        ... def clip_gradient(x):
        ...     return x
        >>> def fwd(x):
        ...     return x, None                       # (output, residuals)
        >>> def bwd(res, g):
        ...     return (sm.clip(g, -1.0, 1.0),)     # one cotangent per positional argument
        >>> clip_gradient.defvjp(fwd, bwd)

    ``fwd(*args) -> (out, residuals)``; ``bwd(residuals, g) -> tuple`` with one cotangent pytree (or None)
    per positional argument. Forward mode (jvp) works through the VJP rule (it is linear in ``g``);
    second derivatives work when ``bwd`` is written in sciml ops.
    """

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = self.bwd = None
        self._in_fwd = 0  # fwd usually calls the function itself: that call evaluates it plainly

    def defvjp(self, fwd, bwd):
        self.fwd, self.bwd = fwd, bwd
        return self

    def __call__(self, *args):
        name = f"custom_vjp({getattr(self.fun, '__name__', 'f')})"
        if self.fwd is None:
            raise TypeError(f"{name}: no rule; call .defvjp(fwd, bwd) before using it.")
        nd = set(a % len(args) for a in self.nondiff_argnums) if args else set()
        diff_args = [a for i, a in enumerate(args) if i not in nd]
        leaves, tdef = flatten(diff_args)
        if self._in_fwd or not _active(leaves):
            return self.fun(*args)
        pos = _diff_positions(leaves)
        self._in_fwd += 1
        try:
            out, res = self.fwd(*args)
        finally:
            self._in_fwd -= 1
        packing = _Packing(name, out)
        bwd = self.bwd

        def vjp_rule(g_leaves, xs):
            g = unflatten(packing.tdef, g_leaves)
            nd_vals = [args[i] for i in sorted(nd)]
            cts = bwd(*nd_vals, res, g) if nd_vals else bwd(res, g)
            if not isinstance(cts, (tuple, list)) or len(cts) != len(diff_args):
                raise ValueError(f"{name}: bwd returned {type(cts).__name__} of length "
                                 f"{len(cts) if isinstance(cts, (tuple, list)) else '-'}; expected a tuple with one "
                                 f"cotangent per differentiable positional argument ({len(diff_args)}).")
            flat = []
            for c, a in zip(cts, diff_args):
                n = len(flatten(a)[0])
                flat += [None] * n if c is None else flatten(c)[0]
            return [flat[p] for p in pos]
        return _primitive_call(name, [leaves[p] for p in pos], packing, vjp_rule)


class custom_jvp:
    """A function with a user-given forward-mode rule (``jax.custom_jvp``).

    ``jvp(primals, tangents) -> (primal_out, tangent_out)`` with primals/tangents tuples of the positional
    arguments (zeros for arguments that carry no tangent). Reverse mode transposes the rule (it must be
    linear in the tangents, as in JAX), so ``grad`` works; written in sciml ops, it differentiates again.

    Example:
        >>> @sm.custom_jvp
        ... def log1pexp(x):
        ...     return sm.log(1.0 + sm.exp(x))
        >>> @log1pexp.defjvp
        ... def _(primals, tangents):
        ...     (x,), (t,) = primals, tangents
        ...     return log1pexp(x), t * sm.sigmoid(x)
    """

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        self._in_rule = 0

    def defjvp(self, jvp):
        self.jvp = jvp
        return jvp

    def __call__(self, *args):
        name = f"custom_jvp({getattr(self.fun, '__name__', 'f')})"
        if self.jvp is None:
            raise TypeError(f"{name}: no rule; call .defjvp(jvp) before using it.")
        nd = set(a % len(args) for a in self.nondiff_argnums) if args else set()
        leaves, tdef = flatten(list(args))
        diff_pos = [p for p in _diff_positions(leaves) if _arg_of(tdef, leaves, p, args) not in nd]
        if self._in_rule or not _active(leaves):
            return self.fun(*args)
        with P.no_grad():
            out = self.fun(*unflatten(tdef, [_detach(x) for x in leaves]))
        packing = _Packing(name, out)
        rule = self.jvp

        def call_rule(xs, ts):
            primals = _rebuild(tdef, leaves, diff_pos, xs)
            tl = [zeros(x.shape, x.dtype) if isinstance(x, Tensor) else x for x in leaves]
            for p, x, t in zip(diff_pos, xs, ts):
                tl[p] = zeros(x.shape, x.dtype) if t is None else t
            tangents = unflatten(tdef, tl)
            nd_vals = [primals[i] for i in sorted(nd)]
            rest = tuple(a for i, a in enumerate(primals) if i not in nd)
            rest_t = tuple(a for i, a in enumerate(tangents) if i not in nd)
            self._in_rule += 1  # the rule usually calls the function for its primal output
            try:
                r = rule(*nd_vals, rest, rest_t) if nd_vals else rule(tuple(primals), tuple(tangents))
            finally:
                self._in_rule -= 1
            if not isinstance(r, (tuple, list)) or len(r) != 2:
                raise ValueError(f"{name}: the jvp rule must return (primal_out, tangent_out).")
            return flatten(r[1])[0]

        def jvp_rule(ts, xs):
            return call_rule(list(xs), list(ts))

        def vjp_rule(g_leaves, xs):
            from .transforms import vjp
            xs = list(xs)

            def lin(*ts):
                return packing.pack(call_rule(xs, list(ts)))
            _, pull = vjp(lin, *[zeros(x.shape, x.dtype) for x in xs])
            return list(pull(packing.pack(list(g_leaves)), create_graph=P.is_grad_enabled()))
        return _primitive_call(name, [leaves[p] for p in diff_pos], packing, vjp_rule, jvp_rule)


def _arg_of(tdef, leaves, p, args):
    """Index of the positional argument holding leaf ``p``."""
    n = 0
    for i, a in enumerate(args):
        k = len(flatten(a)[0])
        if p < n + k:
            return i
        n += k
    return len(args)


def checkpoint(fun, *, static_argnums=()):
    """``fun`` that stores no intermediates for reverse mode: the backward pass recomputes them from the
    inputs (``jax.checkpoint`` / remat). Values and derivatives of every order equal ``fun``'s.

    Only Tensor leaves of the positional arguments are differentiated (closed-over Tensors are constants).
    """
    static = tuple(static_argnums)

    @functools.wraps(fun)
    def wrapped(*args):
        st = set(a % len(args) for a in static) if args else set()
        leaves, tdef = flatten([a for i, a in enumerate(args) if i not in st])
        if not _active(leaves):
            return fun(*args)
        pos = _diff_positions(leaves)

        def call(values):
            dyn = _rebuild(tdef, leaves, pos, values)
            it = iter(dyn)
            full = [args[i] if i in st else next(it) for i in range(len(args))]
            return fun(*full)
        with P.no_grad():
            out = call([_detach(leaves[p]) for p in pos])
        name = f"checkpoint({getattr(fun, '__name__', 'f')})"
        packing = _Packing(name, out)

        def vjp_rule(g_leaves, xs):
            from .transforms import vjp
            _, pull = vjp(lambda *v: packing.pack(flatten(call(list(v)))[0]), *xs)
            return list(pull(packing.pack(list(g_leaves)), create_graph=P.is_grad_enabled()))
        return _primitive_call(name, [leaves[p] for p in pos], packing, vjp_rule)
    return wrapped


remat = checkpoint
