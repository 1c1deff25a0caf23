"""The DeepXDE ports (examples/deepxde/) run in their quick mode (SCIML_QUICK=1), and the
benchmark's line counter and table (benchmarks/bench_deepxde.py) work without DeepXDE."""
import os
import runpy
import sys

import numpy as np
import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, ROOT)
from benchmarks import bench_deepxde as B  # noqa: E402


@pytest.mark.parametrize("name", B.ports())
def test_port_runs_in_quick_mode(name, monkeypatch, capsys):
    monkeypatch.setenv("SCIML_QUICK", "1")
    ns = runpy.run_path(os.path.join(B.PORTS_DIR, f"{name}.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "relative L2 error" in out and np.isfinite(ns["result"].rel_l2)
    # all the steps asked for (an L-BFGS stage after Adam may stop early once converged)
    steps = ns["STEPS"] + ns.get("LBFGS_STEPS", 0)
    assert ns["STEPS"] <= ns["result"].history["step"][-1] <= steps


def test_line_counts_and_table(tmp_path):
    f = tmp_path / "p.py"
    f.write_text('"""doc\nstring"""\nimport os\n\nimport numpy as np  # c\n# comment\n'
                 'STEPS = int(os.environ.get("SCIML_STEPS", 5))\nx = 1\nwall = 2\nerr = 3\n')
    assert B.user_lines(str(f)) == 2          # the numpy import and x = 1
    assert len(B.ports()) >= 12
    row = {"name": "p", "sciml": {"rel_l2": 1e-3, "time": 2.0, "C": 1.01},
           "deepxde": {"rel_l2": 2e-3, "time": 3.0, "C": 1.02}, "lines": (10, 20)}
    line = B._row(row)
    assert line == "| `p` | 1.00e-03 | 2.00e-03 | 2 s | 3 s | 10 | 20 | C: 1.01 / 1.02 |"
    assert "| `p` | 1.00e-03 | – |" in B._row(dict(row, deepxde=None))
