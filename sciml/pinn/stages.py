"""Stage runners of the PINN solver and its resampling policy.

A stage is ``(optimizer, steps)``. :func:`run_stage` picks the runner:

* first-order (Adam, SGD, ...): one gradient step per step;
* curvature (L-BFGS, BFGS, Newton, ...): the optimizer is handed the loss function and runs
  its own iterations, at most the steps left in the stage per call (a step = an iteration);
* least-squares (Levenberg–Marquardt, Gauss–Newton): as curvature, on the residual vector.

Each runner starts at step ``first`` of its stage (a resumed run), reports every step to
``run.after_step`` (which resamples, records, logs, calls the callbacks and checkpoints) and
returns ``(steps_done, stopped)``: ``stopped`` when a callback or Ctrl-C asked to stop.
The losses of the log lines go to ``run.best`` (best.py: the best model so far).
"""
import os

import numpy as np

from .. import backend
from .. import distributed as dist
from .._log import get_logger
from . import sampling
from .problem import Batch, Loss

log = get_logger("pinn")


def is_curvature(opt):
    return hasattr(opt, "_minimize") or getattr(opt, "needs_loss", False)


def is_least_squares(opt):
    return any(c.__name__ in ("LevenbergMarquardt", "GaussNewton") for c in type(opt).__mro__)


def run_stage(run, si, opt, steps, first):
    if is_least_squares(opt):
        return run_least_squares(run, si, opt, steps, first)
    if is_curvature(opt):
        return run_curvature(run, si, opt, steps, first)
    return run_first_order(run, si, opt, steps, first)


def run_first_order(run, si, opt, steps, first):
    """One ``opt.step(grads)`` per step; logs every ``run.log_every`` steps (default: about
    20 lines a stage)."""
    every = run.log_every or max(1, steps // 20)
    k = first
    while k < steps:
        log_line = (k + 1) % every == 0 or k + 1 == steps
        if log_line:   # this step's loss will be read: keep the parameters it is evaluated at
            run.best.take(run.step + 1)   # (device copies; none between log lines)
        (value, terms), grads = _gradient(run)(run.params)
        opt.step(grads)
        k += 1
        if run.weighting.adaptive:
            run.weighting.update(k, run.term_grad_norms)
        if run.after_step(si, opt, k, steps, 1, value, terms, log=log_line):   # read later: run.defer
            return k, True
    return k, False


def run_curvature(run, si, opt, steps, first):
    """``opt.step(loss_fn)`` calls, each capped at the steps left in the stage. An ``LBFGS``
    built without ``jit=`` (its default, None) is switched to ``jit=True`` (loss and gradient replayed
    through sciml.jit, the same bits) when the first-order step of this Loss replays (see
    ``_gradient``): Lorenz inverse at 1/50, 33.6 -> 25.0 s."""
    def objective():
        glob = dist.wrap_loss(lambda p: run.total(p)[0])   # global mean over MPI ranks
        fwd = run.transform[0]
        return glob if fwd is None else (lambda p: fwd(glob(p)))
    inv = run.transform[1] or (lambda v: v)
    if getattr(opt, "_jit_auto", False) and not opt._jit and _replayable(run):
        opt._jit = True   # L-BFGS: its loss and gradient replayed (sciml.jit), the same bits
    return _curvature_loop(run, si, opt, steps, first, objective, inv)


def run_least_squares(run, si, opt, steps, first):
    """Levenberg–Marquardt / Gauss–Newton on the weighted residual vector."""
    def objective():
        return dist.wrap_residuals(lambda p: run.loss.residual_vector(p, run.w_now()))
    return _curvature_loop(run, si, opt, steps, first, objective, lambda v: v)


def _gradient(run):
    """The first-order step's ``params -> ((loss, terms), grads)``.

    On one process it is ``sciml.jit`` of ``value_and_grad(run.total)``: traced at the second
    step (and checked against an eager call), then replayed, i.e. the same kernels and BLAS calls
    in the same order on the same buffers (the same bits) without the Python of the tape, the
    rules and the fused regions (a 3x50 tanh net on 37 points: 4.3 -> 1.3 ms a step). The loss
    weights are static (a new trace when an adaptive weighting changes them), and a new ``Loss``
    (resampling) gets a new trace, at its second step. A function that cannot be traced (a
    host read while tracing, a user's own Taichi kernel) runs eagerly, as do a run under MPI (its
    all-reduce), a device arch (Vulkan, CUDA: the fused step is a few grouped launches already,
    and a replay there relaunches with fresh contexts) and ``SCIML_PINN_JIT=0``."""
    cache = run.__dict__.setdefault("_grad_fn", [None, None])
    if cache[0] is not run.loss:
        cache[:] = [run.loss, _Step(run)]
    return cache[1]


class _Step:
    """``params -> ((loss, terms), grads)`` of one Loss: jitted unless it cannot be (see
    ``_gradient``); ``.jitted`` says which ran, ``.why`` why not."""

    def __init__(self, run):
        from ..autodiff.transforms import value_and_grad
        self.run, self.why, self.probed = run, None, False
        self.eager = dist.value_and_grad(run.total, has_aux=True, reduce_aux=True)
        if os.environ.get("SCIML_PINN_JIT", "1") == "0":
            self.why = "SCIML_PINN_JIT=0"
        elif dist.is_distributed():
            self.why = "distributed (the gradient's all-reduce)"
        elif not backend.on_host():   # devices: the fused step's own launch budget (tests/test_launch_budget.py)
            self.why = "a device arch (its fused step is already a few grouped launches)"
        self.fn = None
        if self.why is None:
            from ..autodiff.jit import jit
            vg = value_and_grad(lambda p, w: run.total(p, list(w)), has_aux=True)
            self.fn = jit(vg, static_argnums=1, max_traces=2)

    @property
    def jitted(self):
        return self.fn is not None

    def __call__(self, params):
        if self.fn is None:
            return self.eager(params)
        if not self.probed:   # the first step eagerly (it compiles the kernels); traced at the second
            self.probed = True
            return self.eager(params)
        from ..autodiff.jit import JitError
        try:   # (detached leaves: a bare Parameter, e.g. a PDE coefficient, records a tape node)
            return self.fn(_detached(params), tuple(self.run.w_now()))
        except JitError as e:   # cannot be replayed: eager from now on, and say why (debug log)
            self.fn, self.why = None, str(e)
            log.debug("solve: first-order steps run eagerly: %s", e)
            return self.eager(params)


def _detached(tree):
    from ..autodiff.pytree import tree_map
    return tree_map(lambda t: t.detach() if getattr(t, "_node", None) is not None else t, tree)


def _replayable(run):
    """True when the first-order step of the current Loss is (or would be) jitted. (A fused GEMM
    split over two threads, large point sets, is one recorded host call: ``fused_gemm._split_gemm``.)"""
    return _gradient(run).fn is not None


_CONVERGED = ("gtol", "ftol", "xtol", "line_search", "converged", "descent")


def _curvature_loop(run, si, opt, steps, first, objective, to_loss):
    k = first
    while k < steps:
        res = _chunk(opt, objective(), steps - k)
        done = max(int(getattr(res, "iterations", 1)), 0)
        n = max(done, 1)
        k += n
        value, terms = to_loss(float(res.loss)), dist.all_reduce(run.loss.terms(run.params))
        why = getattr(res, "reason", "")
        # no decrease found on these points (float32 at its rounding floor): with resampling
        # on, draw the next points now instead of ending the stage
        force = why == "line_search" and done > 0 and k < steps and run.policy.active(run.step + n)
        if run.after_step(si, opt, k, steps, n, value, terms, log=True, force_resample=force):
            return k, True
        if not force and k < steps and (done == 0 or why in _CONVERGED):
            msg = getattr(res, "message", "") or ""
            msg = msg.split(": ", 2)[-1] if msg.count(": ") >= 2 else msg  # drop the chunk's counts
            run.console.note(f"{type(opt).__name__}: stopped at step {k} of {steps}: {msg}")
            break
    return k, False


def _chunk(opt, loss_fn, remaining):
    """One ``opt.step(loss_fn)``, its iteration cap lowered to the stage's remaining steps."""
    from ..optim.result import CurvatureOptimizer
    if isinstance(opt, CurvatureOptimizer):
        return opt.step(loss_fn, max_iter=max(1, int(remaining)))
    return opt.step(loss_fn)


class ResamplePolicy:
    """When and how the interior points are redrawn (``solve(resample=...)``).

    Args:
        resample: None, ``'rad'``/``'rar'`` or a dict of options (see ``solve``).
    """

    DEFAULTS = {"method": "rad", "every": 1000, "candidates": 4, "k": 1.0, "c": 1.0, "add": 0.1,
                "until": None, "restart": True}

    def __init__(self, resample):
        if resample is None or resample is False:
            self.opts = None
            return
        if isinstance(resample, str):
            resample = {"method": resample}
        if not isinstance(resample, dict):
            raise TypeError(f"solve(resample=...): expected None, 'rad', 'rar' or a dict, got "
                            f"{type(resample).__name__}.")
        bad = set(resample) - set(self.DEFAULTS)
        if bad:
            raise ValueError(f"solve(resample=...): unknown option(s) {sorted(bad)}; expected "
                             f"{sorted(self.DEFAULTS)}.")
        self.opts = {**self.DEFAULTS, **resample}
        if self.opts["method"] not in ("rad", "rar"):
            raise ValueError(f"solve(resample=...): method must be 'rad' or 'rar', got "
                             f"{self.opts['method']!r}.")
        every = self.opts["every"]
        if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every <= 0:
            raise ValueError(f"solve(resample=...): 'every' must be an int > 0, got {every!r}.")

    def active(self, global_step):
        """Resampling still allowed at this global step."""
        o = self.opts
        return o is not None and (o["until"] is None or global_step <= o["until"])

    def due(self, global_step, n, force=False):
        """Resample after a step that took the global count from ``global_step - n``."""
        if not self.active(global_step):
            return False
        e = self.opts["every"]
        return force or global_step // e > (global_step - n) // e

    def resample(self, problem, loss, params, rng, dtype, method):
        """A new Loss on redrawn interior points (the conditions keep theirs)."""
        o, batch = self.opts, loss.batch
        n = batch.n
        cand = problem.domain.sample_interior(int(o["candidates"] * n), rng, method)
        r = loss.residual_at(params, cand)
        if o["method"] == "rad":
            interior = sampling.rad_resample(cand, r, n, rng, k=o["k"], c=o["c"])
        else:
            extra = sampling.rar_add(cand, r, max(1, int(o["add"] * n)))
            interior = np.concatenate([batch.interior, extra])
        return with_batch(loss, Batch(problem, interior, batch.cond_points, dtype))


def with_batch(loss, batch):
    """A copy of ``loss`` on other points (the recorded derivative sets are kept)."""
    new = Loss.__new__(Loss)
    new.__dict__.update(loss.__dict__)
    new.batch = batch
    return new


__all__ = ["run_stage", "run_first_order", "run_curvature", "run_least_squares",
           "ResamplePolicy", "is_curvature", "is_least_squares", "with_batch"]
