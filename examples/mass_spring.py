"""A 2-D mass-spring robot taught to walk right by a small neural controller, end to end.

The DiffTaichi mass_spring pattern in sciml: each step an MLP (sciml.models.MLP) reads sine
waves (a clock) and the masses' positions relative to the robot's centre and outputs one
actuation per spring; the step itself is a Taichi kernel (sciml.physics.mass_spring) whose
gradient comes from Taichi's autodiff. The whole rollout is one differentiable sciml program;
the controller is trained with sciml's Adam on

    loss = -(mean x of the masses at the final step).

    python examples/mass_spring.py                  # writes mass_spring.png (frame strip + loss)
    python examples/mass_spring.py --plot walk.svg  # the figure elsewhere (.png, .pdf or .svg)
    python examples/mass_spring.py --quick          # smoke test
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
from sciml._io import atomic_write, check_plot_arg
from sciml.models import MLP
from sciml.optim import Adam

N_SIN = 4
PHYSICS = [0.004, -4.8, 15.0, 0.1]  # dt, gravity, damping, ground height


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--plot", "--out", dest="plot", metavar="PATH", default="mass_spring.png",
                    help="figure: frames of the trained robot's walk and the loss (.png, .pdf or .svg; "
                         "default mass_spring.png)")
    ap.add_argument("--quick", action="store_true", help="short rollout, 2 iterations (smoke test)")
    args = ap.parse_args(argv)
    args.plot = check_plot_arg(ap, args.plot)  # a bad path fails now, not after training
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

    def mean_x(params):  # every state of one rollout, and the masses' mean x per step (for the plot)
        with sm.no_grad():
            states = sim.rollout(x0, physics, controller(params), return_states=True)
        return states, np.array([s.numpy()[:, 0].mean() for s in states])

    untrained = mean_x(net.params())[1]
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

    states, trained = mean_x(net.params())
    plot(states, ends, pos, untrained, trained, history, dt, args.plot)
    return history


def plot(states, ends, pos, untrained, trained, history, dt, path):
    """Top: six frames of the trained robot's rollout, each panel centred on the robot at one scale.
    Bottom: the loss per Adam step, and the robot's mean x over the rollout before and after training."""
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    steps = len(states) - 1
    frames = np.linspace(0, steps, 6).astype(int)
    xy = [states[f].numpy()[:, :2] for f in frames]
    half = 0.5 * max(float((a.max(axis=0) - a.min(axis=0)).max()) for a in xy) + 0.03  # one scale for all panels
    top = max(float(a[:, 1].max()) for a in xy) + 0.03
    ground, start = PHYSICS[3], pos[:, 0].mean()
    fig = Figure(figsize=(12, 5.2))
    top_row = fig.add_gridspec(1, len(frames), left=0.05, right=0.99, top=0.82, bottom=0.6, wspace=0.3)
    bottom_row = fig.add_gridspec(1, 2, left=0.07, right=0.99, top=0.46, bottom=0.1, wspace=0.22)
    for k, (f, xs) in enumerate(zip(frames, xy)):
        ax = fig.add_subplot(top_row[0, k])
        ax.add_collection(LineCollection(xs[ends], colors="tab:blue", lw=1, label="springs"))
        ax.plot(xs[:, 0], xs[:, 1], "o", color="tab:red", ms=3, label="masses")
        ax.axhline(ground, color="k", lw=0.8, label="ground")
        ax.axvline(start, color="0.5", lw=0.8, ls="--", label="start (mean x at t = 0)")
        cx = xs[:, 0].mean()
        ax.set_xlim(cx - half, cx + half)
        ax.set_ylim(ground - 0.02, top)
        ax.set_aspect("equal")
        ax.set_title(f"t = {f * dt:.2f} s", fontsize=8)
        ax.tick_params(labelsize=6)
        ax.locator_params(axis="x", nbins=3)
        ax.set_xlabel("x (m)", fontsize=7)
        ax.set_ylabel("y (m)", fontsize=7, labelpad=1)
        if k == 0:
            handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.935))
    ax1 = fig.add_subplot(bottom_row[0, 0])
    ax1.plot(np.arange(len(history)), history, "o-", ms=3)
    ax1.xaxis.get_major_locator().set_params(integer=True)
    ax1.set_xlabel("Adam step")
    ax1.set_ylabel("loss = -(mean x at the end) (m)")
    ax1.set_title("training", fontsize=9)
    ax1.grid(True, alpha=0.3)
    ax2 = fig.add_subplot(bottom_row[0, 1])
    t = np.arange(len(trained)) * dt
    ax2.plot(t, untrained, color="0.5", label="untrained controller")
    ax2.plot(t, trained, color="tab:green", label="trained controller")
    ax2.set_xlabel("simulated time t (s)")
    ax2.set_ylabel("mean x of the masses (m)")
    ax2.set_title("the robot's position during one rollout", fontsize=9)
    ax2.legend(fontsize=8)
    ax2.grid(True, alpha=0.3)
    fig.suptitle(f"Mass-spring robot taught to walk right: frames of the trained rollout "
                 f"(mean x {trained[0]:.3f} -> {trained[-1]:.3f} m)", fontsize=10)
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=100)
    print(f"wrote {path}")
    return fig


if __name__ == "__main__":
    main()
