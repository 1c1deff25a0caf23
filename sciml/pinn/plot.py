"""Plots of a PINN result: solution, reference, pointwise error and loss curves (matplotlib,
non-interactive Agg backend unless ``show=True``)."""
import math

import numpy as np


def _figure(show):
    import matplotlib
    if not show:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    return plt


def _loss_panel(ax, result):
    h = result.history
    steps = np.asarray(h["step"], dtype=float)
    if len(steps):
        ax.semilogy(steps, np.maximum(h["loss"], 1e-300), label="loss", lw=1.5, color="k")
        names = [k for k in h if k not in ("step", "loss", "rel_l2", "time")]
        for n in names:
            ax.semilogy(steps, np.maximum(h[n], 1e-300), label=n, lw=0.8, alpha=0.8)
        err = np.asarray(h["rel_l2"], dtype=float)
        ok = np.isfinite(err)
        if ok.any():
            ax.semilogy(steps[ok], err[ok], "o-", ms=3, label="rel. L2 error", color="tab:red")
    ax.set_xlabel("step")
    ax.set_title("training")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)


def _component_names(pb, k):
    names = getattr(pb, "output_names", None)
    if names and len(names) == k:
        return list(names)
    return ["u"] if k == 1 else [f"u[{i}]" for i in range(k)]


def plot_result(result, path=None, show=False):
    """Figure for a :class:`~sciml.pinn.solver.Result`; see ``Result.plot``.

    One row per output component (solution, reference, pointwise error), plus the loss curves;
    a single-output 2-D problem keeps the 2 x 2 layout (solution, reference, error, loss)."""
    plt = _figure(show)
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
            fig, axes = plt.subplots(2, 2, figsize=(11, 8))
            rows = [[axes[0, 0], axes[0, 1], axes[1, 0]]]
            loss_ax = axes[1, 1]
        else:
            fig = plt.figure(figsize=(15, 3.6 * (n_out + 1)))
            gs = fig.add_gridspec(n_out + 1, 3)
            rows = [[fig.add_subplot(gs[i, j]) for j in range(3)] for i in range(n_out)]
            loss_ax = fig.add_subplot(gs[n_out, :])
        for i, (a_sol, a_ref, a_err) in enumerate(rows):
            lab = "" if n_out == 1 else f" {comps[i]}"
            pred = np.where(outside, np.nan, pred_all[:, i].reshape(shape))
            panels = [(a_sol, pred, "PINN solution" + lab, "viridis")]
            if ref_all is not None and ref_all.shape[1] > i:
                ref = np.where(outside, np.nan, ref_all[:, i].reshape(shape))
                panels += [(a_ref, ref, "reference" + lab, "viridis"),
                           (a_err, np.abs(pred - ref), "|error|" + lab, "magma")]
            else:
                a_ref.axis("off")
                a_err.axis("off")
            for ax, Z, title, cmap in panels:
                m = ax.pcolormesh(X, Y, Z, shading="auto", cmap=cmap)
                fig.colorbar(m, ax=ax)
                ax.set_xlabel(names[0])
                ax.set_ylabel(names[1])
                ax.set_title(title)
        _loss_panel(loss_ax, result)
    elif dim == 1:
        fig = plt.figure(figsize=(14, 4 if n_out == 1 else 3.2 * n_out))
        gs = fig.add_gridspec(n_out, 3)
        lo, hi = pb.domain.bbox
        x = np.linspace(lo[0], hi[0], 501)[:, None]
        pred_all = predict(x)
        ref_all = None if pb.reference is None else np.reshape(pb.reference(x), (len(x), -1))
        for i in range(n_out):
            a_sol, a_err = fig.add_subplot(gs[i, 0]), fig.add_subplot(gs[i, 1])
            lab = "" if n_out == 1 else f" {comps[i]}"
            a_sol.plot(x[:, 0], pred_all[:, i], label="PINN")
            if ref_all is not None and ref_all.shape[1] > i:
                a_sol.plot(x[:, 0], ref_all[:, i], "--", label="reference")
                a_err.semilogy(x[:, 0], np.abs(pred_all[:, i] - ref_all[:, i]) + 1e-300)
            a_sol.legend()
            a_sol.set_title("solution" + lab)
            a_err.set_title("|error|" + lab)
            for ax in (a_sol, a_err):
                ax.set_xlabel(names[0])
        _loss_panel(fig.add_subplot(gs[:, 2]), result)
    else:
        fig, ax = plt.subplots(1, 1, figsize=(6, 4))
        _loss_panel(ax, result)
    err = result.rel_l2
    title = pb.name + (f": relative L2 error {err:.2e}" if math.isfinite(err) else "")
    title += f" ({result.time:.0f} s)"
    fig.suptitle(title)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
    if show:
        plt.show()
    else:
        plt.close(fig)
    return fig


__all__ = ["plot_result"]
