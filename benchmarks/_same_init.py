"""``bench_deepxde --same-init``: run a DeepXDE twin and record its network's initial weights,
then run the sciml port starting from exactly those weights, so that a row's two columns differ
by the library alone and not by the random draw of the initial weights.

    python -m benchmarks._same_init dump WEIGHTS.npz examples/deepxde/dde/NAME.py   # DeepXDE
    python -m benchmarks._same_init load WEIGHTS.npz examples/deepxde/NAME.py       # sciml

``dump`` wraps ``dde.Model.__init__`` (the twin's network exists by then, untrained) and saves
every ``torch.nn.Linear`` of the network in order; ``load`` wraps ``sciml.models.MLP.__init__``
and overwrites the freshly drawn weights and biases of each MLP the port builds, in order, with
the dumped ones (layer shapes checked). The scripts themselves are run unchanged (``runpy``).
"""
import os
import runpy
import sys

import numpy as np


def dump(path, script):
    import deepxde as dde
    import torch

    init = dde.Model.__init__

    def wrapped(self, data, net, *a, **k):
        mats = {}
        for i, m in enumerate(x for x in net.modules() if isinstance(x, torch.nn.Linear)):
            mats[f"w{i}"] = m.weight.detach().cpu().numpy().T.astype(np.float64)   # (in, out)
            mats[f"b{i}"] = (m.bias.detach().cpu().numpy().astype(np.float64) if m.bias is not None
                             else np.zeros(m.weight.shape[0]))
        np.savez(path, **mats)
        init(self, data, net, *a, **k)

    dde.Model.__init__ = wrapped
    _run(script)


def load(path, script):
    from sciml.models import layers

    saved = np.load(path)
    n = sum(1 for k in saved.files if k.startswith("w"))
    queue = [(saved[f"w{i}"], saved[f"b{i}"]) for i in range(n)]
    init = layers.MLP.__init__

    def wrapped(self, *a, **k):
        init(self, *a, **k)
        for layer in self.layers:
            if not queue:
                raise RuntimeError(f"--same-init: the port builds more layers than {path} holds ({n})")
            w, b = queue.pop(0)
            if tuple(w.shape) != tuple(layer.weight.shape):
                raise RuntimeError(f"--same-init: layer shapes differ: DeepXDE {w.shape}, sciml "
                                   f"{tuple(layer.weight.shape)}")
            dt = layer.weight.numpy().dtype
            layer.weight._assign(w.astype(dt))
            layer.bias._assign(b.astype(dt))

    layers.MLP.__init__ = wrapped
    _run(script)
    if queue:
        raise RuntimeError(f"--same-init: the port used {n - len(queue)} of the {n} layers in {path}")


def _run(script):
    sys.argv = [script]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    mode, path, script = sys.argv[1:4]
    {"dump": dump, "load": load}[mode](path, script)
