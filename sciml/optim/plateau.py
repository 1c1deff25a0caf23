"""Stateful learning-rate control and weight averaging that act on a bound optimizer:
:class:`ReduceLROnPlateau` (PyTorch's rule) and :class:`EMA` (an exponential moving average of the
parameters, e.g. for evaluation).

    >>> opt = sm.optim.Adam(net.parameters(), lr=1e-3)
    >>> plateau = sm.optim.ReduceLROnPlateau(opt, factor=0.5, patience=3)
    >>> plateau.step(val_loss)                 # once per epoch: lowers every group's lr after a plateau
    >>> ema = sm.optim.EMA(net.parameters(), decay=0.999)
    >>> ema.update()                           # after each opt.step()
    >>> with ema.average_parameters(): evaluate(net)
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from .. import backend

__all__ = ["ReduceLROnPlateau", "EMA"]


class ReduceLROnPlateau:
    """Multiply every parameter group's learning rate by ``factor`` when a metric has stopped improving
    for more than ``patience`` calls of :meth:`step` (PyTorch's ReduceLROnPlateau, same arguments and rule).

    Args:
        optimizer: a bound optimizer whose groups have numeric ``"lr"`` (not schedules).
        mode: ``"min"`` (lower is better) or ``"max"``.
        factor: in (0, 1).
        patience: calls without improvement tolerated before a reduction.
        threshold, threshold_mode: improvement means metric < best (1 - threshold) (``"rel"``, min mode) or
            metric < best - threshold (``"abs"``); mirrored for max mode.
        cooldown: calls after a reduction during which bad calls are not counted.
        min_lr: lower bound (a number, or one per group).
        eps: reductions smaller than this are skipped.
    """

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0.0, eps=1e-8):
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode={mode!r}; expected 'min' or 'max'.")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: threshold_mode={threshold_mode!r}; expected 'rel' or 'abs'.")
        if not (isinstance(factor, (int, float)) and 0 < factor < 1):
            raise ValueError(f"ReduceLROnPlateau: factor={factor!r}; expected a number in (0, 1).")
        for k, v in (("patience", patience), ("cooldown", cooldown)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"ReduceLROnPlateau: {k}={v!r}; expected a non-negative integer.")
        if not hasattr(optimizer, "param_groups") or not optimizer.param_groups:
            raise TypeError("ReduceLROnPlateau: expected a bound sciml optimizer (with param_groups).")
        for i, g in enumerate(optimizer.param_groups):
            if callable(g.get("lr")):
                raise TypeError(f"ReduceLROnPlateau: param_groups[{i}]['lr'] is a schedule; expected a number (a "
                                "plateau rule and a fixed schedule would fight over the learning rate).")
        n = len(optimizer.param_groups)
        self.min_lrs = [float(min_lr)] * n if isinstance(min_lr, (int, float)) else [float(v) for v in min_lr]
        if len(self.min_lrs) != n:
            raise ValueError(f"ReduceLROnPlateau: got {len(self.min_lrs)} min_lr values for {n} parameter groups.")
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, float(factor), patience
        self.threshold, self.threshold_mode, self.cooldown, self.eps = float(threshold), threshold_mode, cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0

    def _better(self, a):
        b, t = self.best, self.threshold
        if self.mode == "min":
            return a < (b * (1 - t) if self.threshold_mode == "rel" else b - t)
        return a > (b * (1 + t) if self.threshold_mode == "rel" else b + t)

    def step(self, metric):
        """Record ``metric`` (a number or scalar Tensor); lower the learning rates after a plateau.
        Returns True when it reduced them."""
        current = float(metric)
        self.last_epoch += 1
        if self._better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            reduced = False
            for g, lo in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(g["lr"])
                new = max(old * self.factor, lo)
                if old - new > self.eps:
                    g["lr"] = new
                    reduced = True
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
            return reduced
        return False

    def get_last_lr(self):
        return [float(g["lr"]) for g in self.optimizer.param_groups]

    def state_dict(self):
        return {"best": self.best, "num_bad_epochs": self.num_bad_epochs, "cooldown_counter": self.cooldown_counter,
                "last_epoch": self.last_epoch, "lrs": self.get_last_lr()}

    def load_state_dict(self, sd):
        self.best, self.num_bad_epochs = float(sd["best"]), int(sd["num_bad_epochs"])
        self.cooldown_counter, self.last_epoch = int(sd["cooldown_counter"]), int(sd["last_epoch"])
        for g, lr in zip(self.optimizer.param_groups, sd.get("lrs", [])):
            g["lr"] = float(lr)


class EMA:
    """Exponential moving average of parameters: shadow <- d shadow + (1 - d) p at each :meth:`update`.

    Args:
        params: a Module, ``model.parameters()`` or a pytree of Parameters.
        decay: d in [0, 1).
        warmup: use min(decay, (1 + n) / (10 + n)) at update n (the TensorFlow ExponentialMovingAverage
            num_updates rule), so early averages are not dominated by the initial weights.
    """

    def __init__(self, params, decay=0.999, warmup=False):
        from .base import _as_leaves
        if not (isinstance(decay, (int, float)) and 0 <= decay < 1):
            raise ValueError(f"EMA: decay={decay!r}; expected a number in [0, 1).")
        self.decay, self.warmup = float(decay), bool(warmup)
        self._leaves = _as_leaves("EMA", params)[0]
        self.shadow = [p.detach().numpy().copy() for p in self._leaves]
        self.num_updates = 0

    def current_decay(self):
        if self.warmup:
            return min(self.decay, (1 + self.num_updates) / (10 + self.num_updates))
        return self.decay

    def update(self):
        """Blend the current parameter values into the average."""
        d = self.current_decay()
        for s, p in zip(self.shadow, self._leaves):
            s *= d
            s += (1 - d) * p.numpy()
        self.num_updates += 1

    def copy_to(self):
        """Write the averages into the parameters (in place)."""
        for s, p in zip(self.shadow, self._leaves):
            p._assign(s)

    @contextlib.contextmanager
    def average_parameters(self):
        """Inside the block the parameters hold the averages; the trained values come back after."""
        saved = [p.numpy().copy() for p in self._leaves]
        self.copy_to()
        try:
            yield self
        finally:
            for v, p in zip(saved, self._leaves):
                p._assign(v)

    def state_dict(self):
        return {"decay": self.decay, "num_updates": self.num_updates,
                "shadow": {str(i): np.array(s) for i, s in enumerate(self.shadow)}}

    def load_state_dict(self, sd):
        sh = sd["shadow"]
        if len(sh) != len(self.shadow):
            raise ValueError(f"EMA.load_state_dict: {len(sh)} averages for {len(self.shadow)} parameters.")
        for i, s in enumerate(self.shadow):
            a = np.asarray(sh[str(i)])
            if a.shape != s.shape:
                raise ValueError(f"EMA.load_state_dict: average {i} has shape {a.shape}; expected {s.shape}.")
            s[...] = a
        self.num_updates = int(sd["num_updates"])
