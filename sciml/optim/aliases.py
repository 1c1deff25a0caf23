"""The usual optimizers as one-line chains of transforms (pure; wrap in ``Optimizer`` to use statefully).

    >>> tx = adamw(1e-3, weight_decay=1e-2)
    >>> opt = sm.optim.Optimizer(model.parameters(), chain(clip_by_global_norm(1.0), tx))

These compute the same updates as the fused optimizers in ``first_order.py`` (PyTorch's formulas).
"""
from __future__ import annotations

from .base import Transform, chain
from .transforms import (add_decayed_weights, scale_by_adagrad, scale_by_adam, scale_by_lr, scale_by_rms, trace)

__all__ = ["sgd", "adam", "adamw", "rmsprop", "adagrad"]


def sgd(lr=1e-2, momentum=0.0, nesterov=False, weight_decay=0.0, dampening=0.0) -> Transform:
    parts = [add_decayed_weights(weight_decay)] if weight_decay else []
    if momentum:
        parts.append(trace(momentum, nesterov, dampening))
    return chain(*parts, scale_by_lr(lr))


def adam(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0) -> Transform:
    parts = [add_decayed_weights(weight_decay)] if weight_decay else []
    return chain(*parts, scale_by_adam(b1, b2, eps), scale_by_lr(lr))


def adamw(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-2) -> Transform:
    """Decoupled weight decay: update = -lr (adam_direction + wd p) (Loshchilov & Hutter 2019)."""
    return chain(scale_by_adam(b1, b2, eps), add_decayed_weights(weight_decay), scale_by_lr(lr))


def rmsprop(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0) -> Transform:
    parts = [add_decayed_weights(weight_decay)] if weight_decay else []
    return chain(*parts, scale_by_rms(alpha, eps), scale_by_lr(lr))


def adagrad(lr=1e-2, eps=1e-10, weight_decay=0.0) -> Transform:
    parts = [add_decayed_weights(weight_decay)] if weight_decay else []
    return chain(*parts, scale_by_adagrad(eps), scale_by_lr(lr))
