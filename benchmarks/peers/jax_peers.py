"""JAX (jit, CPU) peers of sciml's benchmark workloads.

Every ``jax_*`` function returns ``{"name", "median_s", "min_s", "repeat",
"openblas_coretype", ...extras}``. Run ``python -m benchmarks.peers.jax_peers``
for a table. Requires jax (optional; see ``benchmarks.peers.load_peer``).

Importing this module turns on ``jax_enable_x64`` (W5 needs float64); all
float32 workloads pass explicit float32 arrays, and each result's ``dtype``
field reports the dtype actually computed in. Compile time is excluded from
``median_s`` and reported separately as ``compile_s`` (first call).
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from . import common as C  # noqa: E402
from . import cli_main, make_result, timeit_samples  # noqa: E402

_block = jax.block_until_ready


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def _params(np_params):
    return [(jnp.asarray(W), jnp.asarray(b)) for W, b in np_params]


def _mlp(params, x, act):
    h = x
    for i, (W, b) in enumerate(params):
        h = h @ W + b
        if i < len(params) - 1:
            h = act(h)
    return h


def _adam_update(params, g, m, v, t):
    """Hand-written Adam (same formula as torch.optim.Adam)."""
    b1, b2, lr, eps = C.ADAM_B1, C.ADAM_B2, C.ADAM_LR, C.ADAM_EPS
    t = t + 1
    m = jax.tree_util.tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
    v = jax.tree_util.tree_map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_,
                               v, g)
    tf = t.astype(jnp.float32)
    c1 = 1 - b1 ** tf
    c2 = 1 - b2 ** tf
    params = jax.tree_util.tree_map(
        lambda p, m_, v_: p - lr * (m_ / c1) / (jnp.sqrt(v_ / c2) + eps),
        params, m, v)
    return params, m, v, t


def _gnorm(g):
    return float(math.sqrt(sum(float(jnp.sum(jnp.asarray(x, jnp.float64) ** 2))
                               for x in jax.tree_util.tree_leaves(g))))


def _train_result(name, loss_fn, params, data, warmup, repeat, **extra):
    """jit(value_and_grad + Adam) step; data is a tuple of arrays."""
    vg = jax.value_and_grad(loss_fn)

    def step(state, *data):
        params, m, v, t = state
        loss, g = vg(params, *data)
        params, m, v, t = _adam_update(params, g, m, v, t)
        return (params, m, v, t), loss

    step = jax.jit(step, donate_argnums=(0,))
    loss0, g0 = jax.jit(vg)(params, *data)
    zeros = lambda: jax.tree_util.tree_map(jnp.zeros_like, params)  # noqa
    state = [(jax.tree_util.tree_map(jnp.copy, params), zeros(), zeros(),
              jnp.zeros((), jnp.int32))]

    def run():
        state[0], loss = step(state[0], *data)
        _block(loss)

    t0 = time.perf_counter()
    run()
    compile_s = time.perf_counter() - t0
    s = timeit_samples(run, warmup, repeat)
    return make_result(name, s, loss0=float(loss0), grad_norm0=_gnorm(g0),
                       steps_per_s=1.0 / float(np.median(s)),
                       compile_s=compile_s, dtype=str(loss0.dtype), **extra)


# --------------------------------------------------------------------------
# W1: MLP 784-512-512-10 train step
# --------------------------------------------------------------------------
def _xent(params, x, y):
    logits = _mlp(params, x, jax.nn.relu)
    lp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(lp, y[:, None], axis=1))


def jax_w1_mlp_step(seed=0, warmup=5, repeat=20):
    d = C.w1_inputs(seed)
    data = (jnp.asarray(d["x"]), jnp.asarray(d["y"].astype(np.int32)))
    r = _train_result("jax/W1_mlp_step", _xent, _params(d["params"]), data,
                      warmup, repeat)
    r["samples_per_s"] = C.W1_BATCH / r["median_s"]
    return r


# --------------------------------------------------------------------------
# PINN derivative machinery
# --------------------------------------------------------------------------
def _net(params, X):            # X (N,2) -> (N,)
    return _mlp(params, X, jnp.tanh)[:, 0]


def _dirs(X):
    e0 = jnp.zeros_like(X).at[:, 0].set(1)
    e1 = jnp.zeros_like(X).at[:, 1].set(1)
    return e0, e1


def _d1_d2(f, X, e):
    """(f, df/de, d2f/de2) per point via nested forward mode on the batch."""
    def f1(X):
        return jax.jvp(f, (X,), (e,))
    (u, du), (_, d2u) = jax.jvp(f1, (X,), (e,))
    return u, du, d2u


def _pt(params, p):             # p (2,) -> scalar
    return _mlp(params, p[None, :], jnp.tanh)[0, 0]


# --------------------------------------------------------------------------
# W2: Burgers
# --------------------------------------------------------------------------
def _burgers_jvp(params, X, Xi, ui, Xb, nu):
    f = lambda Z: _net(params, Z)  # noqa: E731
    ex, et = _dirs(X)
    u, u_x, u_xx = _d1_d2(f, X, ex)
    u_t = jax.jvp(f, (X,), (et,))[1]
    r = u_t + u * u_x - nu * u_xx
    e0 = _net(params, Xi) - ui
    eb = _net(params, Xb)
    return jnp.mean(r * r) + jnp.mean(e0 * e0) + jnp.mean(eb * eb)


def _burgers_vmap(params, X, Xi, ui, Xb, nu):
    vg = jax.value_and_grad(_pt, argnums=1)
    e0 = jnp.array([1.0, 0.0], X.dtype)

    def per_point(p):
        # forward-over-reverse: (u, grad u) and the Hessian column d/dx
        (u, gp), (_, hcol) = jax.jvp(lambda q: vg(params, q), (p,), (e0,))
        return u, gp[0], gp[1], hcol[0]

    u, u_x, u_t, u_xx = jax.vmap(per_point)(X)
    r = u_t + u * u_x - nu * u_xx
    e0 = _net(params, Xi) - ui
    eb = _net(params, Xb)
    return jnp.mean(r * r) + jnp.mean(e0 * e0) + jnp.mean(eb * eb)


def jax_w2_burgers_step(seed=0, warmup=5, repeat=20, mode="jvp"):
    """mode: 'jvp' (nested forward-mode on the batch) or 'vmap' (vmap of
    per-point grad/hessian)."""
    d = C.w2_inputs(seed)
    nu = d["nu"]
    data = tuple(jnp.asarray(d[k]) for k in
                 ("X_int", "X_init", "u_init", "X_bnd"))
    lf = {"jvp": _burgers_jvp, "vmap": _burgers_vmap}[mode]
    return _train_result(f"jax/W2_burgers_pinn_step_{mode}",
                         lambda p, *a: lf(p, *a, nu), _params(d["params"]),
                         data, warmup, repeat)


# --------------------------------------------------------------------------
# W3: Poisson
# --------------------------------------------------------------------------
def _poisson_jvp(params, X, f, Xb):
    g = lambda Z: _net(params, Z)  # noqa: E731
    ex, ey = _dirs(X)
    _, _, u_xx = _d1_d2(g, X, ex)
    _, _, u_yy = _d1_d2(g, X, ey)
    r = -(u_xx + u_yy) - f
    eb = _net(params, Xb)
    return jnp.mean(r * r) + jnp.mean(eb * eb)


def _poisson_vmap(params, X, f, Xb):
    g = jax.grad(_pt, argnums=1)
    e0 = jnp.array([1.0, 0.0], X.dtype)
    e1 = jnp.array([0.0, 1.0], X.dtype)

    def lap_pt(p):   # forward-over-reverse Hessian-vector products
        hx = jax.jvp(lambda q: g(params, q), (p,), (e0,))[1]
        hy = jax.jvp(lambda q: g(params, q), (p,), (e1,))[1]
        return hx[0] + hy[1]

    lap = jax.vmap(lap_pt)(X)
    r = -lap - f
    eb = _net(params, Xb)
    return jnp.mean(r * r) + jnp.mean(eb * eb)


def jax_w3_poisson_step(seed=0, warmup=5, repeat=20, mode="jvp"):
    d = C.w3_inputs(seed)
    data = tuple(jnp.asarray(d[k]) for k in ("X_int", "f_int", "X_bnd"))
    lf = {"jvp": _poisson_jvp, "vmap": _poisson_vmap}[mode]
    return _train_result(f"jax/W3_poisson_pinn_step_{mode}", lf,
                         _params(d["params"]), data, warmup, repeat)


# --------------------------------------------------------------------------
# W4a: HVP of the W1 loss, jvp of grad
# --------------------------------------------------------------------------
def jax_w4a_hvp(seed=0, warmup=3, repeat=20, return_vector=False):
    d = C.w4a_inputs(seed)
    x, y = jnp.asarray(d["x"]), jnp.asarray(d["y"].astype(np.int32))
    p = _params(d["params"])
    v = _params(d["v"])

    @jax.jit
    def hvp(p, v):
        return jax.jvp(jax.grad(lambda q: _xent(q, x, y)), (p,), (v,))[1]

    t0 = time.perf_counter()
    hv = _block(hvp(p, v))
    compile_s = time.perf_counter() - t0
    s = timeit_samples(lambda: _block(hvp(p, v)), warmup, repeat)
    flat = np.concatenate([np.asarray(a, np.float64).ravel()
                           for a in jax.tree_util.tree_leaves(hv)])
    r = make_result("jax/W4a_hvp_jvp_grad", s, hv_norm=float(np.linalg.norm(flat)),
                    compile_s=compile_s,
                    dtype=str(jax.tree_util.tree_leaves(hv)[0].dtype))
    if return_vector:   # order: W1,b1,W2,b2,W3,b3 raveled (as torch_peers)
        r["hv"] = flat
    return r


# --------------------------------------------------------------------------
# W4b: full Hessian, 321 params
# --------------------------------------------------------------------------
def jax_w4b_hessian(seed=0, warmup=3, repeat=20, dtype="float32",
                    return_hessian=False):
    d = C.w4b_inputs(seed, np.dtype(dtype))
    x, y, theta = (jnp.asarray(d[k]) for k in ("x", "y", "theta"))
    sizes = d["sizes"]

    def loss_flat(th):
        ps, k = [], 0
        for i, o in zip(sizes[:-1], sizes[1:]):
            W = th[k:k + i * o].reshape(i, o)
            k += i * o
            ps.append((W, th[k:k + o]))
            k += o
        e = _mlp(ps, x, jnp.tanh) - y
        return jnp.mean(e * e)

    hfn = jax.jit(jax.hessian(loss_flat))
    t0 = time.perf_counter()
    H = _block(hfn(theta))
    compile_s = time.perf_counter() - t0
    s = timeit_samples(lambda: _block(hfn(theta)), warmup, repeat)
    Hd = np.asarray(H, np.float64)
    r = make_result("jax/W4b_full_hessian_321", s, n_params=int(theta.size),
                    hess_fro=float(np.linalg.norm(Hd)),
                    hess_asym=float(np.abs(Hd - Hd.T).max()),
                    compile_s=compile_s, dtype=str(H.dtype))
    if return_hessian:
        r["hessian"] = np.asarray(H)
    return r


# --------------------------------------------------------------------------
# W5: heat diffusion, lax.scan, float64
# --------------------------------------------------------------------------
def _heat(u0, steps, r):
    def body(u, _):
        inner = u[1:-1] + r * (u[:-2] - 2.0 * u[1:-1] + u[2:])
        return jnp.pad(inner, 1), None
    u, _ = jax.lax.scan(body, u0, None, length=steps)
    return u


def jax_w5_heat_grad(seed=0, warmup=3, repeat=20, steps=C.W5_STEPS):
    """loss=sum((u_T-target)^2), grad wrt u0. Returns "grad" (np.float64)."""
    u0n, tn = C.w5_inputs(seed)
    u0, target = jnp.asarray(u0n), jnp.asarray(tn)

    def loss(u0):
        e = _heat(u0, steps, C.W5_R) - target
        return jnp.sum(e * e)

    vg = jax.jit(jax.value_and_grad(loss))
    fwd = jax.jit(loss)
    t0 = time.perf_counter()
    lv, g = _block(vg(u0))
    compile_s = time.perf_counter() - t0
    _block(fwd(u0))
    s = timeit_samples(lambda: _block(vg(u0)), warmup, repeat)
    sf = timeit_samples(lambda: _block(fwd(u0)), warmup, repeat)
    return make_result("jax/W5_heat_grad_scan", s, loss=float(lv),
                       forward_only_s=float(np.median(sf)),
                       compile_s=compile_s, grad=np.asarray(g),
                       dtype=str(g.dtype))


# --------------------------------------------------------------------------
def run_all(only=None):
    jobs = [
        ("W1", jax_w1_mlp_step),
        ("W2", jax_w2_burgers_step),
        ("W2", lambda: jax_w2_burgers_step(mode="vmap")),
        ("W3", jax_w3_poisson_step),
        ("W3", lambda: jax_w3_poisson_step(mode="vmap")),
        ("W4a", jax_w4a_hvp), ("W4b", jax_w4b_hessian),
        ("W5", jax_w5_heat_grad),
    ]
    out = []
    for key, fn in jobs:
        if only and not any(o.lower() in key.lower() for o in only):
            continue
        r = fn()
        out.extend(r if isinstance(r, list) else [r])
    return out


if __name__ == "__main__":
    cli_main(run_all, f"jax peers (jax {jax.__version__}, "
             f"{jax.devices()[0].platform})")
