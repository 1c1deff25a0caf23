"""A small Transformer encoder on a synthetic task: read a sequence of 12 tokens (vocabulary 16) and name the
largest token. Embedding + learned positions + 2 TransformerEncoderLayers + mean pooling + a linear head.

    python examples/transformer_toy.py               # test accuracy (chance 1/16)
    python examples/transformer_toy.py --plot t.png  # and a figure (.png, .pdf or .svg): loss, accuracy by label
    python examples/transformer_toy.py --quick       # smoke test
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
from sciml.data import DataLoader  # noqa: E402
from sciml.models import (Embedding, Linear, Module, Parameter, TransformerEncoderLayer, accuracy,  # noqa: E402
                          cross_entropy)
from sciml.optim import AdamW, schedules  # noqa: E402
from sciml.train import Trainer  # noqa: E402

VOCAB, SEQ = 16, 12


def make_data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, VOCAB, size=(n, SEQ))
    return X.astype(np.int64), X.max(1).astype(np.int64)


class Classifier(Module):
    def __init__(self, d=32, heads=4, layers=2):
        self.tok = Embedding(VOCAB, d)
        self.pos = Parameter(0.02 * np.random.default_rng(1).standard_normal((SEQ, d)))
        self.blocks = [TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.0, batch_first=True)
                       for _ in range(layers)]
        self.head = Linear(d, VOCAB)

    def forward(self, idx):
        h = self.tok(np.asarray(idx.numpy() if hasattr(idx, "numpy") else idx).astype(np.int64)) + self.pos
        for b in self.blocks:
            h = b(h)
        return self.head(h.mean(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", metavar="PATH", default=None,
                    help="write a figure: training loss, test accuracy by label (.png, .pdf or .svg)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    args.plot = check_plot_arg(ap, args.plot)  # a bad path fails now, not after training
    sm.init(seed=args.seed)  # seeds the initial weights
    n = 256 if args.quick else 4000
    Xtr, ytr = make_data(n, args.seed)
    Xte, yte = make_data(n // 4, args.seed + 1)
    net = Classifier(16 if args.quick else 32, 2 if args.quick else 4, 1 if args.quick else 2)
    epochs = 1 if args.quick else args.epochs
    loader = DataLoader(Xtr, ytr, batch_size=64, shuffle=True, seed=args.seed)
    opt = AdamW(net.parameters(), lr=schedules.warmup_cosine(3e-3, 50, epochs * len(loader)), weight_decay=1e-2)
    trainer = Trainer(net, cross_entropy, opt, metrics={"accuracy": accuracy}, progress=not args.quick)
    history = trainer.fit(loader, epochs=epochs)
    acc = trainer.evaluate((Xte, yte))["accuracy"]
    print(f"Transformer test accuracy {acc:.3f}  (chance {1 / VOCAB:.3f})")
    if args.plot is not None:
        pred = trainer.predict(Xte).argmax(1)
        plot(history, len(loader), yte, pred, acc, args.plot)
    return acc


def plot(history, steps_per_epoch, yte, pred, acc, path):
    """Training loss per step and per epoch (left); test accuracy for each true label (right)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(10, 3.6))
    ax, ax2 = fig.subplots(1, 2)
    loss = np.asarray(history["loss"])
    ax.plot(np.arange(1, len(loss) + 1), loss, lw=0.6, alpha=0.7, label="per step (minibatch of 64)")
    ep = [e["loss"] for e in history["epochs"]]
    ax.plot(steps_per_epoch * np.arange(1, len(ep) + 1), ep, "o-", ms=3, label="mean over each epoch")
    ax.axhline(np.log(VOCAB), color="0.5", ls=":", lw=1, label=f"guessing (log {VOCAB})")
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title("training loss", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    labels = np.arange(VOCAB)
    count = np.array([(yte == k).sum() for k in labels])
    seen = count > 0
    per = np.array([(pred[yte == k] == k).mean() if c else np.nan for k, c in zip(labels, count)])
    ax2.bar(labels[seen], 100 * per[seen], color="tab:green", label="test accuracy for this label")
    for k in labels[seen]:
        ax2.annotate(f"n={count[k]}", (k, 100 * per[k]), xytext=(0, 2), textcoords="offset points",
                     ha="center", fontsize=6)
    ax2.axhline(100 / VOCAB, color="0.5", ls=":", lw=1, label=f"chance (1/{VOCAB})")
    ax2.set_xlabel("true label: the largest token in the sequence")
    ax2.set_ylabel("test accuracy (%)")
    ax2.set_ylim(0, 135)
    ax2.set_yticks(np.arange(0, 101, 20))
    ax2.set_xticks(labels[seen])
    ax2.set_title("test accuracy by label (n = number of test sequences)", fontsize=10)
    ax2.legend(fontsize=8, loc="upper center", ncol=2)
    fig.suptitle(f"Transformer encoder naming the largest of {SEQ} tokens (vocabulary {VOCAB}): "
                 f"test accuracy {100 * acc:.1f}%", fontsize=11)
    fig.tight_layout()
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=100)
    print(f"wrote {path}")
    return fig


if __name__ == "__main__":
    main()
