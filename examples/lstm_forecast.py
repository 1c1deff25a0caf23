"""Time-series forecasting with an LSTM: predict the next value of a noisy two-tone signal from the last 32.

    python examples/lstm_forecast.py            # test RMSE vs the last-value baseline
    python examples/lstm_forecast.py --quick    # smoke test

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
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    sm.manual_seed(args.seed)
    Xtr, ytr, Xte, yte = make_data(400 if args.quick else 3000, 12 if args.quick else 32, args.seed)
    net = Forecaster(8 if args.quick else 32)
    trainer = Trainer(net, mse, Adam(net.parameters(), lr=1e-2), progress=not args.quick,
                      callbacks=[EarlyStopping(patience=4, restore_best=True), LROnPlateau(factor=0.5, patience=1)])
    trainer.fit(DataLoader(Xtr, ytr, batch_size=64, shuffle=True, seed=args.seed),
                epochs=1 if args.quick else args.epochs, val=(Xte, yte))
    pred = trainer.predict(Xte)
    rmse = float(np.sqrt(np.mean((pred - yte) ** 2)))
    naive = float(np.sqrt(np.mean((Xte[:, -1] - yte) ** 2)))
    print(f"LSTM test RMSE {rmse:.4f}   last-value baseline {naive:.4f}   (noise std 0.1)")
    return rmse


if __name__ == "__main__":
    main()
