"""Input derivatives of an MLP by nested automatic differentiation (the reference path).

``mlp_derivatives(layers, activation, x, derivs)`` has the same interface as
:func:`sciml.pinn.fused.mlp_derivatives` and works for any activation (any sciml function)
and any derivative order, by nesting forward-mode ``jvp`` along unit directions. It is the
path the PINN solver falls back to when the fused path does not apply, and the reference the
fused path is tested against.

``taylor_streams`` is the same Taylor-stream computation the fused kernels do (value, first
and second input derivatives carried through the layers together), written in sciml ops: it
is what the fused primitive's higher-order derivative rules differentiate.
"""
from __future__ import annotations

import math
import numbers

from ..autodiff import ops as O
from ..autodiff.tensor import Tensor, as_tensor, zeros
from ..autodiff.transforms import jvp


def normalize_layers(layers, where="mlp_derivatives"):
    """``layers`` as a list of (W, b) Tensor pairs; accepts objects with ``.weight``/``.bias``."""
    if isinstance(layers, (Tensor, str)) or not hasattr(layers, "__iter__"):
        raise TypeError(f"{where}: layers must be a list of (W, b) pairs, got {type(layers).__name__}.")
    out = []
    for k, layer in enumerate(layers):
        if hasattr(layer, "weight") and hasattr(layer, "bias"):
            layer = (layer.weight, layer.bias)
        if not isinstance(layer, (tuple, list)) or len(layer) != 2:
            raise TypeError(f"{where}: layers[{k}] must be a (W, b) pair of Tensors, got {type(layer).__name__}.")
        W, b = as_tensor(layer[0]), as_tensor(layer[1])
        if W.ndim != 2 or b.ndim != 1 or b.shape[0] != W.shape[1]:
            raise ValueError(f"{where}: layers[{k}] has W of shape {W.shape} and b of shape {b.shape}; "
                             "expected W (in, out) and b (out,).")
        if k and W.shape[0] != out[-1][0].shape[1]:
            raise ValueError(f"{where}: layers[{k}] takes {W.shape[0]} inputs but layers[{k - 1}] gives "
                             f"{out[-1][0].shape[1]} outputs.")
        out.append((W, b))
    if not out:
        raise ValueError(f"{where}: layers is empty; expected at least one (W, b) pair.")
    return out


def normalize_derivs(derivs, d, max_order=None, where="mlp_derivatives"):
    """List of (user key, canonical sorted multi-index); checks indices against ``d`` inputs."""
    if isinstance(derivs, (str, bytes)) or not hasattr(derivs, "__iter__"):
        raise TypeError(f"{where}: derivs must be an iterable of multi-indices like [(), (0,), (0, 1)], "
                        f"got {derivs!r}.")
    out = []
    for m in derivs:
        if isinstance(m, numbers.Integral):
            m = (m,)
        if not isinstance(m, tuple) or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool)
                                               for i in m):
            raise TypeError(f"{where}: derivative multi-index {m!r} must be a tuple of ints, e.g. (0, 1).")
        for i in m:
            if not 0 <= i < d:
                raise ValueError(f"{where}: derivative multi-index {m} refers to input {i}, but x has {d} "
                                 f"columns (valid indices 0..{d - 1}).")
        if max_order is not None and len(m) > max_order:
            raise ValueError(f"{where}: derivative {m} has order {len(m)}; this path supports order <= "
                             f"{max_order}.")
        out.append((m, tuple(sorted(int(i) for i in m))))
    return out


def check_input(x, layers, where="mlp_derivatives"):
    x = as_tensor(x)
    if x.ndim != 2:
        raise ValueError(f"{where}: x must be a 2-D (n, d) Tensor of points, got shape {x.shape}.")
    if x.shape[1] != layers[0][0].shape[0]:
        raise ValueError(f"{where}: x has {x.shape[1]} columns but the first layer's W has "
                         f"{layers[0][0].shape[0]} rows (shape {layers[0][0].shape}).")
    for k, (W, b) in enumerate(layers):
        for name, t in (("W", W), ("b", b)):
            if t.dtype != x.dtype:
                raise TypeError(f"{where}: layers[{k}] {name} has dtype {t.dtype} but x has {x.dtype}; "
                                "expected one float dtype throughout.")
    if x.dtype not in ("float32", "float64"):
        raise TypeError(f"{where}: x has dtype {x.dtype}; expected float32 or float64.")
    return x


def mlp(layers, activation, x):
    """``activation`` after every layer but the last: y = h @ W + b."""
    h = x
    for k, (W, b) in enumerate(layers):
        h = O.matmul(h, W) + b
        if k < len(layers) - 1:
            h = activation(h)
    return h


def _unit(x, i):
    import numpy as np
    e = np.zeros(x.shape)
    e[:, i] = 1.0
    from ..autodiff.tensor import tensor
    return tensor(e, x.dtype)


def mlp_derivatives(layers, activation, x, derivs):
    """Value and input derivatives of an MLP at the points ``x`` by nested forward mode.

    Args:
        layers: list of (W, b) Tensor pairs, W of shape (in, out); y = h @ W + b; no activation
            after the last layer.
        activation: any sciml function of one Tensor (``sm.tanh``, ``sm.sin``, ...).
        x: (n, d) Tensor of points.
        derivs: iterable of multi-indices: ``()`` the value, ``(i,)`` d/dx_i, ``(i, j)``
            d2/dx_i dx_j, any order.
    Returns:
        dict multi-index -> (n, out) Tensor, differentiable w.r.t. every W, b (and x).
    """
    layers = normalize_layers(layers)
    x = check_input(x, layers)
    items = normalize_derivs(derivs, x.shape[1])
    units = {}

    def unit(i):
        if i not in units:
            units[i] = _unit(x, i)
        return units[i]

    def deriv_fn(m):
        f = lambda z: mlp(layers, activation, z)  # noqa: E731
        for i in m:
            f = (lambda g, i: (lambda z: jvp(g, (z,), (unit(i),))[1]))(f, i)
        return f

    cache, out = {}, {}
    for key, m in items:
        if m not in cache:
            cache[m] = deriv_fn(m)(x)
        out[key] = cache[m]
    return out


# --- the Taylor-stream composite (what the fused kernels compute), in sciml ops ------------
def plan(canon, d):
    """Streams needed for the canonical multi-indices: (coords, pairs, index).

    coords: input coordinates whose first derivative streams are carried (sorted);
    pairs: (a, c) positions in ``coords`` of each second-derivative stream (sorted);
    index: canonical multi-index -> stream number (0 = value, 1.. first, then second).
    """
    coords = sorted({i for m in canon for i in m})
    pair_set = sorted({m for m in canon if len(m) == 2})
    pos = {c: k for k, c in enumerate(coords)}
    pairs = tuple((pos[i], pos[j]) for i, j in pair_set)
    index = {(): 0}
    for k, c in enumerate(coords):
        index[(c,)] = 1 + k
    for p, m in enumerate(pair_set):
        index[m] = 1 + len(coords) + p
    return tuple(coords), pairs, index


def activation_coeffs(activation, z):
    """(sigma(z), sigma'(z), sigma''(z)) in sciml ops for the activations the fused path knows."""
    name = activation_name(activation)
    if name == "tanh":
        t = O.tanh(z)
        s1 = 1.0 - t * t
        return t, s1, -2.0 * t * s1
    if name == "sin":
        s = O.sin(z)
        return s, O.cos(z), -s
    if name == "softplus":
        p = O.sigmoid(z)
        return O.softplus(z), p, p * (1.0 - p)
    if name == "gelu":     # exact gelu z Phi(z), sm.gelu's default (the fused Taylor kernels use it too)
        cdf = 0.5 * O.erfc(z * (-1.0 / math.sqrt(2.0)))
        pdf = (1.0 / math.sqrt(2.0 * math.pi)) * O.exp(-0.5 * z * z)
        return z * cdf, cdf + z * pdf, pdf * (2.0 - z * z)
    raise ValueError(f"activation_coeffs: unsupported activation {activation!r}")


def activation_name(activation):
    """'tanh' | 'sin' | 'softplus' | 'gelu' for the sciml functions (or those names), else None."""
    if isinstance(activation, str):
        return activation if activation in ("tanh", "sin", "softplus", "gelu") else None
    for name in ("tanh", "sin", "softplus", "gelu"):
        if activation is getattr(O, name, None):
            return name
    cls = type(activation)   # the module forms sciml.models.Tanh() etc. (parameter-free)
    if cls.__module__.startswith("sciml.models") and cls.__name__ in _MODULE_NAMES:
        return _MODULE_NAMES[cls.__name__]
    return None


_MODULE_NAMES = {"Tanh": "tanh", "Sin": "sin", "Softplus": "softplus", "GELU": "gelu"}


def taylor_streams(layers, activation, x, coords, pairs):
    """The stacked (S, n, out) streams [value, d/dx_c for c in coords, d2 for each pair]
    propagated through the layers in sciml ops (differentiable to any order)."""
    W, b = layers[0]
    z = O.matmul(x, W) + b
    zi = [W[c] for c in coords]          # (w,) rows: broadcast over points
    zp = [None] * len(pairs)
    L = len(layers)
    for k in range(1, L + 1):
        if k == L:
            break
        s0, s1, s2 = activation_coeffs(activation, z)
        h = s0
        hi = [s1 * t for t in zi]
        hp = []
        for (a, c), t in zip(pairs, zp):
            v = s2 * zi[a] * zi[c]
            hp.append(v if t is None else v + s1 * t)
        W, b = layers[k]
        z = O.matmul(h, W) + b
        zi = [O.matmul(t, W) for t in hi]
        zp = [O.matmul(t, W) for t in hp]
    n, o = x.shape[0], layers[-1][0].shape[1]
    streams = [z]
    for t in zi + zp:
        if t is None:
            t = zeros((n, o), x.dtype)
        elif t.shape != (n, o):
            t = O.broadcast_to(t, (n, o))
        streams.append(t)
    return O.stack(streams, 0)
