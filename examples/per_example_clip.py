"""Per-example gradient clipping (the DP-SGD update) with sm.vmap.

A small MLP classifies two interleaved half-moons. Each step takes a minibatch, computes one gradient per
example with ``sm.vmap(sm.grad(loss), in_axes=(None, 0, 0))`` (one batched pass, not a loop), clips each
example's gradient to norm C, averages, adds Gaussian noise (sm.random, keyed per step) and applies Adam.

    python examples/per_example_clip.py                 # 300 steps
    python examples/per_example_clip.py --plot dp.png   # and a figure (.png, .pdf or .svg)
    python examples/per_example_clip.py --quick         # smoke test
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
from sciml.optim import Adam


def moons(n, rng):
    t = rng.uniform(0, np.pi, n)
    lab = rng.integers(0, 2, n)
    x = np.where(lab[:, None] == 0, np.stack([np.cos(t), np.sin(t)], 1),
                 np.stack([1 - np.cos(t), 0.5 - np.sin(t)], 1))
    return x + 0.1 * rng.standard_normal((n, 2)), lab.astype(np.float64)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--clip", type=float, default=1.0, help="per-example gradient norm bound C")
    ap.add_argument("--noise", type=float, default=0.5, help="noise multiplier sigma (std = sigma C / batch)")
    ap.add_argument("--plot", metavar="PATH", default=None,
                    help="write a figure: the learnt decision boundary, the loss and the share of clipped "
                         "gradients per step (.png, .pdf or .svg)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    args.plot = check_plot_arg(ap, args.plot)  # a bad path fails now, not after training
    sm.init(dtype="float64", seed=0)
    steps = 10 if args.quick else args.steps
    if args.quick:
        args.batch = 32
    rng = np.random.default_rng(0)
    xn, yn = moons(1024, rng)
    net = sm.models.MLP([2, 32, 32, 1], activation=sm.tanh, seed=0)

    def loss(p, x, y):  # one example: x (2,), y ()
        z = net.apply(p, sm.reshape(x, (1, 2)))[0, 0]
        return sm.softplus(z) - y * z  # logistic loss on the logit

    per_example = sm.vmap(sm.grad(loss), in_axes=(None, 0, 0))
    opt = Adam(net.parameters(), lr=1e-2)
    key = sm.random.key(0)
    # check once: the batched per-example gradients equal a loop over the examples
    p0, xb, yb = net.params(), sm.tensor(xn[:4]), sm.tensor(yn[:4])
    g = per_example(p0, xb, yb)
    leaves = sm.tree_util.tree_leaves(g)
    err = max(float(np.abs(a.numpy()[i] - b.numpy()).max()) for i in range(4)
              for a, b in zip(leaves, sm.tree_util.tree_leaves(sm.grad(loss)(p0, xb[i], yb[i]))))
    print(f"per-example gradients: vmap vs loop max |diff| = {err:.2e}")
    t0 = time.perf_counter()
    batch_loss, clipped = [], []   # per step: mean loss of the minibatch (before the update), share clipped
    for step in range(steps):
        idx = rng.choice(len(xn), args.batch, replace=False)
        x, y = sm.tensor(xn[idx]), sm.tensor(yn[idx])
        g = per_example(net.params(), x, y)                                       # leaves (B,) + shape
        sq = sum(sm.reshape(v * v, (args.batch, -1)).sum(1) for v in sm.tree_util.tree_leaves(g))
        scale = sm.minimum(1.0, args.clip / (sm.sqrt(sq) + 1e-12))               # (B,)
        if args.plot is not None:
            z = net.apply(net.params(), x)[:, 0]
            batch_loss.append(float((sm.softplus(z) - y * z).mean()))
            clipped.append(float((scale.numpy() < 1.0).mean()))
        leaves, tdef = sm.tree_util.tree_flatten(g)
        keys = sm.random.split(sm.random.fold_in(key, step), len(leaves))
        noisy = []
        for i, v in enumerate(leaves):
            mean = (v * sm.reshape(scale, (args.batch,) + (1,) * (v.ndim - 1))).mean(0)
            noisy.append(mean + (args.noise * args.clip / args.batch) * sm.random.normal(keys[i], mean.shape))
        opt.step(sm.tree_util.tree_unflatten(tdef, noisy))
    dt = time.perf_counter() - t0
    logits = net(sm.tensor(xn)).numpy()[:, 0]
    acc = float(((logits > 0) == (yn > 0.5)).mean())
    print(f"{steps} DP-SGD steps (batch {args.batch}, C = {args.clip}, sigma = {args.noise}) in {dt:.1f} s; "
          f"train accuracy {acc:.3f}")
    if args.plot is not None:
        plot(net, xn, yn, batch_loss, clipped, acc, args, args.plot)
    return {"accuracy": acc, "vmap_vs_loop": err}


def plot(net, xn, yn, batch_loss, clipped, acc, args, path):
    """The classifier's probability over the plane with the data (left); loss and clipped share per step."""
    from matplotlib.figure import Figure
    gx, gy = np.meshgrid(np.linspace(-1.6, 2.6, 120), np.linspace(-1.1, 1.6, 80))
    with sm.no_grad():
        prob = 1 / (1 + np.exp(-net(sm.tensor(np.stack([gx.ravel(), gy.ravel()], 1))).numpy()[:, 0]))
    fig = Figure(figsize=(11, 4.3))
    ax, ax2 = fig.subplots(1, 2)
    m = ax.contourf(gx, gy, prob.reshape(gx.shape), levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.55)
    fig.colorbar(m, ax=ax, label="predicted P(class 1)")
    ax.contour(gx, gy, prob.reshape(gx.shape), levels=[0.5], colors="k", linewidths=1)
    ax.plot(*xn[yn == 0].T, "o", ms=3, color="tab:blue", mec="k", mew=0.3, label="class 0")
    ax.plot(*xn[yn == 1].T, "^", ms=3, color="tab:red", mec="k", mew=0.3, label="class 1")
    ax.plot([], [], "k-", lw=1, label="decision boundary (P = 0.5)")
    ax.set_xlabel("feature x1")
    ax.set_ylabel("feature x2")
    ax.set_title(f"learnt classifier (train accuracy {100 * acc:.1f}%)", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    w = max(1, min(10, len(batch_loss) // 5))   # moving mean over w steps: the raw curves are noisy

    def smooth(v):
        return np.convolve(np.asarray(v, float), np.ones(w) / w, mode="valid")
    steps = np.arange(w, len(batch_loss) + 1)
    ax2.plot(steps, smooth(batch_loss), color="tab:blue", lw=1, label="minibatch loss (left axis)")
    ax2.set_xlabel("DP-SGD step")
    ax2.set_ylabel("logistic loss of the minibatch")
    ax2.grid(True, alpha=0.3)
    ax3 = ax2.twinx()
    ax3.plot(steps, 100 * smooth(clipped), color="tab:orange", lw=1,
             label=f"examples clipped to norm C = {args.clip:g} (right axis)")
    ax3.set_ylabel("examples clipped (%)")
    ax3.set_ylim(0, 105)
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax3.get_legend_handles_labels()
    ax3.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    ax2.set_title(f"training (moving means over {w} steps)", fontsize=10)
    fig.suptitle(f"Per-example gradient clipping (DP-SGD: batch {args.batch}, C = {args.clip:g}, "
                 f"noise multiplier {args.noise:g}) on two half-moons", fontsize=11)
    fig.tight_layout()
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=100)
    print(f"wrote {path}")
    return fig


if __name__ == "__main__":
    main()
