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
                 'STEPS = int(os.environ.get("SCIML_STEPS", 5))\nLBFGS_STEPS = STEPS // 2\n'
                 'LB = max(1, STEPS // 2)\ndde.optimizers.set_LBFGS_options(maxiter=LB)\n'
                 'PER = LB // -(-LB // 1000)\ndde.optimizers.LBFGS_options.update(iter_per_step=PER)\n'
                 'x = 1\nwall = 2\nerr = 3\n')
    assert B.user_lines(str(f)) == 2          # the numpy import and x = 1
    assert len(B.ports()) >= 12
    row = {"name": "p", "sciml": {"rel_l2": 1e-3, "time": 2.0, "C": 1.01},
           "deepxde": {"rel_l2": 2e-3, "time": 3.0, "C": 1.02}, "lines": (10, 20)}
    line = B._row(row)
    assert line == "| `p` | 1.00e-03 | 2.00e-03 | 2 s | 3 s | 10 | 20 | C: 1.01 / 1.02 | – |"
    # the iterations a row ran: its own, or cut (--cut F, --full NAMES) with L-BFGS scaled alike
    assert B._row(dict(row, iters=((2000, 1500), (20000, 15000)))).endswith(
        "| 2000 + 1500 L-BFGS (own 20000 + 15000) |")
    import argparse
    a = argparse.Namespace(steps=None, cut=10, full=["poisson_robin_1d"])
    assert B.budget("poisson_robin_1d", a) == B.own_steps("poisson_robin_1d") == (10000, 0)
    assert B.budget("heat", a) == (2000, 1500) and B.own_steps("heat") == (20000, 15000)
    assert "| `p` | 1.00e-03 | – |" in B._row(dict(row, deepxde=None))
    # --seeds N: the median and its range over the runs
    runs = [{"rel_l2": e, "time": t, "C": c} for e, t, c in [(3e-3, 5, 1.0), (1e-3, 4, 2.0), (2e-3, 9, 3.0)]]
    s = B._summary(runs)
    assert s["rel_l2"] == 2e-3 and s["time"] == 5 and s["C"] == 2.0 and s["rel_l2_range"] == (1e-3, 3e-3)
    assert s["rel_l2_mean"] == pytest.approx(2e-3)
    assert B._row(dict(row, sciml=s)).startswith(
        "| `p` | 2.00e-03 (1.0e-03–3.0e-03), mean 2.0e-03 | 2.00e-03 | 5 s |")
    assert "rel_l2_mean" not in B._row(dict(row, sciml=s))   # not listed as a fitted number


def test_pde_on_boundary_includes_both_ends_of_a_periodic_condition():
    # DeepXDE's Poisson_periodic_1d: 16 domain + 2 boundary points, the PDE on all 18; the
    # periodic condition's point at x = 1 is one of them (it was missing: 17 PDE points)
    from sciml.pinn import Dirichlet, Interval, Periodic, Problem, d
    from sciml.pinn.solver import sample_batch
    pb = Problem(Interval(-1, 1), lambda u, x: d(u, x, x),
                 conditions=[Dirichlet(0.0, on="left", points=1), Periodic("x", points=1)])
    b = sample_batch(pb, 16, np.random.default_rng(0), "lhs", "float64", pde_on_boundary=True)
    ends = b.interior[np.isin(b.interior[:, 0], [-1.0, 1.0]), 0]
    assert b.n == 19 and sorted(ends) == [-1.0, -1.0, 1.0]
    b = sample_batch(pb, 16, np.random.default_rng(0), "lhs", "float64")
    assert b.n == 16


def test_condition_names_carry_the_component():
    from sciml.pinn import Dirichlet, Initial, Periodic
    assert Initial(1.0, component=2).name == "initial[2]"
    assert Dirichlet(0.0, on="left", component=0).name == "dirichlet:left[0]"
    assert Periodic("x", component=1).name == "periodic:x[1]"
    assert Dirichlet(0.0, component=1, name="u").name == "u"


def test_same_init_loads_the_recorded_weights_into_the_ports_mlp(tmp_path):
    # bench_deepxde --same-init: the sciml port (run unchanged) starts from DeepXDE's weights
    import subprocess
    import sys
    rng = np.random.default_rng(0)
    w = {"w0": rng.normal(size=(1, 3)), "b0": rng.normal(size=3),
         "w1": rng.normal(size=(3, 2)), "b1": rng.normal(size=2)}
    np.savez(tmp_path / "init.npz", **w)
    (tmp_path / "port.py").write_text(
        "import numpy as np\nfrom sciml.models import MLP\nnet = MLP([1, 3, 2], seed=5)\n"
        "np.savez('out.npz', *[a for l in net.layers for a in (l.weight.numpy(), l.bias.numpy())])\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-m", "benchmarks._same_init", "load", str(tmp_path / "init.npz"),
                    str(tmp_path / "port.py")], cwd=tmp_path, env=env, check=True)
    out = np.load(tmp_path / "out.npz")
    for i, k in enumerate(["w0", "b0", "w1", "b1"]):
        np.testing.assert_allclose(out[f"arr_{i}"], w[k], rtol=1e-6)   # float32 copies


def test_readout_best_runs_each_port_at_its_best_model(tmp_path):
    # bench_deepxde --readout best: the sciml port runs through benchmarks/_same_init.py with
    # solve(restore_best=True), logging every tenth of the Adam stage, and says which step it kept
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
               SCIML_READOUT="best", SCIML_STEPS="40")
    out = subprocess.run([sys.executable, "-m", "benchmarks._same_init", "load", "-",
                          os.path.join(B.PORTS_DIR, "poisson_robin_1d.py")], cwd=tmp_path, env=env,
                         check=True, capture_output=True, text=True).stdout
    import re
    step = int(re.search(r"READOUT best model at step (\d+), loss", out).group(1))
    assert 4 <= step <= 40 and step % 4 == 0 or step == 40, out[-2000:]   # logged every 40 // 10 steps
    assert "relative L2 error" in out


@pytest.mark.skipif(not os.environ.get("SCIML_PEER_PATH") and __import__("importlib").util.find_spec("deepxde") is None,
                    reason="needs DeepXDE (the bench extra)")
def test_readout_best_restores_deepxdes_best_snapshot(tmp_path):
    # the DeepXDE side: the network is put back to its state at train_state.best_step before predict
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    peer = os.environ.get("SCIML_PEER_PATH", "")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (peer, root, os.environ.get("PYTHONPATH", "")) if p),
               SCIML_READOUT="best", SCIML_STEPS="50", DDE_BACKEND="pytorch", SCIML_SEED="0")
    out = subprocess.run([sys.executable, "-m", "benchmarks._same_init", "dump", "-",
                          os.path.join(B.PORTS_DIR, "dde", "poisson_robin_1d.py")], cwd=tmp_path, env=env,
                         check=True, capture_output=True, text=True).stdout
    assert "READOUT best model at step" in out and "RESULT rel_l2=" in out, out[-2000:]
    import re
    ours = re.search(r"READOUT best model at step (\d+)", out).group(1)
    assert re.search(r"Best model at step (\d+)", out).group(1) == ours   # DeepXDE's own summary


def test_adam_spikes_statistics():
    # benchmarks/adam_spikes.py: the second half's share of steps above 10x the running minimum,
    # and spikes counted once per rise
    from benchmarks.adam_spikes import late_stats
    loss = np.r_[np.geomspace(1.0, 1e-3, 100), np.full(100, 1e-3)]
    loss[150:160] = 1.0          # one spike of 10 steps in the second half
    loss[180] = 5e-3             # a bump under 10x: not a spike
    s = late_stats(loss)
    assert s["spikes"] == 1 and s["in_spike"] == pytest.approx(10 / 100) and s["last"] == 1e-3
    assert s["median"] == 1e-3
