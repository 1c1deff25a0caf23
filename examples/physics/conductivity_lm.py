"""Recover a conductivity field from temperatures: Levenberg-Marquardt through a simulation vs Adam.

1-D heat conduction (``sm.physics.conduction1d``: 24 cells, 100 steps, one conductivity per cell)
from a known start profile; the temperatures every 10 steps are observed. The unknown field k
(kept in the stable range by k = 0.45 sigmoid(theta)) is fitted by nonlinear least squares,
0.5 ||sim(u0, k(theta))[obs] - data||^2:

* Levenberg-Marquardt: the Jacobian by forward mode (``sm.jacfwd``: one tangent rollout per
  cell, through the simulation's tangent kernel), J^T r by reverse mode, a damped Gauss-Newton step;
* Adam on the same loss (gradients by reverse mode), the learning rate the best of a small sweep.

    python examples/physics/conductivity_lm.py            # writes conductivity_lm.png
    python examples/physics/conductivity_lm.py --quick    # smoke test
"""
import argparse
import os
import sys
import time

import numpy as np

try:
    import sciml as sm
except ImportError:  # running from a source checkout without `pip install -e .`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    import sciml as sm
from sciml.models import Parameter
from sciml.optim import Adam


K_MAX = 0.45  # explicit scheme stable for k <= 0.5


def to_k(theta):
    return K_MAX * sm.sigmoid(theta)


def problem(n, steps):
    x = np.linspace(0, 1, n)
    k_true = 0.15 + 0.1 * np.sin(2 * np.pi * x)
    u0 = sum(np.sin(np.pi * m * x + p) / m for m, p in zip(range(1, 6), np.random.default_rng(0).random(5) * 6))
    u0[0] = u0[-1] = 0.0
    sim = sm.physics.conduction1d(n, steps)
    obs = list(range(10, steps + 1, 10))
    data = sim(sm.tensor(u0), sm.tensor(k_true), states=obs).numpy()
    return sim, sm.tensor(u0), obs, sm.tensor(data), k_true


def levenberg_marquardt(residual, k0, iters, tol):
    k, lam = k0.copy(), 1e-3
    r = residual(sm.tensor(k)).numpy().reshape(-1)
    history = [0.5 * float(r @ r)]
    for _ in range(iters):
        J = sm.jacfwd(residual)(sm.tensor(k)).numpy().reshape(r.size, k.size)  # forward mode, one JVP per cell
        g, A = J.T @ r, J.T @ J
        while True:
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            r_new = residual(sm.tensor(k + step)).numpy().reshape(-1)
            if 0.5 * float(r_new @ r_new) < history[-1]:
                k, r, lam = k + step, r_new, lam / 3
                break
            lam *= 4
            if lam > 1e12:
                return k, history
        history.append(0.5 * float(r @ r))
        if history[-1] < tol:
            break
    return k, history


def adam(loss, k0, iters, lr, tol):
    k = Parameter(k0.copy())
    opt = Adam([k], lr=lr)
    history = []
    vg = sm.value_and_grad(loss)
    for _ in range(iters):
        value, g = vg(k)
        history.append(float(value))
        if history[-1] <= tol:
            break
        opt.step([g])
    return k.numpy(), history


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--adam-iters", type=int, default=2000)
    ap.add_argument("--out", default="conductivity_lm.png")
    ap.add_argument("--lm-iters", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="12 cells, 40 steps, few iterations (smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.steps, args.adam_iters, args.lm_iters = 12, 40, 20, 6
    sm.init(arch="cpu", dtype="float64")
    sim, u0, obs, data, k_true = problem(args.n, args.steps)
    residual = lambda theta: sim(u0, to_k(theta), states=obs) - data  # noqa: E731
    loss = lambda theta: 0.5 * (residual(theta) ** 2).sum()  # noqa: E731
    k0 = np.full(args.n, np.log(0.2 / (K_MAX - 0.2)))  # theta of k = 0.2 everywhere
    tol = 1e-12 * float(loss(sm.tensor(k0)))

    t0 = time.perf_counter()
    k_lm, h_lm = levenberg_marquardt(residual, k0, args.lm_iters, tol)
    k_lm = to_k(sm.tensor(k_lm)).numpy()
    t_lm = time.perf_counter() - t0
    interior = slice(1, args.n - 1)  # the end cells' k never acts (zero ends)
    err_lm = float(np.abs(k_lm - k_true)[interior].max())
    print(f"Levenberg-Marquardt: loss {h_lm[0]:.3e} -> {h_lm[-1]:.3e} in {len(h_lm) - 1} iterations "
          f"({t_lm:.1f} s); max |k - k_true| = {err_lm:.2e}")

    best = None
    for lr in ((3e-2,) if args.quick else (1e-1, 3e-2, 1e-2)):
        t0 = time.perf_counter()
        k_ad, h_ad = adam(loss, k0, args.adam_iters, lr, h_lm[-1])
        k_ad = to_k(sm.tensor(k_ad)).numpy()
        run = (h_ad[-1], lr, k_ad, h_ad, time.perf_counter() - t0)
        if best is None or run[0] < best[0]:
            best = run
    _, lr, k_ad, h_ad, t_ad = best
    reached = next((i for i, v in enumerate(h_ad) if v <= h_lm[-1]), None)
    err_ad = float(np.abs(k_ad - k_true)[interior].max())
    print(f"Adam (lr {lr:g}, best of 3): loss {h_ad[0]:.3e} -> {h_ad[-1]:.3e} in {len(h_ad)} iterations "
          f"({t_ad:.1f} s); max |k - k_true| = {err_ad:.2e}; "
          + (f"reached LM's final loss at iteration {reached}" if reached is not None
             else f"never reached LM's final loss {h_lm[-1]:.1e}"))

    from matplotlib.figure import Figure

    from sciml._io import atomic_write
    fig = Figure(figsize=(10, 3.6))
    ax = fig.subplots(1, 2)
    x = np.linspace(0, 1, args.n)
    ax[0].plot(x[interior], k_true[interior], "k-", lw=2, label="true k")
    ax[0].plot(x[interior], k_lm[interior], "o", ms=4, label=f"Levenberg-Marquardt ({len(h_lm) - 1} it.)")
    ax[0].plot(x[interior], k_ad[interior], "x", ms=4, label=f"Adam ({len(h_ad)} it.)")
    ax[0].set_xlabel("x")
    ax[0].set_ylabel("conductivity k")
    ax[0].legend(fontsize=7)
    ax[1].semilogy(h_lm, "o-", label="Levenberg-Marquardt")
    ax[1].semilogy(h_ad, "-", label=f"Adam (lr {lr:g})")
    ax[1].set_xlabel("iteration")
    ax[1].set_ylabel("0.5 ||residual||^2")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    with atomic_write(args.out) as tmp:
        fig.savefig(tmp, dpi=120)
    print(f"wrote {args.out}")
    return h_lm, h_ad


if __name__ == "__main__":
    main()
