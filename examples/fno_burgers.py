"""A 1-D Fourier neural operator (Li et al. 2021) learning the Burgers solution operator u(., 0) -> u(., T).

Data: u_t + u u_x = nu u_xx on the periodic interval [0, 1), initial conditions drawn from a Gaussian
random field, solved to T = 1 by a pseudo-spectral method (RK4, 2/3 dealiasing) in the example itself.
Model: lift (u0, x) to `width` channels, `layers` Fourier layers v <- gelu(K v + W v) where K keeps the
`modes` lowest frequencies and multiplies them by learned complex matrices (sm.fft.rfft(modes=), fft.einsum,
irfft; complex values as sm.fft.Complex), then project to one channel. Trained with Adam on the relative L2 error.

With PyTorch installed (`--torch`), the same architecture, initial weights, data and batches are trained
in PyTorch too, one epoch of each in turn (so both see the same machine load), and both report the median
time per epoch and the test error. `--threads N` gives both frameworks N CPU threads.

    python examples/fno_burgers.py              # 256 train / 64 test samples on a 128-point grid
    python examples/fno_burgers.py --quick      # smoke test
    python examples/fno_burgers.py --plot fno.png   # also draws test predictions and the training loss
"""
import argparse
import os
import time

import numpy as np

try:
    import sciml as sm
except ImportError:  # running from a source checkout without `pip install -e .`
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import sciml as sm
gelu = sm.gelu  # exact GELU: one kernel forward and one backward
from sciml.models import Linear, Module, Parameter
from sciml.optim import Adam
from sciml._io import check_plot_arg

F = sm.fft


def burgers_data(n_samples, grid, nu=0.01, T=1.0, seed=0):
    """(u0, uT), each (n_samples, grid), by a pseudo-spectral RK4 solver."""
    rng = np.random.default_rng(seed)
    k = np.fft.rfftfreq(grid, 1.0 / grid) * 2 * np.pi
    m = np.arange(k.size)
    spec = (rng.standard_normal((n_samples, k.size)) + 1j * rng.standard_normal((n_samples, k.size)))
    spec *= 25.0 * (m ** 2 + 25.0) ** -1.25 * grid  # smooth random field
    spec[:, 0] = 0.0
    u0 = np.fft.irfft(spec, grid)
    keep = m < grid // 3  # 2/3 dealiasing

    def rhs(uh):
        u = np.fft.irfft(uh, grid)
        return -0.5j * k * np.fft.rfft(u * u) * keep - nu * k ** 2 * uh
    uh = np.fft.rfft(u0)
    dt = 0.2 / (grid * max(1.0, np.abs(u0).max()))
    steps = int(np.ceil(T / dt))
    dt = T / steps
    for _ in range(steps):
        k1 = rhs(uh)
        k2 = rhs(uh + 0.5 * dt * k1)
        k3 = rhs(uh + 0.5 * dt * k2)
        k4 = rhs(uh + dt * k3)
        uh = uh + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return u0, np.fft.irfft(uh, grid)


class SpectralConv1d(Module):
    """v (b, n, c) -> irfft(R_k rfft(v)_k for the `modes` lowest k) with complex weights R (modes, c, c), stored
    interleaved as one real parameter ``w`` of shape (modes, c, c, 2) (real, imaginary: numpy's complex layout)."""

    def __init__(self, width, modes, rng):
        scale = 1.0 / (width * width)
        wr = scale * rng.uniform(size=(modes, width, width))
        wi = scale * rng.uniform(size=(modes, width, width))
        self.w = Parameter(np.stack([wr, wi], -1))
        self.modes = modes

    def forward(self, v):
        vh = F.rfft(v, axis=1, modes=self.modes)                  # Complex (b, modes, c), the lowest modes only
        out = F.einsum("bki,kio->bko", vh, F.Complex.from_packed(self.w))  # one complex GEMM
        return F.irfft(out, v.shape[1], axis=1)                   # missing frequencies count as zero


class FNO1d(Module):
    def __init__(self, modes=16, width=32, layers=4, seed=0):
        rng = np.random.default_rng(seed)
        self.lift = Linear(2, width, seed=seed)
        self.spectral = [SpectralConv1d(width, modes, rng) for _ in range(layers)]
        self.pointwise = [Linear(width, width, seed=seed + 1 + i) for i in range(layers)]
        self.proj1 = Linear(width, 128, seed=seed + 100)
        self.proj2 = Linear(128, 1, seed=seed + 101)

    def forward(self, u0):
        b, n = u0.shape
        x = sm.broadcast_to(sm.reshape(sm.linspace(0.0, 1.0 - 1.0 / n, n, dtype=u0.dtype), (1, n, 1)), (b, n, 1))
        v = self.lift(sm.concat([sm.reshape(u0, (b, n, 1)), x], -1))
        for i, (k, w) in enumerate(zip(self.spectral, self.pointwise)):
            v = k(v) + w(v)
            if i < len(self.spectral) - 1:
                v = gelu(v)
        return sm.reshape(self.proj2(gelu(self.proj1(v))), (b, n))


def rel_l2(pred, y):
    d = ((pred - y) ** 2).sum(1)
    return (sm.sqrt(d / (y * y).sum(1))).mean()


def train_sciml(net, data, epochs, batch, lr, jit=True, losses=None):
    """Train ``net``; a generator yielding each epoch's seconds, then (as its return value) the test error.
    ``losses``: a list that receives each epoch's mean training loss."""
    (xtr, ytr), (xte, yte) = data
    opt = Adam(net.parameters(), lr=lr)
    step = sm.value_and_grad(lambda p, x, y: rel_l2(net.apply(p, x), y))
    if jit:  # trace once per batch shape, then replay the kernels (and the BLAS / FFT host calls)
        step = sm.jit(step)
    rng = np.random.default_rng(1)
    for ep in range(epochs):
        t0 = time.perf_counter()
        order = rng.permutation(len(xtr))
        total = []
        for i in range(0, len(xtr), batch):
            idx = order[i:i + batch]
            loss, g = step(net.params(), sm.tensor(xtr[idx]), sm.tensor(ytr[idx]))
            opt.step(g)
            total.append(loss)
        dt = time.perf_counter() - t0
        if losses is not None:
            losses.append(float(np.mean([float(v) for v in total])))
        yield dt
    return float(rel_l2(net(sm.tensor(xte)), sm.tensor(yte)))


def train_torch(net, data, epochs, batch, lr):  # pragma: no cover - needs torch
    """The same model, data, batches and initial weights in PyTorch; a generator like train_sciml."""
    import torch
    torch.set_default_dtype(torch.float64 if sm.default_dtype() == "float64" else torch.float32)
    dt = torch.get_default_dtype()
    named = dict(net.named_parameters())

    class TorchFNO(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(torch.tensor(v.numpy()))
                                             for k, v in named.items()})
            self.layers = len(net.spectral)
            self.modes = net.spectral[0].modes

        def lin(self, name, v):
            return v @ self.p[name + "_weight"] + self.p[name + "_bias"]

        def forward(self, u0):
            b, n = u0.shape
            x = torch.linspace(0, 1 - 1 / n, n, dtype=dt).reshape(1, n, 1).expand(b, n, 1)
            v = self.lin("lift", torch.cat([u0.reshape(b, n, 1), x], -1))
            for i in range(self.layers):
                w = torch.view_as_complex(self.p[f"spectral_{i}_w"])
                vh = torch.fft.rfft(v, dim=1)[:, :self.modes]
                out = torch.zeros(b, n // 2 + 1, v.shape[2], dtype=vh.dtype)
                out[:, :self.modes] = torch.einsum("bki,kio->bko", vh, w)
                v = torch.fft.irfft(out, n, dim=1) + self.lin(f"pointwise_{i}", v)
                if i < self.layers - 1:
                    v = torch.nn.functional.gelu(v)
            return self.lin("proj2", torch.nn.functional.gelu(self.lin("proj1", v))).reshape(b, n)

    model = TorchFNO()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    (xtr, ytr), (xte, yte) = data
    rel = lambda p, y: (((p - y) ** 2).sum(1) / (y * y).sum(1)).sqrt().mean()
    rng = np.random.default_rng(1)
    for ep in range(epochs):
        t0 = time.perf_counter()
        order = rng.permutation(len(xtr))
        for i in range(0, len(xtr), batch):
            idx = order[i:i + batch]
            opt.zero_grad()
            loss = rel(model(torch.tensor(xtr[idx], dtype=dt)), torch.tensor(ytr[idx], dtype=dt))
            loss.backward()
            opt.step()
        yield time.perf_counter() - t0
    with torch.no_grad():
        return float(rel(model(torch.tensor(xte, dtype=dt)), torch.tensor(yte, dtype=dt)))


def run_interleaved(trainers):
    """Run the training generators one epoch each in turn (both see the same machine load); returns
    {name: (test error, [seconds per epoch])}."""
    times = {k: [] for k in trainers}
    res, live = {}, dict(trainers)
    while live:
        for k, gen in list(live.items()):
            try:
                times[k].append(next(gen))
            except StopIteration as stop:
                res[k] = (stop.value, times[k])
                del live[k]
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--grid", type=int, default=128)
    ap.add_argument("--train", type=int, default=256)
    ap.add_argument("--test", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--modes", type=int, default=16)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--torch", action="store_true", help="also train the PyTorch twin (needs torch)")
    ap.add_argument("--no-jit", action="store_true", help="run the training step eagerly")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads for both frameworks (Taichi, the BLAS, PyTorch); default: each library's own")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plot", metavar="PATH", default=None,
                    help="save a figure: test predictions against the spectral solution, and the training loss "
                         "(.png, .pdf or .svg)")
    args = ap.parse_args(argv)
    args.plot = check_plot_arg(ap, args.plot)  # a bad path fails now, not after training
    if args.quick:
        args.grid, args.train, args.test, args.epochs, args.modes, args.width = 32, 16, 8, 1, 6, 8
    if args.threads is not None:
        from sciml.kernels import blas
        sm.init(dtype=args.dtype, seed=0, cpu_max_num_threads=args.threads)
        blas.set_threads(args.threads)
    else:
        sm.init(dtype=args.dtype, seed=0)
    u0, uT = burgers_data(args.train + args.test, args.grid)
    data = ((u0[:args.train], uT[:args.train]), (u0[args.train:], uT[args.train:]))
    net = FNO1d(args.modes, args.width, seed=0)
    trainers = {}
    if args.torch:  # first in each round: its first epoch copies the initial weights before sciml updates them
        import torch
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        trainers["torch"] = train_torch(net, data, args.epochs, args.batch, args.lr)
    losses = []
    trainers["sciml"] = train_sciml(net, data, args.epochs, args.batch, args.lr, jit=not args.no_jit, losses=losses)
    res = {k: (err, float(np.median(t))) for k, (err, t) in run_interleaved(trainers).items()}
    if "torch" in res:
        print(f"PyTorch: test rel. L2 {res['torch'][0]:.4f}, {res['torch'][1]:.3f} s/epoch (median of {args.epochs})")
    print(f"sciml:   test rel. L2 {res['sciml'][0]:.4f}, {res['sciml'][1]:.3f} s/epoch (median of {args.epochs}"
          + (", epochs interleaved with PyTorch's)" if "torch" in res else ")"))
    if args.plot is not None:
        plot(net, data, losses, res["sciml"][0], args.plot)
        print(f"plot written to {args.plot}")
    return res


def plot(net, data, losses, err, path):
    """Three test cases (initial state, spectral solution at T, the FNO's prediction) and the training loss."""
    from matplotlib.figure import Figure
    from sciml._io import atomic_write
    (_, _), (xte, yte) = data
    pred = net(sm.tensor(xte[:3])).numpy()
    x = np.linspace(0, 1, xte.shape[1], endpoint=False)
    fig = Figure(figsize=(11, 3.6), layout="constrained")
    axs = fig.subplots(1, 4)
    for j in range(3):
        ax = axs[j]
        ax.plot(x, xte[j], color="0.6", lw=1, label="u(x, 0), the input")
        ax.plot(x, yte[j], color="k", lw=1.5, label="u(x, 1), spectral solver")
        ax.plot(x, pred[j], "--", color="tab:red", lw=1.5, label="u(x, 1), FNO")
        ax.set_title(f"test case {j + 1}")
        ax.set_xlabel("x")
        ax.set_ylabel("u")
    h, lab = axs[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="outside lower center", ncol=3, fontsize=8)
    ax = axs[3]
    ax.semilogy(np.arange(1, len(losses) + 1), losses, "o-", ms=3)
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean training rel. L2")
    ax.set_title("training")
    fig.suptitle(f"Fourier neural operator, 1-D Burgers (nu = 0.01): test rel. L2 error {err:.3f}")
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=100, format=os.path.splitext(path)[1][1:])


if __name__ == "__main__":
    main()
