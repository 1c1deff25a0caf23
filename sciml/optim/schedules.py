"""Learning-rate schedules: callables ``step -> lr`` (step = number of updates already taken, from 0).

Pass one wherever a learning rate goes: ``Adam(params, lr=cosine_decay(1e-3, 1000))`` or
``scale_by_lr(warmup(1e-3, 100, cosine_decay(1e-3, 900)))``.
"""
from __future__ import annotations

import bisect
import math

__all__ = ["constant", "step_decay", "exponential_decay", "cosine_decay", "linear_warmup", "warmup_cosine",
           "as_schedule", "multistep_decay", "polynomial_decay", "cosine_warm_restarts", "one_cycle",
           "piecewise_constant", "join_schedules"]


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


def _steps(name, **kw):
    for k, v in kw.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name}: {k}={v!r}; expected a positive integer.")


def multistep_decay(lr, milestones, gamma=0.1):
    """lr * gamma ** (number of milestones <= step) (PyTorch MultiStepLR)."""
    _check("multistep_decay", lr=lr, gamma=gamma)
    ms = sorted(int(m) for m in milestones)
    if any(m < 0 for m in ms):
        raise ValueError(f"multistep_decay: milestones={list(milestones)}; expected non-negative integers.")
    return lambda step: float(lr) * gamma ** bisect.bisect_right(ms, int(step))


def polynomial_decay(lr, total_steps, power=1.0, final_lr=0.0):
    """final + (lr - final) (1 - min(step, T) / T) ** power (PyTorch PolynomialLR with final 0; optax's
    polynomial_schedule)."""
    _check("polynomial_decay", lr=lr, power=power, final_lr=final_lr)
    _steps("polynomial_decay", total_steps=total_steps)
    T = int(total_steps)
    return lambda step: final_lr + (lr - final_lr) * (1.0 - min(int(step), T) / T) ** power


def cosine_warm_restarts(lr, T_0, T_mult=1, eta_min=0.0):
    """Cosine annealing with warm restarts (Loshchilov & Hutter 2017; PyTorch CosineAnnealingWarmRestarts):
    periods T_0, T_0 T_mult, T_0 T_mult^2, ...; within a period of length T_i at position T_cur,
    eta_min + (lr - eta_min) (1 + cos(pi T_cur / T_i)) / 2."""
    _check("cosine_warm_restarts", lr=lr, eta_min=eta_min)
    _steps("cosine_warm_restarts", T_0=T_0, T_mult=T_mult)

    def sched(step):
        s = int(step)
        if T_mult == 1:
            t_cur, t_i = s % T_0, T_0
        else:
            n = int(math.log(s / T_0 * (T_mult - 1) + 1, T_mult))
            t_cur, t_i = s - T_0 * (T_mult ** n - 1) // (T_mult - 1), T_0 * T_mult ** n
            if t_cur >= t_i:  # floating-point log at a boundary
                t_cur, t_i = t_cur - t_i, t_i * T_mult
        return eta_min + (lr - eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2
    return sched


def one_cycle(max_lr, total_steps, pct_start=0.3, anneal="cos", div_factor=25.0, final_div_factor=1e4,
              three_phase=False):
    """The 1cycle policy (Smith & Topin 2019), PyTorch OneCycleLR's formula: from max_lr / div_factor up to
    max_lr over pct_start of the steps, then down to max_lr / div_factor / final_div_factor (cosine or linear
    annealing; ``three_phase`` as PyTorch)."""
    _check("one_cycle", max_lr=max_lr, pct_start=pct_start, div_factor=div_factor, final_div_factor=final_div_factor)
    _steps("one_cycle", total_steps=total_steps)
    if not 0 < pct_start < 1:
        raise ValueError(f"one_cycle: pct_start={pct_start}; expected a number in (0, 1).")
    if anneal not in ("cos", "linear"):
        raise ValueError(f"one_cycle: anneal={anneal!r}; expected 'cos' or 'linear'.")
    init = max_lr / div_factor
    low = init / final_div_factor
    T = int(total_steps)
    if three_phase:
        phases = [(pct_start * T - 1, init, max_lr), (2 * pct_start * T - 2, max_lr, init), (T - 1, init, low)]
    else:
        phases = [(pct_start * T - 1, init, max_lr), (T - 1, max_lr, low)]

    def f(a, b, pct):
        return b + (a - b) / 2 * (math.cos(math.pi * pct) + 1) if anneal == "cos" else (b - a) * pct + a

    def sched(step):
        s = min(int(step), T)
        start = 0.0
        for i, (end, a, b) in enumerate(phases):
            if s <= end or i == len(phases) - 1:
                return f(a, b, (s - start) / (end - start))
            start = end
    return sched


def piecewise_constant(boundaries, values):
    """values[i] for boundaries[i-1] <= step < boundaries[i] (``len(values) == len(boundaries) + 1``)."""
    b = [int(x) for x in boundaries]
    v = [float(x) for x in values]
    if len(v) != len(b) + 1 or b != sorted(b):
        raise ValueError(f"piecewise_constant: got {len(b)} boundaries and {len(v)} values; expected increasing "
                         "boundaries and one more value than boundaries.")
    return lambda step: v[bisect.bisect_right(b, int(step))]


def join_schedules(schedules, boundaries):
    """schedules[i](step - boundaries[i-1]) for boundaries[i-1] <= step < boundaries[i] (optax's
    join_schedules: each piece restarts its own step count)."""
    sch = [as_schedule(s) for s in schedules]
    b = [int(x) for x in boundaries]
    if len(sch) != len(b) + 1 or b != sorted(b):
        raise ValueError(f"join_schedules: got {len(sch)} schedules and {len(b)} boundaries; expected increasing "
                         "boundaries and one more schedule than boundaries.")

    def sched(step):
        s = int(step)
        i = bisect.bisect_right(b, s)
        return sch[i](s - (b[i - 1] if i else 0))
    return sched
