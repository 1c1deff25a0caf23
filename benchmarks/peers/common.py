"""Framework-neutral workload definitions for the peer benchmarks.

Everything here is plain NumPy so that sciml's own benchmark scripts can build
bit-identical inputs (same seeds, same initial parameters, same collocation
points) and compare losses / gradients with the PyTorch and JAX peers.

Conventions
-----------
* MLP parameters are a list of ``(W, b)`` pairs with ``W`` of shape
  ``(fan_in, fan_out)`` (so a layer is ``h @ W + b``) and ``b`` of shape
  ``(fan_out,)``.  Weights are Glorot-uniform, biases zero.
* Every generator takes ``seed`` and uses ``numpy.random.default_rng``.
"""

from __future__ import annotations

import math

import numpy as np

# --------------------------------------------------------------------------
# shared hyper-parameters
# --------------------------------------------------------------------------
ADAM_LR = 1e-3
ADAM_B1 = 0.9
ADAM_B2 = 0.999
ADAM_EPS = 1e-8

W1_SIZES = (784, 512, 512, 10)
W1_BATCH = 256

PINN_SIZES = (2, 32, 32, 32, 32, 1)          # W2 and W3
W2_NU = 0.01 / math.pi
W2_N_INTERIOR, W2_N_INITIAL, W2_N_BOUNDARY = 10000, 200, 200
W3_N_INTERIOR, W3_N_BOUNDARY = 10000, 400

W4B_SIZES = (1, 16, 16, 1)                   # 321 parameters
W4B_N_POINTS = 64

W5_N = 1024
W5_STEPS = 2000
W5_R = 0.2

W6_N = 100


# --------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------
def mlp_init(sizes, seed=0, dtype=np.float32):
    """Glorot-uniform weights, zero biases: list of (W[in,out], b[out])."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        lim = math.sqrt(6.0 / (fan_in + fan_out))
        W = rng.uniform(-lim, lim, size=(fan_in, fan_out)).astype(dtype)
        b = np.zeros((fan_out,), dtype=dtype)
        params.append((W, b))
    return params


def n_params(sizes):
    return sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:]))


def flatten_params(params):
    """Concatenate [W1.ravel(), b1, W2.ravel(), b2, ...] (row-major W)."""
    return np.concatenate([np.concatenate([W.ravel(), b]) for W, b in params])


def unflatten_params(theta, sizes):
    """Inverse of :func:`flatten_params` for NumPy arrays."""
    out, k = [], 0
    for i, o in zip(sizes[:-1], sizes[1:]):
        W = theta[k:k + i * o].reshape(i, o)
        k += i * o
        b = theta[k:k + o]
        k += o
        out.append((W, b))
    return out


# --------------------------------------------------------------------------
# W1: MLP training step
# --------------------------------------------------------------------------
def w1_inputs(seed=0):
    """x: (256,784) f32 N(0,1); y: (256,) int64 in [0,10); params: W1_SIZES."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((W1_BATCH, W1_SIZES[0])).astype(np.float32)
    y = rng.integers(0, W1_SIZES[-1], size=(W1_BATCH,)).astype(np.int64)
    return {"x": x, "y": y, "params": mlp_init(W1_SIZES, seed + 1)}


# --------------------------------------------------------------------------
# W2: Burgers PINN, x in [-1,1], t in [0,1]
#   r = u_t + u u_x - nu u_xx,  u(x,0) = -sin(pi x),  u(+-1,t) = 0
#   loss = mean(r^2) + mean((u(x,0) + sin(pi x))^2) + mean(u(+-1,t)^2)
# --------------------------------------------------------------------------
def w2_inputs(seed=0, dtype=np.float32):
    """Columns of every point array are (x, t)."""
    rng = np.random.default_rng(seed)
    xi = rng.uniform(-1.0, 1.0, W2_N_INTERIOR)
    ti = rng.uniform(0.0, 1.0, W2_N_INTERIOR)
    x0 = rng.uniform(-1.0, 1.0, W2_N_INITIAL)
    tb = rng.uniform(0.0, 1.0, W2_N_BOUNDARY)
    xb = np.where(np.arange(W2_N_BOUNDARY) % 2 == 0, -1.0, 1.0)
    return {
        "X_int": np.stack([xi, ti], 1).astype(dtype),
        "X_init": np.stack([x0, np.zeros_like(x0)], 1).astype(dtype),
        "u_init": (-np.sin(math.pi * x0)).astype(dtype),
        "X_bnd": np.stack([xb, tb], 1).astype(dtype),
        "nu": W2_NU,
        "params": mlp_init(PINN_SIZES, seed + 1, dtype),
    }


# --------------------------------------------------------------------------
# W3: Poisson on [0,1]^2:  -lap u = f, f = 2 pi^2 sin(pi x) sin(pi y), u=0 on
# the boundary (exact u = sin(pi x) sin(pi y)).
#   loss = mean((-lap u - f)^2) + mean(u_bnd^2)
# --------------------------------------------------------------------------
def w3_inputs(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (W3_N_INTERIOR, 2))
    f = 2 * math.pi ** 2 * np.sin(math.pi * X[:, 0]) * np.sin(math.pi * X[:, 1])
    m = W3_N_BOUNDARY // 4
    s = rng.uniform(0.0, 1.0, (4, m))
    z, o = np.zeros(m), np.ones(m)
    Xb = np.concatenate([np.stack([s[0], z], 1), np.stack([s[1], o], 1),
                         np.stack([z, s[2]], 1), np.stack([o, s[3]], 1)], 0)
    return {
        "X_int": X.astype(dtype),
        "f_int": f.astype(dtype),
        "X_bnd": Xb.astype(dtype),
        "params": mlp_init(PINN_SIZES, seed + 1, dtype),
    }


# --------------------------------------------------------------------------
# W4a: HVP of the W1 loss along a random direction; W4b: full Hessian
# --------------------------------------------------------------------------
def w4a_inputs(seed=0):
    """W1 inputs plus ``v``: list of (vW, vb) N(0,1) float32 like params."""
    d = w1_inputs(seed)
    rng = np.random.default_rng(seed + 2)
    d["v"] = [(rng.standard_normal(W.shape).astype(np.float32),
               rng.standard_normal(b.shape).astype(np.float32))
              for W, b in d["params"]]
    return d


def w4b_inputs(seed=0, dtype=np.float32):
    """1->16->16->1 tanh MLP, MSE vs sin(pi x) on 64 points in [-1,1].

    ``theta`` is the flat (321,) parameter vector in :func:`flatten_params`
    layout. Biases are small random (not zero) so the Hessian is generic.
    """
    rng = np.random.default_rng(seed)
    x = np.linspace(-1.0, 1.0, W4B_N_POINTS).reshape(-1, 1)
    y = np.sin(math.pi * x)
    params = mlp_init(W4B_SIZES, seed + 1, np.float64)
    params = [(W, rng.uniform(-0.1, 0.1, b.shape)) for W, b in params]
    return {"x": x.astype(dtype), "y": y.astype(dtype),
            "theta": flatten_params(params).astype(dtype), "sizes": W4B_SIZES}


# --------------------------------------------------------------------------
# W5: 1-D explicit heat diffusion
#   for each of 2000 steps (synchronous / double-buffered update):
#       u_new[i] = u[i] + 0.2*(u[i-1] - 2 u[i] + u[i+1])   for 1 <= i <= n-2
#       u_new[0] = u_new[n-1] = 0
#   loss = sum((u_final - target)^2), gradient w.r.t. u0 (all n entries;
#   u0[0], u0[n-1] are read by the first step's stencil, so their gradient
#   entries are 0.2 * adjoint of the neighbouring cell, not 0).
# --------------------------------------------------------------------------
def w5_inputs(seed=0):
    """Return (u0, target), float64 arrays of length 1024 with zero ends."""
    rng = np.random.default_rng(seed)
    u0 = rng.standard_normal(W5_N)
    u0[0] = u0[-1] = 0.0
    xs = np.linspace(0.0, 1.0, W5_N)
    target = 0.5 * np.sin(math.pi * xs) + 0.1 * rng.standard_normal(W5_N)
    target[0] = target[-1] = 0.0
    return u0.astype(np.float64), target.astype(np.float64)


def w5_reference(u0, target, steps=W5_STEPS, r=W5_R):
    """Plain NumPy forward + hand-written adjoint. Returns (loss, grad)."""
    u = np.array(u0, dtype=np.float64)
    for _ in range(steps):
        nxt = np.zeros_like(u)
        nxt[1:-1] = u[1:-1] + r * (u[:-2] - 2.0 * u[1:-1] + u[2:])
        u = nxt
    res = u - target
    lam = 2.0 * res
    for _ in range(steps):
        g = np.zeros_like(lam)
        li = lam[1:-1]                 # adjoint of interior outputs
        g[1:-1] += (1.0 - 2.0 * r) * li
        g[:-2] += r * li
        g[2:] += r * li
        lam = g
    return float(np.sum(res * res)), lam


# --------------------------------------------------------------------------
# W6: Rosenbrock
# --------------------------------------------------------------------------
def rosenbrock_x0(n=W6_N):
    x = np.ones(n, dtype=np.float64)
    x[0::2] = -1.2
    return x
