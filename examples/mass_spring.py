"""A 2-D mass-spring robot taught to walk right by a small neural controller, end to end.

The DiffTaichi mass_spring pattern in sciml: each step an MLP (sciml.models.MLP) reads sine
waves (a clock) and the masses' positions relative to the robot's centre and outputs one
actuation per spring; the step itself is a Taichi kernel (sciml.physics.mass_spring) whose
gradient comes from Taichi's autodiff. The whole rollout is one differentiable sciml program;
the controller is trained with sciml's Adam on

    loss = -(mean x of the masses at the final step).

    python examples/mass_spring.py             # writes mass_spring.png (frame strip + loss)
    python examples/mass_spring.py --quick     # smoke test
"""
import argparse
import time

import numpy as np

try:
    import sciml as sm
except ImportError:  # running from a source checkout without `pip install -e .`
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam

N_SIN = 4
PHYSICS = [0.004, -4.8, 15.0, 0.1]  # dt, gravity, damping, ground height


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--out", default="mass_spring.png")
    ap.add_argument("--quick", action="store_true", help="short rollout, 2 iterations (smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.iters = 40, 2
    sm.init(arch="cpu", dtype="float64", seed=0)

    pos, ends, springs = sm.physics.robot(cols=4)
    sim = sm.physics.mass_spring(pos, ends, springs, args.steps)
    n, n_springs = pos.shape[0], ends.shape[0]
    x0 = sm.tensor(np.concatenate([pos, np.zeros_like(pos)], axis=1))
    physics = sm.tensor(PHYSICS)
    dt = PHYSICS[0]
    clock = sm.tensor(np.sin(2 * np.pi * (np.arange(args.steps)[:, None] * dt * 2.0 + np.arange(N_SIN)[None] / N_SIN)))
    net = MLP([N_SIN + 2 * n, 32, n_springs], activation=sm.tanh, seed=0)

    def controller(params):
        def act(x, t):
            xy = x[:, :2]
            rel = (xy - xy.mean(axis=0)).reshape((1, 2 * n))
            inp = sm.concat([clock[t:t + 1], rel], axis=1)
            return sm.tanh(net.apply(params, inp)).reshape((n_springs,))
        return act

    def loss(params):
        final = sim.rollout(x0, physics, controller(params))
        return -final[:, 0].mean()

    opt = Adam(net.params(), lr=args.lr)
    history = []
    t0 = time.perf_counter()
    for it in range(args.iters + 1):
        value, grads = sm.value_and_grad(loss)(net.params())
        history.append(float(value))
        print(f"iter {it:3d}  loss {float(value):+.5f}  (mean x at the end {-float(value):.4f}, start "
              f"{pos[:, 0].mean():.4f})")
        if it < args.iters:
            opt.step(grads)
    print(f"{args.iters} Adam steps through {args.steps} simulation steps each in {time.perf_counter() - t0:.1f} s; "
          f"loss {history[0]:+.4f} -> {history[-1]:+.4f}")

    from matplotlib.figure import Figure

    from sciml._io import atomic_write
    with sm.no_grad():
        states = sim.rollout(x0, physics, controller(net.params()), return_states=True)
    frames = np.linspace(0, args.steps, 6).astype(int)
    xy = [states[f].numpy()[:, :2] for f in frames]
    half = 0.5 * max(float((a.max(axis=0) - a.min(axis=0)).max()) for a in xy) + 0.03  # one scale for all panels
    top = max(float(a[:, 1].max()) for a in xy) + 0.03
    fig = Figure(figsize=(2.0 * len(frames), 3.8))
    grid = fig.add_gridspec(2, len(frames), height_ratios=[1, 1.2])
    for k, (f, xs) in enumerate(zip(frames, xy)):  # one panel per frame, each centred on the robot
        ax = fig.add_subplot(grid[0, k])
        for a, b in ends:
            ax.plot(xs[[a, b], 0], xs[[a, b], 1], "-", color="tab:blue", lw=1)
        ax.plot(xs[:, 0], xs[:, 1], "o", color="tab:red", ms=3)
        cx = xs[:, 0].mean()
        ax.axhline(PHYSICS[3], color="k", lw=0.8)
        ax.axvline(pos[:, 0].mean(), color="0.6", lw=0.8, ls="--")  # where the robot started
        ax.set_xlim(cx - half, cx + half)
        ax.set_ylim(PHYSICS[3] - 0.02, top)
        ax.set_aspect("equal")
        ax.set_title(f"t = {f * dt:.2f} s\nmean x = {cx:.3f}", fontsize=8)
        ax.tick_params(labelsize=6)
        if k == 0:
            ax.set_ylabel("y", fontsize=8)
        ax.set_xlabel("x", fontsize=8)
    ax2 = fig.add_subplot(grid[1, :])
    ax2.plot(history, "o-")
    ax2.set_xlabel("Adam step")
    ax2.set_ylabel("loss = -(mean x at the end)")
    fig.suptitle("trained controller: frames of one rollout (dashed: start position; black: ground)", fontsize=9)
    fig.tight_layout()
    with atomic_write(args.out) as tmp:
        fig.savefig(tmp, dpi=120)
    print(f"wrote {args.out}")
    return history


if __name__ == "__main__":
    main()
