"""Loops as functions: ``scan``, ``fori_loop`` and ``while_loop`` (JAX's signatures).

sciml records operations as they run (define-by-run), so a loop is a Python loop over primitive
applications: every transform (grad of any order, jvp, vmap) differentiates through it, and ``sm.jit``
records the unrolled loop once and replays it (trip counts are fixed per trace). Memory for reverse mode
grows with the number of steps; wrap the step in :func:`sciml.checkpoint` to recompute it instead.
"""
from __future__ import annotations

import numbers

from .pytree import flatten, unflatten
from .tensor import Tensor


def _trip(name, v):
    if isinstance(v, Tensor):
        raise TypeError(f"{name}: a loop bound is a Tensor; expected a Python int (sciml unrolls loops: the "
                        "number of steps must be known when the function runs). Use int(t) outside jit.")
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise TypeError(f"{name}: a loop bound is {v!r}; expected a Python int.")
    return int(v)


def scan(f, init, xs=None, length=None, reverse=False):
    """Loop ``carry, y = f(carry, x)`` over the leading axis of ``xs``; returns ``(carry, ys)`` with the ``y``
    pytrees stacked along a new leading axis (``jax.lax.scan``).

    Args:
        f: ``(carry, x) -> (carry, y)``; the carry keeps its structure and shapes; ``y`` may be None.
        init: the initial carry (a pytree).
        xs: pytree of Tensors with a common leading size, or None (then ``length`` steps with x = None).
        length: number of steps (needed when xs is None).
        reverse: run from the last entry to the first (ys keep the order of xs).
    Example:
        >>> carry, ys = sm.scan(lambda c, x: (c + x, c * x), sm.tensor(0.0), sm.arange(4.0))
    """
    from .ops import getitem, stack
    x_leaves, x_def = flatten(xs) if xs is not None else ([], None)
    sizes = {int(x.shape[0]) for x in x_leaves if isinstance(x, Tensor) and x.ndim}
    if len(sizes) > 1:
        raise ValueError(f"scan: xs leaves have leading sizes {sorted(sizes)}; expected one length.")
    n = sizes.pop() if sizes else None
    if length is not None:
        length = _trip("scan", length)
        if n is not None and n != length:
            raise ValueError(f"scan: length={length} but xs has leading size {n}.")
        n = length
    if n is None:
        raise ValueError("scan: pass xs with a leading axis or length=.")
    carry_def = flatten(init)[1]
    order = range(n - 1, -1, -1) if reverse else range(n)
    carry, ys = init, [None] * n
    for i in order:
        x = unflatten(x_def, [getitem(l, i) for l in x_leaves]) if x_def is not None else None
        res = f(carry, x)
        if not isinstance(res, tuple) or len(res) != 2:
            raise TypeError("scan: f must return a pair (carry, y).")
        carry, ys[i] = res
        if repr(flatten(carry)[1]) != repr(carry_def):
            raise TypeError(f"scan: f changed the structure of the carry at step {i}; it must keep init's.")
    y_leaves = [flatten(y)[0] for y in ys]
    if n == 0 or not y_leaves[0]:
        return carry, (None if n == 0 or ys[0] is None else ys[0])
    y_def = flatten(ys[0])[1]
    stacked = [stack([yl[k] for yl in y_leaves], 0) for k in range(len(y_leaves[0]))]
    return carry, unflatten(y_def, stacked)


def fori_loop(lower, upper, body_fun, init_val):
    """``val = body_fun(i, val)`` for i in range(lower, upper) (``jax.lax.fori_loop``; Python int bounds)."""
    lo, hi = _trip("fori_loop", lower), _trip("fori_loop", upper)
    val = init_val
    for i in range(lo, hi):
        val = body_fun(i, val)
    return val


def while_loop(cond_fun, body_fun, init_val):
    """``while cond_fun(val): val = body_fun(val)`` (``jax.lax.while_loop``). The condition is read on the
    host each step, so inside ``sm.jit`` it raises a concretisation error (use fori_loop or scan there);
    reverse mode differentiates the steps actually taken."""
    val = init_val
    while bool(cond_fun(val)):
        val = body_fun(val)
    return val
