"""Collectives on pytrees: every call packs all leaves into ONE flat host buffer and makes one MPI call.

Leaves may be sciml Tensors, numpy arrays or Python numbers; the result has the same structure and
leaf types. On CPU a Tensor's buffer is a numpy array, so packing is one memcpy per leaf and the
results are views into the reduced buffer (no further copy); on devices buffers go through the host.
With one process, ``all_reduce`` and ``broadcast`` only check the leaf types and return the tree
itself: no host copy, no upload, no kernel launch.
"""
from __future__ import annotations

import numbers
import zlib

import numpy as np

from .. import backend
from ..autodiff.pytree import flatten, unflatten
from ..autodiff.tensor import Tensor
from . import comm

OPS = ("mean", "sum", "max", "min")


def _check_leaf(leaf, where):
    """Raise a clear TypeError for a leaf that collectives cannot carry; reads no data (so a
    single-process call touches no device buffer)."""
    if isinstance(leaf, Tensor):
        if leaf.dtype == "bool":
            raise TypeError(f"{where}: got a bool Tensor of shape {leaf.shape}; expected float or int32 Tensors.")
        return
    if isinstance(leaf, np.ndarray):
        if leaf.dtype.kind not in "fiu":
            raise TypeError(f"{where}: got a numpy array of dtype {leaf.dtype}; expected a numeric array.")
        return
    if isinstance(leaf, numbers.Real) and not isinstance(leaf, bool):
        return
    raise TypeError(f"{where}: got a leaf of type {type(leaf).__name__}; expected sciml Tensors, numpy arrays or "
                    "numbers (in nested dicts / lists / tuples).")


def _host(leaf, where):
    """(flat numpy view, kind, shape, dtype-name) of one leaf (on a device: a host copy)."""
    _check_leaf(leaf, where)
    if isinstance(leaf, Tensor):
        return backend.to_numpy(leaf._buf, (leaf.size,), leaf.dtype), "tensor", leaf.shape, leaf.dtype
    if isinstance(leaf, np.ndarray):
        return np.ascontiguousarray(leaf).reshape(-1), "array", leaf.shape, leaf.dtype
    return np.asarray([leaf], np.float64), ("int" if isinstance(leaf, numbers.Integral) else "float"), (), None


def _rebuild(view, kind, shape, dtype):
    if kind == "tensor":
        npdt = backend.NP_DTYPES[dtype]
        if backend.on_host():
            buf = view if view.dtype == npdt else view.astype(npdt)
        else:
            buf = backend.from_numpy(view, dtype)
        return Tensor._make(buf, tuple(shape), dtype)
    if kind == "array":
        return view.astype(dtype, copy=True).reshape(shape)
    if kind == "int":
        return int(round(float(view[0])))
    return float(view[0])


def _check_op(op, where):
    if op not in OPS:
        raise ValueError(f"{where}(op=...): got {op!r}; expected one of {', '.join(map(repr, OPS))}.")


def all_reduce(tree, op: str = "mean", weight: float | None = None):
    """Reduce a pytree over all ranks with one MPI call: every rank gets the same result.

    Args:
        tree: nested dict / list / tuple whose leaves are Tensors, numpy arrays or numbers (for
            example the gradients of a model's parameters).
        op: ``"mean"`` (default), ``"sum"``, ``"max"`` or ``"min"``, leafwise.
        weight: with ``op="mean"``, this rank's weight (e.g. its number of samples), for a
            weighted mean ``sum_r w_r x_r / sum_r w_r`` when shards have different sizes.

    Returns:
        A pytree of the same structure and leaf types. The reduction runs in float64 unless every
        leaf is float32. Results are constants for autodiff (see :func:`wrap_loss` for a
        differentiable reduction). Single-process: ``tree`` itself.

    Example:
        >>> grads = dist.all_reduce(sm.grad(loss)(params, x_local, y_local))     # global mean gradient
    """
    _check_op(op, "all_reduce")
    if weight is not None and op != "mean":
        raise ValueError(f"all_reduce(weight=...): weights apply to op='mean' only; got op={op!r}.")
    if weight is not None and not (isinstance(weight, numbers.Real) and weight >= 0):
        raise ValueError(f"all_reduce(weight=...): got {weight!r}; expected a non-negative number.")
    leaves, td = flatten(tree)
    for leaf in leaves:
        _check_leaf(leaf, "all_reduce")
    if comm.world_size() == 1:  # nothing to reduce: no host copy, no upload, no launch
        return tree
    hosts = [_host(leaf, "all_reduce") for leaf in leaves]
    f32 = all(h[1] == "tensor" and h[3] == "float32" or h[1] == "array" and h[3] == np.float32 for h in hosts)
    dtype = np.float32 if f32 and hosts else np.float64
    sizes = [h[0].size for h in hosts]
    total = sum(sizes)
    extra = 1 if weight is not None else 0
    buf = np.empty(total + extra, dtype)
    off = 0
    for (v, *_), n in zip(hosts, sizes):
        buf[off:off + n] = v
        off += n
    if weight is not None:
        buf[:total] *= weight
        buf[total] = weight
    comm.allreduce_buffer(buf, "sum" if op == "mean" else op, f"all_reduce(op={op!r}) of {total} numbers")
    if op == "mean":
        denom = buf[total] if weight is not None else comm.world_size()
        if denom == 0:
            raise ZeroDivisionError("all_reduce(op='mean', weight=...): the weights sum to 0 over all ranks.")
        buf[:total] *= 1.0 / denom
    out, off = [], 0
    for (v, kind, shape, dt), n in zip(hosts, sizes):
        out.append(_rebuild(buf[off:off + n], kind, shape, dt))
        off += n
    return unflatten(td, out)


def _signature(hosts) -> int:
    desc = repr([(k, tuple(s), str(d), v.size) for v, k, s, d in hosts]).encode()
    return zlib.crc32(desc)


def broadcast(tree, root: int = 0):
    """Every rank gets rank ``root``'s values of ``tree`` (bit-exact, any dtypes; one MPI call for the data).

    Args:
        tree: pytree of Tensors / numpy arrays / numbers with the same structure, shapes and dtypes on
            every rank (e.g. the model's parameters).
        root: the rank whose values are sent.

    Returns:
        A pytree of the same structure and leaf types; single-process: ``tree`` itself.

    Raises:
        ValueError: if the tree's structure, shapes or dtypes differ from rank ``root``'s.

    Example:
        >>> params = dist.broadcast(model_params)      # same initial parameters on every rank
    """
    size = comm.world_size()
    if not (isinstance(root, numbers.Integral) and 0 <= root < size):
        raise ValueError(f"broadcast(root=...): got {root!r}; expected a rank in 0..{size - 1}.")
    leaves, td = flatten(tree)
    for leaf in leaves:
        _check_leaf(leaf, "broadcast")
    if size == 1:  # nothing to send: no host copy
        return tree
    hosts = [_host(leaf, "broadcast") for leaf in leaves]
    sig = np.array([_signature(hosts), sum(v.nbytes for v, *_ in hosts)], np.int64)
    theirs = comm.bcast_buffer(sig.copy(), root, "broadcast (structure check)")
    if not np.array_equal(theirs, sig):
        raise ValueError(f"broadcast: the tree on rank {comm.rank()} ({len(leaves)} leaves, {int(sig[1])} bytes) "
                         f"differs in structure, shapes or dtypes from rank {root}'s ({int(theirs[1])} bytes); "
                         "every rank must pass the same structure.")
    raw = np.empty(int(sig[1]), np.uint8)
    off = 0
    for v, *_ in hosts:
        b = v.view(np.uint8)
        raw[off:off + b.size] = b
        off += b.size
    comm.bcast_buffer(raw, root, f"broadcast of {raw.size} bytes")
    out, off = [], 0
    for v, kind, shape, dt in hosts:
        view = raw[off:off + v.nbytes].copy().view(v.dtype)  # a copy: aligned for zero-copy kernels
        off += v.nbytes
        out.append(_rebuild(view, kind, shape, dt))
    return unflatten(td, out)


def broadcast_parameters(params, root: int = 0):
    """Overwrite parameters in place with rank ``root``'s values (one MPI call); returns ``params``.

    Args:
        params: a Module (its parameters and buffers), ``model.parameters()``, ``model.params()``, or
            any pytree of objects with an in-place ``_assign`` (sciml.models.Parameter). Call it once
            after building the model and before the first step, so every rank starts identical.

    Example:
        >>> net = MLP([2, 32, 1], seed=0); dist.broadcast_parameters(net)
    """
    if hasattr(params, "named_parameters") and callable(params.named_parameters):
        leaves = [p for _, p in params.named_parameters()]
        if hasattr(params, "named_buffers"):
            leaves += [b for _, b in params.named_buffers()]
    else:
        leaves = flatten(params)[0]
    for i, p in enumerate(leaves):
        if not hasattr(p, "_assign"):
            raise TypeError(f"broadcast_parameters: leaf {i} is a {type(p).__name__}; expected Parameters "
                            "(updated in place). For plain Tensors use params = dist.broadcast(params).")
    if comm.world_size() == 1:
        return params
    for p, v in zip(leaves, broadcast(list(leaves), root)):
        p._assign(v)
    return params
