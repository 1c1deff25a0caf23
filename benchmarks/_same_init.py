"""``bench_deepxde --same-init``: run a DeepXDE twin and record its network's initial weights,
then run the sciml port starting from exactly those weights, so that a row's two columns differ
by the library alone and not by the random draw of the initial weights.

    python -m benchmarks._same_init dump WEIGHTS.npz examples/deepxde/dde/NAME.py   # DeepXDE
    python -m benchmarks._same_init load WEIGHTS.npz examples/deepxde/NAME.py       # sciml

``dump`` wraps ``dde.Model.__init__`` (the twin's network exists by then, untrained) and saves
every ``torch.nn.Linear`` of the network in order (a PFNN's one sub-network after the other); ``load`` wraps ``sciml.models.MLP.__init__``
and overwrites the freshly drawn weights and biases of each MLP the port builds, in order, with
the dumped ones (layer shapes checked). The scripts themselves are run unchanged (``runpy``).

``bench_deepxde --readout best`` (``SCIML_READOUT=best``) reads both libraries at their best model, as
DeepXDE reports it ("Best model at step N"): the logged step with the lowest training loss, logged every
tenth of the first stage's iterations in both (the twins' ``display_every``). DeepXDE's side snapshots the
network (and external trainable variables) whenever ``train_state.update_best`` takes a new best and puts
the snapshot back before the script's first ``predict``; sciml's side runs ``solve(restore_best=True)``
with ``log_every`` a tenth of the first stage. ``path`` ``-`` means no weights (the readout alone).
"""
import os
import runpy
import sys

import numpy as np


READOUT = os.environ.get("SCIML_READOUT", "last")


def _best_deepxde(dde):
    """DeepXDE at its best model: snapshot at each new ``best_step``, restore before ``predict``."""
    test, predict = dde.Model._test, dde.Model.predict

    def _test(self, *a, **k):
        before = self.train_state.best_loss_train
        test(self, *a, **k)
        if self.train_state.best_loss_train < before:
            self._sciml_best = ({n: v.detach().clone() for n, v in self.net.state_dict().items()},
                                [v.detach().clone() for v in (self.external_trainable_variables or [])])

    def _predict(self, *a, **k):
        best = self.__dict__.pop("_sciml_best", None)
        if best is not None:
            self.net.load_state_dict(best[0])
            for v, b in zip(self.external_trainable_variables or [], best[1]):
                v.data.copy_(b)
            print(f"READOUT best model at step {self.train_state.best_step}, "
                  f"loss {self.train_state.best_loss_train:.3e}")
        return predict(self, *a, **k)

    dde.Model._test, dde.Model.predict = _test, _predict


def _best_sciml():
    """sciml at its best model: ``solve(restore_best=True)``, logging every tenth of the first stage."""
    import sciml.pinn as P

    solve = P.solve

    def wrapped(problem, net, *a, **k):
        stages = k.get("stages", a[1] if len(a) > 1 else None)
        if stages and k.get("log_every") is None:
            k["log_every"] = max(1, int(stages[0][1]) // 10)
        res = solve(problem, net, *a, restore_best=True, **k)
        print(f"READOUT best model at step {res.best_step}, loss {res.best_loss:.3e}")
        return res

    P.solve = wrapped


def dump(path, script):
    import deepxde as dde
    import torch

    if READOUT == "best":
        _best_deepxde(dde)
    if path == "-":
        return _run(script)

    init = dde.Model.__init__

    def wrapped(self, data, net, *a, **k):
        mats = {}
        for i, m in enumerate(_linears(net, torch)):
            mats[f"w{i}"] = m.weight.detach().cpu().numpy().T.astype(np.float64)   # (in, out)
            mats[f"b{i}"] = (m.bias.detach().cpu().numpy().astype(np.float64) if m.bias is not None
                             else np.zeros(m.weight.shape[0]))
        np.savez(path, **mats)
        init(self, data, net, *a, **k)

    dde.Model.__init__ = wrapped
    _run(script)


def _linears(net, torch):
    """The network's Linear layers in the order a sciml port builds them: module order, except that a
    PFNN (one sub-network per output, each layer a ModuleList over the sub-networks) is taken one
    sub-network at a time, as the port's ``Fields(MLP(...), MLP(...))`` builds its MLPs."""
    layers = getattr(net, "layers", None)
    if type(net).__name__ == "PFNN" and layers is not None and all(
            isinstance(l, torch.nn.ModuleList) and len(l) == len(layers[0]) for l in layers):
        return [layer[j] for j in range(len(layers[0])) for layer in layers]
    return [x for x in net.modules() if isinstance(x, torch.nn.Linear)]


def load(path, script):
    from sciml.models import layers

    if READOUT == "best":
        _best_sciml()
    if path == "-":
        return _run(script)

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
