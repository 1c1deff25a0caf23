"""End to end: a 2-output system (u'' = -sin x, v = u' on [0, pi], u = 0 at both ends) solved to
a small error, and Result.plot() drawing one row per output component."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

import sciml as sm  # noqa: E402
from sciml.models import MLP  # noqa: E402
from sciml.optim import LBFGS, Adam  # noqa: E402
from sciml.pinn import Dirichlet, Interval, Problem, d, solve  # noqa: E402


def _panels(fig):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def test_two_output_system_solves_and_plots_every_component(tmp_path):
    def residual(u, v, x):
        return [d(u, x, x) + sm.sin(x), v - d(u, x)]
    pb = Problem(Interval(0, np.pi), residual, outputs=("u", "v"),
                 conditions=[Dirichlet(0.0, component=0)],
                 reference=lambda p: np.stack([np.sin(p[:, 0]), np.cos(p[:, 0])], axis=1),
                 name="system")
    net = MLP([1, 16, 16, 2], activation=sm.tanh, seed=0)
    r = solve(pb, net, points=64, seed=0, verbose=False,
              stages=[(Adam(lr=1e-2), 200), (LBFGS(history=20, max_iter=50), 1000)])
    assert r.rel_l2 < 1e-3, r.rel_l2
    pred = r.predict(np.array([[np.pi / 2], [0.0]]))
    np.testing.assert_allclose(pred, [[1.0, 0.0], [0.0, 1.0]], atol=5e-3)
    png = tmp_path / "system.png"
    fig = r.plot(str(png))
    assert png.stat().st_size > 1000
    axes = _panels(fig)
    assert len(axes) == 2 * 2 + 1          # (solution, |error|) per component + the loss curves
    titles = [ax.get_title() for ax in axes]
    assert "solution u" in titles and "solution v" in titles
    assert "|error| v" in titles


def test_single_output_plot_keeps_its_layout(tmp_path):
    def residual(u, x):
        return d(u, x, x) + np.pi ** 2 * sm.sin(np.pi * x)
    pb = Problem(Interval(0, 1), residual, conditions=[Dirichlet(0.0)],
                 reference=lambda p: np.sin(np.pi * p[:, 0]))
    net = MLP([1, 8, 1], activation=sm.tanh, seed=0)
    r = solve(pb, net, points=16, stages=[(Adam(lr=1e-2), 5)], verbose=False)
    assert len(_panels(r.plot(str(tmp_path / "one.png")))) == 3


def test_two_component_2d_plot_has_a_row_per_component(tmp_path):
    from sciml.pinn import Rectangle, laplacian

    def residual(u, x, y):
        return [laplacian(u[0]) + 1.0, laplacian(u[1]) - 1.0]
    pb = Problem(Rectangle((0, 0), (1, 1)), residual, outputs=2,
                 conditions=[Dirichlet(0.0, hard=True)],
                 reference=lambda p: np.stack([p[:, 0] * (1 - p[:, 0]), p[:, 1] * (1 - p[:, 1])], axis=1))
    net = MLP([2, 8, 2], activation=sm.tanh, seed=0)
    r = solve(pb, net, points=32, stages=[(Adam(lr=1e-2), 3)], verbose=False)
    fig = r.plot(str(tmp_path / "two.png"))
    axes = _panels(fig)
    assert len(axes) == 3 * 2 + 1          # (solution, reference, |error|) per component + loss
    assert {"PINN solution u[0]", "PINN solution u[1]", "|error| u[1]"} <= {a.get_title() for a in axes}
