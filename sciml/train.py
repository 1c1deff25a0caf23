"""A short fit-style training loop tying a network, a loss and an optimizer together.

    >>> trainer = Trainer(net, sm.models.cross_entropy, sm.optim.Adam(net.parameters(), lr=1e-3),
    ...                   metrics={"accuracy": sm.models.accuracy})
    >>> history = trainer.fit(DataLoader(X, y, batch_size=64, shuffle=True), epochs=10, val=(Xte, yte))
    >>> trainer.evaluate((Xte, yte))         # {'loss': ..., 'accuracy': ...}

Each step computes ``value_and_grad`` of ``loss(model.apply(params, x), y)`` over ``model.params()``
and calls ``optimizer.step(grads)``. A progress line shows the loss and throughput; with
``checkpoint_every=N`` the model, optimizer and loop position are saved every N steps to one
``.npz`` file (no pickle), and ``fit(..., resume=path)`` continues exactly where it stopped.
``check_finite=True`` raises ``FloatingPointError`` naming the step at the first non-finite loss.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from . import distributed as dist
from .autodiff.tensor import Tensor, tensor
from .autodiff.transforms import value_and_grad
from .autodiff.primitive import no_grad
from .data import DataLoader

__all__ = ["Trainer", "Model"]


class Trainer:
    """Train ``model`` on ``loss(model(x), y)`` with ``optimizer``.

    Args:
        model: a :class:`sciml.models.Module`.
        loss: ``loss(pred, y) -> scalar Tensor`` (e.g. ``sm.models.cross_entropy``).
        optimizer: an optimizer bound to ``model.parameters()`` or ``model.params()`` (or unbound: it is
            bound to ``model.parameters()``).
        metrics: {name: f(pred, y) -> float} computed by :meth:`evaluate`.
        checkpoint: path of the checkpoint file (``.npz``); written every ``checkpoint_every`` steps.
        check_finite: raise ``FloatingPointError`` with the step number when the loss is NaN or inf.
        progress: print a progress line (loss, samples/s) while training.
    """

    def __init__(self, model, loss, optimizer, *, metrics=None, checkpoint=None, checkpoint_every=None,
                 check_finite=True, progress=True, log_every=10):
        self.model, self.loss, self.optimizer = model, loss, optimizer
        if optimizer._leaves is None:
            optimizer.bind(model.parameters())
        dist.broadcast_parameters(model)  # under MPI: every rank starts from rank 0's parameters
        self.metrics = dict(metrics or {})
        self.checkpoint, self.checkpoint_every = checkpoint, checkpoint_every
        if checkpoint_every is not None and checkpoint is None:
            raise ValueError("Trainer: checkpoint_every is set but checkpoint (a file path) is None.")
        self.check_finite, self.log_every = check_finite, max(1, int(log_every))
        self.progress = progress and dist.is_main()  # under MPI: rank 0 prints
        self.step = 0
        self.epoch = 0
        self._batch = 0  # batch index within the epoch of the next step
        self.history = {"loss": [], "val": []}
        names = [n for n, _ in model.named_parameters()]
        own = {id(p) for p in model.parameters()}
        if any(id(p) not in own for p in optimizer._leaves):
            raise ValueError("Trainer: the optimizer is bound to parameters that do not belong to the model.")
        self._names = names
        self._grad_fn = value_and_grad(lambda p, x, y: self.loss(self.model.apply(p, x), y))

    # --- one step -----------------------------------------------------------------------------
    def _grads_for_optimizer(self, g):
        if isinstance(self.optimizer._params, dict):
            return g
        flat = []
        for n in self._names:
            node = g
            for k in n.split("."):
                node = node[k]
            flat.append(node)
        if len(flat) != len(self.optimizer._leaves):
            raise ValueError("Trainer: the optimizer must be bound to all of model.parameters() (in order) or to "
                             "model.params().")
        return flat

    def train_step(self, x, y) -> float:
        """One optimisation step on a batch; returns the loss (as a float)."""
        self.model.train()
        x, y = dist.shard((x, y))  # under MPI: this rank's rows of the global batch
        loss, g = self._grad_fn(self.model.params(), x, y)
        loss, g = dist.all_reduce((loss, g), weight=x.shape[0])  # global mean over ranks, one MPI call
        lv = float(loss)
        if self.check_finite and not np.isfinite(lv):
            raise FloatingPointError(f"Trainer: the loss is {lv} at step {self.step} (epoch {self.epoch}, batch "
                                     f"{self._batch}); lower the learning rate, clip gradients (clip_norm=...) or "
                                     "check the data. Pass check_finite=False to continue anyway.")
        self.optimizer.step(self._grads_for_optimizer(g))
        self.step += 1
        return lv

    # --- loop ------------------------------------------------------------------------------
    def fit(self, loader: DataLoader, epochs=1, *, val=None, resume=None, max_steps=None):
        """Train for ``epochs`` passes over ``loader`` (or until ``max_steps`` total steps).

        Args:
            loader: a :class:`sciml.data.DataLoader` yielding (x, y).
            val: optional (x, y) arrays or a DataLoader evaluated after each epoch (``history['val']``).
            resume: a checkpoint path written by this trainer: continue from it.
        Returns:
            history: {'loss': [loss per step], 'val': [metrics dict per epoch]}.
        """
        if not isinstance(loader, DataLoader):
            raise TypeError(f"Trainer.fit: loader is a {type(loader).__name__}; expected sciml.data.DataLoader.")
        if resume is not None and dist.bcast_object(os.path.exists(resume)):  # rank 0 decides (MPI)
            self.load_checkpoint(resume)
        nb = len(loader)
        while self.epoch < epochs:
            t0, seen, last = time.perf_counter(), 0, float("nan")
            for x, y in loader.batches(self.epoch, start=self._batch):
                if max_steps is not None and self.step >= max_steps:
                    return self.history
                last = self.train_step(x, y)
                self.history["loss"].append(last)
                self._batch += 1
                seen += x.shape[0]
                if self.checkpoint_every and self.step % self.checkpoint_every == 0:
                    self.save_checkpoint(self.checkpoint)
                if self.progress and (self._batch % self.log_every == 0 or self._batch == nb):
                    self._show(epochs, nb, last, seen / max(time.perf_counter() - t0, 1e-9))
            rate = seen / max(time.perf_counter() - t0, 1e-9)
            self.epoch += 1
            self._batch = 0
            if val is not None:
                self.history["val"].append(self.evaluate(val))
            if self.progress:
                extra = "".join(f"  val_{k} {v:.4f}" for k, v in (self.history["val"][-1].items() if val is not None
                                                                  else ()))
                print(f"\repoch {self.epoch}/{epochs}  loss {last:.4f}  {rate:,.0f} samples/s{extra}", flush=True)
        return self.history

    def _show(self, epochs, nb, loss, rate):
        w = 20
        done = int(w * self._batch / max(nb, 1))
        line = (f"\repoch {self.epoch + 1}/{epochs} [{'#' * done}{'.' * (w - done)}] {self._batch}/{nb}  "
                f"loss {loss:.4f}  {rate:,.0f} samples/s")
        if sys.stdout.isatty():
            sys.stdout.write(line)
            sys.stdout.flush()

    # --- evaluation -------------------------------------------------------------------------
    def predict(self, x, batch_size=1024):
        """Model outputs (eval mode, no gradients) for array/Tensor x, as a numpy array."""
        self.model.eval()
        xs = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
        outs = []
        with no_grad():
            for i in range(0, xs.shape[0], batch_size):
                xb = tensor(xs[i:i + batch_size], self.optimizer._leaves[0].dtype)
                outs.append(self.model(xb).numpy())
        self.model.train()
        return np.concatenate(outs, 0)

    def evaluate(self, data, batch_size=1024):
        """{'loss': mean loss, **metrics} over (x, y) arrays or a DataLoader."""
        if isinstance(data, DataLoader):
            xs, ys = data.arrays[0], data.arrays[1]
        else:
            xs, ys = data
            xs = xs.numpy() if isinstance(xs, Tensor) else np.asarray(xs)
            ys = ys.numpy() if isinstance(ys, Tensor) else np.asarray(ys)
        pred = self.predict(xs, batch_size)
        dt = self.optimizer._leaves[0].dtype
        p = tensor(pred, dt)
        yt = tensor(ys, dt) if ys.dtype.kind == "f" else tensor(ys)
        out = {"loss": float(self.loss(p, yt))}
        for name, fn in self.metrics.items():
            out[name] = float(fn(p, yt))
        return out

    # --- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, path):
        """Write model, optimizer, loop position and loss history to one .npz file (no pickle)."""
        if not dist.is_main():  # under MPI only rank 0 writes (every rank holds the same state)
            return
        arrays = {f"model/{k}": v for k, v in self.model.state_dict().items()}
        sd = self.optimizer.state_dict()
        arrays.update({f"opt/{k}": v for k, v in sd["state"].items()})
        arrays["opt_step"] = np.asarray(sd["step"])
        arrays["loop"] = np.asarray([self.step, self.epoch, self._batch])
        arrays["history_loss"] = np.asarray(self.history["loss"], dtype=np.float64)
        tmp = os.fspath(path) + ".tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, path)

    def load_checkpoint(self, path):
        """Restore a checkpoint written by :meth:`save_checkpoint`."""
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        self.model.load_state_dict({k[6:]: v for k, v in data.items() if k.startswith("model/")})
        self.optimizer.load_state_dict({"step": int(data["opt_step"]),
                                        "state": {k[4:]: v for k, v in data.items() if k.startswith("opt/")}})
        self.step, self.epoch, self._batch = (int(v) for v in data["loop"])
        self.history["loss"] = [float(v) for v in data["history_loss"]]


Model = Trainer  # MindSpore's name for the object tying network, loss and optimizer together
