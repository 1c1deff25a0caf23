"""``vmap``: vectorise a function over a batch axis, by a batching rule per primitive.

Inside ``vmap(f)``, ``f`` sees Tensors with their per-example (logical) shapes whose buffers hold the
whole batch, batch axis first. Each primitive applied to such a Tensor runs once on the whole batch
through its batching rule and is recorded on the tape (and pushed through forward levels) as the
per-example primitive, so every transform inside ``f`` works per example: ``vmap(grad(loss),
in_axes=(None, 0, 0))`` gives per-example gradients, ``vmap(jacfwd(f))`` per-example Jacobians.
Nested ``vmap`` works (levels); ``jit(vmap(f))`` records the batched kernels. When ``vmap(f)`` itself is
differentiated from outside (its arguments are on a tape or carry tangents), the whole call is one
primitive whose VJP is ``vmap`` of ``f``'s VJP (recomputed), so derivatives of every order compose.

Batching rules (see :data:`RULES`):
- elementwise unary/binary/where/astype, reshape, broadcast_to, sum/max/min, softmax-like row ops,
  matmul: run natively on the batch (operands lifted so broadcasting keeps the batch axis in front);
- primitives linear in their batched operands (views, take, scatter_add, concat, cumsum, matmul with one
  batched side): their batched-JVP rule (the ``batched_jvp`` table), which is exactly a batching rule there;
- factorizations and scans batched over leading axes (sciml.linalg, cumsum/cumprod/prod): natively;
- any other primitive (user Taichi kernels, fused PINN/conv kernels, ops of other helpers): a loop over
  the batch, one call per example (correct, slower). :func:`loop_fallback_primitives` lists the names seen.

Limits: reading values inside ``f`` (``float(t)``, ``t.numpy()``) sees the first example only (as JAX, it
should not be done); batched Tensors must not share a buffer with Tensors closed over by ``f``.

Hooks: while a vmap runs, ``primitive.CALL_HOOK`` routes every primitive call here (batched inputs go to
their batching rule, others to ``primitive.apply``) and ``jit.EAGER_HOOK`` makes ``sm.jit`` functions called on
batched Tensors run eagerly (``vmap(jit(f))`` = ``vmap(f)``; ``jit(vmap(f))`` is the compiled form); both are
cleared when the outermost vmap returns. VJP rules that launch raw kernels on their operands' shapes when
nothing is recorded (``ops/conv.py``'s ``_recorded`` switch) are told to take their composed path meanwhile.
"""
from __future__ import annotations

import functools
import itertools
import numbers

from . import primitive as P
from .pytree import flatten, unflatten
from .tensor import Tensor

_marks: dict = {}  # id(buf) -> [buf, {level: B}]
_active: list = []  # active levels, outermost first
_suspended: set = set()  # levels whose batching rule is running (hidden from the hook)
_registered: dict = {}  # level -> [ids of buffers marked at it]
_level_ids = itertools.count(1)
_fallback_seen: set = set()


def loop_fallback_primitives():
    """Names of primitives that ran through the per-example loop (no batching rule) in this process."""
    return sorted(_fallback_seen)


def _levels_of(x):
    if x._buf is None:
        return None
    m = _marks.get(id(x._buf))
    return m[1] if m is not None else None


def _mark(buf, lv, nb):
    m = _marks.get(id(buf))
    if m is None:
        m = _marks[id(buf)] = [buf, {}]
    if lv not in m[1]:
        m[1][lv] = nb
        _registered[lv].append(id(buf))


def _hooked_call(self, inputs, params):
    lv, nb = None, None
    for x in inputs:
        ls = _levels_of(x)
        if ls:
            for k, b in ls.items():
                if k not in _suspended and k in _registered and (lv is None or k > lv):
                    lv, nb = k, b
    if lv is None:
        return P.apply(self, inputs, params)
    flags = [bool(_levels_of(x)) and lv in _levels_of(x) for x in inputs]
    phys = [Tensor._make(x._buf, ((nb,) + x.shape) if f else x.shape, x.dtype) for x, f in zip(inputs, flags)]
    hidden = {k for k in _registered if k >= lv} - _suspended
    _suspended.update(hidden)
    try:
        with P.no_grad():
            out = _batch_rule(self, phys, flags, params, nb)
    finally:
        _suspended.difference_update(hidden)
    if out.shape[:1] != (nb,):  # pragma: no cover - a rule bug
        raise AssertionError(f"vmap: batching rule of {self.name!r} returned shape {out.shape}")
    _mark(out._buf, lv, nb)
    orig = self.forward
    buf, shape, dtype = out._buf, out.shape[1:], out.dtype

    def once(*a, **k):
        self.forward = orig
        return buf, shape, dtype
    self.forward = once
    try:
        return P.apply(self, inputs, params)
    finally:
        self.forward = orig


# --- batching rules: (prim, physical inputs, batched flags, params, B) -> physical output (B,) + shape --
def _lift(x, flag, ndim):
    """A batched (B,) + s operand as (B,) + (1,) * (ndim - len(s)) + s; unbatched operands unchanged."""
    if not flag:
        return x
    k = ndim - (x.ndim - 1)
    return x.reshape(x.shape[:1] + (1,) * k + x.shape[1:]) if k > 0 else x


def _logical_ndim(xs, flags):
    return max(x.ndim - (1 if f else 0) for x, f in zip(xs, flags))


def _bcast_all(xs, flags, nb):
    from .ops import broadcast_to
    return [x if f else broadcast_to(x, (nb,) + x.shape) for x, f in zip(xs, flags)]


def _rule_elementwise(prim, xs, flags, params, nb):
    nd = _logical_ndim(xs, flags)
    out = prim(*[_lift(x, f, nd) for x, f in zip(xs, flags)], **params)
    if out.shape[:1] != (nb,) or out.ndim != nd + 1:  # every batched operand had a size-1 batch (nb == 1)
        from .ops import broadcast_to
        out = broadcast_to(out.reshape((1,) * (nd + 1 - out.ndim) + out.shape), (nb,) + out.shape[out.ndim - nd:])
    return out


def _rule_unary(prim, xs, flags, params, nb):
    return prim(*xs, **params)


def _rule_reshape(prim, xs, flags, params, nb):
    return prim(xs[0], shape=(nb,) + tuple(params["shape"]))


def _rule_broadcast(prim, xs, flags, params, nb):
    shape = tuple(params["shape"])
    return prim(_lift(xs[0], True, len(shape)), shape=(nb,) + shape)


def _rule_axis(prim, xs, flags, params, nb):
    return prim(xs[0], axis=params["axis"] + 1)


def _rule_rows(prim, xs, flags, params, nb):
    """Primitives over (rows, n) 2-D operands: fold the batch into the rows."""
    x = xs[0]
    out = prim(x.reshape((-1,) + x.shape[2:]), **params)
    return out.reshape((nb, -1) + out.shape[1:])


def _rule_leading_batch(prim, xs, flags, params, nb):
    """Primitives batched over leading axes with equal batch dims on every operand."""
    return prim(*_bcast_all(xs, flags, nb), **params)


def _rule_matmul(prim, xs, flags, params, nb):
    if all(flags):
        return prim(*xs, **params)
    return _rule_linear(prim, xs, flags, params, nb)


def _rule_mm2(prim, xs, flags, params, nb):
    from .ops import broadcast_to
    from .ops.linalg import _mm
    parts = []
    for (x, y, fx, fy), (t1, t2) in (((xs[0], xs[1], flags[0], flags[1]), (params["ta"], params["tb"])),
                                     ((xs[2], xs[3], flags[2], flags[3]), (params["tc"], params["td"]))):
        if fx or fy:
            parts.append(_rule_matmul(_mm, [x, y], [fx, fy], {"ta": t1, "tb": t2}, nb))
        else:
            r = _mm(x, y, ta=t1, tb=t2)
            parts.append(broadcast_to(r, (nb,) + r.shape))
    return parts[0] + parts[1].reshape(parts[0].shape)  # (a second pair may be shaped as a reshape of the output)


_OUT_SHAPE = {
    "take": lambda x, idx, **p: idx.shape + x.shape[1:],
    "scatter_add": lambda g, idx, rows: (rows,) + g.shape[idx.ndim:],
    "cumsum": lambda x, reverse: x.shape,
    "identity": lambda x: x.shape,
    "view": lambda x, meta, shape: tuple(shape),
    "unview": lambda g, meta, in_shape: tuple(in_shape),
    "matmul": lambda a, b, ta, tb: (),
}
# positions in which a primitive is linear (jointly, within one group): its batched-JVP rule is its batching rule
_LINEAR = {"take": [{0}], "scatter_add": [{0}], "cumsum": [{0}], "identity": [{0}],
           "view": [{0}], "unview": [{0}], "matmul": [{0}, {1}]}


def _linear_ok(prim, flags):
    groups = _LINEAR.get(prim.name, [])
    if prim.batched_jvp is None:
        return False
    batched = {i for i, f in enumerate(flags) if f}
    return any(batched <= g for g in groups)


def _rule_linear(prim, xs, flags, params, nb):
    logical = [Tensor._make(x._buf, x.shape[1:] if f else x.shape, x.dtype) for x, f in zip(xs, flags)]
    out_shape = _OUT_SHAPE[prim.name](*logical, **params)
    out = Tensor._make(None, tuple(out_shape), xs[0].dtype)
    ts = tuple(x if f else None for x, f in zip(xs, flags))
    r = prim.batched_jvp(ts, *logical, out=out, **params)
    return r


def _rule_loop(prim, xs, flags, params, nb):
    from .ops import getitem, stack
    _fallback_seen.add(prim.name)
    outs = [prim(*[getitem(x, b) if f else x for x, f in zip(xs, flags)], **params)
            for b in range(nb)]
    return stack(outs, 0)


def _kind(prim):
    q = getattr(prim.forward, "__qualname__", "")
    if q.startswith("_unary_forward"):
        return "unary"
    if q.startswith("_binary_forward") or prim.name in ("where", "pair_sum"):
        return "elementwise"
    if q.startswith("_rows_forward"):
        return "unary"
    return prim.name


RULES = {
    "unary": _rule_unary, "elementwise": _rule_elementwise, "astype": _rule_unary,
    "reshape": _rule_reshape, "broadcast_to": _rule_broadcast,
    "sum": _rule_axis, "max": _rule_axis, "min": _rule_axis,
    "matmul": _rule_matmul, "matmul2": _rule_mm2,
    "cholesky": _rule_leading_batch, "solve": _rule_leading_batch, "triangular_solve": _rule_leading_batch,
    "qr": _rule_unary, "svd": _rule_unary, "qr_complete": _rule_unary, "svd_full": _rule_unary,
    "eigh": _rule_unary, "slogdet": _rule_unary, "pinv": _rule_unary,
    "cumsum": _rule_rows, "cumprod": _rule_rows, "prod": _rule_rows, "argsort": _rule_rows, "argext": _rule_rows,
    "bias_act": lambda prim, xs, flags, params, nb: prim(*xs, **params) if not flags[1] else
    _rule_loop(prim, xs, flags, params, nb),
    # sciml/_dft.py adds the rules of the FFT primitives (dft, rdft, irdft, ceinsum, cpack, cpart)
    "concat": lambda prim, xs, flags, params, nb: prim(*_bcast_all(xs, flags, nb), axis=params["axis"] + 1),
}


def _batch_rule(prim, xs, flags, params, nb):
    k = _kind(prim)
    if k == "elementwise" and prim.name == "pair_sum":
        return _rule_loop(prim, xs, flags, params, nb)
    rule = RULES.get(k)
    if rule is not None:
        return rule(prim, xs, flags, params, nb)
    if prim.name in _LINEAR and _linear_ok(prim, flags):
        return _rule_linear(prim, xs, flags, params, nb)
    return _rule_loop(prim, xs, flags, params, nb)


# --- the transform ------------------------------------------------------------------------------------------
def _axes_for(name, in_axes, args):
    """One int-or-None per leaf of args, from an int/None or a tuple (per argument, each an int/None or a
    pytree matching that argument)."""
    if isinstance(in_axes, (numbers.Integral, type(None))):
        return [in_axes] * len(flatten(list(args))[0])
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if not isinstance(in_axes, tuple) or len(in_axes) != len(args):
        raise ValueError(f"{name}: in_axes={in_axes!r} must be an int, None, or a tuple with one entry per "
                         f"positional argument ({len(args)}).")
    out = []
    for a, ax in zip(args, in_axes):
        n = len(flatten(a)[0])
        if isinstance(ax, (numbers.Integral, type(None))):
            out += [ax] * n
        else:
            al = _axis_leaves(ax)
            if len(al) != n:
                raise ValueError(f"{name}: in_axes entry {ax!r} does not match the structure of its argument.")
            out += al
    return out


def _axis_leaves(ax):
    """Leaves of an in_axes pytree, None counting as a leaf (pytree.flatten's order: dict keys sorted)."""
    if isinstance(ax, dict):
        return [v for k in sorted(ax, key=str) for v in _axis_leaves(ax[k])]
    if isinstance(ax, (list, tuple)):
        return [v for a in ax for v in _axis_leaves(a)]
    return [ax]


def batched_at_any_level(x) -> bool:
    """True if ``x`` is a batched Tensor of an active vmap (its buffer holds several examples)."""
    return isinstance(x, Tensor) and bool(_levels_of(x))


_saved: dict = {}


def _jit_eager(args, kwargs):
    return any(batched_at_any_level(x) for x in flatten([list(args), kwargs])[0])


def _install():
    from .jit import EAGER_HOOK  # (the package's name ``jit`` is the function)
    if P.CALL_HOOK[0] is not _hooked_call:
        P.CALL_HOOK[0] = _hooked_call
        EAGER_HOOK[0] = _jit_eager
        # rules that bypass primitives when nothing records them (raw kernels on logical shapes) must take
        # their composed path inside vmap: conv.py's bias_act / softmax_cross_entropy VJPs
        from .ops import conv
        _saved["conv._recorded"] = conv._recorded
        conv._recorded = lambda *ts: True


def _uninstall():
    if not _active:
        from .jit import EAGER_HOOK
        P.CALL_HOOK[0] = None
        EAGER_HOOK[0] = None
        if "conv._recorded" in _saved:
            from .ops import conv
            conv._recorded = _saved.pop("conv._recorded")


def vmap(f, in_axes=0, out_axes=0, axis_size=None):
    """Vectorise ``f`` over a batch axis (``jax.vmap``).

    Args:
        f: a function of Tensors (pytrees) built from sciml ops.
        in_axes: the batch axis of each argument: an int, None (not batched), or a tuple with one entry per
            positional argument (each an int/None or a pytree of them matching the argument).
        out_axes: where the batch axis goes in every output leaf (an int).
        axis_size: the batch size when no argument is batched.
    Returns:
        A function with ``f``'s arguments, batched along ``in_axes``, returning ``f``'s outputs stacked
        along ``out_axes``.
    Example:
        >>> per_example = sm.vmap(sm.grad(loss), in_axes=(None, 0, 0))(params, x, y)   # leaves (B,) + shape
    """
    if not isinstance(out_axes, numbers.Integral):
        raise TypeError(f"vmap: out_axes={out_axes!r}; expected an int.")

    @functools.wraps(f)
    def wrapped(*args):
        leaves, tdef = flatten(list(args))
        axes = _axes_for("vmap", in_axes, args)
        nb = axis_size
        norm = []
        for i, (x, ax) in enumerate(zip(leaves, axes)):
            if ax is None:
                norm.append(None)
                continue
            if not isinstance(x, Tensor):
                from .tensor import tensor
                x = leaves[i] = tensor(x)
            if not -x.ndim <= ax < max(x.ndim, 1) or x.ndim == 0:
                raise ValueError(f"vmap: in_axes {ax} for an argument of shape {x.shape}.")
            ax = int(ax) % x.ndim
            if nb is None:
                nb = x.shape[ax]
            elif x.shape[ax] != nb:
                raise ValueError(f"vmap: batch sizes differ: {nb} and {x.shape[ax]} (argument leaf {i}, shape "
                                 f"{x.shape}, axis {ax}).")
            norm.append(ax)
        if nb is None:
            raise ValueError("vmap: no argument is batched (every in_axes is None); pass axis_size=.")
        if any(isinstance(x, Tensor) and (x._node is not None or x._tangents) for x in leaves):
            return _vmap_differentiable(f, leaves, tdef, norm, nb, out_axes)
        return _run(f, leaves, tdef, norm, nb, out_axes)
    return wrapped


def _run(f, leaves, tdef, axes, nb, out_axes):
    from .ops import broadcast_to, moveaxis
    lv = next(_level_ids)
    _registered[lv] = []
    _active.append(lv)
    _install()
    try:
        seen = {id(x._buf) for x, ax in zip(leaves, axes) if ax is None and isinstance(x, Tensor)}
        inner = []
        for x, ax in zip(leaves, axes):
            if ax is None:
                inner.append(x)
                continue
            p = moveaxis(x, ax, 0) if ax else x
            if id(p._buf) in seen or (_levels_of(p) and lv in _levels_of(p)):  # shared buffer: copy
                p = p * 1.0 if p.dtype in ("float32", "float64") else p + 0
            seen.add(id(p._buf))
            _mark(p._buf, lv, nb)
            inner.append(Tensor._make(p._buf, p.shape[1:], p.dtype))
        out = f(*unflatten(tdef, inner))
        outs, odef = flatten(out)
        res = []
        for o in outs:
            if not isinstance(o, Tensor):
                raise TypeError(f"vmap: f returned a leaf of type {type(o).__name__}; expected Tensors.")
            ls = _levels_of(o)
            if ls and lv in ls:
                phys = Tensor._make(o._buf, (nb,) + o.shape, o.dtype)
            else:
                _suspended.add(lv)
                try:
                    phys = broadcast_to(o.detach(), (nb,) + o.shape)
                finally:
                    _suspended.discard(lv)
            res.append(phys)
    finally:
        for i in _registered.pop(lv):
            m = _marks.get(i)
            if m is not None:
                m[1].pop(lv, None)
                if not m[1]:
                    del _marks[i]
        _active.remove(lv)
        _uninstall()
        from .ops.linalg import _bcast_cache
        _bcast_cache.clear()
    final = []
    for r in res:
        ax = int(out_axes) % r.ndim
        final.append(moveaxis(r, 0, ax) if ax else r)
    return unflatten(odef, final)


def _vmap_differentiable(f, leaves, tdef, axes, nb, out_axes):
    """vmap(f) as one primitive on the outer tape: its VJP is vmap of f's VJP (recomputed)."""
    from .custom import _Packing, _primitive_call
    from .transforms import vjp
    pos = [i for i, x in enumerate(leaves) if isinstance(x, Tensor) and x.dtype in ("float32", "float64")]
    detached = [Tensor._make(x._buf, x.shape, x.dtype) if isinstance(x, Tensor) else x for x in leaves]
    out = _run(f, detached, tdef, axes, nb, out_axes)
    packing = _Packing("vmap", out)

    def vjp_rule(g_leaves, xs):
        ng = len(g_leaves)

        def per_example(*flat):
            vals, gs = list(flat[:len(pos)]), list(flat[len(pos):])
            full = list(leaves)
            for p, v in zip(pos, vals):
                full[p] = v

            def fx(*v):
                fl = list(full)
                for p, vv in zip(pos, v):
                    fl[p] = vv
                return flatten(f(*unflatten(tdef, fl)))[0]
            _, pull = vjp(fx, *vals)
            return list(pull(gs, create_graph=P.is_grad_enabled()))
        in_ax = tuple([axes[p] for p in pos] + [out_axes] * ng)
        cts = vmap(per_example, in_axes=in_ax, out_axes=0)(*xs, *g_leaves)
        from .ops import moveaxis, sum as _sum
        res = []
        for c, p in zip(cts, pos):
            ax = axes[p]
            res.append(_sum(c, 0) if ax is None else (moveaxis(c, 0, ax) if ax else c))
        return res
    return _primitive_call("vmap", [leaves[p] for p in pos], packing, vjp_rule)
