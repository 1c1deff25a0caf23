"""A data loader over in-memory numpy arrays: batching, seeded shuffling, drop_last.

    >>> loader = DataLoader(X, y, batch_size=64, shuffle=True, seed=0)
    >>> for xb, yb in loader: ...          # Tensors: floats in the default float dtype, integers int32

Shuffling is a function of (seed, epoch) only, so a run resumed at epoch e sees the same batches
as an uninterrupted one (``loader.set_epoch(e)``; iterating advances the epoch by one).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .autodiff.tensor import tensor

__all__ = ["DataLoader", "train_test_split"]


class DataLoader:
    """Iterate over aligned arrays in mini-batches.

    Args:
        *arrays: numpy arrays (or array-likes) with the same first dimension.
        batch_size: rows per batch.
        shuffle: draw a new permutation every epoch (from ``seed`` and the epoch number).
        seed: seed of the shuffling.
        drop_last: drop the final incomplete batch.
        dtype: float dtype of float arrays (default: sciml's default float dtype).
    """

    def __init__(self, *arrays, batch_size=32, shuffle=False, seed=0, drop_last=False, dtype=None):
        if not arrays:
            raise ValueError("DataLoader: got no arrays; expected e.g. DataLoader(X, y, batch_size=64).")
        self.arrays = [np.asarray(a) for a in arrays]
        n = self.arrays[0].shape[0] if self.arrays[0].ndim else None
        for i, a in enumerate(self.arrays):
            if a.ndim == 0 or a.shape[0] != n:
                raise ValueError(f"DataLoader: array {i} has shape {a.shape}; expected first dimension {n} like "
                                 "array 0 (one row per sample).")
            if a.dtype.kind not in "biuf":
                raise TypeError(f"DataLoader: array {i} has dtype {a.dtype}; expected numbers (float, int or bool).")
        self.n, self.batch_size = n, _positive_int("DataLoader", "batch_size", batch_size)
        if not isinstance(seed, (numbers.Integral, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"DataLoader: seed={seed!r} ({type(seed).__name__}); expected an integer.")
        self.shuffle, self.seed, self.drop_last, self.dtype = bool(shuffle), int(seed), bool(drop_last), dtype
        self.epoch = 0

    def __len__(self):
        return self.n // self.batch_size if self.drop_last else math.ceil(self.n / self.batch_size)

    def set_epoch(self, epoch: int):
        """The epoch whose permutation the next iteration uses."""
        self.epoch = int(epoch)

    def order(self, epoch=None):
        """Row order of an epoch (a permutation if shuffling)."""
        e = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return np.arange(self.n)
        return np.random.default_rng([self.seed, e]).permutation(self.n)

    def batches(self, epoch=None, start=0):
        """Yield the batches of ``epoch`` from batch index ``start`` on (as tuples of Tensors)."""
        idx = self.order(epoch)
        for b in range(start, len(self)):
            sel = idx[b * self.batch_size:(b + 1) * self.batch_size]
            yield tuple(self._to_tensor(a[sel]) for a in self.arrays)

    def _to_tensor(self, a):
        if a.dtype.kind == "f":
            return tensor(a, self.dtype or "float")
        return tensor(a)

    def __iter__(self):
        e = self.epoch
        self.epoch += 1
        return self.batches(e)


def _positive_int(name, arg, v):
    if not isinstance(v, (numbers.Integral, np.integer)) or isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name}: {arg}={v!r} ({type(v).__name__}); expected a positive integer.")
    if v <= 0:
        raise ValueError(f"{name}: {arg}={v}; expected a positive integer.")
    return int(v)


def train_test_split(*arrays, test_size=0.25, seed=0):
    """Split aligned arrays into train and test parts with a seeded permutation:
    returns (a_train, a_test, b_train, b_test, ...).

    Args:
        test_size: a fraction in (0, 1) of the rows, or a whole number of rows in [0, n].
    """
    if not arrays:
        raise ValueError("train_test_split: got no arrays; expected e.g. train_test_split(X, y, test_size=0.25).")
    arrays = [np.asarray(a) for a in arrays]
    if arrays[0].ndim == 0:
        raise ValueError("train_test_split: array 0 is 0-d; expected one row per sample.")
    n = arrays[0].shape[0]
    for i, a in enumerate(arrays):
        if a.ndim == 0 or a.shape[0] != n:
            raise ValueError(f"train_test_split: array {i} has shape {a.shape}; expected first dimension {n} like "
                             "array 0 (one row per sample).")
    if isinstance(test_size, (bool, np.bool_)) or not isinstance(test_size, (numbers.Real, np.number)):
        raise TypeError(f"train_test_split: test_size={test_size!r} ({type(test_size).__name__}); expected a "
                        "fraction in (0, 1) or a number of rows.")
    if isinstance(test_size, (numbers.Integral, np.integer)):
        if not 0 <= test_size <= n:
            raise ValueError(f"train_test_split: test_size={test_size} rows; expected 0 <= test_size <= {n}.")
        k = int(test_size)
    else:
        if not 0.0 < test_size < 1.0:
            raise ValueError(f"train_test_split: test_size={test_size}; expected a fraction in (0, 1) or a whole "
                             f"number of rows in [0, {n}].")
        k = int(round(n * test_size))
    if not isinstance(seed, (numbers.Integral, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"train_test_split: seed={seed!r} ({type(seed).__name__}); expected an integer.")
    perm = np.random.default_rng(seed).permutation(n)
    te, tr = perm[:k], perm[k:]
    out = []
    for a in arrays:
        out += [a[tr], a[te]]
    return out
