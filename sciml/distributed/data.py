"""Sharding data and collocation points over ranks, per-rank seeds, and rank-0-only output."""
from __future__ import annotations

import builtins
import numbers

import numpy as np

from ..autodiff.tensor import Tensor
from . import comm


def shard_range(n: int, rank: int | None = None, size: int | None = None) -> tuple[int, int]:
    """``(start, stop)`` of this rank's contiguous block of ``n`` items (sizes differ by at most one).

    Example:
        >>> dist.shard_range(10, rank=1, size=3)     # (4, 7): blocks 0:4, 4:7, 7:10
    """
    if not (isinstance(n, numbers.Integral) and n >= 0):
        raise ValueError(f"shard_range(n=...): got {n!r}; expected a non-negative integer.")
    size = comm.world_size() if size is None else int(size)
    rank = comm.rank() if rank is None else int(rank)
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"shard_range: rank={rank}, size={size}; expected size >= 1 and 0 <= rank < size.")
    q, r = divmod(int(n), size)
    start = rank * q + builtins.min(rank, r)
    return start, start + q + (1 if rank < r else 0)


def local_count(n: int) -> int:
    """How many of ``n`` global items (points, samples) this rank holds: ``n`` split as evenly as possible.

    Example:
        >>> pts = domain.sample_interior(dist.local_count(10000), rng)   # 5000 per rank on 2 ranks
    """
    a, b = shard_range(n)
    return b - a


def shard(data, axis: int = 0):
    """This rank's contiguous block of ``data`` along ``axis`` (the first axis by default).

    ``data`` is a Tensor, a numpy array, or a tuple / list / dict of them with the same length along
    ``axis`` (e.g. ``(x, y)``); the result has the same structure. With a global batch of B items and
    N ranks, rank r gets items ``shard_range(B)``; when N divides B the mean over ranks of the local
    mean losses is the global mean loss. Single-process: ``data`` itself.

    Example:
        >>> x_local, y_local = dist.shard((x, y))
    """
    if isinstance(data, dict):
        items = list(data.items())
        parts = shard(tuple(v for _, v in items), axis)
        return {k: v for (k, _), v in zip(items, parts)}
    if isinstance(data, (tuple, list)):
        lengths = {_length(d, axis) for d in data}
        if len(lengths) > 1:
            raise ValueError(f"shard: the arrays have lengths {sorted(lengths)} along axis {axis}; expected one "
                             "length (they are sharded together, item by item).")
        return type(data)(shard(d, axis) for d in data)
    n = _length(data, axis)
    if comm.world_size() == 1:
        return data
    start, stop = shard_range(n)
    idx = (slice(None),) * (axis % len(data.shape)) + (slice(start, stop),)
    return data[idx]


def _length(d, axis):
    if not isinstance(d, (Tensor, np.ndarray)):
        raise TypeError(f"shard: got {type(d).__name__}; expected a sciml Tensor or numpy array "
                        "(or a tuple / list / dict of them).")
    if not d.shape:
        raise ValueError("shard: got a 0-d array; expected at least one axis to split.")
    return d.shape[axis % len(d.shape)]


def rank_seed(seed: int | None) -> int | None:
    """A seed for this rank: ``seed`` itself on rank 0 (so one rank reproduces a serial run), distinct
    well-mixed seeds on the other ranks. Use it to sample each rank's own collocation points.

    Example:
        >>> pts = domain.sample_interior(n_local, np.random.default_rng(dist.rank_seed(0)))
    """
    if seed is None:
        return None
    r = comm.rank()
    if r == 0:
        return int(seed)
    return int(np.random.SeedSequence(int(seed), spawn_key=(r,)).generate_state(1, np.uint32)[0])


def print0(*args, **kwargs):
    """``print`` on rank 0 only (progress lines, summaries)."""
    if comm.rank() == 0:
        print(*args, **kwargs)
