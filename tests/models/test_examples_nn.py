"""Smoke tests of examples/digits_mlp.py and examples/digits_cnn.py (tiny runs, float64 in-process)."""
import importlib.util
import os

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="scikit-learn (digits data): pip install -e '.[examples]'")
ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["digits_mlp", "digits_cnn"])
def test_example_quick(name, tmp_path, capsys):
    out = tmp_path / "loss.png"
    acc = _load(name).main(["--quick", "--dtype", "float64", "--out", str(out)])
    assert out.exists() and 0.0 <= acc <= 1.0
    assert "test accuracy" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["lstm_forecast", "transformer_toy", "deeponet"])
def test_issue16_examples_quick(name, capsys):
    value = _load(name).main(["--quick"])
    assert np.isfinite(value)
    out = capsys.readouterr().out
    assert any(w in out for w in ("RMSE", "accuracy", "relative L2"))
