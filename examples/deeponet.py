"""DeepONet (Lu et al. 2021) for the antiderivative operator G(u)(y) = int_0^y u(s) ds, u a random smooth
function sampled at 50 sensors: branch net on u, trunk net on y, output their dot product plus a bias.

    python examples/deeponet.py                 # relative L2 test error
    python examples/deeponet.py --plot op.png   # and a figure (.png, .pdf or .svg): test functions, loss
    python examples/deeponet.py --quick         # smoke test

Layers use PyTorch's default initialisation (Linear), which is what makes this reach a low error with
default settings.
"""
import argparse
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

try:
    import sciml as sm
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import sciml as sm
from sciml._io import atomic_write, check_plot_arg  # noqa: E402
from sciml.models import Linear, Module, Parameter, Sequential, Tanh  # noqa: E402
from sciml.optim import Adam  # noqa: E402

M = 50  # sensors


def make_data(n_funcs, n_points, seed, coefficients=False):
    """u(x) = sum_k a_k sin(k pi x) + b_k cos(k pi x) on [0, 1]; G(u)(y) exactly (and (a, b) on request)."""
    rng = np.random.default_rng(seed)
    xs = np.linspace(0, 1, M)
    k = np.arange(1, 6)
    a, b = rng.standard_normal((n_funcs, 5)) / k, rng.standard_normal((n_funcs, 5)) / k
    U = a @ np.sin(np.pi * k[:, None] * xs) + b @ np.cos(np.pi * k[:, None] * xs)
    Y = rng.uniform(0, 1, size=(n_funcs, n_points))
    G = antiderivative(a, b, Y)
    return (U, Y, G, a, b) if coefficients else (U, Y, G)


def antiderivative(a, b, Y):
    """G(u)(y) = int_0^y u for u with sine coefficients a and cosine coefficients b (n_funcs, 5)."""
    k = np.arange(1, 6)
    return ((a / (np.pi * k))[:, None, :] * (1 - np.cos(np.pi * k * Y[..., None]))).sum(-1) + \
        ((b / (np.pi * k))[:, None, :] * np.sin(np.pi * k * Y[..., None])).sum(-1)


class DeepONet(Module):
    def __init__(self, width=40, p=40):
        self.branch = Sequential(Linear(M, width), Tanh(), Linear(width, width), Tanh(), Linear(width, p))
        self.trunk = Sequential(Linear(1, width), Tanh(), Linear(width, width), Tanh(), Linear(width, p))
        self.b0 = Parameter(np.zeros(1))

    def forward(self, u, y):
        B, P = y.shape
        bu = self.branch(u)                                    # (B, p)
        ty = self.trunk(sm.reshape(y, (B * P, 1)))             # (B P, p)
        ty = sm.reshape(ty, (B, P, ty.shape[1]))
        return (ty * sm.reshape(bu, (B, 1, bu.shape[1]))).sum(2) + self.b0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", metavar="PATH", default=None,
                    help="write a figure: three test functions u, G(u) exact and predicted, and the loss "
                         "(.png, .pdf or .svg)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    args.plot = check_plot_arg(ap, args.plot)  # a bad path fails now, not after training
    sm.init(seed=args.seed)  # seeds the initial weights
    U, Y, G = make_data(200 if args.quick else 1000, 20, args.seed)
    Ut, Yt, Gt, at, bt = make_data(100, 50, args.seed + 1, coefficients=True)
    net = DeepONet(16 if args.quick else 40, 16 if args.quick else 40)
    opt = Adam(net.parameters(), lr=1e-3)
    vg = sm.value_and_grad(lambda p, u, y, g: ((net.apply(p, u, y) - g) ** 2).mean())
    rng = np.random.default_rng(args.seed)
    steps = 20 if args.quick else args.steps
    losses = []
    for step in range(steps):
        i = rng.integers(0, len(U), 100)
        loss, grads = vg(net.params(), sm.tensor(U[i]), sm.tensor(Y[i]), sm.tensor(G[i]))
        opt.step(grads)
        losses.append(float(loss))
        if not args.quick and step % 500 == 0:
            print(f"step {step:5d}  loss {float(loss):.3e}")
    with sm.no_grad():
        pred = net(sm.tensor(Ut), sm.tensor(Yt)).numpy()
    err = float(np.linalg.norm(pred - Gt) / np.linalg.norm(Gt))
    print(f"DeepONet relative L2 test error {err:.4f}")
    if args.plot is not None:
        plot(net, Ut, at, bt, losses, err, args.plot)
    return err


def plot(net, Ut, at, bt, losses, err, path):
    """Three test functions u (left), their antiderivatives exact and predicted (middle), the loss (right)."""
    from matplotlib.figure import Figure
    y = np.linspace(0, 1, 101)
    show = [0, 1, 2]
    with sm.no_grad():
        pred = net(sm.tensor(Ut[show]), sm.tensor(np.tile(y, (len(show), 1)))).numpy()
    exact = antiderivative(at[show], bt[show], np.tile(y, (len(show), 1)))
    fig = Figure(figsize=(12, 4.0))
    ax = fig.subplots(1, 3)
    xs = np.linspace(0, 1, M)
    for j, i in enumerate(show):
        c = f"C{j}"
        ax[0].plot(xs, Ut[i], ".-", color=c, ms=3, lw=0.8, label=f"u{j + 1}")
        ax[1].plot(y, exact[j], "-", color=c, lw=1.5, label=f"G(u{j + 1}) exact")
        ax[1].plot(y, pred[j], "o", color=c, ms=3, markevery=5, label=f"G(u{j + 1}) DeepONet")
    ax[0].set_title(f"input functions (values at the {M} sensors)", fontsize=10)
    ax[0].set_xlabel("x")
    ax[0].set_ylabel("u(x)")
    ax[0].legend(fontsize=8)
    ax[1].set_title("output: G(u)(y) = integral of u from 0 to y", fontsize=10)
    ax[1].set_xlabel("y")
    ax[1].set_ylabel("G(u)(y)")
    ax[1].legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2), columnspacing=1.0)
    ax[2].semilogy(np.arange(1, len(losses) + 1), losses, lw=0.6)
    ax[2].set_title("training", fontsize=10)
    ax[2].set_xlabel("Adam step (100 functions x 20 points)")
    ax[2].set_ylabel("mean squared error of G(u)(y)")
    ax[2].grid(True, which="both", alpha=0.3)
    for a in ax[:2]:
        a.grid(True, alpha=0.3)
    fig.suptitle(f"DeepONet learning the antiderivative operator: three unseen test functions "
                 f"(relative L2 test error {err:.4f} over 100)", fontsize=11)
    fig.tight_layout()
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=100)
    print(f"wrote {path}")
    return fig


if __name__ == "__main__":
    main()
