"""Curvature primitives for second-order methods, on pytrees of Tensors.

- :func:`hvp` / :func:`grad_and_hvp`: Hessian-vector products by forward over reverse (each
  primitive's JVP rule is applied through the backward pass; double-VJP only where a primitive
  has no JVP rule). :func:`hvp_operator`: many products at one point (graph recorded once).
- :func:`hessian_dense`: the dense (n, n) Hessian over the flattened parameters, for small n.
- :func:`hutchinson_diag`: unbiased estimate of diag(H) from seeded Rademacher probes,
  ``E[z * (H z)] = diag(H)``.
- :func:`residual_jvp`, :func:`residual_vjp`, :func:`gauss_newton_product`: products with the
  Jacobian J of a residual vector function r(params), and the Gauss-Newton product J^T (J v);
  :func:`gauss_newton_operator` for many products at one point (residual graph recorded once).

Example:
    >>> f = lambda p: (p["w"] ** 3).sum()
    >>> hvp(f, {"w": sm.tensor([1.0, 2.0])}, {"w": sm.tensor([1.0, 0.0])})   # {"w": Tensor([6., 0.])}
"""
from __future__ import annotations

import numpy as np

from .pytree import flatten, unflatten
from .tensor import Tensor, tensor
from . import backward as B
from . import primitive as P
from . import transforms as T


def _leaves(where, name, tree):
    leaves, td = flatten(tree)
    if not leaves:
        raise ValueError(f"{where}: {name} is empty; expected a pytree of float Tensors.")
    for i, l in enumerate(leaves):
        if not isinstance(l, Tensor):
            raise TypeError(f"{where}: {name} leaf {i} is a {type(l).__name__}; expected a Tensor.")
    return leaves, td


def _match(where, params, v, vname="v"):
    pl, pd = _leaves(where, "params", params)
    vl, vd = _leaves(where, vname, v)
    if vd != pd:
        raise ValueError(f"{where}: {vname} has {len(vl)} leaves in a {type(v).__name__}; expected a pytree "
                         f"shaped like params ({len(pl)} leaves in a {type(params).__name__}).")
    for i, (a, b) in enumerate(zip(pl, vl)):
        if a.shape != b.shape:
            raise ValueError(f"{where}: {vname} leaf {i} has shape {b.shape}; expected {a.shape} (the params leaf).")
        if a.dtype != b.dtype:
            raise TypeError(f"{where}: {vname} leaf {i} has dtype {b.dtype}; expected {a.dtype}.")
    return pl, pd, vl


def grad_and_hvp(f, params, v):
    """``(grad f(params), H v)``, both pytrees shaped like ``params`` (forward over reverse).

    Args:
        f: function of one pytree returning a scalar Tensor.
        params: pytree of float Tensors.
        v: pytree shaped like ``params`` (same shapes and dtypes).
    """
    pl, pd, vl = _match("hvp", params, v)

    def flat_f(*leaves):
        return f(unflatten(pd, list(leaves)))
    g, hv = T.hvp(flat_f, tuple(pl), tuple(vl))
    return unflatten(pd, list(g)), unflatten(pd, list(hv))


def hvp(f, params, v):
    """Hessian-vector product ``H v`` of a scalar ``f`` at ``params``, shaped like ``params``.

    Forward over reverse, without the gradient itself: the gradient's last products (e.g. a
    weight gradient ``h^T g``, one GEMM per layer) are dead here, so only their tangents are
    computed (:func:`sciml.autodiff.backward.tangent_only_results`); use :func:`grad_and_hvp`
    when the gradient is wanted too."""
    pl, pd, vl = _match("hvp", params, v)

    def flat_f(*leaves):
        return f(unflatten(pd, list(leaves)))
    with B.tangent_only_results(P.reverse_depth() + 1):
        _, hv = T.hvp(flat_f, tuple(pl), tuple(vl))
    return unflatten(pd, list(hv))


def hvp_operator(f, params):
    """``v -> H v`` at fixed ``params`` for MANY ``v`` (pytrees shaped like ``params``): the gradient
    graph is recorded once, then each product is one backward pass through it (reverse over
    reverse, valid because H is symmetric). What Newton-CG uses: 2.4x cheaper per product than a
    fresh forward-over-reverse :func:`hvp` on 100-D Rosenbrock."""
    pl, pd = _leaves("hvp_operator", "params", params)

    def flat_f(*leaves):
        return f(unflatten(pd, list(leaves)))
    g = T.grad(flat_f, argnums=tuple(range(len(pl))))
    _, pull = T.vjp(lambda *a: tuple(g(*a)), *pl)

    def op(v):
        _, _, vl = _match("hvp_operator", params, v)
        return unflatten(pd, [h.detach() for h in pull(tuple(vl), create_graph=False)])
    return op


def _flat_fn(f, params, where):
    """``f`` as a function of one flat vector, and that vector (for dense derivatives)."""
    from .ops import concat, getitem, reshape
    pl, pd = _leaves(where, "params", params)
    shapes = [l.shape for l in pl]
    offs = np.concatenate([[0], np.cumsum([l.size for l in pl])]).astype(int).tolist()
    x = pl[0] if len(pl) == 1 and len(shapes[0]) == 1 else concat([reshape(l, (-1,)) for l in pl])

    def g(xf):
        if len(pl) == 1:
            return f(unflatten(pd, [reshape(xf, shapes[0])]))
        return f(unflatten(pd, [reshape(getitem(xf, slice(a, b)), s) for a, b, s in zip(offs, offs[1:], shapes)]))
    return g, x.detach()


def hessian_dense(f, params, *, chunk_size=None, method="batched"):
    """Dense Hessian of a scalar ``f`` over the flattened ``params`` (leaves in pytree order,
    each row-major): a Tensor of shape (n, n). Meant for small n (a few thousand).

    Args:
        chunk_size: basis vectors per pass for ``method="batched"`` (see :func:`sciml.jacfwd`).
        method: ``"batched"`` (default): forward over reverse with batched tangents, all rows of a
            chunk in one pass (``sm.hessian``); ``"rows"``: the forward and the gradient graph once,
            then one backward pass of the gradient graph per row.

    Example:
        >>> hessian_dense(lambda p: (p["a"] ** 2 * p["b"]).sum(), {"a": sm.tensor([1.0]), "b": sm.tensor([2.0])})
        >>> # Tensor([[4., 2.], [2., 0.]])
    """
    from .ops import stack
    if method not in ("batched", "rows"):
        raise ValueError(f"hessian_dense: method={method!r}; expected 'batched' or 'rows'.")
    g, x = _flat_fn(f, params, "hessian_dense")
    if method == "batched":  # the gradient itself is dead here: only its tangents (as in hvp; same bits)
        with B.tangent_only_results(P.reverse_depth() + 1):
            return T.hessian(g, chunk_size=chunk_size)(x).detach()
    n = x.size
    _, pull = T.vjp(T.grad(g), x)
    eye = np.eye(n)
    rows = [pull(tensor(eye[i], x.dtype), create_graph=False)[0] for i in range(n)]
    return stack(rows, 0).detach()


def rademacher(like, seed):
    """A pytree shaped like ``like`` with independent +-1 entries (numpy Generator(seed))."""
    rng = np.random.default_rng(seed)
    leaves, td = flatten(like)
    return unflatten(td, [tensor(rng.integers(0, 2, size=l.shape) * 2.0 - 1.0, l.dtype) for l in leaves])


def hutchinson_diag(f, params, probes=1, seed=0, *, return_grad=False):
    """Hutchinson estimate of diag(H): the mean of ``z * (H z)`` over ``probes`` Rademacher ``z``.

    Args:
        f: scalar function of a pytree.
        params: pytree of float Tensors.
        probes: number of probe vectors (the estimate's variance falls as 1/probes).
        seed: seed of the probes (same seed, same estimate).
        return_grad: if True, return ``(diag, grad)`` (the gradient comes free with each HVP).
    Returns:
        A pytree shaped like ``params``.
    """
    if isinstance(probes, bool) or not isinstance(probes, (int, np.integer)) or probes < 1:
        raise ValueError(f"hutchinson_diag: probes must be a positive integer; got {probes!r}.")
    pl, pd = _leaves("hutchinson_diag", "params", params)
    rng = np.random.default_rng(seed)
    acc = None
    g = None
    for _ in range(int(probes)):
        z = [tensor(rng.integers(0, 2, size=l.shape) * 2.0 - 1.0, l.dtype) for l in pl]
        g, hz = grad_and_hvp(f, params, unflatten(pd, z))
        est = [zi * hi for zi, hi in zip(z, flatten(hz)[0])]
        acc = est if acc is None else [a + e for a, e in zip(acc, est)]
    diag = unflatten(pd, [a / float(probes) if probes > 1 else a for a in acc])
    return (diag, g) if return_grad else diag


def residual_jvp(residual, params, v):
    """``(r(params), J v)`` for a residual function returning one Tensor (any shape)."""
    pl, pd, vl = _match("residual_jvp", params, v)
    r, jv = T.jvp(lambda *ls: _check_residual("residual_jvp", residual(unflatten(pd, list(ls)))),
                  tuple(pl), tuple(vl))
    return r, jv


def residual_vjp(residual, params, u):
    """``(r(params), J^T u)``; ``u`` has the residual's shape; ``J^T u`` is shaped like ``params``."""
    r, pull = T.vjp(lambda p: _check_residual("residual_vjp", residual(p)), params)
    u = u if isinstance(u, Tensor) else tensor(u, r.dtype)
    if u.shape != r.shape:
        raise ValueError(f"residual_vjp: u has shape {u.shape}; expected the residual's shape {r.shape}.")
    return r, pull(u)[0]


def gauss_newton_product(residual, params, v):
    """The Gauss-Newton product ``J^T (J v)`` (shaped like ``params``): the Hessian of
    ``0.5 * ||r||^2`` without the second-derivative term. One JVP and one VJP."""
    _, jv = residual_jvp(residual, params, v)
    return residual_vjp(residual, params, jv)[1]


def gauss_newton_operator(residual, params):
    """``(r, op, jt)`` at fixed ``params``: ``op(v) = J^T (J v)`` and ``jt(u) = J^T u`` for MANY ``v`` / ``u``.

    The residual's graph is recorded once; ``J v`` is the transpose of the (linear) VJP map, taken by
    reverse mode through it, so each product is two backward passes and no forward re-run (what the
    matrix-free Levenberg-Marquardt uses; ``gauss_newton_product`` re-runs the forward twice).
    """
    from .tensor import zeros
    r, pull = T.vjp(lambda p: _check_residual("gauss_newton_operator", residual(p)), params)
    _, pull2 = T.vjp(lambda u: pull(u, create_graph=True)[0], zeros(r.shape, r.dtype))

    def jt(u):
        return T.stop_gradient(pull(u, create_graph=False)[0])

    def op(v):
        _match("gauss_newton_operator", params, v)
        return jt(pull2(v, create_graph=False)[0])
    return r, op, jt


def _check_residual(where, r):
    if not isinstance(r, Tensor):
        raise TypeError(f"{where}: the residual function must return one Tensor; got {type(r).__name__}.")
    return r
