"""Billiards: fit the cue ball's launch velocity so that the object ball stops on a target.

Two balls with soft-sphere collisions and drag (sciml.physics.billiards: one Taichi kernel per
step, differentiated by Taichi's autodiff through the collision). The launch velocity is a
sciml Tensor fitted with sciml's L-BFGS (or Adam: --optimizer adam) on

    loss(v) = |x_object(T) - target|^2.

    python examples/billiards.py                     # writes billiards.png
    python examples/billiards.py --plot shot.pdf     # the figure elsewhere (.png, .pdf or .svg)
    python examples/billiards.py --quick             # smoke test
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
from sciml.models import Parameter
from sciml.optim import Adam, lbfgs

CUE = (0.2, 0.5)
OBJECT = (0.7, 0.56)
TARGET = np.array([1.25, 0.95])
PARAMS = [0.01, 0.5, 2000.0, 0.04]  # dt, drag, contact stiffness, radius


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--optimizer", choices=["lbfgs", "adam"], default="lbfgs")
    ap.add_argument("--iters", type=int, default=None, help="default: 30 for L-BFGS, 80 for Adam")
    ap.add_argument("--lr", type=float, default=0.02, help="Adam learning rate")
    ap.add_argument("--plot", "--out", dest="plot", metavar="PATH", default="billiards.png",
                    help="figure of the shots and the loss (.png, .pdf or .svg; default billiards.png)")
    ap.add_argument("--quick", action="store_true", help="few iterations (smoke test)")
    args = ap.parse_args(argv)
    args.plot = check_plot_arg(ap, args.plot)  # a bad path fails now, not after training
    if args.iters is None:
        args.iters = 30 if args.optimizer == "lbfgs" else 80
    if args.quick:
        args.iters = 4
    sm.init(arch="cpu", dtype="float64", seed=0)

    sim = sm.physics.billiards(2, args.steps)
    params = sm.tensor(PARAMS)
    target = sm.tensor(TARGET)
    cue_pos, obj_row = sm.tensor([list(CUE)]), sm.tensor([[*OBJECT, 0.0, 0.0]])

    def start(v):
        return sm.concat([sm.concat([cue_pos, v.reshape((1, 2))], axis=1), obj_row], axis=0)

    def loss(v):
        final = sim(start(v), params)
        return ((final[1, :2] - target) ** 2).sum()

    v_start = np.array([1.0, 0.0])  # aimed straight right: a glancing hit
    history = []
    t0 = time.perf_counter()
    if args.optimizer == "lbfgs":
        history.append(float(loss(sm.tensor(v_start))))
        print(f"iter   0  loss {history[0]:.4e}  launch velocity {v_start}")

        def report(info):
            history.append(info.loss)
            print(f"iter {info.iteration:3d}  loss {info.loss:.4e}  launch velocity {np.round(info.params.numpy(), 5)}")
        res = lbfgs(loss, sm.tensor(v_start), max_iter=args.iters, gtol=1e-12, callback=report)
        v_fit, nfev = res.params.numpy(), res.nfev
    else:
        v = Parameter(v_start)
        opt = Adam([v], lr=args.lr)
        for it in range(args.iters + 1):
            value, g = sm.value_and_grad(loss)(v)
            history.append(float(value))
            if it % max(1, args.iters // 10) == 0:
                print(f"iter {it:3d}  loss {float(value):.4e}  launch velocity {np.round(v.numpy(), 4)}")
            if it < args.iters:
                opt.step([g])
        v_fit, nfev = v.numpy(), args.iters + 1
    dt = time.perf_counter() - t0
    print(f"final loss {history[-1]:.3e} (from {history[0]:.3e}), {nfev} rollouts + gradients, {dt:.2f} s; "
          f"launch velocity {v_fit}")

    plot(sim, start, params, v_start, v_fit, history, args.optimizer, args.plot)
    return history


def plot(sim, start, params, v_start, v_fit, history, optimizer, path):
    """Both shots (start and fitted velocity) on the table, and the loss per iteration."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.4, 1]})
    for vel, style, name in ((v_start, ":", "start"), (v_fit, "-", "fitted")):
        traj = sim.trajectory(start(sm.tensor(vel)), params, every=2)
        ax[0].plot(traj[:, 0, 0], traj[:, 0, 1], "k" + style, label=f"cue ball, {name} shot")
        ax[0].plot(traj[:, 1, 0], traj[:, 1, 1], "tab:blue", ls=style, label=f"object ball, {name} shot")
    ax[0].plot([CUE[0], OBJECT[0]], [CUE[1], OBJECT[1]], "o", color="0.5", ms=5, label="balls at t = 0")
    ax[0].plot(*TARGET, "r*", ms=12, ls="none", label="target")
    ax[0].set_aspect("equal")
    ax[0].set_xlabel("x (table units)")
    ax[0].set_ylabel("y (table units)")
    ax[0].set_title("paths of the two balls")
    ax[0].legend(fontsize=7, loc="upper left")
    ax[1].semilogy(np.arange(len(history)), history, "o-", ms=3)
    ax[1].set_xlabel({"lbfgs": "L-BFGS", "adam": "Adam"}[optimizer] + " iteration")
    ax[1].set_ylabel("loss = |x_object(T) - target|^2")
    ax[1].set_title("fit of the launch velocity")
    ax[1].grid(True, which="both", alpha=0.3)
    fig.suptitle(f"Billiards: cue launch velocity ({v_start[0]:.2f}, {v_start[1]:.2f}) -> "
                 f"({v_fit[0]:.3f}, {v_fit[1]:.3f}) sends the object ball to the target", fontsize=10)
    fig.tight_layout()
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=100)
    print(f"wrote {path}")
    return fig


if __name__ == "__main__":
    main()
