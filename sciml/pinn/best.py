"""The best model of a PINN run (DeepXDE's ``Best model at step N``, Keras's
``restore_best_weights``): the parameters with the lowest training loss seen so far.

``solve`` offers every loss it already has on the host, at the log lines (every log line of
a first-order stage, its last step included, and the end of every curvature-optimizer call),
to :class:`BestModel`. The parameters a loss belongs to are kept as device-side copies (one
copy kernel per leaf; no host read, no upload), so the steps between log lines cost nothing:

* a first-order step's loss is evaluated at the parameters *before* its update, so before a
  step whose loss will be logged the runner copies the parameters into a candidate slot
  (:meth:`BestModel.take`); when the loss is better the candidate becomes the best (a swap of
  two sets of buffers, no copy), else it is reused next time;
* a curvature optimizer's loss belongs to the parameters it leaves (:meth:`offer` without a
  candidate copies them, only when the loss is better).

So ``best_params`` reproduce ``best_loss`` exactly, and ``best_step`` is the history's step
whose ``loss`` entry is ``best_loss``.
"""
import math

import numpy as np

from .. import backend
from ..autodiff.pytree import flatten, unflatten
from ..autodiff.tensor import Tensor


def _copy(dst, src):
    from ..kernels import optim as KO
    if src.size:
        KO.copy(dst._buf, src._buf, src.size, src.dtype)


def _empty_like(leaf):
    return Tensor._make(backend.empty(max(leaf.size, 1), leaf.dtype), tuple(leaf.shape), leaf.dtype)


class BestModel:
    """The lowest finite training loss seen at the log lines, its step, its error against the
    reference (when known) and device copies of the parameters it belongs to.

    Args:
        params: the run's parameter pytree (``{'net': ..., 'pde': ...}``); its leaves are
            read (copied) in place, never replaced.
    """

    def __init__(self, params):
        self.leaves, self.treedef = flatten(params)
        self.step, self.loss, self.rel_l2 = None, math.inf, float("nan")
        self._best = self._cand = None   # lists of Tensors, one per leaf
        self._cand_step = None

    def take(self, step):
        """Copy the current parameters into the candidate slot: the loss that ``offer`` will
        get for global ``step`` was evaluated at them (a first-order step's, before its
        update)."""
        if self._cand is None:
            self._cand = [_empty_like(p) for p in self.leaves]
        for dst, src in zip(self._cand, self.leaves):
            _copy(dst, src)
        self._cand_step = step

    def offer(self, step, loss, rel_l2=float("nan")):
        """The training loss at global ``step`` (a host float). It becomes the best when it is
        finite and lower than the best so far; its parameters are the candidate taken for this
        step, else the current ones (``rel_l2``: the current parameters' error, nan when not
        known; a candidate's is not known here and is measured once at the end). Returns True
        when it became the best."""
        cand, self._cand_step = self._cand_step == step, None
        if not (math.isfinite(loss) and loss < self.loss):
            return False
        if cand:
            self._best, self._cand = self._cand, self._best
        else:
            if self._best is None:
                self._best = [_empty_like(p) for p in self.leaves]
            for dst, src in zip(self._best, self.leaves):
                _copy(dst, src)
        self.step, self.loss = int(step), float(loss)
        self.rel_l2 = float("nan") if cand else float(rel_l2)
        return True

    @property
    def found(self):
        return self.step is not None

    def tree(self):
        """The best parameters as a pytree shaped like the run's (``{'net', 'pde'}``) of
        Tensors (the snapshot's own buffers); None before any."""
        return None if self._best is None else unflatten(self.treedef, list(self._best))

    def restore(self):
        """Copy the best parameters into the run's (the network's and the coefficients')."""
        if self._best is not None:
            for dst, src in zip(self.leaves, self._best):
                _copy(dst, src)

    def summary(self, fitted, error, restored_error=None):
        """``Result``'s ``best_*`` (None before any): ``fitted(tree)`` gives the coefficients,
        ``error(tree)`` the error vs the reference (None without one), called once, for a
        first-order candidate (the log line's error is one update later) unless
        ``restored_error`` (the run's final error, the best model being restored) is given."""
        if not self.found:
            return None
        tree = self.tree()
        rel = self.rel_l2
        if restored_error is not None:
            rel = restored_error
        elif not math.isfinite(rel):
            rel = error(tree)
        return {"step": self.step, "loss": self.loss, "rel_l2": rel, "params": tree["net"],
                "parameters": fitted(tree)}

    def restored_note(self, steps, with_loss):
        """What the result line adds when the best model was restored."""
        return (f" (best model at step {self.step} of {steps}"
                + (f", loss {self.loss:.3e})" if with_loss else ")"))

    def deepxde_line(self, rel_l2=None):
        """DeepXDE's closing line, ``Best model at step N: ...`` (``verbose=True``)."""
        return (f"Best model at step {self.step}: loss {self.loss:.3e}"
                + (f", rel. L2 {rel_l2:.3e}" if rel_l2 is not None else ""))

    # --- checkpoints ---------------------------------------------------------------------
    def state(self):
        """``(step, loss, rel_l2, [numpy arrays])`` for a checkpoint, or None before any."""
        if not self.found:
            return None
        return self.step, self.loss, self.rel_l2, [np.asarray(t.numpy()) for t in self._best]

    def load(self, state):
        """Back from :meth:`state` (a resumed run); None: nothing tracked yet."""
        self.step, self.loss, self.rel_l2 = None, math.inf, float("nan")
        self._cand_step = None
        if state is None:
            return
        step, loss, rel_l2, arrays = state
        self._best = [Tensor._make(backend.from_numpy(np.asarray(a, dtype=p.dtype).reshape(-1)
                                                      if p.size else np.zeros(1, p.dtype), p.dtype),
                                   tuple(p.shape), p.dtype) for a, p in zip(arrays, self.leaves)]
        self.step, self.loss, self.rel_l2 = int(step), float(loss), float(rel_l2)


__all__ = ["BestModel"]
