"""``sciml.random``: explicit, splittable keys and counter-based draws (Threefry-2x32 in Taichi).

As in JAX, a key is a value: ``key(seed)`` makes one, ``split(key, n)`` derives n independent keys,
``fold_in(key, i)`` derives one from an integer; the same key always gives the same draw, on every arch.
Draws are Taichi kernels launched through sciml's kernel cache, so they run inside ``sm.jit``: pass the
key as an argument and each call with a new key gives fresh numbers (Dropout and noise injection jit).

A key is an int32 Tensor of shape (2,) (the bits of two uint32 words); ``split`` returns shape (n, 2),
whose rows are keys (``k1, k2 = split(key)`` works).

Example:
    >>> k = sm.random.key(0)
    >>> k, sub = sm.random.split(k)
    >>> x = sm.random.normal(sub, (3, 2))
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import backend
from .autodiff.primitive import Primitive
from .autodiff.tensor import Tensor, as_tensor, canonical_dtype, tensor
from .kernels import random as KR

__all__ = ["bernoulli", "categorical", "fold_in", "key", "normal", "permutation", "randint", "split",
           "truncated_normal", "uniform", "PRNGKey"]


def key(seed) -> Tensor:
    """A key from an integer seed (any Python int; seeds equal modulo 2^64 give the same key)."""
    if isinstance(seed, Tensor) or not isinstance(seed, (numbers.Integral, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"random.key: seed={seed!r}; expected a Python int.")
    s = int(seed) % (1 << 64)
    words = np.array([(s >> 32) & 0xFFFFFFFF, s & 0xFFFFFFFF], dtype=np.uint32).view(np.int32)
    return tensor(words, "int32")


PRNGKey = key


def _check_key(name, k):
    if not isinstance(k, Tensor) or k.dtype != "int32" or k.shape != (2,):
        seen = f"a Tensor of shape {k.shape} and dtype {k.dtype}" if isinstance(k, Tensor) else type(k).__name__
        raise TypeError(f"random.{name}: key is {seen}; expected a key (int32 Tensor of shape (2,)) from "
                        "sm.random.key(seed) or split(key). Pick one row of split's result: keys[0].")
    return k


# Draws are order-0 primitives of the key (constants to every transform): sm.vmap over a batch of keys then
# draws once per key (its per-example loop), as jax.vmap does.
def _keys_fwd(k, num, hi, data):
    out = backend.empty(2 * num, "int32")
    KR.derive_keys(k._buf, out, num, hi, data)
    return out, (num, 2) if hi == 1 else (2,), "int32"


def _draw_fwd(k, kind, shape, dtype, p0, p1):
    n = math.prod(shape)
    out = backend.empty(n, dtype)
    if n:
        KR.draw(kind, k._buf, out, n, p0, p1, dtype)
    return out, shape, dtype


def _randint_fwd(k, shape, lo, span):
    n = math.prod(shape)
    out = backend.empty(n, "int32")
    if n:
        KR.randint(k._buf, out, n, lo, span)
    return out, shape, "int32"


def _bits_fwd(k, n):
    out = backend.empty(max(n, 1), "int32")
    if n:
        KR.bits(k._buf, out, n)
    return out, (n,), "int32"


_keys_p = Primitive("random_keys", _keys_fwd, order=0)
_draw_p = Primitive("random_draw", _draw_fwd, order=0)
_randint_p = Primitive("random_randint", _randint_fwd, order=0)
_bits_p = Primitive("random_bits", _bits_fwd, order=0)


def split(k, num=2) -> Tensor:
    """``num`` new keys, shape (num, 2)."""
    _check_key("split", k)
    if not isinstance(num, numbers.Integral) or num < 1:
        raise ValueError(f"random.split: num={num!r}; expected a positive int.")
    return _keys_p(k, num=int(num), hi=1, data=0)


def fold_in(k, data) -> Tensor:
    """A new key from ``k`` and an integer ``data`` (e.g. a step or rank number)."""
    _check_key("fold_in", k)
    if not isinstance(data, (numbers.Integral, np.integer)) or isinstance(data, bool):
        raise TypeError(f"random.fold_in: data={data!r}; expected a Python int.")
    d = int(data) % (1 << 32)
    return _keys_p(k, num=1, hi=2, data=d - (1 << 32) if d >= 1 << 31 else d)


def _shape(name, shape):
    if shape is None:
        return ()
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"random.{name}: shape={shape!r}; expected a tuple of ints.") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"random.{name}: shape={shape}; sizes must be >= 0.")
    if math.prod(shape) >= 1 << 31:
        raise ValueError(f"random.{name}: shape={shape} has too many elements (at most 2^31 - 1 per draw).")
    return shape


def _float_dtype(name, dtype):
    dt = canonical_dtype(dtype)
    if dt not in ("float32", "float64"):
        raise TypeError(f"random.{name}: dtype={dtype!r}; expected float32 or float64.")
    return dt


def _draw(kind, k, shape, dtype, p0, p1):
    return _draw_p(k, kind=kind, shape=tuple(shape), dtype=dtype, p0=float(p0), p1=float(p1))


def uniform(k, shape=(), dtype=None, minval=0.0, maxval=1.0) -> Tensor:
    """Uniform samples in [minval, maxval) (numbers or Tensors broadcasting against ``shape``)."""
    _check_key("uniform", k)
    shape, dt = _shape("uniform", shape), _float_dtype("uniform", dtype)
    if isinstance(minval, numbers.Real) and isinstance(maxval, numbers.Real):
        return _draw("uniform", k, shape, dt, minval, maxval)
    u = _draw("uniform", k, shape, dt, 0.0, 1.0)
    lo, hi = as_tensor(minval, dt), as_tensor(maxval, dt)
    return lo + (hi - lo) * u


def normal(k, shape=(), dtype=None) -> Tensor:
    """Standard normal samples (Box-Muller on Threefry uniforms)."""
    _check_key("normal", k)
    return _draw("normal", k, _shape("normal", shape), _float_dtype("normal", dtype), 0.0, 1.0)


def truncated_normal(k, lower, upper, shape=(), dtype=None) -> Tensor:
    """Standard normal samples conditioned on [lower, upper] (inverse CDF; ``lower``/``upper`` numbers)."""
    _check_key("truncated_normal", k)
    if not isinstance(lower, numbers.Real) or not isinstance(upper, numbers.Real) or not lower < upper:
        raise ValueError(f"random.truncated_normal: lower={lower!r}, upper={upper!r}; expected numbers with "
                         "lower < upper.")
    lo, hi = math.erf(lower / math.sqrt(2)), math.erf(upper / math.sqrt(2))
    x = _draw("truncnorm", k, _shape("truncated_normal", shape), _float_dtype("truncated_normal", dtype), lo, hi)
    from .autodiff.ops import clip
    return clip(x, float(lower), float(upper))  # the erfinv approximation may step out by an ulp


def bernoulli(k, p=0.5, shape=None) -> Tensor:
    """Bool samples, True with probability ``p`` (a number or a Tensor; shape defaults to p's)."""
    _check_key("bernoulli", k)
    if isinstance(p, numbers.Real):
        if not 0 <= p <= 1:
            raise ValueError(f"random.bernoulli: p={p}; expected a probability in [0, 1].")
        return _draw("uniform", k, _shape("bernoulli", shape), "float64" if backend.on_host() else "float32",
                     0.0, 1.0) < float(p)
    p = as_tensor(p)
    shape = p.shape if shape is None else _shape("bernoulli", shape)
    return _draw("uniform", k, shape, p.dtype if p.dtype in ("float32", "float64") else "float32", 0.0, 1.0) < p


def randint(k, shape, minval, maxval, dtype="int32") -> Tensor:
    """Integers uniform in [minval, maxval) (int32)."""
    _check_key("randint", k)
    if canonical_dtype(dtype) != "int32":
        raise TypeError(f"random.randint: dtype={dtype!r}; only int32 is offered.")
    if not all(isinstance(v, (numbers.Integral, np.integer)) for v in (minval, maxval)):
        raise TypeError(f"random.randint: minval={minval!r}, maxval={maxval!r}; expected ints.")
    lo, hi = max(int(minval), -(1 << 31)), min(int(maxval), 1 << 31)
    if hi <= lo:
        raise ValueError(f"random.randint: minval={minval} >= maxval={maxval}; expected minval < maxval.")
    shape = _shape("randint", shape)
    return _randint_p(k, shape=shape, lo=lo, span=hi - lo)


def permutation(k, x, axis=0) -> Tensor:
    """A random permutation of ``range(x)`` (int x) or of ``x``'s entries along ``axis`` (Tensor x)."""
    _check_key("permutation", k)
    from .autodiff.ops import array as A, moveaxis
    if isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, bool):
        n = int(x)
        if n < 0:
            raise ValueError(f"random.permutation: x={n}; expected a non-negative int.")
        data = None
    else:
        data = as_tensor(x)
        if data.ndim == 0:
            raise ValueError("random.permutation: x is a 0-d Tensor; expected an int or an array.")
        axis = int(axis) % data.ndim
        n = data.shape[axis]
    perm = A.argsort(_bits_p(k, n=n))  # 32 random bits per entry; ties by index
    if data is None:
        return perm
    from .autodiff.ops.shape import _take
    return moveaxis(_take(moveaxis(data, axis, 0), perm), 0, axis)


def categorical(k, logits, axis=-1, shape=None) -> Tensor:
    """Samples of category indices with probabilities softmax(logits) along ``axis`` (Gumbel-max); int32.

    ``shape`` (default: logits' shape without ``axis``) must end with those batch dimensions."""
    _check_key("categorical", k)
    from .autodiff.ops import array as A, broadcast_to, moveaxis
    logits = as_tensor(logits)
    if logits.dtype not in ("float32", "float64"):
        logits = logits.astype("float32")
    axis = int(axis) % logits.ndim
    lg = moveaxis(logits, axis, -1)
    batch = lg.shape[:-1]
    shape = batch if shape is None else _shape("categorical", shape)
    if tuple(shape[len(shape) - len(batch):]) != batch:
        raise ValueError(f"random.categorical: shape={shape} must end with the batch shape {batch} of logits.")
    g = _draw("gumbel", k, tuple(shape) + lg.shape[-1:], logits.dtype, 0.0, 0.0)
    return A.argmax(broadcast_to(lg, tuple(shape) + lg.shape[-1:]).detach() + g, axis=-1)
