"""What ``solve`` returns (:class:`Result`), what callbacks receive (:class:`Progress`), and
the error of a trained network against the problem's reference."""
import numpy as np


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
        path_reason: why that path ran (e.g. the activation the fused kernels lack).
        best_step: the global step of the best model: the lowest finite training loss among
            the log lines (every ``log_every`` first-order steps, the last step of each stage,
            each curvature-optimizer call), DeepXDE's ``train_state.best_step``; None when
            no loss was logged. ``history['loss']`` at that step is ``best_loss``.
        best_loss: that loss (``best_loss_train``); None when no loss was logged.
        best_rel_l2: the best model's relative L2 error vs the reference (None without one).
        best_params: the best model's network parameters, a pytree like ``params`` (copies,
            held on the device; equal to ``params`` after ``solve(restore_best=True)``).
        best_parameters: the trainable PDE coefficients of the best model, dict name -> float.
        restored_best: True when ``solve(restore_best=True)`` put the best model back into
            the network: ``params``, ``predict``, ``rel_l2`` and ``parameters`` are its.
    """

    def __init__(self, problem, net, loss, history, errors, wall, grid, best=None,
                 restored_best=False):
        self.problem, self.net, self.history, self.errors, self.time = problem, net, history, errors, wall
        self.params = net.params()
        self.rel_l2 = errors.get("rel_l2", float("nan"))
        self.path = loss.path_used
        self.path_reason = getattr(loss, "path_reason", "")
        self._loss, self._grid = loss, grid
        self.parameters = {k: p.fitted for k, p in problem.parameters.items()}
        best = best or {}
        self.best_step, self.best_loss = best.get("step"), best.get("loss")
        self.best_rel_l2, self.best_params = best.get("rel_l2"), best.get("params")
        self.best_parameters = best.get("parameters", {})
        self.restored_best = bool(restored_best and best)

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
        if self.best_step is not None:
            extra += f", best_step={self.best_step}" + (" (restored)" if self.restored_best else "")
        return f"Result(rel_l2={self.rel_l2:.3e}, time={self.time:.1f}s{extra})"


class Progress:
    """Passed to callbacks: ``stage``, ``step`` (global), ``loss``, ``rel_l2``, ``terms``
    (dict), ``weights`` (dict), ``parameters`` (fitted PDE coefficients, dict), ``params``,
    ``elapsed``, ``best_step`` and ``best_loss`` (the best model so far, this step's loss
    included: ``lambda p: p.step - p.best_step >= 2000`` stops after 2000 steps without a new
    best, Keras's ``EarlyStopping(patience=...)``). A callback returning True stops the run (a
    checkpoint then records the stage and step, and a resumed run continues there)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def reference_grid(problem):
    """Points and reference values the error is measured on (None without a reference). A reference
    with k < n_out columns measures the first k outputs (an inverse problem's field known, its
    coefficient field not); more columns than outputs is an error (numpy would broadcast)."""
    g = _reference_grid(problem)
    if g is not None and g["u"].shape[1] > problem.n_out:
        raise ValueError(f"Problem(reference=...): the reference gives {g['u'].shape[1]} columns at "
                         f"{len(g['u'])} points but the problem has {problem.n_out} output(s); expected "
                         f"at most {problem.n_out} (k < {problem.n_out} columns compare the first k outputs).")
    return g


def _reference_grid(problem):
    ref = problem.reference
    if ref is None:
        return None
    if isinstance(ref, tuple):   # data: (points, values)
        pts, u = ref
        return {"points": pts, "u": u, "shape": None}
    if hasattr(ref, "grid") and problem.domain.dim == 2:
        X, Y, U = ref.grid(256, 100) if "t" in problem.names else ref.grid(101, 101)
        pts = np.stack([X.ravel(), Y.ravel()], axis=1)
        return {"points": pts, "u": np.reshape(U, (len(pts), -1)), "shape": X.shape,
                "X": X, "Y": Y}
    dom = problem.domain
    if dom.dim == 1:
        lo, hi = dom.bbox
        pts = np.linspace(lo[0], hi[0], 1001)[:, None]
    else:
        pts = dom.sample_interior(4096, method="grid")
    u = np.asarray(ref(pts), dtype=np.float64)
    return {"points": pts, "u": np.reshape(u, (len(pts), -1)), "shape": None}


def errors(loss, params, grid):
    """``rel_l2``, ``max_abs`` and ``rmse`` of the prediction on the grid (empty without)."""
    if grid is None:
        return {}
    pred = loss.predict(params, grid["points"]).astype(np.float64)
    ref = grid["u"]
    if pred.shape != ref.shape:
        pred = pred[:, :ref.shape[1]]
    diff = pred - ref
    return {"rel_l2": float(np.linalg.norm(diff) / max(np.linalg.norm(ref), 1e-300)),
            "max_abs": float(np.abs(diff).max()), "rmse": float(np.sqrt(np.mean(diff ** 2)))}


__all__ = ["Result", "Progress", "reference_grid", "errors"]
