"""The PINN training loop: ``solve(problem, net, points=..., stages=[(Adam(lr=1e-3), 5000),
(LBFGS(), 1000)])``.

Each stage is an optimizer and a number of steps. First-order optimizers (Adam, SGD, ...)
take one gradient step per step; curvature optimizers (L-BFGS, Levenberg–Marquardt, ...)
are handed the loss function and run their own iterations (a step = an iteration). The
loss is ``sum_i w_i mean(r_i^2)`` over the PDE residual and the conditions, with fixed or
adaptive weights (weighting.py); all derivatives of one evaluation come from one network
call (operators.py: the fused Taylor-mode kernels when they apply).
"""
import contextlib
import math
import os
import time

import numpy as np

from .. import backend
from .. import distributed as dist
from ..autodiff import ops
from ..autodiff.pytree import flatten, unflatten
from ..autodiff.tensor import tensor
from ..autodiff.transforms import vjp
from . import sampling
from .problem import Batch, Loss, Problem
from .weighting import as_weighting


class Result:
    """What ``solve`` returns.

    Attributes:
        net: the trained network (trained in place).
        params: its parameters, ``net.params()``.
        parameters: fitted PDE coefficients, dict name -> float (inverse problems).
        history: dict of lists: ``step``, ``loss``, one list per loss term, ``rel_l2``
            (nan where not evaluated), ``time`` (seconds since the start).
        rel_l2: relative L2 error vs the reference on its grid (nan without reference).
        errors: dict with ``rel_l2``, ``max_abs`` and ``rmse`` (empty without reference).
        time: wall time of the run in seconds.
        path: derivative path used (``'fused'``, ``'generic'`` or ``'autodiff'``).
    """

    def __init__(self, problem, net, loss, history, errors, wall, grid):
        self.problem, self.net, self.history, self.errors, self.time = problem, net, history, errors, wall
        self.params = net.params()
        self.rel_l2 = errors.get("rel_l2", float("nan"))
        self.path = loss.path_used
        self._loss, self._grid = loss, grid
        self.parameters = {k: p.fitted for k, p in problem.parameters.items()}

    def predict(self, points):
        """Network output (hard constraints applied) at points ``(m, dim)``: numpy ``(m, k)``."""
        x = self.problem.domain._points(points, "predict")
        return self._loss.predict({"net": self.params}, x)

    def plot(self, path=None, show=False):
        """Solution, reference, pointwise error and loss curves in one figure (matplotlib).

        Args:
            path: file to write (``.png``, ``.pdf``, ...); None: do not save.
            show: also ``plt.show()``.
        Returns:
            The matplotlib Figure.
        """
        from .plot import plot_result
        return plot_result(self, path, show)

    def __repr__(self):
        extra = "".join(f", {k}={v:.6g}" for k, v in self.parameters.items())
        return f"Result(rel_l2={self.rel_l2:.3e}, time={self.time:.1f}s{extra})"


def _default_stages():
    from ..optim import Adam
    stages = [(Adam(lr=1e-3), 5000)]
    try:
        from ..optim import LBFGS
        stages.append((LBFGS(), 1000))
    except ImportError:
        pass
    return stages


def _is_curvature(opt):
    return hasattr(opt, "_minimize") or getattr(opt, "needs_loss", False)


def _is_least_squares(opt):
    return any(c.__name__ in ("LevenbergMarquardt", "GaussNewton") for c in type(opt).__mro__)


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
    for _, p in net.named_parameters():
        if p.dtype != dtype:
            p._buf = backend.from_numpy(p.numpy().astype(dtype), dtype)
            p.dtype = dtype


def _point_counts(problem, points):
    conds = problem.conditions
    if isinstance(points, dict):
        known = {"interior", "boundary"} | {c.name for c in conds} | {c.on for c in conds}
        bad = set(points) - known
        if bad:
            raise ValueError(f"solve(points=...): unknown key(s) {sorted(bad)}; expected "
                             f"'interior', 'boundary' or a condition name {sorted(known)}.")
        n_int = points.get("interior", 4096)
        default_b = points.get("boundary", max(64, n_int // 20))
        per = [points.get(c.name, points.get(c.on, c.n_points or default_b)) for c in conds]
    else:
        n_int = points
        per = [c.n_points or max(64, int(points) // 20) if not isinstance(points, bool) else 0
               for c in conds]
    n_int = sampling.check_count(n_int, "solve(points=...): the number of interior points")
    if n_int == 0:
        raise ValueError("solve(points=...): need at least one interior point.")
    return n_int, [sampling.check_count(int(n), "solve(points=...)") for n in per]


def _given_interior(problem, points):
    """User-given interior points (an (n, dim) array, or under 'interior' in a dict), checked
    to lie in the domain; None when only counts are given."""
    arr = points.get("interior") if isinstance(points, dict) else points
    if isinstance(arr, (int, np.integer)) or arr is None:
        return None, points
    x = problem.domain.check_inside(arr, what="solve(points=...)")
    n = len(x)
    if isinstance(points, dict):
        points = {**points, "interior": n}
    else:
        points = n
    return x, points


def sample_batch(problem, points, rng, method, dtype):
    """Sample interior and condition points (a :class:`Batch`). ``points`` as in ``solve``;
    the interior points may also be given as an ``(n, dim)`` array (checked to lie inside)."""
    given, points = _given_interior(problem, points)
    n_int, per = _point_counts(problem, points)
    n_int, per = dist.local_count(n_int), [dist.local_count(n) for n in per]  # this rank's share (MPI)
    interior = given if given is not None else problem.domain.sample_interior(n_int, rng, method)
    cond_pts = [c.sample(problem.domain, n, rng, method)
                for c, n in zip(problem.conditions, per) if not c.hard]
    return Batch(problem, interior, cond_pts, dtype)


def _reference_grid(problem):
    ref = problem.reference
    if ref is None:
        return None
    if hasattr(ref, "grid") and problem.domain.dim == 2:
        X, Y, U = ref.grid(256, 100) if "t" in problem.names else ref.grid(101, 101)
        pts = np.stack([X.ravel(), Y.ravel()], axis=1)
        return {"points": pts, "u": np.reshape(U, (len(pts), -1)), "shape": X.shape,
                "X": X, "Y": Y}
    dom = problem.domain
    pts = dom.sample_interior(4096 if dom.dim > 1 else 1001, method="grid")
    if dom.dim == 1:
        lo, hi = dom.bbox
        pts = np.linspace(lo[0], hi[0], 1001)[:, None]
    u = np.asarray(ref(pts), dtype=np.float64)
    return {"points": pts, "u": np.reshape(u, (len(pts), -1)), "shape": None}


def _errors(loss, params, grid):
    if grid is None:
        return {}
    pred = loss.predict(params, grid["points"]).astype(np.float64)
    ref = grid["u"]
    if pred.shape != ref.shape:
        pred = pred[:, :ref.shape[1]]
    diff = pred - ref
    return {"rel_l2": float(np.linalg.norm(diff) / max(np.linalg.norm(ref), 1e-300)),
            "max_abs": float(np.abs(diff).max()), "rmse": float(np.sqrt(np.mean(diff ** 2)))}


class Progress:
    """Passed to callbacks: ``stage``, ``step`` (global), ``loss``, ``terms`` (dict), ``weights``
    (dict), ``parameters`` (fitted PDE coefficients, dict), ``params``, ``elapsed``. A callback
    returning True stops the run."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _save_checkpoint(path, params, stage, step, weights, history, opt):
    if not dist.is_main():  # under MPI only rank 0 writes (every rank holds the same values)
        return
    leaves, _ = flatten(params)
    data = {f"p{i}": np.asarray(l.numpy()) for i, l in enumerate(leaves)}
    data["stage"], data["step"], data["weights"] = np.array(stage), np.array(step), weights
    for k, v in history.items():
        data[f"h.{k}"] = np.asarray(v, dtype=np.float64)
    if opt is not None and not _is_curvature(opt) and hasattr(opt, "state_dict"):
        try:
            sd = opt.state_dict()
            data["opt.step"] = np.array(sd["step"])
            for k, v in sd["state"].items():
                data[f"opt.{k}"] = np.asarray(v)
        except Exception:   # an optimizer without a saveable state: resume restarts it
            pass
    tmp = path + ".tmp.npz"
    np.savez(tmp, **data)
    os.replace(tmp, path)


def _load_checkpoint(path, params):
    z = np.load(path)
    leaves, _ = flatten(params)
    for i, p in enumerate(leaves):
        a = z[f"p{i}"]
        if a.shape != p.shape:
            raise ValueError(f"solve(checkpoint={path!r}): parameter {i} has shape {a.shape} in the "
                             f"checkpoint but {p.shape} in the network; it comes from another "
                             "network or problem (delete it or pass resume=False).")
        p._assign(a)
    hist = {k[2:]: list(z[k]) for k in z.files if k.startswith("h.")}
    opt = {k[4:]: z[k] for k in z.files if k.startswith("opt.") and k != "opt.step"}
    opt_sd = {"step": int(z["opt.step"]), "state": opt} if "opt.step" in z.files else None
    return int(z["stage"]), int(z["step"]), z["weights"], hist, opt_sd


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


def solve(problem, net, points=4096, stages=None, *, blas_threads=1, **kw):
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
        callbacks: functions ``cb(progress)`` called at every log line; True stops the run.
        checkpoint: file (``.npz``) to save parameters, stage, step, weights, history and the
            first-order optimizer state to every ``checkpoint_every`` steps and at the end.
        resume: if the checkpoint file exists, continue from it.
        seed: seeds the point sampling (the network has its own seed).
        dtype: ``'float32'`` or ``'float64'`` (default: sciml's default dtype); the network is
            cast to it in place.
        log_every: print a progress line every this many steps (default: about 20 lines a stage).
        verbose: print progress lines.
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
        blas_threads: BLAS threads while training (default 1: numpy's OpenBLAS threads and
            Taichi's otherwise compete for the cores; None leaves numpy's setting).
        path: derivative path, ``'auto'`` (fused when it applies), ``'fused'``, ``'generic'``
            or ``'autodiff'``.
        loss_transform: what curvature stages (L-BFGS, BFGS, Newton) minimise: None (the loss
            L itself), ``'sqrt'`` (sqrt L) or ``'log'`` (log L), the loss modification of Urban,
            Stefanou & Pons 2024: same minimisers, but the quasi-Newton model stays well scaled
            as L falls by many orders of magnitude. Logged losses are always L.
    Returns:
        :class:`Result`.
    """
    with _blas_threads(blas_threads):
        return _solve(problem, net, points, stages, **kw)


def _solve(problem, net, points=4096, stages=None, *, weights=None, callbacks=(), checkpoint=None,
           checkpoint_every=1000, resume=True, seed=0, dtype=None, log_every=None, verbose=True,
           resample=None, method="lhs", path="auto", loss_transform=None):
    """Implementation of :func:`solve`."""
    from .. import runtime
    if not isinstance(problem, Problem):
        raise TypeError(f"solve: problem must be a sciml.pinn.Problem, got {type(problem).__name__}.")
    if not (hasattr(net, "params") and hasattr(net, "apply")):
        raise TypeError(f"solve: net must be a sciml model (params() and apply()), got "
                        f"{type(net).__name__}.")
    dtype = runtime.default_dtype() if dtype is None else str(dtype)
    if dtype not in ("float32", "float64"):
        raise ValueError(f"solve: dtype must be 'float32' or 'float64', got {dtype!r}.")
    stages = _check_stages(_default_stages() if stages is None else stages)
    weighting = as_weighting(weights)
    verbose = verbose and dist.is_main()  # under MPI: rank 0 prints
    rng = sampling.as_rng(dist.rank_seed(seed) if isinstance(seed, int) else seed, "solve(seed=...)")
    _cast_net(net, dtype)
    _check_net(problem, net, dtype)
    batch = sample_batch(problem, points, rng, method, dtype)
    loss = Loss(problem, net, batch, path)
    names = loss.term_names
    weighting.init(names, [1.0] + [c.weight for c in problem.soft_conditions])

    from ..models.module import Parameter as ModelParameter
    pde = {k: ModelParameter(tensor(p.raw_init(), dtype)) for k, p in problem.parameters.items()}
    params = {"net": net.params(), "pde": pde}
    grid = _reference_grid(problem)
    history = {k: [] for k in ["step", "loss", *names, "rel_l2", "time"]}
    start_stage, start_step, opt_sd = 0, 0, None
    if checkpoint and resume and dist.bcast_object(os.path.exists(checkpoint)):
        start_stage, start_step, w, hist, opt_sd = _load_checkpoint(checkpoint, params)
        weighting.load(w)
        history.update({k: list(v) for k, v in hist.items() if k in history})
        if verbose:
            print(f"resuming from {checkpoint}: stage {start_stage + 1}, step {start_step}")
    resample = _resample_options(resample)
    fwd, inv = _loss_transform(loss_transform)
    dist.broadcast_parameters(params)  # under MPI: every rank starts from rank 0's parameters

    t0 = time.perf_counter()
    w_now = lambda: [float(v) for v in weighting.w]  # noqa: E731

    def total(p):
        terms = loss.terms(p)
        w = w_now()
        tot = terms[0] * w[0]
        for wi, ti in zip(w[1:], terms[1:]):
            tot = tot + ti * wi
        return tot, terms

    def record(step, value, terms, force_eval=False):
        history["step"].append(step)
        history["loss"].append(value)
        for n, t in zip(names, terms):
            history[n].append(float(t))
        history["time"].append(time.perf_counter() - t0)
        err = _errors(loss, params, grid)["rel_l2"] if (force_eval and grid) else float("nan")
        history["rel_l2"].append(err)
        return err

    global_step = sum(s for _, s in stages[:start_stage]) + start_step
    stop = False
    for si, (opt, steps) in enumerate(stages):
        if si < start_stage or stop:
            continue
        first = start_step if si == start_stage else 0
        label = type(opt).__name__
        every = log_every or max(1, steps // 20)
        curv = _is_curvature(opt)
        leaves_tree = params if problem.parameters else {"net": params["net"], "pde": {}}
        opt.bind(leaves_tree)
        if opt_sd is not None and si == start_stage and not curv:
            try:
                opt.load_state_dict(opt_sd)
            except Exception:
                pass
        tick, tick_step = time.perf_counter(), first
        k = first
        while k < steps and not stop:
            k_prev = k
            if curv:
                if _is_least_squares(opt):   # Levenberg–Marquardt / Gauss–Newton: residuals
                    chunk_fn = dist.wrap_residuals(lambda p: loss.residual_vector(p, w_now()))  # all ranks' residuals
                else:
                    glob = dist.wrap_loss(lambda p: total(p)[0])  # global mean over MPI ranks
                    chunk_fn = glob if fwd is None else (lambda p, glob=glob: fwd(glob(p)))
                res = _curvature_chunk(opt, chunk_fn, steps - k)
                done = max(int(getattr(res, "iterations", 1)), 0)
                k += max(done, 1)
                global_step += max(done, 1)
                with_log = True
                value, terms = float(res.loss), dist.all_reduce(loss.terms(params))
                if fwd is not None and not _is_least_squares(opt):
                    value = inv(value)
                why = getattr(res, "reason", "")
                force = (why == "line_search" and done > 0 and resample is not None and k < steps
                         and (resample["until"] is None or global_step <= resample["until"]))
                if force:
                    # no decrease found on these points (float32 at its rounding floor): with
                    # resampling on, draw the next points now instead of ending the stage
                    stop_stage = False
                elif done == 0 or why in ("gtol", "ftol", "xtol", "line_search", "converged"):
                    stop_stage = True
                else:
                    stop_stage = False
            else:
                force = False
                (value_t, terms), grads = dist.value_and_grad(total, has_aux=True, reduce_aux=True)(params)
                opt.step(grads)
                k += 1
                global_step += 1
                value = float(value_t)
                with_log = k % every == 0 or k == steps
                stop_stage = False
                if weighting.adaptive:
                    weighting.update(k, lambda: _term_grad_norms(loss, params))
            if resample and k < steps and (resample["until"] is None or global_step <= resample["until"]) \
                    and (force or global_step // resample["every"]
                         > (global_step - (k - k_prev)) // resample["every"]):
                batch = _resample(problem, loss, params, batch, rng, resample, dtype, method)
                loss = _rebuild(loss, batch)
                if curv and resample["restart"]:   # a new objective: restart the curvature history
                    opt.bind(leaves_tree)
            if not math.isfinite(value):
                raise FloatingPointError(f"solve: the loss became {value} at step {global_step} "
                                         f"({label}); lower the learning rate or check the problem.")
            err = record(global_step, value, terms, force_eval=with_log)
            if with_log:
                now = time.perf_counter()
                rate = (k - tick_step) / max(now - tick, 1e-9)
                tick, tick_step = now, k
                if verbose:
                    _print_line(label, min(k, steps), steps, value, names, terms, err, rate, weighting,
                                _fitted(problem, pde))
                info = Progress(stage=si, step=global_step, loss=value, rel_l2=err,
                                terms=dict(zip(names, map(float, terms))),
                                weights=dict(zip(names, w_now())), params=params,
                                parameters=_fitted(problem, pde),
                                elapsed=now - t0)
                for cb in callbacks:
                    if cb(info):
                        stop = True
            if checkpoint and (global_step % checkpoint_every == 0 or k >= steps):
                _save_checkpoint(checkpoint, params, si, k, weighting.state(), history, opt)
            if stop_stage:
                if verbose:
                    why = getattr(res, "message", "") or ""
                    why = why.split(": ", 2)[-1] if why.count(": ") >= 2 else why  # drop the chunk's own counts
                    print(f"{label}: stopped at step {k} of {steps}: {why}")
                break
        start_step = 0
        if checkpoint:
            _save_checkpoint(checkpoint, params, si + 1, 0, weighting.state(), history, None)
    wall = time.perf_counter() - t0
    for k, v in _fitted(problem, pde).items():
        problem.parameters[k].fitted = v
    errors = _errors(loss, params, grid)
    result = Result(problem, net, loss, history, errors, wall, grid)
    if verbose:
        msg = f"done in {wall:.1f} s"
        if errors:
            msg += f"; relative L2 error {errors['rel_l2']:.3e}"
        for k, v in result.parameters.items():
            msg += f"; {k} = {v:.6g}"
        print(msg)
    return result


def _curvature_chunk(opt, loss_fn, remaining):
    """One ``opt.step(loss_fn)``, its iteration cap lowered to the stage's remaining steps."""
    from ..optim.result import CurvatureOptimizer
    if isinstance(opt, CurvatureOptimizer):
        return opt.step(loss_fn, max_iter=max(1, int(remaining)))
    return opt.step(loss_fn)


def _check_net(problem, net, dtype):
    x = tensor(np.zeros((1, problem.domain.dim)), dtype)
    try:
        y = net.apply(net.params(), x)
    except Exception as e:
        raise ValueError(f"solve: the network cannot take points of shape (n, {problem.domain.dim}) "
                         f"(coordinates {problem.names}): {e}") from None
    if y.ndim != 2 or y.shape[1] != problem.n_out:
        raise ValueError(f"solve: the network maps (n, {problem.domain.dim}) to {y.shape}; the "
                         f"problem needs (n, {problem.n_out}) (outputs).")


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


def _resample_options(resample):
    if resample is None or resample is False:
        return None
    if isinstance(resample, str):
        resample = {"method": resample}
    if not isinstance(resample, dict):
        raise TypeError(f"solve(resample=...): expected None, 'rad', 'rar' or a dict, got "
                        f"{type(resample).__name__}.")
    opts = {"method": "rad", "every": 1000, "candidates": 4, "k": 1.0, "c": 1.0, "add": 0.1,
            "until": None, "restart": True}
    bad = set(resample) - set(opts)
    if bad:
        raise ValueError(f"solve(resample=...): unknown option(s) {sorted(bad)}; expected "
                         f"{sorted(opts)}.")
    opts.update(resample)
    if opts["method"] not in ("rad", "rar"):
        raise ValueError(f"solve(resample=...): method must be 'rad' or 'rar', got "
                         f"{opts['method']!r}.")
    return opts


def _loss_transform(name):
    """(forward, inverse) of ``solve(loss_transform=...)``: None, 'sqrt' or 'log'."""
    if name is None or name == "none":
        return None, None
    if name == "sqrt":
        return ops.sqrt, lambda v: v * v
    if name == "log":
        return ops.log, math.exp
    raise ValueError(f"solve(loss_transform=...): expected None, 'sqrt' or 'log', got {name!r}.")


def _resample(problem, loss, params, batch, rng, opts, dtype, method):
    n = batch.n
    cand = problem.domain.sample_interior(int(opts["candidates"] * n), rng, method)
    r = loss.residual_at(params, cand)
    if opts["method"] == "rad":
        interior = sampling.rad_resample(cand, r, n, rng, k=opts["k"], c=opts["c"])
    else:
        extra = sampling.rar_add(cand, r, max(1, int(opts["add"] * n)))
        interior = np.concatenate([batch.interior, extra])
    return Batch(problem, interior, batch.cond_points, dtype)


def _rebuild(loss, batch):
    new = Loss.__new__(Loss)
    new.__dict__.update(loss.__dict__)
    new.batch = batch
    return new


def _fitted(problem, pde):
    """Current values of the trainable PDE coefficients, dict name -> float."""
    out = {}
    for k, p in problem.parameters.items():
        raw = float(pde[k].numpy())
        out[k] = math.exp(raw) if p.log else raw
    return out


def _print_line(label, k, steps, value, names, terms, err, rate, weighting, fitted=None):
    parts = "  ".join(f"{n} {float(t):.2e}" for n, t in zip(names, terms))
    line = f"{label:>6} {k:>6}/{steps:<6} loss {value:.3e}  [{parts}]"
    if math.isfinite(err):
        line += f"  rel_l2 {err:.3e}"
    if weighting.adaptive:
        line += "  w " + ",".join(f"{w:.3g}" for w in weighting.w)
    for n, v in (fitted or {}).items():
        line += f"  {n} {v:.5g}"
    line += f"  {rate:.1f} steps/s"
    print(line, flush=True)


__all__ = ["solve", "Result", "Progress", "sample_batch"]
