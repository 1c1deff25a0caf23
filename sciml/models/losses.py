"""Losses, built from sciml ops (so they differentiate to any order). ``reduction``: "mean" | "sum" | "none".

    >>> loss = sm.models.losses.cross_entropy(logits, labels)        # logits (n, C), labels (n,) ints
"""
from __future__ import annotations

import numpy as np

from ..autodiff.ops import abs, minimum, softplus, sum
from ..autodiff.ops.conv import softmax_cross_entropy
from ..autodiff.tensor import Tensor, as_tensor, canonical_dtype, tensor
from . import _loss_fused as fused_mse

__all__ = ["mse", "l1", "huber", "cross_entropy", "nll", "binary_cross_entropy_with_logits", "one_hot"]

_REDUCTIONS = ("mean", "sum", "none")


def _reduce(name, x, reduction):
    if reduction == "mean":
        return x.mean()
    if reduction == "sum":
        return x.sum()
    if reduction == "none":
        return x
    raise ValueError(f"{name}: reduction={reduction!r}; expected one of {_REDUCTIONS}.")


def _pair(name, pred, target):
    pred = as_tensor(pred)
    target = as_tensor(target, pred.dtype) if not isinstance(target, Tensor) else target
    if target.dtype != pred.dtype:
        target = target.astype(pred.dtype)
    if pred.shape != target.shape:
        raise ValueError(f"{name}: pred has shape {pred.shape} and target {target.shape}; expected equal shapes "
                         "(sciml does not broadcast losses silently).")
    return pred, target


def mse(pred, target, reduction="mean"):
    """(pred - target)^2, reduced."""
    pred, target = _pair("mse", pred, target)
    if fused_mse.fusable(pred, target, reduction):   # one kernel each way (composed rules at higher orders)
        return fused_mse.mse(pred, target, reduction)
    d = pred - target
    return _reduce("mse", d * d, reduction)


def l1(pred, target, reduction="mean"):
    """|pred - target|, reduced."""
    pred, target = _pair("l1", pred, target)
    return _reduce("l1", abs(pred - target), reduction)


def huber(pred, target, delta=1.0, reduction="mean"):
    """0.5 d^2 if |d| <= delta else delta (|d| - delta / 2), d = pred - target (PyTorch HuberLoss)."""
    pred, target = _pair("huber", pred, target)
    if not delta > 0:
        raise ValueError(f"huber: delta={delta}; expected a positive number.")
    a = abs(pred - target)
    q = minimum(a, delta)  # quadratic part, = 0.5 q^2 + delta (a - q)
    return _reduce("huber", 0.5 * q * q + delta * (a - q), reduction)


def _labels(name, labels, n, classes):
    lab = labels.numpy() if isinstance(labels, Tensor) else np.asarray(labels)
    if lab.dtype.kind not in "iu":
        raise TypeError(f"{name}: labels have dtype {lab.dtype}; expected integer class indices.")
    if lab.shape != (n,):
        raise ValueError(f"{name}: labels have shape {lab.shape}; expected ({n},) (one class index per row).")
    if n and (lab.min() < 0 or lab.max() >= classes):
        bad = int(np.flatnonzero((lab < 0) | (lab >= classes))[0])
        raise ValueError(f"{name}: label {int(lab[bad])} at index {bad} is out of range; expected class indices "
                         f"in [0, {classes}).")
    return lab


def one_hot(labels, classes, dtype=None, smoothing=0.0):
    """(n, classes) one-hot rows (with label smoothing: 1 - s + s / C on the label, s / C elsewhere)."""
    lab = _labels("one_hot", labels, len(np.asarray(labels.numpy() if isinstance(labels, Tensor) else labels)),
                  classes)
    return _one_hot(lab, classes, dtype, smoothing)


def _one_hot(lab, classes, dtype, smoothing):
    """one_hot of already checked integer labels ``lab`` (numpy)."""
    n = lab.shape[0]
    dt = canonical_dtype("float" if dtype is None else dtype)
    if smoothing == 0.0 and dt in ("float32", "float64"):  # exact: build it in the target dtype directly
        m = np.zeros((n, classes), dt)
        m[np.arange(n), lab] = 1
        return tensor(m, dt)
    m = np.full((n, classes), smoothing / classes)
    m[np.arange(n), lab] += 1.0 - smoothing
    return tensor(m, dtype or "float")


def _check_logits(name, x):
    x = as_tensor(x)
    if x.ndim != 2:
        raise ValueError(f"{name}: input has shape {x.shape}; expected (n, classes).")
    return x


def cross_entropy(logits, labels, label_smoothing=0.0, reduction="mean"):
    """-sum_c q_c log softmax(logits)_c with q the (smoothed) one-hot of integer ``labels``.

    Args:
        logits: (n, C) unnormalised scores.
        labels: (n,) integer class indices in [0, C).
        label_smoothing: s in [0, 1): target 1 - s + s/C on the label, s/C elsewhere (PyTorch's definition).
    """
    logits = _check_logits("cross_entropy", logits)
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"cross_entropy: label_smoothing={label_smoothing}; expected a number in [0, 1).")
    n, c = logits.shape
    q = _one_hot(_labels("cross_entropy", labels, n, c), c, logits.dtype, label_smoothing)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction={reduction!r}; expected one of {_REDUCTIONS}.")
    return softmax_cross_entropy(logits, q, reduction)


def nll(log_probs, labels, reduction="mean"):
    """-log_probs[i, labels[i]] (input: log-probabilities, e.g. from log_softmax)."""
    log_probs = _check_logits("nll", log_probs)
    n, c = log_probs.shape
    _labels("nll", labels, n, c)
    q = one_hot(labels, c, log_probs.dtype)
    return _reduce("nll", -sum(q * log_probs, -1), reduction)


def binary_cross_entropy_with_logits(logits, targets, reduction="mean"):
    """softplus(x) - x y = -[y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], stable for any x."""
    logits, targets = _pair("binary_cross_entropy_with_logits", logits, targets)
    return _reduce("binary_cross_entropy_with_logits", softplus(logits) - logits * targets, reduction)


def accuracy(logits, labels) -> float:
    """Fraction of rows whose arg-max equals the label (a metric, not differentiable)."""
    pred = np.argmax(as_tensor(logits).numpy(), axis=-1)
    lab = labels.numpy() if isinstance(labels, Tensor) else np.asarray(labels)
    return float(np.mean(pred == lab))
