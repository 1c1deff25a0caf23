"""DeepONet (Lu et al. 2021) for the antiderivative operator G(u)(y) = int_0^y u(s) ds, u a random smooth
function sampled at 50 sensors: branch net on u, trunk net on y, output their dot product plus a bias.

    python examples/deeponet.py          # relative L2 test error
    python examples/deeponet.py --quick  # smoke test

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
from sciml.models import Linear, Module, Parameter, Sequential, Tanh  # noqa: E402
from sciml.optim import Adam  # noqa: E402

M = 50  # sensors


def make_data(n_funcs, n_points, seed):
    """u(x) = sum_k a_k sin(k pi x) + b_k cos(k pi x) on [0, 1]; G(u)(y) exactly."""
    rng = np.random.default_rng(seed)
    xs = np.linspace(0, 1, M)
    k = np.arange(1, 6)
    a, b = rng.standard_normal((n_funcs, 5)) / k, rng.standard_normal((n_funcs, 5)) / k
    U = a @ np.sin(np.pi * k[:, None] * xs) + b @ np.cos(np.pi * k[:, None] * xs)
    Y = rng.uniform(0, 1, size=(n_funcs, n_points))
    G = ((a / (np.pi * k))[:, None, :] * (1 - np.cos(np.pi * k * Y[..., None]))).sum(-1) + \
        ((b / (np.pi * k))[:, None, :] * np.sin(np.pi * k * Y[..., None])).sum(-1)
    return U, Y, G


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
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    sm.manual_seed(args.seed)
    U, Y, G = make_data(200 if args.quick else 1000, 20, args.seed)
    Ut, Yt, Gt = make_data(100, 50, args.seed + 1)
    net = DeepONet(16 if args.quick else 40, 16 if args.quick else 40)
    opt = Adam(net.parameters(), lr=1e-3)
    vg = sm.value_and_grad(lambda p, u, y, g: ((net.apply(p, u, y) - g) ** 2).mean())
    rng = np.random.default_rng(args.seed)
    steps = 20 if args.quick else args.steps
    for step in range(steps):
        i = rng.integers(0, len(U), 100)
        loss, grads = vg(net.params(), sm.tensor(U[i]), sm.tensor(Y[i]), sm.tensor(G[i]))
        opt.step(grads)
        if not args.quick and step % 500 == 0:
            print(f"step {step:5d}  loss {float(loss):.3e}")
    with sm.no_grad():
        pred = net(sm.tensor(Ut), sm.tensor(Yt)).numpy()
    err = float(np.linalg.norm(pred - Gt) / np.linalg.norm(Gt))
    print(f"DeepONet relative L2 test error {err:.4f}")
    return err


if __name__ == "__main__":
    main()
