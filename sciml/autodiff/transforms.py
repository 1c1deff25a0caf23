"""Functional transforms: vjp is the engine; grad, value_and_grad and jacrev wrap it; jvp
is forward mode (true JVP rules); batched_jvp pushes B tangents at once (batched JVP rules);
jacfwd = batched_jvp over chunks of basis vectors; hessian = jacfwd(grad); hvp = jvp of grad.

All take and return pytrees of Tensors. ``has_aux``: if True, ``f`` returns ``(output, aux)``;
aux is passed through untouched.
"""
from __future__ import annotations

import functools
import numbers

import numpy as np

from . import backward as B
from . import primitive as P
from .pytree import flatten, tree_map, unflatten
from .ops.linalg import _bcast_cache
from .tensor import Tensor, as_tensor, tensor, zeros

GRAD_SCALAR = ("grad(f) needs f to return a scalar, got shape {shape}. "
               "Reduce it (.sum(), .mean()) or use jacrev(f).")


def _leaf_error(where, x):
    return TypeError(f"{where}: got a leaf of type {type(x).__name__}; expected Tensors (or numbers / numpy "
                     "arrays, which are converted). Wrap data with sciml.tensor(...).")


def _to_tensor(where, x):
    """A differentiated leaf as a float Tensor (numbers and numpy arrays are converted to the default
    float dtype; an int32 or bool Tensor is an error)."""
    if isinstance(x, Tensor):
        if x.dtype not in ("float32", "float64"):
            raise TypeError(f"{where}: got a Tensor of dtype {x.dtype} to differentiate with respect to; expected "
                            "float32 or float64 (derivatives exist for float inputs only: make it with "
                            "sm.tensor(..., 'float32') or x.astype('float32')).")
        return x
    if isinstance(x, (numbers.Number, np.ndarray, np.generic)) and not isinstance(x, (bool, np.bool_)):
        if isinstance(x, numbers.Complex) and not isinstance(x, numbers.Real):
            raise _leaf_error(where, x)
        if isinstance(x, np.ndarray) and x.dtype.kind not in "iuf":
            raise _leaf_error(where, x)
        return tensor(x, "float")
    raise _leaf_error(where, x)


def _check_callable(where, f):
    if not callable(f):
        raise TypeError(f"{where}(f): f={f!r} ({type(f).__name__}); expected a function of Tensors.")


def _watch(x: Tensor) -> Tensor:
    """A new tape entry for ``x``: a leaf if ``x`` is off the tape, else an identity node after it,
    so gradients are taken w.r.t. this use of x only (correct nesting)."""
    if x._node is None:
        t = Tensor._make(x._buf, x.shape, x.dtype, None, x._tangents)
        t._node = P.leaf_node(t)
        return t
    with P.enable_grad():
        return _identity(x)


_identity = P.Primitive("identity", lambda x: (x._buf, x.shape, x.dtype))
_identity.def_vjp(lambda g, x, out: (g,))
_identity.def_jvp(lambda ts, x, out: ts[0])
_identity.def_batched_jvp(lambda ts, x, out: ts[0])


def _argnums(argnums, nargs, where):
    single = isinstance(argnums, numbers.Integral) and not isinstance(argnums, bool)
    if not single and not (isinstance(argnums, (tuple, list)) and argnums):
        raise TypeError(f"{where}: argnums={argnums!r}; expected an int or a non-empty tuple of ints.")
    nums = (argnums,) if single else tuple(argnums)
    for a in nums:
        if not isinstance(a, numbers.Integral) or isinstance(a, bool):
            raise TypeError(f"{where}: argnums={argnums!r}; expected an int or a non-empty tuple of ints.")
        if not -nargs <= a < nargs:
            raise ValueError(f"{where}: argnums={argnums} but the function got {nargs} positional argument(s).")
    return single, tuple(a % nargs for a in nums)


def vjp(f, *primals, has_aux=False, _where="vjp"):
    """Value of ``f(*primals)`` and a function mapping output cotangents to input cotangents.

    Returns:
        ``(out, vjp_fn)`` or ``(out, vjp_fn, aux)``; ``vjp_fn(cotangent)`` returns a tuple with one
        pytree per primal, shaped like it.
    Example:
        >>> y, pull = sm.vjp(sm.sin, sm.tensor([0.0, 1.0]))
        >>> pull(sm.ones((2,)))[0]       # cos(x)
    """
    _check_callable("vjp", f)
    with P.reverse_scope() as depth, P.enable_grad():
        flat, defs, watched = [], [], []
        for p in primals:
            leaves, td = flatten(p)
            w = [_watch(_to_tensor(_where, l) if isinstance(l, Tensor) else _to_tensor("vjp", l)) for l in leaves]
            watched.append(w)
            defs.append(td)
        args = [unflatten(td, w) for td, w in zip(defs, watched)]
        res = f(*args)
    if has_aux:
        if not (isinstance(res, tuple) and len(res) == 2):
            raise ValueError("has_aux=True needs f to return a pair (output, aux).")
        res, aux = res
    out_leaves, out_def = flatten(res)
    for o in out_leaves:
        if not isinstance(o, Tensor):
            raise TypeError(f"vjp: f returned a leaf of type {type(o).__name__}; expected Tensors.")
    nested = depth > 1 or P.reverse_depth() > 0

    def vjp_fn(cotangent, create_graph=None):
        cts = flatten(cotangent)[0]
        if len(cts) != len(out_leaves):
            raise ValueError(f"vjp_fn: cotangent has {len(cts)} leaves; f's output has {len(out_leaves)}.")
        cts = [as_tensor(c, o.dtype) for c, o in zip(cts, out_leaves)]
        for c, o in zip(cts, out_leaves):
            if c.shape != o.shape:
                raise ValueError(f"vjp_fn: cotangent of shape {c.shape} for an output of shape {o.shape}.")
        wrt = [w._node for ws in watched for w in ws]
        cg = nested or P.reverse_depth() > 0 if create_graph is None else create_graph
        with P.reverse_scope():
            grads = B.backward_to(out_leaves, cts, wrt, create_graph=cg)
        it = iter(grads)
        res_ = []
        for td, ws in zip(defs, watched):
            res_.append(unflatten(td, [_zero_if_none(next(it), w) for w in ws]))
        return tuple(res_)
    out = unflatten(out_def, [_unwatch(o) for o in out_leaves]) if not nested else res
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _unwatch(o):
    """At the outermost transform, hand results back off the tape."""
    return Tensor._make(o._buf, o.shape, o.dtype, None, o._tangents)


def _zero_if_none(g, like):
    return zeros(like.shape, like.dtype) if g is None else g


def value_and_grad(f, argnums=0, has_aux=False):
    """A function returning ``(f(*args), grad)``, or ``((f(*args), aux), grad)`` with ``has_aux``.

    Args:
        f: function returning a scalar Tensor.
        argnums: positional argument(s) to differentiate with respect to (default 0).
        has_aux: if True, ``f`` returns ``(value, aux)``.
    """
    _check_callable("value_and_grad", f)
    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        single, nums = _argnums(argnums, len(args), "grad")

        def g(*diff):
            full = list(args)
            for i, d in zip(nums, diff):
                full[i] = d
            return f(*full, **kwargs)
        out = vjp(g, *[args[i] for i in nums], has_aux=has_aux, _where="grad")
        value, pull = out[0], out[1]
        if not isinstance(value, Tensor):
            raise TypeError(f"grad(f) needs f to return a scalar Tensor, got {type(value).__name__}.")
        if value.size != 1 or value.ndim > 1:
            raise ValueError(GRAD_SCALAR.format(shape=value.shape))
        if value.dtype not in ("float32", "float64"):
            raise TypeError(f"grad(f) needs f to return a float scalar, got dtype {value.dtype}; an integer or bool "
                            "output has no derivative.")
        from .tensor import ones
        grads = pull(ones(value.shape, value.dtype))
        grads = grads[0] if single else grads
        return ((value, out[2]), grads) if has_aux else (value, grads)
    return wrapped


def grad(f, argnums=0, has_aux=False):
    """Gradient of a scalar-valued ``f`` w.r.t. ``argnums``, shaped like those arguments (pytrees).

    Gradients are Tensors that can be differentiated again: ``grad(grad(f))`` works.

    Example:
        >>> sm.grad(lambda x: (x ** 3).sum())(sm.tensor([1.0, 2.0]))     # Tensor([3., 12.])
    """
    _check_callable("grad", f)
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        (v, g) = vg(*args, **kwargs)
        return (g, v[1]) if has_aux else g
    return wrapped


def jvp(f, primals, tangents, has_aux=False):
    """Forward mode: ``(f(*primals), J @ tangents)`` using each primitive's JVP rule.

    Args:
        primals: tuple of pytrees (the arguments of f).
        tangents: tuple of pytrees shaped like ``primals``.
    """
    _check_callable("jvp", f)
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp(f, primals, tangents): primals and tangents must be tuples (one entry per argument).")
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents.")
    lv = P.new_level()
    args = []
    for p, t in zip(primals, tangents):
        pl, pd = flatten(p)
        tl, _ = flatten(t)
        if len(pl) != len(tl):
            raise ValueError("jvp: a tangent does not have the structure of its primal.")
        duals = []
        for a, b in zip(pl, tl):
            a = _to_tensor("jvp", a)
            b = as_tensor(b, a.dtype)
            if b.dtype != a.dtype:
                if b.dtype in ("float32", "float64"):
                    raise TypeError(f"jvp: tangent of dtype {b.dtype} for a primal of dtype {a.dtype}.")
                b = b.astype(a.dtype)
            if b.shape != a.shape:
                raise ValueError(f"jvp: tangent of shape {b.shape} for a primal of shape {a.shape}.")
            tg = dict(a._tangents or {})
            tg[lv] = b
            duals.append(Tensor._make(a._buf, a.shape, a.dtype, a._node, tg))
        args.append(unflatten(pd, duals))
    return _split_level(f(*args), lv, has_aux, ())


def _split_level(res, lv, has_aux, batch):
    """(primal out, tangent out[, aux]) of ``f``'s result at forward level ``lv``; missing tangents
    are zeros of shape ``batch + out.shape``."""
    aux = None
    if has_aux:
        res, aux = res
    leaves, td = flatten(res)
    outs, touts = [], []
    for o in leaves:
        o = as_tensor(o)
        t = (o._tangents or {}).get(lv)
        touts.append(zeros(batch + o.shape, o.dtype) if t is None else t)
        outs.append(o._strip(lv) if o._tangents and lv in o._tangents else o)
    r = (unflatten(td, outs), unflatten(td, touts))
    return r + (aux,) if has_aux else r


def linearize(f, *primals):
    """(f(*primals), jvp_fn) where ``jvp_fn(*tangents)`` re-runs forward mode (no caching)."""
    _check_callable("linearize", f)
    out = f(*primals)
    return out, lambda *ts: jvp(f, primals, ts)[1]


def _basis(x: Tensor):
    n = x.size
    eye = np.eye(n, dtype=np.float64).reshape((n,) + x.shape)
    return [tensor(eye[i], x.dtype) for i in range(n)]


def jacrev(f, argnums=0, has_aux=False):
    """Jacobian by reverse mode: one VJP per output element. Shape ``out.shape + x.shape``."""
    _check_callable("jacrev", f)
    @functools.wraps(f)
    def wrapped(*args):
        single, nums = _argnums(argnums, len(args), "jacrev")

        def g(*diff):
            full = list(args)
            for i, d in zip(nums, diff):
                full[i] = d
            return f(*full)
        res = vjp(g, *[args[i] for i in nums], has_aux=has_aux, _where="jacrev")
        out, pull = res[0], res[1]
        if not isinstance(out, Tensor):
            raise TypeError("jacrev: f must return a single Tensor.")
        if out.dtype not in ("float32", "float64"):
            raise TypeError(f"jacrev: f returned a Tensor of dtype {out.dtype}; an integer or bool output has no "
                            "derivative (return floats).")
        jac = []
        if not out.size:  # no rows: an empty Jacobian of shape out.shape + x.shape (as JAX)
            for i in nums:
                jac.append(tree_map(lambda p: zeros(out.shape + _to_tensor("jacrev", p).shape, out.dtype), args[i]))
        else:
            rows = [pull(e) for e in _basis(out)]
            for k in range(len(nums)):
                jac.append(tree_map(lambda *rs, o=out: _stack_rows(rs, o.shape), *[r[k] for r in rows]))
        jac = jac[0] if single else tuple(jac)
        return (jac, res[2]) if has_aux else jac
    return wrapped


def _stack_rows(rows, out_shape):
    from .ops import reshape, stack
    s = stack(list(rows), 0)
    return reshape(s, tuple(out_shape) + rows[0].shape)


def batched_jvp(f, primals, tangents, has_aux=False):
    """Forward mode with B tangents at once (a vmap of :func:`jvp` over the tangents).

    Each tangent leaf has shape ``(B,) + primal_leaf.shape`` (one B for all leaves; a None leaf is a
    zero tangent). Every primitive with a batched JVP rule pushes all B tangents in one pass (for a
    matmul: one GEMM over the B stacked blocks); a primitive without one loops over B with its
    ordinary rule. Only the tangents are batched: ``f`` runs once, on the unbatched primals.

    Returns:
        ``(f(*primals), tangents_out)`` where each output tangent leaf has shape ``(B,) + out.shape``
        (``+ (aux,)`` with ``has_aux``).
    Example:
        >>> x = sm.tensor([1.0, 2.0])
        >>> sm.batched_jvp(lambda x: x ** 3, (x,), (sm.eye(2),))[1]   # rows of the Jacobian: [[3, 0], [0, 12]]
    """
    _check_callable("batched_jvp", f)
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("batched_jvp(f, primals, tangents): primals and tangents must be tuples "
                        "(one entry per argument).")
    if len(primals) != len(tangents):
        raise ValueError(f"batched_jvp: {len(primals)} primals but {len(tangents)} tangents.")
    lv = P.new_level()
    nb = None
    args = []
    for p, t in zip(primals, tangents):
        pl, pd = flatten(p)
        tl = [None] * len(pl) if t is None else flatten(t)[0]
        if len(pl) != len(tl):
            raise ValueError("batched_jvp: a tangent does not have the structure of its primal.")
        duals = []
        for a, b in zip(pl, tl):
            if b is None:
                duals.append(a if isinstance(a, Tensor) else _to_tensor("batched_jvp", a))
                continue
            a = _to_tensor("batched_jvp", a)
            b = as_tensor(b, a.dtype)
            if b.ndim != a.ndim + 1 or b.shape[1:] != a.shape:
                raise ValueError(f"batched_jvp: tangent of shape {b.shape} for a primal of shape {a.shape}; "
                                 f"expected (B,) + {a.shape}.")
            if nb is None:
                nb = b.shape[0]
            elif b.shape[0] != nb:
                raise ValueError(f"batched_jvp: tangents have batch sizes {nb} and {b.shape[0]}; expected one B.")
            if b.dtype != a.dtype:
                raise TypeError(f"batched_jvp: tangent dtype {b.dtype} for a primal of dtype {a.dtype}.")
            tg = dict(a._tangents or {})
            tg[lv] = b
            duals.append(Tensor._make(a._buf, a.shape, a.dtype, a._node, tg))
        args.append(unflatten(pd, duals))
    if nb is None:
        raise ValueError("batched_jvp: every tangent is None; pass at least one (B,) + shape tangent.")
    info = [nb, 0]
    P._batched_levels[lv] = info
    from ..kernels import blas
    try:
        # MKL single-threaded inside a batched pass: its GEMMs here are many and small, and its OpenMP
        # threads (spinning after each call once torch's OpenMP runtime is loaded in the process) starved
        # Taichi's thread pool: W4b 64-120 ms -> 13-22 ms with torch imported, 22-25 -> 14-18 ms without
        with blas.threads(1):
            res = f(*args)
    finally:
        P._batched_levels.pop(lv, None)
        _bcast_cache.clear()
    out = _split_level(res, lv, has_aux, (nb,))
    _last_cost[0] = info[1]
    return out


_last_cost = [0]  # elements of tangent output produced per batch column by the last batched_jvp (chunking)
# default chunking of jacfwd / hessian: n <= FIRST_CHUNK columns go in one pass (as torch.func / JAX do);
# for larger n a first pass of PROBE_CHUNK columns measures the tangent data produced per column, and later
# passes take as many columns as keep it under CHUNK_BUDGET elements per pass
FIRST_CHUNK = 512
PROBE_CHUNK = 32
CHUNK_BUDGET = 1 << 25


def jacfwd(f, argnums=0, has_aux=False, *, chunk_size=None, batched=True):
    """Jacobian by forward mode, shape ``out.shape + x.shape`` (pytree outputs: per leaf).

    Args:
        chunk_size: tangents pushed per pass (batched tangents, :func:`batched_jvp`). None: all n basis
            vectors in one pass when n <= ``FIRST_CHUNK`` (512); else a first pass of ``PROBE_CHUNK`` (32)
            measures the tangent data per column, and later passes take as many columns as keep it under
            ``CHUNK_BUDGET`` (2**25 elements) per pass.
        batched: False = the previous path, one unbatched :func:`jvp` per input element.
    """
    _check_callable("jacfwd", f)
    if not batched:
        return _jacfwd_loop(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args):
        from .ops import concat, moveaxis, reshape
        single, nums = _argnums(argnums, len(args), "jacfwd")
        xs = [_to_tensor("jacfwd", args[i]) for i in nums]
        if chunk_size is not None and (not isinstance(chunk_size, (numbers.Integral, np.integer))
                                       or isinstance(chunk_size, bool) or int(chunk_size) < 1):
            raise ValueError(f"jacfwd: chunk_size={chunk_size!r}; expected a positive int or None.")

        def g(*diff):
            full = list(args)
            for i, d in zip(nums, diff):
                full[i] = d
            return f(*full)
        jacs = []
        aux = None
        for k, x in enumerate(xs):
            n = x.size
            if n == 0:  # no columns: the Jacobian is empty
                r = g(*xs)
                out_leaves, td = flatten(r[0] if has_aux else r)
                if has_aux:
                    aux = r[1]
                jacs.append((td, [zeros(as_tensor(o).shape + x.shape, as_tensor(o).dtype) for o in out_leaves]))
                continue
            pieces, start = [], 0
            step = int(chunk_size) if chunk_size is not None else (n if n <= FIRST_CHUNK else PROBE_CHUNK)
            while start < n:
                c = min(step, n - start)
                eye = np.zeros((c, n))
                eye[np.arange(c), start + np.arange(c)] = 1.0
                basis = tensor(eye.reshape((c,) + x.shape), x.dtype)
                r = batched_jvp(g, tuple(xs), tuple(basis if j == k else None for j in range(len(xs))),
                                has_aux=has_aux)
                if has_aux:
                    aux = r[2]
                tl, td = flatten(r[1])
                out_leaves = flatten(r[0])[0]
                pieces.append(tl)
                start += c
                if chunk_size is None:
                    step = max(1, min(n, CHUNK_BUDGET // max(_last_cost[0], 1)))
            leaves = []
            for i, o in enumerate(out_leaves):
                parts = [p[i] for p in pieces]
                j = parts[0] if len(parts) == 1 else concat(parts, 0)           # (n,) + out.shape
                j = moveaxis(j, 0, -1) if o.ndim else j                          # out.shape + (n,)
                leaves.append(reshape(j, o.shape + x.shape))
            jacs.append((td, leaves))
        if single:
            jac = unflatten(*jacs[0])
        elif jacs[0][0][0] == "leaf":
            jac = tuple(unflatten(td, ls) for td, ls in jacs)  # one Tensor output: a tuple over argnums
        else:  # pytree output: its structure outside, a tuple over argnums inside (as JAX)
            jac = unflatten(jacs[0][0], [tuple(ls[i] for _, ls in jacs) for i in range(len(jacs[0][1]))])
        return (jac, aux) if has_aux else jac
    return wrapped


def _jacfwd_loop(f, argnums=0, has_aux=False):
    """Jacobian by forward mode: one JVP per input element (the unbatched path)."""
    @functools.wraps(f)
    def wrapped(*args):
        from .ops import moveaxis, reshape, stack
        single, nums = _argnums(argnums, len(args), "jacfwd")
        xs = [_to_tensor("jacfwd", args[i]) for i in nums]
        jacs = []
        aux = None
        for k, x in enumerate(xs):
            cols = []
            for e in _basis(x):
                tangents = tuple(e if j == k else zeros(xx.shape, xx.dtype) for j, xx in enumerate(xs))

                def g(*diff):
                    full = list(args)
                    for i, d in zip(nums, diff):
                        full[i] = d
                    return f(*full)
                r = jvp(g, tuple(xs), tangents, has_aux=has_aux)
                if has_aux:
                    aux = r[2]
                cols.append(r[1])
            out_shape = cols[0].shape
            j = stack(cols, -1) if cols else None
            jacs.append(reshape(j, out_shape + x.shape))
        jac = jacs[0] if single else tuple(jacs)
        return (jac, aux) if has_aux else jac
    return wrapped


def hessian(f, argnums=0, has_aux=False, *, chunk_size=None, batched=True):
    """Hessian of a scalar-valued function, as a dense Tensor (forward over reverse).

    Args:
        f: function returning a scalar Tensor.
        argnums: positional argument(s) to differentiate with respect to (default 0).
        has_aux: if True, ``f`` returns ``(value, aux)`` and the result is ``(H, aux)``.
        chunk_size, batched: as in :func:`jacfwd` (batched tangents through the gradient's graph:
            forward over reverse, ``ceil(n / chunk)`` passes; ``batched=False``: one pass per element).
    Returns:
        A function with ``f``'s signature; H has shape ``x.shape + x.shape``.
    Example:
        >>> sm.hessian(lambda x: (x ** 3).sum())(sm.tensor([1.0, 2.0]))   # Tensor([[6., 0.], [0., 12.]])
    """
    _check_callable("hessian", f)
    g = grad(f, argnums, has_aux=has_aux)
    return jacfwd(g, argnums, has_aux=has_aux, chunk_size=chunk_size, batched=batched)


def hvp(f, primals, tangents):
    """Hessian-vector product ``(grad f(x), H v)`` by forward-over-reverse (JVP rules through the
    backward pass), for pytrees ``primals`` / ``tangents`` (tuples, one entry per argument)."""
    _check_callable("hvp", f)
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("hvp(f, primals, tangents): primals and tangents must be tuples (one entry per argument).")
    nums = tuple(range(len(primals)))
    g = grad(f, argnums=nums)
    gx, hv = jvp(lambda *a: g(*a), tuple(primals), tuple(tangents))
    return gx, hv


def stop_gradient(x):
    """``x`` with no derivative: cut from the tape and from forward levels (pytrees too)."""
    return tree_map(lambda t: t.detach() if isinstance(t, Tensor) else t, x)
