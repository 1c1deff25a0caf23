"""Plots of a PINN result: solution, reference, pointwise error and the training curves.

Figures are built with matplotlib's object API (:class:`matplotlib.figure.Figure`): drawing one
never switches or starts a GUI backend, so it works the same in a script, on a headless server
and in a notebook (where the returned Figure displays itself). ``show=True`` makes the figure
through ``pyplot`` and calls ``pyplot.show()`` (inline in a notebook, a window elsewhere).
Files are written atomically (:func:`sciml._io.atomic_write`).

The training panel draws the total loss, every loss term that differs from it, the relative L2
error at the evaluation steps, and marks the stage switches (e.g. Adam -> L-BFGS) and the
resamplings of the collocation points when the result's history records them
(``history["stage_step"]`` / ``history["stage_name"]``, ``history["resample_step"]``).
"""
import math
import os

import numpy as np

from .._io import atomic_write, check_output_path

# history keys that are not loss-term curves
_NOT_TERMS = ("step", "loss", "rel_l2", "time", "stage_step", "stage_name", "resample_step")


def plot_formats():
    """File suffixes ``Figure.savefig`` can write here (``.png``, ``.pdf``, ``.svg``, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase
    return tuple(sorted("." + k for k in FigureCanvasBase.get_supported_filetypes()))


def check_plot_path(path, *, arg="path"):
    """``path`` as a string after checking that its folder exists and its suffix is a format
    matplotlib writes; raises ValueError / FileNotFoundError / PermissionError naming ``arg``."""
    return check_output_path(path, arg=arg, suffixes=plot_formats())


def new_figure(figsize, show=False):
    """A Figure: through pyplot only when it is to be shown, else a plain object (no backend)."""
    if show:
        import matplotlib.pyplot as plt
        return plt.figure(figsize=figsize)
    from matplotlib.figure import Figure
    return Figure(figsize=figsize)


def save_figure(fig, path, dpi=100):
    """``fig.savefig(path)`` through an atomic write (the temporary name keeps the suffix, so
    the format is the one ``path`` asks for)."""
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=os.path.splitext(path)[1][1:].lower() or None)


def _events(h, steps):
    """(stage switches [(step, name)], resampling steps) from the history, when it has them."""
    names = list(h.get("stage_name", []) or [])
    starts = [float(s) for s in (h.get("stage_step", []) or [])]
    switches = [(s, str(names[i]) if i < len(names) else "") for i, s in enumerate(starts) if s > 0]
    resamples = [float(s) for s in (h.get("resample_step", []) or [])]
    return switches, resamples


def _loss_panel(ax, result):
    h = result.history
    steps = np.asarray(h.get("step", []), dtype=float)
    loss = np.asarray(h.get("loss", []), dtype=float)
    if len(steps):
        terms = [k for k in h if k not in _NOT_TERMS and len(h[k]) == len(steps)]
        shown = [n for n in terms   # a term equal to the loss (a single-term loss) is the same curve
                 if not np.allclose(np.asarray(h[n], dtype=float), loss, rtol=1e-6, atol=0, equal_nan=True)]
        same = [n for n in terms if n not in shown]
        label = "loss" + (f" (= {', '.join(same)})" if same else "")
        ax.semilogy(steps, np.maximum(loss, 1e-300), label=label, lw=1.5, color="k")
        for n in shown:
            ax.semilogy(steps, np.maximum(np.asarray(h[n], dtype=float), 1e-300), label=f"{n} term",
                        lw=0.8, alpha=0.8)
        err = np.asarray(h.get("rel_l2", [np.nan] * len(steps)), dtype=float)
        ok = np.isfinite(err)
        if ok.any():
            ax.semilogy(steps[ok], err[ok], "o-", ms=3, label="relative L2 error", color="tab:red")
        switches, resamples = _events(h, steps)
        for i, s in enumerate(resamples):
            ax.axvline(s, color="tab:green", lw=0.6, ls=":", alpha=0.7,
                       label="points resampled" if i == 0 else None)
        for i, (s, name) in enumerate(switches):
            ax.axvline(s, color="tab:blue", lw=1.0, ls="--", label="stage switch" if i == 0 else None)
            if name:
                ax.annotate(name, (s, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                            textcoords="offset points", va="top", fontsize=7, color="tab:blue")
    ax.set_xlabel("step")
    ax.set_ylabel("loss, loss terms, rel. L2 error")
    ax.set_title("training")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)


def _component_names(pb, k):
    names = getattr(pb, "output_names", None)
    if names and len(names) == k:
        return list(names)
    return ["u"] if k == 1 else [f"u[{i}]" for i in range(k)]


def plot_result(result, path=None, show=False):
    """Figure for a :class:`~sciml.pinn.solver.Result`; see ``Result.plot``.

    One row per output component (solution, reference, pointwise error), plus the training
    curves; a single-output 2-D problem keeps the 2 x 2 layout (solution, reference, error,
    training). ``path``: a file to write (its suffix picks the format: ``.png``, ``.pdf``,
    ``.svg``, ...), checked before anything is drawn. ``show``: also ``pyplot.show()``.
    Returns the :class:`matplotlib.figure.Figure`."""
    if path is not None:
        path = check_plot_path(path, arg="plot(path=...)")
    pb, grid = result.problem, result._grid
    dim = pb.domain.dim
    names = pb.names
    n_out = int(getattr(pb, "n_out", 1) or 1)
    comps = _component_names(pb, n_out)
    predict = lambda pts: np.reshape(result._loss.predict({"net": result.params}, pts),  # noqa: E731
                                     (len(pts), -1))
    if dim == 2:
        if grid is not None and grid.get("shape") is not None:
            X, Y, shape = grid["X"], grid["Y"], grid["shape"]
            pts, ref_all = grid["points"], grid["u"]
        else:
            lo, hi = pb.domain.bbox
            X, Y = np.meshgrid(np.linspace(lo[0], hi[0], 200), np.linspace(lo[1], hi[1], 100))
            shape, pts = X.shape, np.stack([X.ravel(), Y.ravel()], axis=1)
            ref_all = None if pb.reference is None else np.reshape(pb.reference(pts), (len(pts), -1))
        pred_all = predict(pts)
        outside = ~pb.domain.inside(pts).reshape(shape)
        if n_out == 1:
            fig = new_figure((11, 8), show)
            axes = fig.subplots(2, 2)
            rows = [[axes[0, 0], axes[0, 1], axes[1, 0]]]
            loss_ax = axes[1, 1]
        else:
            fig = new_figure((15, 3.6 * (n_out + 1)), show)
            gs = fig.add_gridspec(n_out + 1, 3)
            rows = [[fig.add_subplot(gs[i, j]) for j in range(3)] for i in range(n_out)]
            loss_ax = fig.add_subplot(gs[n_out, :])
        for i, (a_sol, a_ref, a_err) in enumerate(rows):
            c = comps[i]
            lab = "" if n_out == 1 else f" {c}"
            pred = np.where(outside, np.nan, pred_all[:, i].reshape(shape))
            panels = [(a_sol, pred, "PINN solution" + lab, "viridis", f"{c} (PINN)")]
            if ref_all is not None and ref_all.shape[1] > i:
                ref = np.where(outside, np.nan, ref_all[:, i].reshape(shape))
                panels += [(a_ref, ref, "reference" + lab, "viridis", f"{c} (reference)"),
                           (a_err, np.abs(pred - ref), "|error|" + lab, "magma",
                            f"|{c} - {c} reference|")]
            else:
                a_ref.axis("off")
                a_err.axis("off")
            for ax, Z, title, cmap, quantity in panels:
                m = ax.pcolormesh(X, Y, Z, shading="auto", cmap=cmap)
                fig.colorbar(m, ax=ax, label=quantity)
                ax.set_xlabel(names[0])
                ax.set_ylabel(names[1])
                ax.set_title(title)
        _loss_panel(loss_ax, result)
    elif dim == 1:
        fig = new_figure((14, 4 if n_out == 1 else 3.2 * n_out), show)
        gs = fig.add_gridspec(n_out, 3)
        lo, hi = pb.domain.bbox
        x = np.linspace(lo[0], hi[0], 501)[:, None]
        pred_all = predict(x)
        ref_all = None if pb.reference is None else np.reshape(pb.reference(x), (len(x), -1))
        for i in range(n_out):
            c = comps[i]
            a_sol, a_err = fig.add_subplot(gs[i, 0]), fig.add_subplot(gs[i, 1])
            lab = "" if n_out == 1 else f" {c}"
            a_sol.plot(x[:, 0], pred_all[:, i], label="PINN")
            if ref_all is not None and ref_all.shape[1] > i:
                a_sol.plot(x[:, 0], ref_all[:, i], "--", label="reference")
                a_err.semilogy(x[:, 0], np.abs(pred_all[:, i] - ref_all[:, i]) + 1e-300)
                a_err.set_ylabel(f"|{c} - {c} reference|")
            else:
                a_err.axis("off")
            a_sol.legend()
            a_sol.set_title("solution" + lab)
            a_sol.set_ylabel(c)
            a_err.set_title("|error|" + lab)
            for ax in (a_sol, a_err):
                ax.set_xlabel(names[0])
        _loss_panel(fig.add_subplot(gs[:, 2]), result)
    else:
        fig = new_figure((6, 4), show)
        _loss_panel(fig.add_subplot(1, 1, 1), result)
    err = result.rel_l2
    title = pb.name + (f": relative L2 error {err:.2e}" if math.isfinite(err) else "")
    fitted = getattr(result, "parameters", None) or {}
    if fitted:   # an inverse problem: the recovered coefficients belong in the title
        title += "; fitted " + ", ".join(f"{k} = {float(v):.4g}" for k, v in fitted.items())
    title += f" ({result.time:.0f} s)"
    fig.suptitle(title)
    fig.tight_layout()
    if path:
        save_figure(fig, path)
    if show:
        import matplotlib.pyplot as plt
        plt.show()
    return fig


__all__ = ["plot_result", "plot_formats", "check_plot_path", "new_figure", "save_figure"]
