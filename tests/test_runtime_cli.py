"""Runtime and the `sciml` command line (in-process: main(argv) with the already-started cpu runtime)."""
import numpy as np
import pytest

import sciml as sm
from sciml import cli, runtime


def test_info_prints_versions_arch_dtype_threads(capsys):
    assert cli.main(["info", "--arch", "cpu", "--dtype", "float64"]) == 0
    out = capsys.readouterr().out
    for key in ("sciml", "taichi", "numpy", "arch     cpu", "dtype    float64", "threads"):
        assert key in out
    assert sm.__version__ in out


def test_info_reports_a_clear_error_for_a_bad_arch(capsys):
    assert cli.main(["info", "--arch", "tpu"]) == 2
    assert "got 'tpu'; expected one of" in capsys.readouterr().err


def test_demo_prints_exact_hessian(capsys):
    assert cli.main(["demo", "--arch", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "max |H - exact|" in out
    err = float(out.split("max |H - exact| =")[1].split()[0])
    assert err < 1e-12


def test_runtime_state():
    assert runtime.is_initialized() and runtime.arch() == "cpu" and runtime.default_dtype() == "float64"
    assert runtime.num_threads() >= 1
    sm.manual_seed(5)
    a = sm.rand(3).numpy()
    sm.manual_seed(5)
    np.testing.assert_array_equal(a, sm.rand(3).numpy())
    assert sm.init(seed=5) == "cpu"  # same settings: fine, reseeds


def test_cli_requires_a_command():
    with pytest.raises(SystemExit):
        cli.main([])
