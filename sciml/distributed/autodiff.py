"""Differentiable data parallelism: a loss whose value, gradient and Hessian-vector products are global.

Two primitives, transposes of each other, carry the communication:

* ``_mean_over_ranks(x)``: forward = mean of ``x`` over ranks (an all-reduce); its VJP passes the
  cotangent through (cotangents of replicated values are replicated); its JVP all-reduces the tangent.
* ``_sync(theta)``: forward = identity on the (replicated) parameters; its VJP all-reduces the
  cotangent, which turns each rank's local gradient into the global mean; its JVP is the identity.

``wrap_loss(f)(params, ...) = _mean_over_ranks(f(_sync(params), ...))``. Because the rules are sciml
ops (the VJP of ``_sync`` is a ``_mean_over_ranks``), every transform composes: ``grad`` gives the
global gradient, ``hvp`` (forward over reverse, or reverse over reverse) gives the global Hessian-vector
product, and every rank sees bit-identical values, so L-BFGS line searches and CG loops take the same
decisions on every rank. All parameter leaves go through ONE ``_sync`` (concatenated), so a gradient is
one MPI call.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import backend
from ..autodiff import transforms as T
from ..autodiff.ops import concat, reshape, split
from ..autodiff.primitive import Primitive
from ..autodiff.pytree import flatten, unflatten
from ..autodiff.tensor import Tensor
from . import comm
from .collectives import all_reduce


def _mean_forward(x, weight):
    n = x.size
    dt = backend.NP_DTYPES[x.dtype]
    buf = np.empty(n + 1, dt)
    buf[:n] = backend.to_numpy(x._buf, (n,), x.dtype)
    w = 1.0 if weight is None else weight
    if weight is not None:
        buf[:n] *= w
    buf[n] = w
    comm.allreduce_buffer(buf, "sum", f"wrap_loss: all-reduce of {n} numbers")
    if buf[n] == 0:
        raise ZeroDivisionError("wrap_loss(weight=...): the weights sum to 0 over all ranks.")
    out = buf[:n] * (1.0 / buf[n])
    return (out if backend.on_host() else backend.from_numpy(out, x.dtype)), x.shape, x.dtype


_mean_over_ranks = Primitive("mean_over_ranks", _mean_forward)
_sync = Primitive("sync_over_ranks", lambda x, weight: (x._buf, x.shape, x.dtype))

_mean_over_ranks.def_vjp(lambda g, x, out, weight: (g,))
_mean_over_ranks.def_jvp(lambda ts, x, out, weight: _mean_over_ranks(ts[0], weight=weight))
_sync.def_vjp(lambda g, x, out, weight: (_mean_over_ranks(g, weight=weight),))
_sync.def_jvp(lambda ts, x, out, weight: ts[0])


def _gather_forward(x, counts, offset):
    n = x.size
    local = np.ascontiguousarray(backend.to_numpy(x._buf, (n,), x.dtype))
    out = comm.allgather_buffer(local, counts, f"wrap_residuals: all-gather of {sum(counts)} residuals")
    return (out if backend.on_host() else backend.from_numpy(out, x.dtype)), (int(sum(counts)),), x.dtype


def _gather_vjp(g, x, out, counts, offset):
    from ..autodiff.ops.shape import getitem
    return (getitem(g, slice(offset, offset + x.size)),)


_gather = Primitive("gather_over_ranks", _gather_forward)  # 1-D local -> 1-D global (rank order)
_gather.def_vjp(_gather_vjp)
_gather.def_jvp(lambda ts, x, out, counts, offset: _gather(ts[0], counts=counts, offset=offset))
_sync_sum = Primitive("sync_sum_over_ranks", lambda x: (x._buf, x.shape, x.dtype))
_sum_over_ranks = Primitive("sum_over_ranks", lambda x: _sum_forward(x))
_sync_sum.def_vjp(lambda g, x, out: (_sum_over_ranks(g),))
_sync_sum.def_jvp(lambda ts, x, out: ts[0])
_sum_over_ranks.def_vjp(lambda g, x, out: (g,))
_sum_over_ranks.def_jvp(lambda ts, x, out: _sum_over_ranks(ts[0]))


def _sum_forward(x):
    n = x.size
    buf = np.array(backend.to_numpy(x._buf, (n,), x.dtype))
    comm.allreduce_buffer(buf, "sum", f"wrap_residuals: all-reduce of {n} numbers")
    return (buf if backend.on_host() else backend.from_numpy(buf, x.dtype)), x.shape, x.dtype


def wrap_residuals(residual_fn, argnums=0, mean=True):
    """Make a residual function global for least-squares optimizers (Levenberg-Marquardt, Gauss-Newton).

    Each rank computes the residuals of its own points; the wrapped function returns, on every rank,
    the 1-D concatenation of all ranks' residuals (rank order), differentiable in both modes: JVPs
    all-gather the tangents (each rank computes only its rows of the Jacobian) and VJPs sum each rank's
    contribution, so ``J``, ``J^T J`` and ``J^T r`` are the global ones and every rank takes the same
    step. Single-process it returns ``residual_fn`` unchanged.

    Args:
        residual_fn: ``residual_fn(params, *args) -> Tensor`` of this rank's residuals (any shape).
        argnums: argument(s) holding the replicated parameters.
        mean: scale by ``1 / sqrt(world_size)`` so that ``0.5 ||r||^2`` is the mean over ranks of the
            local ``0.5 ||r_local||^2`` (what :func:`wrap_loss` averages); False: the plain concatenation
            (the residual of the union of all ranks' points).

    Example:
        >>> LevenbergMarquardt(params).step(dist.wrap_residuals(lambda p: net.apply(p, x_local) - y_local))
    """
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if comm.world_size() == 1:
        return residual_fn

    @functools.wraps(residual_fn)
    def wrapped(*args, **kwargs):
        args = list(args)
        for i in nums:
            if not -len(args) <= i < len(args):
                raise ValueError(f"wrap_residuals: argnums={argnums} but the function got {len(args)} positional "
                                 "argument(s).")
            args[i] = _synced_sum(args[i])
        r = residual_fn(*args, **kwargs)
        if not isinstance(r, Tensor):
            raise TypeError(f"wrap_residuals: residual_fn must return a Tensor, got {type(r).__name__}.")
        r = reshape(r, (-1,))
        counts = comm.allgather_buffer(np.array([r.size], np.int64), [1] * comm.world_size(),
                                       "wrap_residuals: residual counts")
        offset = int(counts[:comm.rank()].sum())
        out = _gather(r, counts=tuple(int(c) for c in counts), offset=offset)
        return out * (1.0 / math.sqrt(comm.world_size())) if mean else out
    return wrapped


def _synced_sum(tree):
    leaves, td = flatten(tree)
    out = []
    for leaf in leaves:
        if not isinstance(leaf, Tensor):
            raise TypeError(f"wrap_residuals: the differentiated argument has a leaf of type {type(leaf).__name__}; "
                            "expected sciml Tensors.")
    groups: dict = {}
    for i, leaf in enumerate(leaves):
        groups.setdefault(leaf.dtype, []).append(i)
    out = list(leaves)
    for idx in groups.values():
        parts = [reshape(leaves[i], (-1,)) for i in idx]
        flat = _sync_sum(concat(parts) if len(parts) > 1 else parts[0])
        pieces = split(flat, list(np.cumsum([p.size for p in parts])[:-1])) if len(parts) > 1 else [flat]
        for i, p in zip(idx, pieces):
            out[i] = reshape(p, leaves[i].shape)
    return unflatten(td, out)


def _synced(tree, weight):
    """``tree`` passed through ``_sync``: one flat concatenated vector per float dtype."""
    leaves, td = flatten(tree)
    for leaf in leaves:
        if not isinstance(leaf, Tensor):
            raise TypeError(f"wrap_loss: the differentiated argument has a leaf of type {type(leaf).__name__}; "
                            "expected sciml Tensors.")
    out = list(leaves)
    groups: dict = {}
    for i, leaf in enumerate(leaves):
        groups.setdefault(leaf.dtype, []).append(i)
    for idx in groups.values():
        parts = [reshape(leaves[i], (-1,)) for i in idx]
        flat = _sync(concat(parts) if len(parts) > 1 else parts[0], weight=weight)
        pieces = split(flat, list(np.cumsum([p.size for p in parts])[:-1])) if len(parts) > 1 else [flat]
        for i, p in zip(idx, pieces):
            out[i] = reshape(p, leaves[i].shape)
    return unflatten(td, out)


def _check_weight(weight, where):
    if weight is None:
        return None
    if not (isinstance(weight, (int, float, np.integer, np.floating)) and math.isfinite(weight) and weight >= 0):
        raise ValueError(f"{where}(weight=...): got {weight!r}; expected a non-negative number "
                         "(this rank's share, e.g. its number of points).")
    return float(weight)


def wrap_loss(loss_fn, argnums=0, has_aux=False, weight=None):
    """Make ``loss_fn`` global: value, gradient and HVPs are means over all ranks' local losses.

    Use it for optimizers that evaluate the loss themselves (L-BFGS, Newton-CG, AdaHessian): each rank
    computes its loss on its own shard of the data; the wrapped loss returns the same global value on
    every rank and differentiates to the global gradient and Hessian-vector products, so every rank
    takes the same step. Single-process it returns ``loss_fn`` unchanged.

    Args:
        loss_fn: ``loss_fn(params, *args) -> scalar Tensor`` (or ``(scalar, aux)`` with ``has_aux``).
        argnums: argument(s) holding the replicated parameters (pytrees of Tensors).
        has_aux: ``loss_fn`` returns ``(loss, aux)``; aux stays local to the rank.
        weight: this rank's weight for a weighted mean (its number of points when shards differ in
            size); default: plain mean over ranks.

    Example:
        >>> loss = dist.wrap_loss(lambda p: mse(model.apply(p, x_local), y_local))
        >>> LBFGS(params).step(loss)           # same iterates on every rank
    """
    weight = _check_weight(weight, "wrap_loss")
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if comm.world_size() == 1:
        return loss_fn

    @functools.wraps(loss_fn)
    def wrapped(*args, **kwargs):
        args = list(args)
        for i in nums:
            if not -len(args) <= i < len(args):
                raise ValueError(f"wrap_loss: argnums={argnums} but the loss got {len(args)} positional argument(s).")
            args[i] = _synced(args[i], weight)
        res = loss_fn(*args, **kwargs)
        aux = None
        if has_aux:
            if not (isinstance(res, tuple) and len(res) == 2):
                raise ValueError("wrap_loss(has_aux=True) needs loss_fn to return a pair (loss, aux).")
            res, aux = res
        if not isinstance(res, Tensor) or res.size != 1:
            shape = getattr(res, "shape", type(res).__name__)
            raise ValueError(f"wrap_loss: loss_fn must return a scalar Tensor, got {shape}.")
        out = _mean_over_ranks(res, weight=weight)
        return (out, aux) if has_aux else out
    return wrapped


def value_and_grad(loss_fn, argnums=0, has_aux=False, weight=None, reduce_aux=False):
    """Like :func:`sciml.value_and_grad`, but the loss and gradient are means over ranks, in ONE MPI call.

    The first-order data-parallel step: each rank differentiates its local loss, then loss and
    gradients are packed together and all-reduced once. ``aux`` (with ``has_aux``) stays local unless
    ``reduce_aux=True`` (then its Tensor / number leaves are averaged in the same call, e.g. the loss
    terms a progress line prints).

    Example:
        >>> loss, grads = dist.value_and_grad(loss_fn)(params, x_local, y_local)
        >>> params = opt.step(grads)           # identical on every rank
    """
    weight = _check_weight(weight, "value_and_grad")
    vg = T.value_and_grad(loss_fn, argnums, has_aux)

    @functools.wraps(loss_fn)
    def wrapped(*args, **kwargs):
        (value, grads) = vg(*args, **kwargs)
        if comm.world_size() == 1:
            return value, grads
        loss = value[0] if has_aux else value
        if has_aux and reduce_aux:
            loss, grads, aux = all_reduce((loss, grads, value[1]), "mean", weight=weight)
            return (loss, aux), grads
        loss, grads = all_reduce((loss, grads), "mean", weight=weight)
        return ((loss, value[1]) if has_aux else loss), grads
    return wrapped
