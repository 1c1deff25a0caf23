"""The non-PDE examples' ``--plot PATH`` flag: the path is checked before any training (a clear
argparse error naming --plot), and a small run writes a figure that explains itself: a title,
labelled axes, a labelled colourbar for every colour map, and a legend entry for each visible curve
where an axes draws more than one (no duplicate entries). The figures are built with matplotlib's
object API (no pyplot state) and written through sciml._io.atomic_write (no temporary file left)."""
import importlib.util
import os

import matplotlib.figure
import numpy as np
import pytest

import sciml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# each example in a small mode: the arguments after --plot PATH
SMALL = {
    "billiards": ["--steps", "60", "--iters", "2"],
    "mass_spring": ["--steps", "12", "--iters", "1"],
    "digits_mlp": ["--quick", "--dtype", "float64"],
    "deeponet": ["--quick"],
    "lstm_forecast": ["--quick"],
    "transformer_toy": ["--quick"],
    "gp_regression": ["--quick"],
    "per_example_clip": ["--quick", "--steps", "10"],
}
NEEDS_SKLEARN = {"digits_mlp", "digits_cnn"}
# digits_cnn's training (conv kernels) is the slowest; its --plot wiring is digits_mlp's, and
# tests/models/test_examples_nn.py runs it with the flag's old name --out: here its figure is drawn
# from a made-up history (test_digits_cnn_figure), and its bad paths are checked like the others'.
ALL = sorted(SMALL) + ["digits_cnn"]


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_plot_{name}", os.path.join(ROOT, "examples", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _skip_without_sklearn(name):
    if name in NEEDS_SKLEARN:
        pytest.importorskip("sklearn", reason="scikit-learn (digits data): pip install -e '.[examples]'")


def _data_lines(ax):
    return [ln for ln in ax.get_lines() if ln.get_visible() and len(np.atleast_1d(ln.get_xdata())) > 0]


def _legend_texts(fig):
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    texts = []
    for leg in legends:
        entries = [t.get_text() for t in leg.get_texts()]
        assert len(entries) == len(set(entries)), f"duplicate legend entries: {entries}"
        assert all(e and not e.startswith("_") for e in entries), entries
        texts += entries
    return set(texts)


def check_figure(fig):
    """Fail with a message when the figure does not explain itself."""
    assert isinstance(fig, matplotlib.figure.Figure)
    assert fig.canvas.manager is None, "built through pyplot (use matplotlib.figure.Figure)"
    suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
    legend_texts = _legend_texts(fig)
    colorbar_axes = {m.colorbar.ax for ax in fig.axes for m in ax.collections + ax.images
                     if getattr(m, "colorbar", None) is not None}
    for ax in fig.axes:
        if ax in colorbar_axes:
            continue
        has_data = bool(_data_lines(ax) or ax.collections or ax.images or ax.patches)
        if not has_data:
            continue
        assert suptitle or ax.get_title(), "an axes with data and no title (and no figure title)"
        twins = [a for a in ax.get_shared_x_axes().get_siblings(ax) if a is not ax]
        assert ax.get_xlabel() or any(a.get_xlabel() for a in twins), f"no x label on {ax.get_title()!r}"
        assert ax.get_ylabel(), f"no y label on {ax.get_title()!r}"
        for m in ax.collections + ax.images:   # colour maps (pcolormesh, imshow, contourf) need a labelled colourbar
            if type(m).__name__ in ("QuadMesh", "AxesImage") or getattr(m, "filled", False):
                assert m.colorbar is not None, f"a colour map without a colourbar on {ax.get_title()!r}"
                cb_ax = m.colorbar.ax
                assert cb_ax.get_ylabel() or cb_ax.get_xlabel(), "a colourbar without a quantity label"
        lines = _data_lines(ax)
        if len(lines) >= 2:
            for ln in lines:
                assert ln.get_label() in legend_texts, \
                    f"curve {ln.get_label()!r} on {ax.get_title()!r} has no legend entry ({sorted(legend_texts)})"


@pytest.fixture
def saved_figures(monkeypatch):
    """Record every Figure that is saved (the examples' own savefig calls go through)."""
    saved = []
    original = matplotlib.figure.Figure.savefig

    def savefig(self, fname, *args, **kwargs):
        saved.append((self, os.fspath(fname)))
        return original(self, fname, *args, **kwargs)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return saved


@pytest.mark.parametrize("name", sorted(SMALL))
def test_plot_flag_writes_a_figure_that_explains_itself(name, tmp_path, saved_figures):
    _skip_without_sklearn(name)
    out = tmp_path / f"{name}.png"
    _load(name).main(["--plot", str(out)] + SMALL[name])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path)) == [out.name], "a temporary file was left behind"
    assert len(saved_figures) == 1
    fig, written = saved_figures[0]
    assert os.path.dirname(written) == str(tmp_path) and written != str(out)   # through atomic_write
    check_figure(fig)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad, message", [("missing/fig.png", "does not exist"), ("fig.txt", "suffix")])
def test_bad_plot_path_fails_before_training(name, bad, message, tmp_path, monkeypatch, capsys):
    def started(*a, **k):
        raise AssertionError("training started before --plot was checked")
    monkeypatch.setattr(sciml, "init", started)
    monkeypatch.setattr(sciml, "manual_seed", started)
    with pytest.raises(SystemExit) as exc:
        _load(name).main(["--plot", str(tmp_path / bad)])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert "--plot" in captured.err and message in captured.err
    assert captured.out == ""
    assert os.listdir(tmp_path) == []


def test_digits_cnn_figure(tmp_path, saved_figures):
    mod = _load("digits_cnn")
    rng = np.random.default_rng(0)
    history = {"loss": list(np.exp(-np.linspace(0, 5, 46)) + 0.01 * rng.random(46)),
               "val": [{"loss": 0.5 / (e + 1), "accuracy": 0.9 + 0.01 * e} for e in range(2)]}
    out = tmp_path / "cnn.png"
    fig = mod.plot(history, str(out), "CNN")
    assert out.read_bytes()[:4] == b"\x89PNG" and os.listdir(tmp_path) == [out.name]
    assert saved_figures[0][0] is fig
    check_figure(fig)


def test_plot_format_follows_the_suffix(tmp_path, saved_figures):
    out = tmp_path / "gp.svg"
    _load("gp_regression").main(["--quick", "--plot", str(out)])
    assert out.read_text().lstrip().startswith("<?xml") and "<svg" in out.read_text()


def test_gp_posterior_std_matches_numpy():
    mod = _load("gp_regression")
    sciml.init(dtype="float64", seed=0)
    rng = np.random.default_rng(1)
    x, xs = np.sort(rng.uniform(-2, 2, 12)), np.linspace(-3, 3, 7)
    l, sf, sn = 0.7, 1.3, 0.2
    p = {"log_l": sciml.tensor(np.log(l)), "log_sf": sciml.tensor(np.log(sf)), "log_sn": sciml.tensor(np.log(sn))}
    got = mod.posterior_std(p, sciml.tensor(x), sciml.tensor(xs)).numpy()

    def k(a, b):
        return sf ** 2 * np.exp(-0.5 * (a[:, None] - b[None]) ** 2 / l ** 2)
    K = k(x, x) + sn ** 2 * np.eye(len(x))
    want = np.sqrt(np.diag(k(xs, xs) - k(xs, x) @ np.linalg.solve(K, k(x, xs))))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_check_figure_catches_a_figure_that_does_not_explain_itself():
    fig = matplotlib.figure.Figure()
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], label="a")
    ax.plot([0, 1], [1, 0], label="b")
    ax.set_title("t")
    ax.set_xlabel("x")
    with pytest.raises(AssertionError, match="y label"):
        check_figure(fig)
    ax.set_ylabel("y")
    with pytest.raises(AssertionError, match="no legend entry"):
        check_figure(fig)
    ax.legend()
    check_figure(fig)
    m = ax.pcolormesh(np.zeros((2, 2)))
    with pytest.raises(AssertionError, match="without a colourbar"):
        check_figure(fig)
    fig.colorbar(m, ax=ax)
    with pytest.raises(AssertionError, match="quantity label"):
        check_figure(fig)
    fig2 = matplotlib.figure.Figure()
    ax2 = fig2.subplots()
    ax2.contourf(np.arange(4.0).reshape(2, 2))
    ax2.set(title="t", xlabel="x", ylabel="y")
    with pytest.raises(AssertionError, match="without a colourbar"):
        check_figure(fig2)


def test_pinn_plot_titles_an_inverse_problem_with_its_fitted_coefficients(tmp_path):
    """An inverse PINN (burgers_inverse): Result.plot's title names the recovered coefficients.
    A stand-in result (no training) keeps this fast; sciml/pinn/plot.py reads only these fields."""
    from types import SimpleNamespace

    from sciml.pinn import Interval, Parameter, Problem, d
    from sciml.pinn.plot import plot_result

    def residual(u, x, c):
        return d(u, x, x) + c * sciml.sin(x)
    pb = Problem(Interval(0, np.pi), residual, parameters={"c": Parameter(0.5)},
                 reference=lambda p: np.sin(p[:, :1]), name="inverse")
    steps = [1, 2, 3, 4]
    result = SimpleNamespace(
        problem=pb, _grid=None, params={}, rel_l2=1.5e-2, time=2.0, parameters={"c": 0.98765},
        _loss=SimpleNamespace(predict=lambda params, pts: 1.01 * np.sin(pts)),
        history={"step": steps, "loss": [1.0, 0.5, 0.2, 0.1], "pde": [0.6, 0.3, 0.1, 0.05],
                 "rel_l2": [np.nan, 0.1, np.nan, 0.015], "stage_step": [0, 3], "stage_name": ["Adam", "L-BFGS"]})
    fig = plot_result(result, str(tmp_path / "inverse.png"))
    assert fig._suptitle.get_text() == "inverse: relative L2 error 1.50e-02; fitted c = 0.9877 (2 s)"
    assert os.listdir(tmp_path) == ["inverse.png"]
    check_figure(fig)
