"""A small Transformer encoder on a synthetic task: read a sequence of 12 tokens (vocabulary 16) and name the
largest token. Embedding + learned positions + 2 TransformerEncoderLayers + mean pooling + a linear head.

    python examples/transformer_toy.py          # test accuracy (chance 1/16)
    python examples/transformer_toy.py --quick  # smoke test
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
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    sm.manual_seed(args.seed)
    n = 256 if args.quick else 4000
    Xtr, ytr = make_data(n, args.seed)
    Xte, yte = make_data(n // 4, args.seed + 1)
    net = Classifier(16 if args.quick else 32, 2 if args.quick else 4, 1 if args.quick else 2)
    epochs = 1 if args.quick else args.epochs
    loader = DataLoader(Xtr, ytr, batch_size=64, shuffle=True, seed=args.seed)
    opt = AdamW(net.parameters(), lr=schedules.warmup_cosine(3e-3, 50, epochs * len(loader)), weight_decay=1e-2)
    trainer = Trainer(net, cross_entropy, opt, metrics={"accuracy": accuracy}, progress=not args.quick)
    trainer.fit(loader, epochs=epochs)
    acc = trainer.evaluate((Xte, yte))["accuracy"]
    print(f"Transformer test accuracy {acc:.3f}  (chance {1 / VOCAB:.3f})")
    return acc


if __name__ == "__main__":
    main()
