"""A fit-style training loop tying a network, a loss and an optimizer together, with callbacks.

    >>> trainer = Trainer(net, sm.models.cross_entropy, sm.optim.Adam(net.parameters(), lr=1e-3),
    ...                   metrics={"accuracy": sm.models.accuracy},
    ...                   callbacks=[EarlyStopping(patience=5), BestCheckpoint("best.npz"), LROnPlateau()])
    >>> history = trainer.fit(DataLoader(X, y, batch_size=64, shuffle=True), epochs=50, val=(Xte, yte))
    >>> trainer.evaluate((Xte, yte))         # {'loss': ..., 'accuracy': ...}

Each step computes ``value_and_grad`` of ``loss(model.apply(params, x), y)`` over ``model.params()``
(frozen parameters are left out) and calls ``optimizer.step``. Progress: a ``tqdm`` bar per epoch
(``tqdm.auto``: a widget in notebooks) with the loss, samples/s, elapsed time and ETA when stderr is a
terminal or a notebook; otherwise (a log file, a pipe) one plain line per epoch through the ``sciml``
logger (:mod:`sciml._log`), never a carriage return. With ``checkpoint_every=N`` the model, optimizer
and loop position are saved every N steps to one ``.npz`` file (no pickle, written atomically), and
``fit(..., resume=path)`` continues exactly where it stopped. ``check_finite=True`` raises
``FloatingPointError`` naming the step at the first non-finite loss.

Callbacks (subclass :class:`Callback`, override any of ``on_train_begin``, ``on_epoch_begin``,
``on_batch_end``, ``on_epoch_end``, ``on_train_end``; set ``trainer.stop_training = True`` to stop after
the current epoch): :class:`EarlyStopping`, :class:`BestCheckpoint`, :class:`LROnPlateau`,
:class:`LogMetrics`. ``on_epoch_end`` receives ``logs``: ``{"loss": mean training loss of the epoch,
"val_loss": ..., "val_<metric>": ..., "lr": ...}``, also appended to ``trainer.history["epochs"]``.
"""
from __future__ import annotations

import math
import os
import sys
import time

import numpy as np

from . import distributed as dist
from ._io import atomic_write, check_output_path
from ._log import get_logger
from .autodiff.tensor import Tensor, tensor
from .autodiff.transforms import value_and_grad
from .autodiff.primitive import no_grad
from .data import DataLoader

__all__ = ["Trainer", "Model", "Callback", "EarlyStopping", "BestCheckpoint", "LROnPlateau", "LogMetrics"]

log = get_logger(__name__)


# --- callbacks ----------------------------------------------------------------------------------
class Callback:
    """Hooks called by :meth:`Trainer.fit`; each receives the trainer (``trainer.model``, ``.optimizer``,
    ``.step``, ``.epoch``, ``.history``) and may set ``trainer.stop_training = True``."""

    def on_train_begin(self, trainer):
        pass

    def on_epoch_begin(self, trainer, epoch):
        pass

    def on_batch_end(self, trainer, step, loss):
        pass

    def on_epoch_end(self, trainer, epoch, logs):
        pass

    def on_train_end(self, trainer):
        pass


class _Monitor(Callback):
    def __init__(self, name, monitor, mode, min_delta=0.0):
        if mode not in ("min", "max", "auto"):
            raise ValueError(f"{name}: mode={mode!r}; expected 'min', 'max' or 'auto'.")
        if mode == "auto":
            mode = "max" if any(k in monitor for k in ("acc", "r2", "score")) else "min"
        self.name, self.monitor, self.mode, self.min_delta = name, monitor, mode, abs(float(min_delta))
        self.best = math.inf if mode == "min" else -math.inf

    def _value(self, logs):
        if self.monitor not in logs:
            raise KeyError(f"{self.name}: monitor={self.monitor!r} is not among the epoch logs {sorted(logs)}; pass "
                           "val=... to fit() for 'val_*' entries, or monitor='loss'.")
        return float(logs[self.monitor])

    def _improved(self, v):
        if math.isnan(v):
            return False
        return v < self.best - self.min_delta if self.mode == "min" else v > self.best + self.min_delta


class EarlyStopping(_Monitor):
    """Stop when ``monitor`` has not improved by more than ``min_delta`` for ``patience`` epochs.

    Args:
        monitor: an epoch-log entry (default ``"val_loss"``; ``"loss"`` for the training loss).
        patience: epochs without improvement tolerated.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (max for accuracy-like names).
        restore_best: load the best epoch's parameters back into the model when stopping / at the end.
    """

    def __init__(self, monitor="val_loss", patience=5, min_delta=0.0, mode="auto", restore_best=False):
        super().__init__("EarlyStopping", monitor, mode, min_delta)
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(f"EarlyStopping: patience={patience!r}; expected a non-negative integer.")
        self.patience, self.restore_best = patience, bool(restore_best)
        self.wait, self.stopped_epoch, self._best_state = 0, None, None

    def on_epoch_end(self, trainer, epoch, logs):
        v = self._value(logs)
        if self._improved(v):
            self.best, self.wait = v, 0
            if self.restore_best:
                self._best_state = trainer.model.state_dict()
            return
        self.wait += 1
        if self.wait > self.patience:
            trainer.stop_training = True
            self.stopped_epoch = epoch
            log.info("EarlyStopping: %s did not improve for %d epochs (best %.6g); stopping after epoch %d.",
                     self.monitor, self.wait, self.best, epoch)

    def on_train_end(self, trainer):
        if self.restore_best and self._best_state is not None:
            trainer.model.load_state_dict(self._best_state)


class BestCheckpoint(_Monitor):
    """Save the model's ``state_dict`` (``sm.save`` format, atomic) whenever ``monitor`` improves.

    The path is checked (existing writable folder, ``.npz`` / ``.safetensors``) when the callback is made,
    before any training. Load it with ``model.load_state_dict(sm.load(path))``.
    """

    def __init__(self, path, monitor="val_loss", mode="auto", min_delta=0.0):
        super().__init__("BestCheckpoint", monitor, mode, min_delta)
        self.path = check_output_path(path, arg="BestCheckpoint(path)", suffixes=(".npz", ".safetensors"),
                                      default_suffix=".npz")
        self.best_epoch = None

    def on_epoch_end(self, trainer, epoch, logs):
        v = self._value(logs)
        if self._improved(v):
            self.best, self.best_epoch = v, epoch
            if dist.is_main():
                from .serialization import save
                save({k: np.asarray(a) for k, a in trainer.model.state_dict().items()}, self.path)


class LROnPlateau(Callback):
    """Lower the optimizer's learning rates when ``monitor`` plateaus (:class:`sciml.optim.ReduceLROnPlateau`
    once per epoch; same arguments)."""

    def __init__(self, monitor="val_loss", **kw):
        self.monitor, self.kw, self.scheduler = monitor, kw, None

    def on_train_begin(self, trainer):
        from .optim.plateau import ReduceLROnPlateau
        if self.scheduler is None:
            self.scheduler = ReduceLROnPlateau(trainer.optimizer, **self.kw)

    def on_epoch_end(self, trainer, epoch, logs):
        if self.monitor not in logs:
            raise KeyError(f"LROnPlateau: monitor={self.monitor!r} is not among the epoch logs {sorted(logs)}.")
        if self.scheduler.step(logs[self.monitor]):
            log.info("LROnPlateau: learning rate lowered to %s after epoch %d.", self.scheduler.get_last_lr(), epoch)


class LogMetrics(Callback):
    """Log every epoch's logs through the ``sciml`` logger (INFO), e.g. into a file handler."""

    def on_epoch_end(self, trainer, epoch, logs):
        log.info("epoch %d: %s", epoch, "  ".join(f"{k} {v:.6g}" for k, v in logs.items()))


# --- progress -------------------------------------------------------------------------------------
def _in_notebook():
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except Exception:  # pragma: no cover
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def _bar_allowed():
    if _in_notebook():
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _fmt_time(s):
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


class Trainer:
    """Train ``model`` on ``loss(model(x), y)`` with ``optimizer``.

    Args:
        model: a :class:`sciml.models.Module`.
        loss: ``loss(pred, y) -> scalar Tensor`` (e.g. ``sm.models.cross_entropy``).
        optimizer: an optimizer bound to the model's parameters (all, some, or in groups), or unbound (it is
            then bound to ``model.parameters()``).
        metrics: {name: f(pred, y) -> float} computed by :meth:`evaluate` (and on ``val`` each epoch).
        checkpoint: path of the checkpoint file (``.npz``), written atomically every ``checkpoint_every``
            steps; its folder is checked before training starts.
        check_finite: raise ``FloatingPointError`` with the step number when the loss is NaN or inf.
        progress: show progress (a tqdm bar on a terminal / notebook, else one log line per epoch).
        callbacks: a list of :class:`Callback`.
    """

    def __init__(self, model, loss, optimizer, *, metrics=None, checkpoint=None, checkpoint_every=None,
                 check_finite=True, progress=True, log_every=10, callbacks=None):
        self.model, self.loss, self.optimizer = model, loss, optimizer
        if getattr(optimizer, "_leaves", None) is None:
            optimizer.bind(model.parameters())
        dist.broadcast_parameters(model)  # under MPI: every rank starts from rank 0's parameters
        self.metrics = dict(metrics or {})
        for k, f in self.metrics.items():
            if not callable(f):
                raise TypeError(f"Trainer(metrics): metrics[{k!r}] is a {type(f).__name__}; expected f(pred, y).")
        if checkpoint_every is not None and checkpoint is None:
            raise ValueError("Trainer: checkpoint_every is set but checkpoint (a file path) is None.")
        if checkpoint_every is not None and (isinstance(checkpoint_every, bool) or not isinstance(
                checkpoint_every, int) or checkpoint_every <= 0):
            raise ValueError(f"Trainer: checkpoint_every={checkpoint_every!r}; expected a positive integer.")
        self.checkpoint = None if checkpoint is None else check_output_path(
            checkpoint, arg="Trainer(checkpoint)", suffixes=(".npz",), default_suffix=".npz")
        self.checkpoint_every = checkpoint_every
        self.callbacks = list(callbacks or [])
        for i, cb in enumerate(self.callbacks):
            if not isinstance(cb, Callback):
                raise TypeError(f"Trainer(callbacks): item {i} is a {type(cb).__name__}; expected a "
                                "sciml.train.Callback.")
        self.check_finite, self.log_every = check_finite, max(1, int(log_every))
        self.progress = progress and dist.is_main()  # under MPI: rank 0 reports
        self.step = 0
        self.epoch = 0
        self._batch = 0  # batch index within the epoch of the next step
        self.stop_training = False
        self.history = {"loss": [], "val": [], "epochs": []}
        self._names = [n for n, _ in model.named_parameters()]
        own = {id(p) for p in model.parameters()}
        if any(id(p) not in own for p in optimizer._leaves):
            raise ValueError("Trainer: the optimizer is bound to parameters that do not belong to the model.")
        self._grad_fn = value_and_grad(lambda p, x, y: self.loss(self.model.apply(p, x), y))

    @property
    def _dtype(self):
        return self.optimizer._leaves[0].dtype

    # --- one step -----------------------------------------------------------------------------
    def _grads_for_optimizer(self, g):
        """The gradients as a flat list aligned with the optimizer's parameters (None: frozen / not given)."""
        by_id = {}
        for n, p in self.model.named_parameters():
            node = g
            for k in n.split("."):
                node = node.get(k) if isinstance(node, dict) else None
                if node is None:
                    break
            by_id[id(p)] = node if isinstance(node, Tensor) else None
        out = [by_id.get(id(p)) for p in self.optimizer._leaves]
        if all(v is not None for v in out):
            from .autodiff.pytree import unflatten
            return unflatten(self.optimizer._treedef, out)
        return out

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
        """Train for ``epochs`` passes over ``loader`` (or until ``max_steps`` total steps, or a callback stops).

        Args:
            loader: a :class:`sciml.data.DataLoader` yielding (x, y).
            val: optional (x, y) arrays or a DataLoader evaluated after each epoch (``history['val']``).
            resume: a checkpoint path written by this trainer: continue from it (ignored if it does not exist).
        Returns:
            history: {'loss': [loss per step], 'val': [metrics dict per epoch], 'epochs': [epoch logs]}.
        """
        if not isinstance(loader, DataLoader):
            raise TypeError(f"Trainer.fit: loader is a {type(loader).__name__}; expected sciml.data.DataLoader.")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"Trainer.fit: epochs={epochs!r}; expected a non-negative integer.")
        if resume is not None and dist.bcast_object(os.path.exists(resume)):  # rank 0 decides (MPI)
            self.load_checkpoint(resume)
        self.stop_training = False
        nb = len(loader)
        for cb in self.callbacks:
            cb.on_train_begin(self)
        try:
            while self.epoch < epochs and not self.stop_training:
                if not self._run_epoch(loader, epochs, nb, val, max_steps):
                    break
        finally:
            for cb in self.callbacks:
                cb.on_train_end(self)
        return self.history

    def _run_epoch(self, loader, epochs, nb, val, max_steps):
        for cb in self.callbacks:
            cb.on_epoch_begin(self, self.epoch + 1)
        t0, seen, losses = time.perf_counter(), 0, []
        bar = self._open_bar(epochs, nb)
        try:
            for x, y in loader.batches(self.epoch, start=self._batch):
                if max_steps is not None and self.step >= max_steps:
                    return False
                last = self.train_step(x, y)
                losses.append(last)
                self.history["loss"].append(last)
                self._batch += 1
                seen += x.shape[0]
                for cb in self.callbacks:
                    cb.on_batch_end(self, self.step, last)
                if self.checkpoint_every and self.step % self.checkpoint_every == 0:
                    self.save_checkpoint(self.checkpoint)
                if bar is not None:
                    bar.update(1)
                    if self._batch % self.log_every == 0 or self._batch == nb:
                        rate = seen / max(time.perf_counter() - t0, 1e-9)
                        bar.postfix[0] = f"loss {last:.4f}  {rate:,.0f} samples/s"
        finally:
            if bar is not None:
                bar.close()
        elapsed = time.perf_counter() - t0
        self.epoch += 1
        self._batch = 0
        logs = {"loss": float(np.mean(losses)) if losses else float("nan")}
        if val is not None:
            ev = self.evaluate(val)
            self.history["val"].append(ev)
            logs.update({f"val_{k}": v for k, v in ev.items()})
        logs["lr"] = self.optimizer.current_lr() if hasattr(self.optimizer, "current_lr") else float("nan")
        self.history["epochs"].append(logs)
        if self.progress:
            extra = "".join(f"  {k} {v:.4f}" for k, v in logs.items() if k.startswith("val_"))
            log.info("epoch %d/%d  loss %.4f  %s samples/s  %s%s", self.epoch, epochs, logs["loss"],
                     f"{seen / max(elapsed, 1e-9):,.0f}", _fmt_time(elapsed), extra)
        for cb in self.callbacks:
            cb.on_epoch_end(self, self.epoch, logs)
        return True

    def _open_bar(self, epochs, nb):
        """A tqdm bar for this epoch on a terminal / in a notebook, else None (plain log lines only)."""
        if not self.progress or not _bar_allowed():
            return None
        from tqdm.auto import tqdm
        return tqdm(total=nb, initial=self._batch, desc=f"epoch {self.epoch + 1}/{epochs}", unit="batch",
                    leave=False, dynamic_ncols=True, file=sys.stderr, postfix=[""],
                    bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]  "
                               "{postfix[0]}")

    # --- evaluation -------------------------------------------------------------------------
    def predict(self, x, batch_size=1024):
        """Model outputs (eval mode, no gradients) for array/Tensor x, as a numpy array."""
        self.model.eval()
        xs = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
        outs = []
        try:
            with no_grad():
                for i in range(0, xs.shape[0], batch_size):
                    xb = tensor(xs[i:i + batch_size], self._dtype)
                    outs.append(self.model(xb).numpy())
        finally:
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
        dt = self._dtype
        p = tensor(pred, dt)
        yt = tensor(ys, dt) if ys.dtype.kind == "f" else tensor(ys)
        out = {"loss": float(self.loss(p, yt))}
        for name, fn in self.metrics.items():
            out[name] = float(fn(p, yt))
        return out

    # --- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, path):
        """Write model, optimizer, loop position and loss history to one .npz file (no pickle), atomically:
        a crash during the write leaves the previous checkpoint intact."""
        if not dist.is_main():  # under MPI only rank 0 writes (every rank holds the same state)
            return
        path = check_output_path(path, arg="Trainer.save_checkpoint(path)", suffixes=(".npz",),
                                 default_suffix=".npz")
        arrays = {f"model/{k}": v for k, v in self.model.state_dict().items()}
        sd = self.optimizer.state_dict()
        arrays.update({f"opt/{k}": v for k, v in sd["state"].items()})
        arrays["opt_step"] = np.asarray(sd["step"])
        lrs = [g.get("lr") for g in getattr(self.optimizer, "param_groups", [])]
        if lrs and all(isinstance(v, (int, float)) for v in lrs):
            arrays["opt_lrs"] = np.asarray(lrs, dtype=np.float64)
        arrays["loop"] = np.asarray([self.step, self.epoch, self._batch])
        arrays["history_loss"] = np.asarray(self.history["loss"], dtype=np.float64)
        with atomic_write(path) as tmp:
            np.savez(tmp, **arrays)

    def load_checkpoint(self, path):
        """Restore a checkpoint written by :meth:`save_checkpoint`."""
        path = os.fspath(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise FileNotFoundError(f"Trainer.load_checkpoint: no file {path!r}.") from None
        except Exception as e:
            raise ValueError(f"Trainer.load_checkpoint({path!r}): cannot read the file ({type(e).__name__}: {e}); it "
                             "is truncated or not a Trainer checkpoint.") from None
        for k in ("opt_step", "loop", "history_loss"):
            if k not in data:
                raise ValueError(f"Trainer.load_checkpoint({path!r}): the entry {k!r} is missing; not a Trainer "
                                 "checkpoint (or an incomplete one).")
        self.model.load_state_dict({k[6:]: v for k, v in data.items() if k.startswith("model/")})
        self.optimizer.load_state_dict({"step": int(data["opt_step"]),
                                        "state": {k[4:]: v for k, v in data.items() if k.startswith("opt/")}})
        if "opt_lrs" in data and len(data["opt_lrs"]) == len(self.optimizer.param_groups):
            for g, lr in zip(self.optimizer.param_groups, data["opt_lrs"]):
                if not callable(g.get("lr")):
                    g["lr"] = float(lr)
        self.step, self.epoch, self._batch = (int(v) for v in data["loop"])
        self.history["loss"] = [float(v) for v in data["history_loss"]]


Model = Trainer  # MindSpore's name for the object tying network, loss and optimizer together
