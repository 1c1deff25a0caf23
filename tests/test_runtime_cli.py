"""Runtime and the `sciml` command line (in-process: main(argv) with the already-started cpu runtime)."""
import argparse
import os
import subprocess
import sys

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


def test_info_refuses_a_bad_arch_or_dtype_naming_the_flag(capsys):
    for argv, flag in ((["info", "--arch", "tpu"], "--arch"), (["info", "--dtype", "float16"], "--dtype"),
                       (["demo", "--arch", "foo"], "--arch")):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {flag}: invalid choice" in err and "choose from" in err, err


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


def test_manual_seed_before_the_first_tensor_is_kept():
    # starting Taichi (init, or the first tensor) must not reseed a stream the user already seeded
    code = ("import sciml as sm; sm.manual_seed(7); sm.init(arch=\"cpu\"); a = sm.randn(4).numpy(); "
            "import numpy as np; b = np.random.default_rng(7).standard_normal(4); "
            "print(float(abs(a - b.astype(a.dtype)).max()))")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in outs), outs[0].stderr[-2000:]
    assert [float(r.stdout.split()[-1]) for r in outs] == [0.0, 0.0]


def test_sciml_alone_prints_the_help_and_exits_0(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: sciml") and "info" in out and "solve" in out and "demo" in out
    assert "bench" not in out and "bench" not in cli.__doc__   # no command that does not exist


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"sciml {sm.__version__}"


def test_every_flag_has_help_text():
    parser = cli.build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0]
    assert set(subs.choices) >= {"info", "demo", "solve"}
    for name, p in [("sciml", parser), *subs.choices.items()]:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)


def test_errors_are_one_line_with_status_2_not_a_traceback():
    """The installed command's path (a fresh interpreter): one line on stderr, exit status 2."""
    r = subprocess.run([sys.executable, "-m", "sciml.cli", "solve", "poisson", "--plot",
                        os.path.join("no-such-folder-here", "x.png")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("sciml solve: error: --plot:") and "does not exist" in lines[0]
