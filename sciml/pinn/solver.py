"""The PINN training loop: ``solve(problem, net, points=..., stages=[(Adam(lr=1e-3), 5000),
(LBFGS(), 1000)])``.

Each stage is an optimizer and a number of steps. First-order optimizers (Adam, SGD, ...)
take one gradient step per step; curvature optimizers (L-BFGS, Levenberg–Marquardt, ...)
are handed the loss function and run their own iterations (a step = an iteration); the stage
runners are in stages.py. The loss is ``sum_i w_i mean(r_i^2)`` over the PDE residual and
the conditions, with fixed or adaptive weights (weighting.py); all derivatives of one
evaluation come from one network call (operators.py: the fused Taylor-mode kernels when they
apply). Checkpoints (checkpoint.py) record the stage and step, so a stopped run resumes where
it stopped; console.py shows the progress.
"""
import contextlib
import math
import os
import signal
import sys
import threading
import time

import numpy as np

from .. import backend
from .. import distributed as dist
from .._io import check_output_path
from ..autodiff import ops
from ..autodiff.pytree import flatten
from ..autodiff.tensor import tensor
from ..autodiff.transforms import vjp
from . import checkpoint as ckpt
from . import fused_loss
from . import sampling
from .best import BestModel
from .console import Console
from .points import sample_batch  # noqa: F401 - re-exported: sciml.pinn.solver.sample_batch
from .problem import Batch, Loss, Problem
from .result import Progress, Result, errors, reference_grid
from .stages import ResamplePolicy, is_curvature, run_stage, with_batch
from .weighting import as_weighting


def _default_stages():
    from ..optim import Adam
    stages = [(Adam(lr=1e-3), 5000)]
    try:
        from ..optim import LBFGS
        stages.append((LBFGS(), 1000))
    except ImportError:
        pass
    return stages


def _check_stages(stages):
    if not isinstance(stages, (list, tuple)) or not stages:
        raise ValueError("solve(stages=...): expected a list of (optimizer, steps) pairs, e.g. "
                         "[(Adam(lr=1e-3), 5000), (LBFGS(), 1000)].")
    out = []
    for k, st in enumerate(stages):
        if not (isinstance(st, (list, tuple)) and len(st) == 2):
            raise ValueError(f"solve(stages=...): stage {k} is {st!r}; expected (optimizer, steps).")
        opt, steps = st
        if not hasattr(opt, "step") or not hasattr(opt, "bind"):
            raise TypeError(f"solve(stages=...): stage {k} has {type(opt).__name__}; expected a "
                            "sciml.optim optimizer (Adam(lr=1e-3), LBFGS(), ...).")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"solve(stages=...): stage {k} has steps={steps!r}; expected an int "
                             ">= 0.")
        out.append((opt, steps))
    return out


def _cast_net(net, dtype):
    """Cast the network's parameters to ``dtype`` in place (solve trains in one dtype)."""
    leaves, _ = flatten(net.params())
    for p in leaves:
        if getattr(p, "dtype", dtype) != dtype:
            p._buf = backend.from_numpy(p.numpy().astype(dtype), dtype)
            p.dtype = dtype


def _blas_threads(n):
    """Limit the BLAS thread pool (numpy's OpenBLAS) while training: its spinning threads and
    Taichi's compete for the same cores; measured here, 2048-point Burgers steps went from
    93 ms to 0.25 ms per GEMM under load with one BLAS thread."""
    if n is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    from ..kernels import blas
    blas.mkl()  # load MKL (sciml's GEMM when installed) now, so that threadpoolctl sees it too
    return threadpool_limits(int(n), user_api="blas")


def solve(problem, net, points=4096, stages=None, *, weights=None, callbacks=(), checkpoint=None,
          checkpoint_every=1000, resume=True, seed=0, dtype=None, log_every=None,
          verbose: bool = False, progress: bool = True, resample=None, method="lhs",
          path="auto", loss_transform=None, pde_on_boundary=False, blas_threads=1,
          restore_best=False):
    """Train a PINN: fit ``net`` so that ``problem``'s residual and conditions vanish.

    Args:
        problem: a :class:`~sciml.pinn.Problem`.
        net: a network with ``params()`` and ``apply(params, x)`` (``sciml.models.MLP``: the fused
            derivative kernels apply), input width ``domain.dim``, output width ``n_out``.
        points: interior points (int; each condition gets ``max(64, points // 20)`` unless it
            sets ``points=``; or an ``(n, dim)`` array of your own points), or a dict ``{'interior': 10000, 'boundary': 200, 'initial': 200}``
            (keys: ``'interior'``, ``'boundary'`` (default of all conditions), condition names).
        stages: list of ``(optimizer, steps)``; default ``[(Adam(lr=1e-3), 5000), (LBFGS(),
            1000)]``. A step of a curvature optimizer is one of its iterations.
        weights: dict term -> weight, ``'grad_norm'``, or ``Fixed(...)`` / ``GradNorm(...)``.
        callbacks: functions ``cb(progress)`` (a :class:`Progress`) called at every log line;
            one returning True stops the run after that step.
        checkpoint: file (``.npz``; checked for a writable folder before training) to save
            the parameters, the stage and step, weights, history, interior points, sampler
            state and the first-order optimizer state to, every ``checkpoint_every`` steps,
            at the end of each stage, and when the run is stopped (a callback, Ctrl-C: the
            run ends after the current step). Written atomically: a crash leaves the
            previous checkpoint.
        resume: if the checkpoint file exists, continue from its stage and step (a
            checkpoint that does not fit the problem, network or stages is refused).
        seed: seeds the point sampling (the network has its own seed).
        dtype: ``'float32'`` or ``'float64'`` (default: sciml's default dtype); the network is
            cast to it in place.
        log_every: callbacks (and ``verbose`` table rows) every this many first-order steps
            (default: about 20 a stage); curvature stages report every optimizer call.
        verbose: print the per-interval table (through the ``sciml.pinn`` logger) instead of
            the progress bar.
        progress: False: show nothing (no header, bar or summary line). By default a header,
            one tqdm bar on stderr (plain lines when stderr is not a terminal) and a summary.
        resample: residual-adaptive resampling of the interior points every ``every`` steps
            (in curvature stages at the end of an optimizer step, which restarts its history
            unless ``'restart': False``: a dense BFGS then keeps its inverse-Hessian estimate
            across the new points, as Urban et al. 2024 do; a curvature step whose line search
            fails after progress draws the new points at once instead of ending the stage):
            None, ``'rad'``/``'rar'``, or a dict ``{'method': 'rad', 'every': 1000,
            'candidates': 4, 'k': 1, 'c': 1}`` (RAD: Wu et al. 2023) or ``{'method': 'rar',
            'add': 0.1}`` (RAR: add the 10% worst candidates); ``'until': step`` stops
            resampling after that (global) step, so the last stage converges on fixed points.
        method: sampler of the collocation points (``'lhs'``, ``'sobol'``, ``'uniform'``,
            ``'grid'``).
        pde_on_boundary: also apply the PDE residual on the conditions' boundary and initial
            points (DeepXDE's semantics: its PDE points are ``num_domain`` interior plus the
            ``num_boundary``/``num_initial`` points); default False: interior points only.
        blas_threads: BLAS threads while training (default 1: numpy's OpenBLAS threads and
            Taichi's otherwise compete for the cores; None leaves numpy's setting).
        path: derivative path, ``'auto'`` (fused when it applies), ``'fused'``, ``'generic'``
            or ``'autodiff'``.
        loss_transform: what curvature stages (L-BFGS, BFGS, Newton) minimise: None (the loss
            L itself), ``'sqrt'`` (sqrt L) or ``'log'`` (log L), the loss modification of Urban,
            Stefanou & Pons 2024: same minimisers, but the quasi-Newton model stays well scaled
            as L falls by many orders of magnitude. Logged losses are always L.
        restore_best: at the end, put the best model (the lowest finite training loss at the
            log lines, tracked always: ``Result.best_step``, ``best_loss``, ``best_params``)
            back into the network and the trainable coefficients, so that ``Result.params``,
            ``predict``, ``rel_l2`` and ``parameters`` are the best model's (DeepXDE's
            ``Best model at step N``, Keras's ``restore_best_weights``). Default False: the
            last step's parameters.
    Returns:
        :class:`Result`.
    """
    run = _Run(problem, net, points, stages, weights=weights, callbacks=callbacks,
               checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume, seed=seed,
               dtype=dtype, log_every=log_every, verbose=verbose, progress=progress,
               resample=resample, method=method, path=path, loss_transform=loss_transform,
               pde_on_boundary=pde_on_boundary, restore_best=restore_best)
    with _blas_threads(blas_threads), _deferred_interrupt() as interrupted:
        run.interrupted = interrupted
        return run.train()


class _Run:
    """One training run: everything the stage runners share (the "state" of ``solve``).

    Built (and every argument checked) before any training; ``train()`` runs the stages from
    the checkpoint's position, ``after_step`` is the per-step policy (resampling, records,
    progress, callbacks, checkpoints)."""

    def __init__(self, problem, net, points, stages, *, weights, callbacks, checkpoint,
                 checkpoint_every, resume, seed, dtype, log_every, verbose, progress, resample,
                 method, path, loss_transform, pde_on_boundary, restore_best):
        from .. import runtime
        if not isinstance(restore_best, bool):
            raise TypeError(f"solve(restore_best=...): expected True or False, got "
                            f"{type(restore_best).__name__} {restore_best!r}.")
        self.restore_best = restore_best
        if not isinstance(problem, Problem):
            raise TypeError(f"solve: problem must be a sciml.pinn.Problem, got "
                            f"{type(problem).__name__}.")
        if not (hasattr(net, "params") and hasattr(net, "apply")):
            raise TypeError(f"solve: net must have params() and apply(params, x), got "
                            f"{type(net).__name__}.")
        dtype = runtime.default_dtype() if dtype is None else str(dtype)
        if dtype not in ("float32", "float64"):
            raise ValueError(f"solve: dtype must be 'float32' or 'float64', got {dtype!r}.")
        self.stages = _check_stages(_default_stages() if stages is None else stages)
        self.weighting = as_weighting(weights)
        self.checkpoint = None if checkpoint is None else check_output_path(
            checkpoint, arg="solve(checkpoint=...)", suffixes=(".npz",), default_suffix=".npz")
        if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) \
                or checkpoint_every <= 0:
            raise ValueError(f"solve(checkpoint_every=...): expected an int > 0, got "
                             f"{checkpoint_every!r}.")
        self.policy = ResamplePolicy(resample)
        self.transform = _loss_transform(loss_transform)
        self.problem, self.net, self.dtype, self.method = problem, net, dtype, method
        self.callbacks, self.checkpoint_every = list(callbacks), checkpoint_every
        self.resume, self.log_every = resume, log_every
        self.rng = sampling.as_rng(dist.rank_seed(seed) if isinstance(seed, int) else seed,
                                   "solve(seed=...)")
        _cast_net(net, dtype)
        _check_net(problem, net, dtype)
        batch = sample_batch(problem, points, self.rng, method, dtype, bool(pde_on_boundary))
        self.loss = Loss(problem, net, batch, path)
        self.names = self.loss.term_names
        self.weighting.init(self.names, [1.0] + [c.weight for c in problem.soft_conditions])
        from ..models.module import Parameter as ModelParameter
        self.pde = {k: ModelParameter(tensor(p.raw_init(), dtype))
                    for k, p in problem.parameters.items()}
        self.params = {"net": net.params(), "pde": self.pde}
        self.leaves_tree = self.params if problem.parameters else {"net": self.params["net"],
                                                                   "pde": {}}
        self.best = BestModel(self.params)   # the lowest loss at the log lines (best.py)
        self.grid = reference_grid(problem)
        self.history = {k: [] for k in ["step", "loss", *self.names, "rel_l2", "time"]}
        self.step, self.opt_state, self.interrupted = 0, None, lambda: False
        # on a device every read of a loss value is a sync: the step values wait here (device
        # Tensors) and are read together, in one transfer, on log lines, before a checkpoint,
        # resampling or a stop, and for the progress bar every _SHOW_EVERY seconds; on the host
        # a read is free, so they are read at every step (the NaN check then stops at once)
        self.defer = not backend.on_host() if _DEFER is None else bool(_DEFER)
        self._pending, self._rows, self._nrows, self._label = [], None, 0, ""
        self._shown = -math.inf
        self._last = (float("nan"), [float("nan")] * len(self.names), {})
        self.marks = {"stage_step": [], "stage_name": [], "resample_step": []}   # for Result.plot (this run)
        show = bool(progress) and dist.is_main()   # under MPI: rank 0 shows the progress
        self.console = Console(sum(s for _, s in self.stages), self.names, show=show,
                               verbose=bool(verbose))

    # --- the loss ------------------------------------------------------------------------
    def w_now(self):
        return [float(v) for v in self.weighting.w]

    def total(self, p, w=None):
        terms = self.loss.terms(p)
        w = self.w_now() if w is None else w
        tot = fused_loss.weighted_total(terms, w)   # devices: one kernel (pinn/fused_loss.py)
        if tot is None:
            tot = terms[0] * w[0]
            for wi, ti in zip(w[1:], terms[1:]):
                tot = tot + ti * wi
        return tot, terms

    def term_grad_norms(self):
        return _term_grad_norms(self.loss, self.params)

    # --- the run -------------------------------------------------------------------------
    def train(self):
        start, first = self._resume()
        self.console.header(self._header(start, first))
        self.console.start(self.step)
        self.t0 = self._tick = time.perf_counter()
        self._tick_step = self.step
        stopped, si = False, start
        for si in range(start, len(self.stages)):
            opt, steps = self.stages[si]
            opt.bind(self.leaves_tree)
            if si == start and self.opt_state is not None:
                with contextlib.suppress(Exception):   # another optimizer kind: it restarts
                    opt.load_state_dict(self.opt_state)
            k0 = first if si == start else 0
            self._pos = None
            self.marks["stage_step"].append(self.step)
            self.marks["stage_name"].append(_STAGE_LABELS.get(type(opt).__name__, type(opt).__name__))
            try:
                k, stopped = run_stage(self, si, opt, steps, k0)
            except KeyboardInterrupt:   # raised inside a step: keep the last finished one
                if self._pos is not None:
                    with contextlib.suppress(FloatingPointError):   # diverged: no checkpoint
                        self.save(*self._pos)
                self.console.close("interrupted")
                raise
            if stopped:
                self.save(si, k, opt)
                break
            self.console.shrink(steps - k)   # a curvature stage that converged early
            self.save(si + 1, 0, None)
        return self._finish(stopped, si)

    def after_step(self, si, opt, k, steps, n, value, terms, *, log, force_resample=False):
        """Everything after ``n`` optimizer steps (now at step ``k`` of ``steps`` in stage
        ``si``); returns True when the run must stop (a callback, Ctrl-C). ``value`` and
        ``terms`` may be device Tensors: they are read only when something needs them (see
        ``defer``)."""
        self.step += n
        self._pos = (si, k, opt)
        self._label = type(opt).__name__
        now = time.perf_counter()
        self._hold(value, terms, now)
        resample = k < steps and self.policy.due(self.step, n, force_resample)
        every = self.checkpoint_every
        save_due = k < steps and self.step // every > (self.step - n) // every
        interrupted = self.interrupted()
        if (not self.defer or log or resample or save_due or interrupted or k >= steps
                or self._display_due(n, now)):
            self._flush()      # raises FloatingPointError at the first non-finite loss
            self._last = (*self._last[:2], _fitted(self.problem, self.pde))
            self._shown = now
        if resample:
            self.loss = self.policy.resample(self.problem, self.loss, self.params, self.rng,
                                             self.dtype, self.method)
            self.marks["resample_step"].append(self.step)
            if is_curvature(opt) and self.policy.opts["restart"]:   # a new objective
                opt.bind(self.leaves_tree)
        label = type(opt).__name__
        value, terms, fitted = self._last
        err = float("nan")
        if log and self.grid:
            err = errors(self.loss, self.params, self.grid)["rel_l2"]
            self.history["rel_l2"][-1] = err
        rate = (self.step - self._tick_step) / max(now - self._tick, 1e-9)
        self.console.update(n, stage=label, k=min(k, steps), steps=steps, value=value,
                            terms=terms, err=err, rate=rate, extra=fitted)
        stop = False
        if log:
            self.best.offer(self.step, value, err)   # before the callbacks: a stop keeps it
            self._tick, self._tick_step = now, self.step
            self.console.line(label, min(k, steps), steps, value, terms, err, rate,
                              self.weighting.w if self.weighting.adaptive else None, fitted)
            info = Progress(stage=si, step=self.step, loss=value, rel_l2=err,
                            terms=dict(zip(self.names, terms)),
                            weights=dict(zip(self.names, self.w_now())), params=self.params,
                            parameters=fitted, elapsed=now - self.t0,
                            best_step=self.best.step, best_loss=self.best.loss)
            for cb in self.callbacks:
                stop = bool(cb(info)) or stop
        stop = stop or self.interrupted()   # a Ctrl-C during this step (the callbacks included)
        if not stop and save_due:
            self.save(si, k, opt)
        return stop

    def _display_due(self, n, now):
        """The progress display shows values at this step: the bar at most every
        _SHOW_EVERY seconds, the plain lines (no terminal) at their steps."""
        c = self.console
        if not c.show:
            return False
        if c.bar is not None:
            return now - self._shown >= _SHOW_EVERY
        if c.plain:
            done = c._done + n
            return done >= c._next_plain or done >= c.total
        return False

    def _hold(self, value, terms, now):
        """Keep this step's values until ``_flush``: with ``defer``, one-element device Tensors are
        copied (one launch) into a row of a device buffer that ``_flush`` reads at once."""
        from ..autodiff.tensor import Tensor
        from ..kernels import optim as KO
        vals = [value, *terms]
        row = None
        if self.defer and all(isinstance(x, Tensor) and x.size == 1 and x.dtype == self.dtype
                              for x in vals):
            width = len(vals)
            if self._rows is None or self._rows[1] != width:
                self._flush()
                self._rows = (backend.empty(_HOLD_ROWS * width, self.dtype), width)
            if self._nrows == _HOLD_ROWS:
                self._flush()
            row, self._nrows = self._nrows, self._nrows + 1
            KO.gather_scalars(self._rows[0], row * width, [x._buf for x in vals], self.dtype)
            vals = None
        self._pending.append((self.step, row, vals, now - self.t0, self._label))

    def _flush(self):
        """Read the held step values (one host read on a device) into the history; the last
        become ``self._last``. A non-finite loss raises, naming its step."""
        pend, self._pending, self._nrows = self._pending, [], 0
        if not pend:
            return
        rows, n = None, sum(e[1] is not None for e in pend)
        if n:
            buf, width = self._rows
            rows = backend.to_numpy(buf, (n * width,), self.dtype).reshape(n, width).tolist()
        h = self.history
        for step, row, vals, t, label in pend:
            vals = rows[row] if row is not None else [float(x) for x in vals]
            value, terms = vals[0], vals[1:]
            if not math.isfinite(value):
                raise FloatingPointError(f"solve: the loss became {value} at step {step} "
                                         f"({label}); lower the learning rate or check the "
                                         "problem.")
            h["step"].append(step)
            h["loss"].append(value)
            for name, x in zip(self.names, terms):
                h[name].append(x)
            h["time"].append(t)
            h["rel_l2"].append(float("nan"))
            self._last = (value, terms, self._last[2])

    def save(self, stage, step, opt):
        self._flush()   # the history up to this step (and no checkpoint of a diverged run)
        if self.checkpoint:
            ckpt.save(self.checkpoint, self.params, stage, step, self.weighting.state(),
                      self.history, opt, interior=self.loss.batch.interior, rng=self.rng,
                      global_step=self.step, best=self.best.state())

    def _resume(self):
        """Load the checkpoint if there is one: ``(stage, step)`` to start from."""
        path = self.checkpoint
        found = path and self.resume and dist.bcast_object(os.path.exists(path))
        if found:
            c = ckpt.load(path, self.params, len(self.names), self.stages)
            self.weighting.load(c.weights)
            self.best.load(c.best)
            self.history.update({k: list(v) for k, v in c.history.items() if k in self.history})
            self.opt_state = c.opt_state
            self.step = c.global_step if c.global_step is not None else \
                sum(s for _, s in self.stages[:c.stage]) + c.step
            if not dist.is_distributed():   # the same points and random stream as before
                if c.interior is not None and c.stage < len(self.stages):
                    self.loss = with_batch(self.loss, Batch(self.problem, c.interior,
                                                            self.loss.batch.cond_points,
                                                            self.dtype))
                if c.rng_state is not None and hasattr(self.rng, "bit_generator"):
                    self.rng.bit_generator.state = c.rng_state
        dist.broadcast_parameters(self.params)  # under MPI: every rank starts from rank 0's
        self._resumed = (path, c.stage, c.step) if found else None
        return (c.stage, c.step) if found else (0, 0)

    def _header(self, start, first):
        pb = self.problem
        n_cond = sum(len(p) for p in self.loss.batch.cond_points)
        plan = " + ".join(f"{type(o).__name__} {s}" for o, s in self.stages)
        text = (f"solve {pb.name}: {pb.domain.dim} input(s) {pb.names} -> {pb.n_out} output(s), "
                f"{self.loss.batch.n} interior + {n_cond} condition points, {plan} steps, "
                f"{self.dtype}")
        if self._resumed:
            text += f"; resuming {self._resumed[0]} at stage {start + 1}, step {first}"
        return text

    def _finish(self, stopped, si):
        wall = time.perf_counter() - self.t0
        best = self.best
        if self.restore_best:
            best.restore()   # the network and the coefficients hold the best model
        for k, v in _fitted(self.problem, self.pde).items():
            self.problem.parameters[k].fitted = v
        errs = errors(self.loss, self.params, self.grid)
        history = {**self.history, **self.marks}     # stage switches and resamplings, drawn by plot()
        result = Result(self.problem, self.net, self.loss, history, errs, wall, self.grid,
                        best=best.summary(
                            lambda tree: _fitted(self.problem, tree["pde"]),
                            lambda tree: errors(self.loss, tree, self.grid).get("rel_l2"),
                            errs.get("rel_l2") if self.restore_best else None),
                        restored_best=self.restore_best)
        restored = self.restore_best and best.found
        head = f"relative L2 error {errs['rel_l2']:.3e}" if errs else \
            f"loss {best.loss if restored else self.history['loss'][-1]:.3e}" \
            if self.history["loss"] else ""
        head += best.restored_note(self.step, bool(errs)) if restored else ""
        msg = f"{self.problem.name}: " + (head + ", " if head else "")
        msg += "".join(f"{k} = {v:.6g}, " for k, v in result.parameters.items())
        msg += f"{wall:.1f} s ({result.path} derivatives)"
        if stopped:
            msg += f"; stopped at step {self._pos[1]} of stage {si + 1}"
            if self.checkpoint:
                msg += f" (resume from {self.checkpoint})"
        if best.found and self.console.verbose:   # DeepXDE's closing line
            self.console.note(best.deepxde_line(result.best_rel_l2))
        self.console.close(msg)
        if self.interrupted():
            raise KeyboardInterrupt(f"solve: interrupted at stage {si + 1}, step {self._pos[1]}"
                                    + (f"; saved to {self.checkpoint}: run again to resume"
                                       if self.checkpoint else ""))
        return result


_SHOW_EVERY = 0.5   # seconds between the progress bar's value reads on a device
_HOLD_ROWS = 256   # step values held on a device between reads
_DEFER = None       # None: defer the step values' reads on devices only; tests set True/False

_STAGE_LABELS = {"LBFGS": "L-BFGS", "LevenbergMarquardt": "LM", "GaussNewton": "Gauss-Newton"}


@contextlib.contextmanager
def _deferred_interrupt():
    """Ctrl-C during training stops the run at the end of the current step (so the
    checkpoint holds a finished step); a second Ctrl-C interrupts at once. Only in the main
    thread (elsewhere Python delivers no signals)."""
    flag = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def handler(signum, frame):
        if flag:
            raise KeyboardInterrupt
        flag.append(True)
        sys.stderr.write("\nsolve: stopping after this step (Ctrl-C again to stop at once)\n")
    try:
        old = signal.signal(signal.SIGINT, handler)
    except (ValueError, OSError):   # signals unavailable here
        yield lambda: False
        return
    try:
        yield lambda: bool(flag)
    finally:
        signal.signal(signal.SIGINT, old)


def _check_net(problem, net, dtype):
    """The network (with its transforms) maps m points to (m, n_out). Probed at m = 5 or 7 points of the
    domain (m unequal to n_out): with one point, a transform written ``x[:, 0] * y`` ((m,) times (m, 1):
    (m, m) by broadcasting) would pass and then train on an (n, n) output without a word."""
    m = 7 if problem.n_out == 5 else 5
    pts = problem.domain.sample_interior(m, np.random.default_rng(0))   # Problem checked the domain has it
    x = tensor(np.asarray(pts, dtype=np.float64), dtype)
    try:
        y = net.apply(net.params(), x)
    except Exception as e:
        raise ValueError(f"solve: the network cannot take points of shape (n, {problem.domain.dim}) "
                         f"(coordinates {problem.names}): {e}") from None
    if y.ndim != 2 or tuple(y.shape) != (m, problem.n_out):
        bc = (" (an output transform written x[:, 0] * y multiplies an (n,) column by the (n, 1) "
              "output: (n, n) by broadcasting; write x[:, 0:1] * y)") if y.ndim == 2 and y.shape[1] == m else ""
        raise ValueError(f"solve: the network maps {m} points (shape ({m}, {problem.domain.dim})) to "
                         f"{tuple(y.shape)}; the problem needs ({m}, {problem.n_out}) (one row per point, "
                         f"one column per output){bc}.")


def _term_grad_norms(loss, params):
    """Euclidean norm of the gradient of each loss term w.r.t. the network parameters."""
    out, pull = vjp(lambda p: ops.stack(loss.terms({"net": p, "pde": params["pde"]})),
                    params["net"])
    norms = []
    m = out.shape[0]
    for i in range(m):
        e = np.zeros(m)
        e[i] = 1.0
        g = dist.all_reduce(pull(tensor(e, out.dtype))[0])  # global gradient under MPI
        leaves, _ = flatten(g)
        norms.append(math.sqrt(sum(float((l * l).sum()) for l in leaves)))
    return norms


def _loss_transform(name):
    """(forward, inverse) of ``solve(loss_transform=...)``: None, 'sqrt' or 'log'."""
    if name is None or name == "none":
        return None, None
    if name == "sqrt":
        return ops.sqrt, lambda v: v * v
    if name == "log":
        return ops.log, math.exp
    raise ValueError(f"solve(loss_transform=...): expected None, 'sqrt' or 'log', got {name!r}.")


def _fitted(problem, pde):
    """Current values of the trainable PDE coefficients, dict name -> float."""
    out = {}
    for k, p in problem.parameters.items():
        raw = float(pde[k].numpy())
        out[k] = math.exp(raw) if p.log else raw
    return out



__all__ = ["solve", "Result", "Progress", "sample_batch"]
