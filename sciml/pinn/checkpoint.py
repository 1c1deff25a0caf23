"""PINN checkpoints: one ``.npz`` file holding where a run is (stage and step inside it),
the parameters, loss weights, history, the optimizer's state (first-order moments, or a
curvature optimizer's history such as L-BFGS's (s, y) pairs), the interior points and the
sampler's random state, so that a resumed run continues exactly where the
stopped one was.

Writes are atomic (:func:`sciml._io.atomic_write`): a crash during a save leaves the
previous checkpoint. Loading validates everything against the problem being solved and
refuses, with the file's path in the message, a checkpoint that does not fit.

Keys: ``format``, ``stage``, ``step`` (steps done in that stage; ``stage == len(stages)``
and ``step == 0`` once the run is finished), ``weights``, ``p0..pN`` (parameter leaves in
pytree order), ``h.<name>`` (history), ``opt.step`` / ``opt.<k>`` (optimizer state),
``global_step``, ``interior`` and ``rng`` (JSON of the sampler's bit-generator state),
``best.step``, ``best.loss``, ``best.rel_l2`` and ``best.p0..pN`` (the best model so far,
best.py; absent before the first log line and in files written before it was tracked).
"""
import json
import zipfile

import numpy as np

from .. import distributed as dist
from .._io import atomic_write
from ..autodiff.pytree import flatten

FORMAT = 2
_REQUIRED = ("stage", "step", "weights")


class Checkpoint:
    """What :func:`load` returns: ``stage``, ``step``, ``weights``, ``history`` (dict of
    lists), ``opt_state`` (an optimizer ``state_dict`` or None), ``interior`` (numpy or None),
    ``rng_state`` (dict or None) and ``best`` (``(step, loss, rel_l2, arrays)`` or None)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def save(path, params, stage, step, weights, history, opt=None, interior=None, rng=None,
         global_step=None, best=None):
    """Write a checkpoint atomically (under MPI only rank 0 writes: every rank holds the
    same parameters). ``best``: ``(step, loss, rel_l2, arrays)`` of the best model so far
    (arrays aligned with the parameter leaves), or None."""
    if not dist.is_main():
        return
    leaves, _ = flatten(params)
    data = {f"p{i}": np.asarray(l.numpy()) for i, l in enumerate(leaves)}
    data.update(format=np.array(FORMAT), stage=np.array(int(stage)), step=np.array(int(step)),
                weights=np.asarray(weights, dtype=np.float64))
    if global_step is not None:
        data["global_step"] = np.array(int(global_step))
    for k, v in history.items():
        data[f"h.{k}"] = np.asarray(v, dtype=np.float64)
    sd = _optimizer_state(opt)
    if sd is not None:
        data["opt.step"] = np.array(sd["step"])
        for k, v in sd["state"].items():
            data[f"opt.{k}"] = np.asarray(v)
    if interior is not None:
        data["interior"] = np.asarray(interior, dtype=np.float64)
    if rng is not None and hasattr(rng, "bit_generator"):
        data["rng"] = np.array(json.dumps(rng.bit_generator.state, default=int))
    if best is not None:
        b_step, b_loss, b_rel, b_arrays = best
        data.update({"best.step": np.array(int(b_step)), "best.loss": np.array(float(b_loss)),
                     "best.rel_l2": np.array(float(b_rel))})
        data.update({f"best.p{i}": np.asarray(a) for i, a in enumerate(b_arrays)})
    with atomic_write(path) as tmp:
        np.savez(tmp, **data)


def _optimizer_state(opt):
    """The optimizer's ``state_dict`` (first-order moments; a curvature optimizer's history,
    e.g. L-BFGS's (s, y) pairs, so that a resumed run continues with the same curvature
    estimate), or None when it has none that can be saved."""
    if opt is None or not hasattr(opt, "state_dict"):
        return None
    try:
        sd = opt.state_dict()
    except Exception:   # an optimizer without a saveable state: resume restarts it
        return None
    if not isinstance(sd, dict) or "state" not in sd or "step" not in sd:
        return None
    return sd


def load(path, params, n_weights, stages):
    """Read and validate a checkpoint; copy its parameters into ``params`` (a pytree of
    Parameters) only once everything fits.

    Args:
        path: the ``.npz`` file.
        params: the run's parameter pytree (network and PDE coefficients).
        n_weights: the number of loss terms of the problem.
        stages: the run's list of ``(optimizer, steps)``.
    Raises:
        ValueError: the file is truncated or not a checkpoint, misses keys, or does not fit
            (parameter count or shapes, loss-weight count, stage or step out of range,
            non-finite parameters); the message names ``path``.
    """
    where = f"solve(checkpoint={path!r})"
    hint = "; delete it or pass resume=False to start afresh."
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as e:
        raise ValueError(f"{where}: cannot read the file ({type(e).__name__}: {e}); it is "
                         f"truncated or not a sciml checkpoint{hint}") from None
    missing = [k for k in _REQUIRED if k not in arrays]
    leaves, _ = flatten(params)
    missing += [f"p{i}" for i in range(len(leaves)) if f"p{i}" not in arrays]
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}; it is incomplete or not a sciml "
                         f"PINN checkpoint{hint}")
    extra = sum(1 for k in arrays if k[0] == "p" and k[1:].isdigit()) - len(leaves)
    if extra:
        raise ValueError(f"{where}: holds {len(leaves) + extra} parameter arrays but the network "
                         f"and problem have {len(leaves)}; it comes from another network or "
                         f"problem{hint}")
    for i, p in enumerate(leaves):
        a = arrays[f"p{i}"]
        if a.shape != tuple(p.shape):
            raise ValueError(f"{where}: parameter {i} has shape {a.shape} in the checkpoint but "
                             f"{tuple(p.shape)} in the network; it comes from another network or "
                             f"problem{hint}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{where}: parameter {i} holds non-finite values (NaN or inf); the "
                             f"run it comes from diverged{hint}")
    weights = np.asarray(arrays["weights"], dtype=np.float64).reshape(-1)
    if weights.size != n_weights:
        raise ValueError(f"{where}: holds {weights.size} loss weight(s) but the problem has "
                         f"{n_weights} loss term(s); it comes from another problem{hint}")
    stage, step = int(arrays["stage"]), int(arrays["step"])
    if not 0 <= stage <= len(stages) or (stage == len(stages) and step != 0):
        raise ValueError(f"{where}: stage {stage + 1} (step {step}) is beyond this run's "
                         f"{len(stages)} stage(s){hint}")
    if stage < len(stages) and not 0 <= step <= stages[stage][1]:
        raise ValueError(f"{where}: step {step} of stage {stage + 1} is outside 0..."
                         f"{stages[stage][1]} (that stage's steps){hint}")
    best = _best(arrays, leaves, where, hint)
    for i, p in enumerate(leaves):
        p._assign(arrays[f"p{i}"])
    opt = {k[4:]: v for k, v in arrays.items() if k.startswith("opt.") and k != "opt.step"}
    rng = json.loads(str(arrays["rng"])) if "rng" in arrays else None
    return Checkpoint(
        stage=stage, step=step, weights=weights,
        history={k[2:]: list(v) for k, v in arrays.items() if k.startswith("h.")},
        opt_state={"step": int(arrays["opt.step"]), "state": opt} if "opt.step" in arrays else None,
        interior=arrays.get("interior"), rng_state=rng, best=best,
        global_step=int(arrays["global_step"]) if "global_step" in arrays else None)


def _best(arrays, leaves, where, hint):
    """The best model's ``(step, loss, rel_l2, arrays)`` from the file (checked to fit the
    parameters), or None when it holds none."""
    if "best.step" not in arrays:
        return None
    found = [arrays.get(f"best.p{i}") for i in range(len(leaves))]
    for i, (a, p) in enumerate(zip(found, leaves)):
        why = "is missing" if a is None else \
            f"has shape {a.shape}, not {tuple(p.shape)}" if a.shape != tuple(p.shape) else \
            "holds non-finite values" if not np.all(np.isfinite(a)) else None
        if why:
            raise ValueError(f"{where}: its best model's parameter {i} {why}; the file is "
                             f"damaged or comes from another network{hint}")
    return (int(arrays["best.step"]), float(arrays["best.loss"]),
            float(arrays.get("best.rel_l2", np.nan)), found)


__all__ = ["save", "load", "Checkpoint", "FORMAT"]
