"""Time-series forecasting with an LSTM: predict the next value of a noisy two-tone signal from the last 32.

    python examples/lstm_forecast.py                # test RMSE vs the last-value baseline
    python examples/lstm_forecast.py --plot f.png   # and a figure (.png, .pdf or .svg): forecasts, loss
    python examples/lstm_forecast.py --quick        # smoke test

PyTorch habits that work as is: LSTM(batch_first=True), default initialisation, Adam, ReduceLROnPlateau and
early stopping as Trainer callbacks, sm.save of the best model.
"""
import argparse
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

try:
    import sciml as sm
except ImportError:  # a source checkout without `pip install -e .`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import sciml as sm
from sciml._io import atomic_write, check_plot_arg  # noqa: E402
from sciml.data import DataLoader  # noqa: E402
from sciml.models import LSTM, Linear, Module, mse  # noqa: E402
from sciml.optim import Adam  # noqa: E402
from sciml.train import EarlyStopping, LROnPlateau, Trainer  # noqa: E402


def make_data(n=3000, window=32, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n + window + 1)
    s = np.sin(2 * np.pi * t / 50) + 0.5 * np.sin(2 * np.pi * t / 13) + 0.1 * rng.standard_normal(t.size)
    X = np.stack([s[i:i + window] for i in range(n)])[:, :, None]
    y = s[window:window + n, None]
    cut = int(0.8 * n)
    return X[:cut], y[:cut], X[cut:], y[cut:]


class Forecaster(Module):
    def __init__(self, hidden=32):
        self.lstm = LSTM(1, hidden, batch_first=True)
        self.head = Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", metavar="PATH", default=None,
                    help="write a figure: test forecasts against the signal, and the loss per epoch "
                         "(.png, .pdf or .svg)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    args.plot = check_plot_arg(ap, args.plot)  # a bad path fails now, not after training
    sm.init(seed=args.seed)  # seeds the initial weights
    Xtr, ytr, Xte, yte = make_data(400 if args.quick else 3000, 12 if args.quick else 32, args.seed)
    net = Forecaster(8 if args.quick else 32)
    trainer = Trainer(net, mse, Adam(net.parameters(), lr=1e-2), progress=not args.quick,
                      callbacks=[EarlyStopping(patience=4, restore_best=True), LROnPlateau(factor=0.5, patience=1)])
    history = trainer.fit(DataLoader(Xtr, ytr, batch_size=64, shuffle=True, seed=args.seed),
                epochs=1 if args.quick else args.epochs, val=(Xte, yte))
    pred = trainer.predict(Xte)
    rmse = float(np.sqrt(np.mean((pred - yte) ** 2)))
    naive = float(np.sqrt(np.mean((Xte[:, -1] - yte) ** 2)))
    print(f"LSTM test RMSE {rmse:.4f}   last-value baseline {naive:.4f}   (noise std 0.1)")
    if args.plot is not None:
        plot(Xte, yte, pred, history, rmse, naive, args.plot)
    return rmse


def plot(Xte, yte, pred, history, rmse, naive, path):
    """The first 150 test steps: signal, LSTM one-step forecast, last-value baseline (left); loss per epoch."""
    from matplotlib.figure import Figure
    n = min(150, len(yte))
    t = np.arange(n)
    fig = Figure(figsize=(11, 4.0))
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
    ax.plot(t, yte[:n, 0], "k.", ms=3, label="signal (noisy)")
    ax.plot(t, pred[:n, 0], "-", color="tab:red", lw=1.2, label=f"LSTM forecast (RMSE {rmse:.3f})")
    ax.plot(t, Xte[:n, -1, 0], "-", color="tab:blue", lw=0.8, alpha=0.6,
            label=f"last-value baseline (RMSE {naive:.3f})")
    ax.set_xlabel("test time step")
    ax.set_ylabel("signal value")
    ax.set_title(f"one-step-ahead forecasts on the first {n} test steps", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    ax.grid(True, alpha=0.3)
    epochs = np.arange(1, len(history["epochs"]) + 1)
    ax2.semilogy(epochs, [e["loss"] for e in history["epochs"]], "o-", ms=3, label="training (mean per epoch)")
    ax2.semilogy(epochs, [v["loss"] for v in history["val"]], "s-", ms=3, label="test")
    ax2.axhline(0.01, color="0.5", ls=":", lw=1, label="noise variance 0.01")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("mean squared error")
    ax2.set_title("loss", fontsize=10)
    ax2.xaxis.get_major_locator().set_params(integer=True)
    ax2.legend(fontsize=8)
    ax2.grid(True, which="both", alpha=0.3)
    fig.suptitle("LSTM forecasting a noisy two-tone signal from its last values", fontsize=11)
    fig.tight_layout()
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=100)
    print(f"wrote {path}")
    return fig


if __name__ == "__main__":
    main()
