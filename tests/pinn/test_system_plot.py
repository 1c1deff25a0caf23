"""End to end: a 2-output system (u'' = -sin x, v = u' on [0, pi], u = 0 at both ends) solved to
a small error, and Result.plot() drawing one row per output component; the plot's labels,
legend, stage/resampling marks, atomic write and its not touching matplotlib's backend."""
import os

import matplotlib
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Interval, Problem, d, solve


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


@pytest.fixture(scope="module")
def tiny():
    """A 1-D result with two loss terms (PDE and boundary), 5 Adam steps."""
    def residual(u, x):
        return d(u, x, x) + np.pi ** 2 * sm.sin(np.pi * x)
    pb = Problem(Interval(0, 1), residual, conditions=[Dirichlet(0.0)],
                 reference=lambda p: np.sin(np.pi * p[:, 0]))
    net = MLP([1, 8, 1], activation=sm.tanh, seed=0)
    return solve(pb, net, points=16, stages=[(Adam(lr=1e-2), 5)], verbose=False)


def test_single_output_plot_keeps_its_layout(tiny, tmp_path):
    assert len(_panels(tiny.plot(str(tmp_path / "one.png")))) == 3


def test_plot_leaves_the_backend_and_pyplot_alone(tiny, tmp_path):
    """No matplotlib.use, no pyplot state: a notebook's inline backend keeps working."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    backend, before = matplotlib.get_backend(), plt.get_fignums()
    fig = tiny.plot(str(tmp_path / "a.pdf"))
    assert isinstance(fig, Figure)
    assert matplotlib.get_backend() == backend and plt.get_fignums() == before
    assert open(tmp_path / "a.pdf", "rb").read(5) == b"%PDF-"          # the suffix picks the format
    assert sorted(os.listdir(tmp_path)) == ["a.pdf"]                     # no temporary file left


def test_show_true_goes_through_pyplot(tiny, monkeypatch):
    """show=True (a notebook, an interactive session): a pyplot figure and pyplot.show()."""
    import matplotlib.pyplot as plt
    shown = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(plt.get_fignums()))
    fig = tiny.plot(show=True)
    try:
        assert len(shown) == 1 and fig.number in shown[0]
    finally:
        plt.close(fig)


def test_plot_labels_axes_colourbars_and_one_legend_entry_per_curve(tiny):
    fig = tiny.plot()
    sol, err, train = _panels(fig)
    assert sol.get_ylabel() == "u" and sol.get_xlabel() == "x"
    assert err.get_ylabel() == "|u - u reference|"
    assert train.get_ylabel() and train.get_xlabel() == "step"
    labels = train.get_legend_handles_labels()[1]
    assert len(labels) == len(set(labels)) == len(train.get_lines())
    assert labels[0] == "loss" and "relative L2 error" in labels


def test_a_single_term_loss_is_one_curve(tmp_path):
    from sciml.pinn import Rectangle, laplacian
    pb = Problem(Rectangle((0, 0), (1, 1)), lambda u, x, y: laplacian(u) + 1.0,
                 conditions=[Dirichlet(0.0, hard=True)])
    r = solve(pb, MLP([2, 4, 1], activation=sm.tanh, seed=0), points=16,
              stages=[(Adam(lr=1e-2), 2)], verbose=False)
    fig = r.plot()
    train = _panels(fig)[-1]
    assert train.get_legend_handles_labels()[1] == ["loss (= pde)"]
    cbars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert cbars and all(ax.get_ylabel() for ax in cbars)              # every colourbar says what it shows


def test_stage_switches_and_resamplings_are_marked(tiny):
    h = dict(tiny.history)
    h.update(stage_step=[0, 3], stage_name=["Adam", "LBFGS"], resample_step=[2, 4])
    r = type(tiny).__new__(type(tiny))
    r.__dict__.update(tiny.__dict__, history=h)
    train = _panels(r.plot())[-1]
    labels = train.get_legend_handles_labels()[1]
    assert labels.count("stage switch") == 1 and labels.count("points resampled") == 1
    xs = sorted(float(ln.get_xdata()[0]) for ln in train.get_lines() if ln.get_linestyle() in ("--", ":"))
    assert xs == [2.0, 3.0, 4.0]
    assert "LBFGS" in [t.get_text() for t in train.texts]


def test_a_bad_plot_path_is_refused_before_drawing(tiny, tmp_path):
    with pytest.raises(ValueError, match=r"plot\(path=...\): .* has suffix '.txt'; expected one of"):
        tiny.plot(str(tmp_path / "x.txt"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tiny.plot(str(tmp_path / "no" / "x.png"))


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
