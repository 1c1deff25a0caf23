"""First-order optimizers as fused in-place Taichi kernels: SGD, Adam, AdamW, RMSprop, Adagrad.

Each step updates every parameter in place with a fused kernel (``sciml/kernels/optim.py``) that
reads the parameter, its gradient and the slot buffers once and writes them back; on CPU the
parameters' vector parts (16-byte SIMD lanes) are updated in ONE launch per dtype (up to 8
tensors per launch), on devices one launch per parameter. The update formulas are
PyTorch's (so trajectories match ``torch.optim``); the same updates exist as composable pure
Transforms in ``aliases.py`` (``adam(...)``, ``sgd(...)``) and give the same numbers.

Every optimizer takes ``lr`` as a number or a schedule (``schedules.py``) and ``clip_norm``
(clip the gradients to this global L2 norm before the update, as ``clip_by_global_norm``).

    >>> opt = sm.optim.Adam(model.parameters(), lr=1e-3)
    >>> opt.step(grads)          # grads shaped like model.parameters()
"""
from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..kernels import optim as K
from .base import Optimizer, global_norm
from .schedules import as_schedule

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]


def _nonneg(cls, **kw):
    for k, v in kw.items():
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{cls}: {k}={v!r}; expected a non-negative number.")


class _Fused(Optimizer):
    """Base of the fused optimizers: per-parameter slot buffers and a per-step kernel."""
    _slot_names: tuple = ()

    def __init__(self, params=None, *, lr, clip_norm=None, weight_decay=0.0):
        name = type(self).__name__
        self.lr = lr
        self._schedule = as_schedule(lr)
        if clip_norm is not None:
            _nonneg(name, clip_norm=clip_norm)
            if clip_norm == 0:
                raise ValueError(f"{name}: clip_norm=0; expected a positive number or None.")
        _nonneg(name, weight_decay=weight_decay)
        self.clip_norm = clip_norm
        self.weight_decay = float(weight_decay)
        super().__init__(params)

    def _init_state(self):
        self._slots = [{s: backend.zeros(max(p.size, 1), p.dtype) for s in self._slot_names} for p in self._leaves]
        self.state = None
        self._ptr_cache = {}  # data addresses of the parameter and slot buffers (kernels/optim.py)

    def current_lr(self) -> float:
        """The learning rate the next step will use."""
        return float(self._schedule(self.step_count))

    def _apply(self, grads):
        gscale = 1.0
        if self.clip_norm is not None:
            n = global_norm(grads)
            if n > self.clip_norm:
                gscale = self.clip_norm / n
        lr = self.current_lr()
        by_dtype = {}
        for p, g, slots in zip(self._leaves, grads, self._slots):
            if p.size:
                by_dtype.setdefault(p.dtype, []).append((self._arrays(p._buf, g._buf, slots), p.size))
        kind, scalars, plain, flags = self._spec(lr, gscale)
        for dtype, items in by_dtype.items():  # one grouped launch per dtype on CPU
            K.update_many(kind, dtype, items, scalars, plain, flags, self._ptr_cache)

    def _state_arrays(self):
        out = {}
        for i, (p, slots) in enumerate(zip(self._leaves, self._slots)):
            for s, buf in slots.items():
                out[f"{i}.{s}"] = np.array(backend.to_numpy(buf, (p.size,), p.dtype))
        return out

    def _load_state_arrays(self, arrays):
        name = type(self).__name__
        expected = {f"{i}.{s}" for i in range(len(self._leaves)) for s in self._slot_names}
        if set(arrays) != expected:
            raise KeyError(f"{name}.load_state_dict: state keys {sorted(arrays)[:6]}... do not match this optimizer "
                           f"({len(self._leaves)} params, slots {self._slot_names}); it comes from another "
                           "optimizer or parameter set.")
        for i, (p, slots) in enumerate(zip(self._leaves, self._slots)):
            for s in slots:
                a = np.asarray(arrays[f"{i}.{s}"]).reshape(-1)
                if a.size != p.size:
                    raise ValueError(f"{name}.load_state_dict: slot {i}.{s} has {a.size} values; parameter {i} has "
                                     f"shape {p.shape}.")
                src = backend.from_numpy(a, p.dtype)
                if p.size:
                    K.copy(slots[s], src, p.size, p.dtype)


class SGD(_Fused):
    """Stochastic gradient descent with optional momentum (PyTorch's formulation).

    g <- g + wd p;  b <- mu b + (1 - dampening) g  (b = g at the first step);
    d = g + mu b if nesterov else b;  p <- p - lr d.

    Args:
        params: pytree of Parameters (or None: bind later).
        lr: learning rate or schedule.
        momentum, dampening, nesterov, weight_decay: as in torch.optim.SGD.
        clip_norm: clip gradients to this global norm first.
    """

    def __init__(self, params=None, lr=1e-2, momentum=0.0, *, dampening=0.0, nesterov=False, weight_decay=0.0,
                 clip_norm=None):
        _nonneg("SGD", momentum=momentum, dampening=dampening)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError(f"SGD: nesterov=True needs momentum > 0 and dampening = 0; got momentum={momentum}, "
                             f"dampening={dampening}.")
        self.momentum, self.dampening, self.nesterov = float(momentum), float(dampening), bool(nesterov)
        self._slot_names = ("momentum",) if momentum else ()
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay)

    def _spec(self, lr, gscale):
        flags = K.sgd_flags(self.momentum, self.step_count == 0, self.nesterov)
        return "sgd", (lr, self.momentum, self.dampening, gscale, self.weight_decay), False, flags

    def _arrays(self, p, g, slots):
        return (p, g, slots["momentum"] if self.momentum else g)


class Adam(_Fused):
    """Adam (Kingma & Ba 2015), one fused in-place kernel per parameter.

    g <- g + wd p;  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
    p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).

    Args:
        params: pytree of Parameters (or None: bind later with ``bind``).
        lr: learning rate or schedule.
        betas: (b1, b2).
        eps: added to the denominator.
        weight_decay: L2 penalty added to the gradient (for decoupled decay use AdamW).
        clip_norm: clip gradients to this global norm first.
    """
    _slot_names = ("m", "v")
    _decoupled = False

    def __init__(self, params=None, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *, clip_norm=None):
        b1, b2 = betas
        name = type(self).__name__
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"{name}: betas={betas}; expected two numbers in [0, 1).")
        _nonneg(name, eps=eps)
        self.betas, self.eps = (float(b1), float(b2)), float(eps)
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay)

    def _spec(self, lr, gscale):
        b1, b2 = self.betas
        t = self.step_count + 1
        wd, dwd = (0.0, lr * self.weight_decay) if self._decoupled else (self.weight_decay, 0.0)
        scalars, plain = K.adam_scalars(lr, b1, b2, self.eps, 1 - b1 ** t, 1 - b2 ** t, gscale, wd, dwd)
        return "adam", scalars, plain, ()

    def _arrays(self, p, g, slots):
        return (p, g, slots["m"], slots["v"])


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019): p <- p (1 - lr wd) before the Adam step."""
    _decoupled = True

    def __init__(self, params=None, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, *, clip_norm=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, clip_norm=clip_norm)


class RMSprop(_Fused):
    """RMSprop (Hinton 2012; PyTorch's form): s <- a s + (1 - a) g^2; d = g / (sqrt(s) + eps);
    with momentum: b <- mu b + d, d = b;  p <- p - lr d."""

    def __init__(self, params=None, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, *,
                 clip_norm=None):
        if not 0 <= alpha < 1:
            raise ValueError(f"RMSprop: alpha={alpha}; expected a number in [0, 1).")
        _nonneg("RMSprop", eps=eps, momentum=momentum)
        self.alpha, self.eps, self.momentum = float(alpha), float(eps), float(momentum)
        self._slot_names = ("square_avg", "momentum") if momentum else ("square_avg",)
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay)

    def _spec(self, lr, gscale):
        return ("rmsprop", (lr, self.alpha, self.eps, self.momentum, gscale, self.weight_decay), False,
                (bool(self.momentum),))

    def _arrays(self, p, g, slots):
        return (p, g, slots["square_avg"], slots["momentum"] if self.momentum else slots["square_avg"])


class Adagrad(_Fused):
    """Adagrad (Duchi et al. 2011): s <- s + g^2;  p <- p - lr g / (sqrt(s) + eps)."""
    _slot_names = ("sum",)

    def __init__(self, params=None, lr=1e-2, eps=1e-10, weight_decay=0.0, *, clip_norm=None):
        _nonneg("Adagrad", eps=eps)
        self.eps = float(eps)
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay)

    def _spec(self, lr, gscale):
        return "adagrad", (lr, self.eps, gscale, self.weight_decay), False, ()

    def _arrays(self, p, g, slots):
        return (p, g, slots["sum"])
