"""Composable gradient transforms (optax style), written in sciml ops: pure functions of pytrees.

Each returns a :class:`Transform`; ``update(grads, state, params)`` returns ``(updates, state)``
and the caller applies ``params + updates``. Chain them with :func:`chain`; ``aliases.py`` builds
the usual optimizers as one-line chains, and :class:`Optimizer` turns any chain into a stateful
optimizer. The fused optimizers in ``first_order.py`` compute the same updates in one kernel.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..autodiff.ops import sqrt
from ..autodiff.pytree import tree_leaves, tree_map
from .base import Transform, global_norm, tree_zeros_like
from .schedules import as_schedule

__all__ = ["apply_updates", "identity", "scale", "scale_by_lr", "scale_by_schedule", "scale_by_adam", "scale_by_rms",
           "scale_by_adagrad", "trace", "add_decayed_weights", "clip_by_global_norm", "AdamState", "ScaleState"]


class ScaleState(NamedTuple):
    step: int


class AdamState(NamedTuple):
    step: int
    m: list
    v: list


class TraceState(NamedTuple):
    step: int
    trace: list


def identity() -> Transform:
    return Transform(lambda params: (), lambda g, s, p=None: (g, s))


def scale(factor) -> Transform:
    """updates = factor * grads."""
    f = float(factor)
    return Transform(lambda params: (), lambda g, s, p=None: (tree_map(lambda x: x * f, g), s))


def scale_by_schedule(schedule) -> Transform:
    """updates = schedule(step) * grads (step counts updates, from 0)."""
    sched = as_schedule(schedule)

    def update(g, state, params=None):
        f = float(sched(state.step))
        return tree_map(lambda x: x * f, g), ScaleState(state.step + 1)
    return Transform(lambda params: ScaleState(0), update)


def scale_by_lr(lr) -> Transform:
    """updates = -lr(step) * grads: gradient descent's sign and step size (lr a number or schedule)."""
    sched = as_schedule(lr)
    return scale_by_schedule(lambda t: -sched(t))


def scale_by_adam(b1=0.9, b2=0.999, eps=1e-8) -> Transform:
    """Adam's direction m_hat / (sqrt(v_hat) + eps) (Kingma & Ba 2015)."""
    def init(params):
        return AdamState(0, tree_zeros_like(params), tree_zeros_like(params))

    def update(g, state, params=None):
        t = state.step + 1
        m = tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, state.m, g)
        v = tree_map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, state.v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        u = tree_map(lambda m_, v_: (m_ * (1 / c1)) / (sqrt(v_ * (1 / c2)) + eps), m, v)
        return u, AdamState(t, m, v)
    return Transform(init, update)


def scale_by_rms(alpha=0.99, eps=1e-8) -> Transform:
    """RMSprop's direction g / (sqrt(s) + eps), s <- alpha s + (1 - alpha) g^2."""
    def init(params):
        return TraceState(0, tree_zeros_like(params))

    def update(g, state, params=None):
        s = tree_map(lambda s_, g_: alpha * s_ + (1 - alpha) * g_ * g_, state.trace, g)
        return tree_map(lambda g_, s_: g_ / (sqrt(s_) + eps), g, s), TraceState(state.step + 1, s)
    return Transform(init, update)


def scale_by_adagrad(eps=1e-10) -> Transform:
    """Adagrad's direction g / (sqrt(sum g^2) + eps)."""
    def init(params):
        return TraceState(0, tree_zeros_like(params))

    def update(g, state, params=None):
        s = tree_map(lambda s_, g_: s_ + g_ * g_, state.trace, g)
        return tree_map(lambda g_, s_: g_ / (sqrt(s_) + eps), g, s), TraceState(state.step + 1, s)
    return Transform(init, update)


def trace(momentum=0.9, nesterov=False, dampening=0.0) -> Transform:
    """Momentum (PyTorch's form): b <- mu b + (1 - dampening) g (b = g at the first step);
    updates = g + mu b if nesterov else b."""
    def init(params):
        return TraceState(0, tree_zeros_like(params))

    def update(g, state, params=None):
        if state.step == 0:
            b = g
        else:
            b = tree_map(lambda b_, g_: momentum * b_ + (1 - dampening) * g_, state.trace, g)
        u = tree_map(lambda g_, b_: g_ + momentum * b_, g, b) if nesterov else b
        return u, TraceState(state.step + 1, b)
    return Transform(init, update)


def add_decayed_weights(weight_decay=1e-4) -> Transform:
    """updates = grads + weight_decay * params (L2 before an adaptive scaling; AdamW's decoupled
    decay when placed after it)."""
    wd = float(weight_decay)

    def update(g, state, params=None):
        if params is None:
            raise ValueError("add_decayed_weights: update(grads, state, params) needs params.")
        return tree_map(lambda g_, p_: g_ + wd * p_, g, params), state
    return Transform(lambda params: (), update)


def clip_by_global_norm(max_norm) -> Transform:
    """Scale all grads by min(1, max_norm / ||grads||_2) (norm over every element of the pytree)."""
    if not max_norm > 0:
        raise ValueError(f"clip_by_global_norm: max_norm={max_norm}; expected a positive number.")

    def update(g, state, params=None):
        n = global_norm(tree_leaves(g))
        if n <= max_norm or not math.isfinite(n):
            return g, state
        f = max_norm / n
        return tree_map(lambda x: x * f, g), state
    return Transform(lambda params: (), update)


def apply_updates(params, updates):
    """``params + updates`` leafwise (optax's apply_updates): new Tensors, the inputs untouched. Each update is
    cast to its parameter's dtype.

        >>> updates, state = tx.update(grads, state, params)
        >>> params = apply_updates(params, updates)
    """
    def add(p, u):
        if u is None:
            return p
        return p + (u if u.dtype == p.dtype else u.astype(p.dtype))
    return tree_map(add, params, updates)
