"""The array-API examples run small (--quick) and reach their checks: GP regression's likelihood equals
scikit-learn's at the fitted hyperparameters; per-example clipping's vmap gradients equal a loop."""
import importlib.util
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gp_regression_quick():
    out = _load("gp_regression").main(["--quick"])
    assert out["nll"] < out["nll_start"] - 5
    if "sklearn_nll_at_ours" in out:
        assert out["sklearn_nll_at_ours"] == pytest.approx(out["nll"], rel=1e-8, abs=1e-8)
        assert out["nll"] <= out["sklearn_nll_fit"] + 1e-3


def test_per_example_clip_quick():
    out = _load("per_example_clip").main(["--quick"])
    assert out["vmap_vs_loop"] < 1e-12
    assert out["accuracy"] > 0.6


def test_fno_burgers_quick(tmp_path):
    png = tmp_path / "fno.png"
    out = _load("fno_burgers").main(["--quick", "--dtype", "float64", "--plot", str(png)])
    err, sec = out["sciml"]
    assert np.isfinite(err) and err < 1.5 and sec > 0
    assert png.stat().st_size > 10_000 and [p.name for p in tmp_path.iterdir()] == ["fno.png"]  # no temp left


def test_fno_burgers_bad_plot_path_fails_before_training(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        _load("fno_burgers").main(["--quick", "--plot", str(tmp_path / "missing" / "f.png")])
    assert e.value.code == 2 and "--plot" in capsys.readouterr().err


def test_fno_spectral_layer_matches_numpy():
    mod = _load("fno_burgers")
    import sciml as sm
    rng = np.random.default_rng(0)
    layer = mod.SpectralConv1d(3, 4, rng)
    v = rng.standard_normal((2, 10, 3))
    got = layer(sm.tensor(v)).numpy()
    w = layer.w.numpy()[..., 0] + 1j * layer.w.numpy()[..., 1]
    vh = np.fft.rfft(v, axis=1)[:, :4]
    out = np.zeros((2, 6, 3), complex)
    out[:, :4] = np.einsum("bki,kio->bko", vh, w)
    np.testing.assert_allclose(got, np.fft.irfft(out, 10, axis=1), atol=1e-5)
