"""Learning-rate schedules: callables ``step -> lr`` (step = number of updates already taken, from 0).

Pass one wherever a learning rate goes: ``Adam(params, lr=cosine_decay(1e-3, 1000))`` or
``scale_by_lr(warmup(1e-3, 100, cosine_decay(1e-3, 900)))``.
"""
from __future__ import annotations

import math

__all__ = ["constant", "step_decay", "exponential_decay", "cosine_decay", "linear_warmup", "warmup_cosine",
           "as_schedule"]


def _check(name, **kw):
    for k, v in kw.items():
        if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name}: {k}={v!r}; expected a finite number.")


def constant(lr):
    """lr at every step."""
    _check("constant", lr=lr)
    lr = float(lr)
    return lambda step: lr


def step_decay(lr, step_size, gamma=0.1):
    """lr * gamma ** (step // step_size) (PyTorch StepLR)."""
    _check("step_decay", lr=lr, gamma=gamma)
    if int(step_size) <= 0:
        raise ValueError(f"step_decay: step_size={step_size}; expected a positive integer.")
    return lambda step: float(lr) * gamma ** (int(step) // int(step_size))


def exponential_decay(lr, gamma, every=1):
    """lr * gamma ** (step / every) (PyTorch ExponentialLR with every=1)."""
    _check("exponential_decay", lr=lr, gamma=gamma)
    return lambda step: float(lr) * gamma ** (int(step) / every)


def cosine_decay(lr, total_steps, final_lr=0.0):
    """final + (lr - final) * (1 + cos(pi * min(step, T) / T)) / 2 (Loshchilov & Hutter 2017, no restarts)."""
    _check("cosine_decay", lr=lr, final_lr=final_lr)
    if int(total_steps) <= 0:
        raise ValueError(f"cosine_decay: total_steps={total_steps}; expected a positive integer.")
    T = int(total_steps)
    return lambda step: final_lr + (lr - final_lr) * 0.5 * (1.0 + math.cos(math.pi * min(int(step), T) / T))


def linear_warmup(lr, warmup_steps, after=None, start=0.0):
    """Linear ramp from ``start`` to ``lr`` over ``warmup_steps``, then ``after(step - warmup_steps)``
    (a schedule) or the constant ``lr``."""
    _check("linear_warmup", lr=lr, start=start)
    W = int(warmup_steps)
    if W < 0:
        raise ValueError(f"linear_warmup: warmup_steps={warmup_steps}; expected >= 0.")
    after = as_schedule(after if after is not None else lr)

    def sched(step):
        step = int(step)
        if step < W:
            return start + (lr - start) * (step + 1) / W
        return after(step - W)
    return sched


def warmup_cosine(lr, warmup_steps, total_steps, final_lr=0.0):
    """Linear warm-up to lr, then cosine decay to final_lr at total_steps."""
    return linear_warmup(lr, warmup_steps, cosine_decay(lr, max(1, total_steps - warmup_steps), final_lr))


def as_schedule(lr):
    """A schedule from a number (constant) or a callable (returned as is)."""
    if callable(lr):
        return lr
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"lr: got {lr!r}; expected a non-negative number or a schedule (callable step -> lr).")
    return constant(lr)
