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


def plot_result(result, path=None, show=False):
    """Figure for a :class:`~sciml.pinn.solver.Result`; see ``Result.plot``."""
    plt = _figure(show)
    pb, grid = result.problem, result._grid
    dim = pb.domain.dim
    names = pb.names
    if dim == 2:
        if grid is not None and grid.get("shape") is not None:
            X, Y, shape = grid["X"], grid["Y"], grid["shape"]
            pts, ref = grid["points"], grid["u"][:, 0].reshape(shape)
        else:
            lo, hi = pb.domain.bbox
            X, Y = np.meshgrid(np.linspace(lo[0], hi[0], 200), np.linspace(lo[1], hi[1], 100))
            shape, pts = X.shape, np.stack([X.ravel(), Y.ravel()], axis=1)
            ref = None if pb.reference is None else \
                np.reshape(pb.reference(pts), (len(pts), -1))[:, 0].reshape(shape)
        pred = result._loss.predict({"net": result.params}, pts)[:, 0].reshape(shape)
        outside = ~pb.domain.inside(pts).reshape(shape)
        pred = np.where(outside, np.nan, pred)
        fig, axes = plt.subplots(2, 2, figsize=(11, 8))
        panels = [(axes[0, 0], pred, "PINN solution", "viridis")]
        if ref is not None:
            ref = np.where(outside, np.nan, ref)
            panels += [(axes[0, 1], ref, "reference", "viridis"),
                       (axes[1, 0], np.abs(pred - ref), "|error|", "magma")]
        else:
            axes[0, 1].axis("off")
            axes[1, 0].axis("off")
        for ax, Z, title, cmap in panels:
            m = ax.pcolormesh(X, Y, Z, shading="auto", cmap=cmap)
            fig.colorbar(m, ax=ax)
            ax.set_xlabel(names[0])
            ax.set_ylabel(names[1])
            ax.set_title(title)
        _loss_panel(axes[1, 1], result)
    else:
        fig, axes = plt.subplots(1, 3 if dim == 1 else 1, figsize=(14 if dim == 1 else 6, 4))
        axes = np.atleast_1d(axes)
        if dim == 1:
            lo, hi = pb.domain.bbox
            x = np.linspace(lo[0], hi[0], 501)[:, None]
            pred = result._loss.predict({"net": result.params}, x)[:, 0]
            axes[0].plot(x[:, 0], pred, label="PINN")
            if pb.reference is not None:
                ref = np.reshape(pb.reference(x), (len(x), -1))[:, 0]
                axes[0].plot(x[:, 0], ref, "--", label="reference")
                axes[1].semilogy(x[:, 0], np.abs(pred - ref) + 1e-300)
            axes[0].legend()
            axes[0].set_title("solution")
            axes[1].set_title("|error|")
            for ax in axes[:2]:
                ax.set_xlabel(names[0])
        _loss_panel(axes[-1], result)
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
