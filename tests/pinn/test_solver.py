"""solve(): a short 1-D Poisson solve to < 1e-3, an inverse problem, checkpoints and resume,
adaptive weights, resampling, float32, callbacks and clear errors."""
import logging

import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import (Dirichlet, GradNorm, Interval, Parameter, PointData, Problem, d, solve)


def _poisson(**kw):
    def residual(u, x):
        return d(u, x, x) + np.pi ** 2 * sm.sin(np.pi * x)
    return Problem(Interval(0, 1), residual, conditions=[Dirichlet(0.0)],
                   reference=lambda p: np.sin(np.pi * p[:, 0]), **kw)


def test_short_1d_poisson_solve_is_accurate(tmp_path):
    net = MLP([1, 16, 16, 1], activation=sm.tanh, seed=0)
    r = solve(_poisson(), net, points=64, seed=0, verbose=False,
              stages=[(Adam(lr=1e-2), 300), (LBFGS(history=20, max_iter=50), 300)])
    assert r.rel_l2 < 1e-3
    assert set(r.errors) == {"rel_l2", "max_abs", "rmse"}
    h = r.history
    assert len(h["step"]) == len(h["loss"]) == len(h["pde"]) == len(h["dirichlet:boundary"])
    assert h["loss"][-1] < h["loss"][0]
    assert r.path == "fused"
    fig = r.plot(str(tmp_path / "poisson.png"))
    assert (tmp_path / "poisson.png").stat().st_size > 1000 and fig is not None
    np.testing.assert_allclose(r.predict([[0.5]])[:, 0], 1.0, atol=1e-2)


def test_inverse_problem_recovers_a_coefficient():
    # u'' + c pi^2 sin(pi x) = 0 with u = sin(pi x) observed: c = 1
    c = Parameter(0.5, log=True)

    def residual(u, x, c):
        return d(u, x, x) + c * np.pi ** 2 * sm.sin(np.pi * x)
    xs = np.linspace(0.05, 0.95, 20)[:, None]
    pb = Problem(Interval(0, 1), residual, parameters={"c": c},
                 conditions=[Dirichlet(0.0), PointData(xs, np.sin(np.pi * xs[:, 0]))])
    net = MLP([1, 16, 1], activation=sm.tanh, seed=0)
    r = solve(pb, net, points=32, verbose=False,
              stages=[(Adam(lr=2e-2), 300), (LBFGS(max_iter=50), 200)])
    assert r.parameters["c"] == pytest.approx(1.0, rel=1e-2)


def test_checkpoint_and_resume(tmp_path):
    ck = str(tmp_path / "run.npz")
    pb = _poisson()
    net = MLP([1, 8, 1], seed=0)
    r1 = solve(pb, net, points=16, stages=[(Adam(lr=1e-2), 10)], checkpoint=ck,
               checkpoint_every=5, verbose=False)
    w_end = net.params()["layers"]["0"]["weight"].numpy()
    # a fresh network resumes from the saved parameters and continues with the next stage
    net2 = MLP([1, 8, 1], seed=5)
    r2 = solve(pb, net2, points=16, stages=[(Adam(lr=1e-2), 10), (Adam(lr=1e-3), 3)],
               checkpoint=ck, verbose=False)
    assert r2.history["step"][:10] == r1.history["step"]
    assert r2.history["step"][10:] == [11, 12, 13]
    with pytest.raises(ValueError, match="comes from another network"):
        solve(pb, MLP([1, 4, 1], seed=0), points=16, stages=[(Adam(), 1)], checkpoint=ck,
              verbose=False)


def test_grad_norm_weights_adapt():
    net = MLP([1, 8, 1], seed=0)
    seen = []
    r = solve(_poisson(), net, points=16, stages=[(Adam(lr=1e-2), 4)], verbose=False,
              weights=GradNorm(every=2, alpha=0.0), log_every=1,
              callbacks=[lambda info: seen.append(dict(info.weights))])
    assert seen[-1]["pde"] != 1.0 and seen[-1]["dirichlet:boundary"] != 1.0
    total = sum(seen[-1].values())
    assert np.isfinite(total) and r.history["step"] == [1, 2, 3, 4]


def test_callback_stops_and_fixed_weights():
    net = MLP([1, 8, 1], seed=0)
    r = solve(_poisson(), net, points=16, stages=[(Adam(lr=1e-2), 50)], verbose=False,
              weights={"dirichlet:boundary": 10.0}, log_every=5,
              callbacks=[lambda info: info.step >= 10])
    assert r.history["step"][-1] == 10


def test_resampling_and_float32():
    net = MLP([1, 8, 1], seed=0)
    r = solve(_poisson(), net, points=32, stages=[(Adam(lr=1e-2), 6)], verbose=False,
              resample={"method": "rad", "every": 3}, dtype="float32")
    assert net.params()["layers"]["0"]["weight"].dtype == "float32"
    assert np.isfinite(r.rel_l2)
    r = solve(_poisson(), MLP([1, 8, 1], seed=0), points=32, stages=[(Adam(lr=1e-2), 4)],
              verbose=False, resample={"method": "rar", "every": 2, "add": 0.25})
    assert np.isfinite(r.rel_l2)
    r = solve(_poisson(), MLP([1, 8, 1], seed=0), points=32, verbose=False,
              stages=[(LBFGS(max_iter=5), 10)], resample={"method": "rad", "every": 5})
    assert np.isfinite(r.rel_l2) and r.history["step"][-1] >= 10


def test_progress_lines(caplog):
    # verbose=True: the per-interval table (through the sciml.pinn logger)
    caplog.set_level(logging.INFO, logger="sciml")
    solve(_poisson(), MLP([1, 8, 1], seed=0), points=16, stages=[(Adam(lr=1e-2), 4)],
          log_every=2, verbose=True)
    err = caplog.text
    assert "Adam      2/4" in err and "rel_l2" in err and "steps/s" in err
    assert "relative L2 error" in err


def test_default_output_is_a_header_a_bar_and_one_summary_line(capsys, caplog, monkeypatch):
    import sciml.pinn.console as C
    caplog.set_level(logging.INFO, logger="sciml")
    # not a terminal (pytest's capture): a few plain lines, no carriage returns
    solve(_poisson(), MLP([1, 8, 1], seed=0), points=16, stages=[(Adam(lr=1e-2), 40)])
    cap = capsys.readouterr()
    assert cap.out == "" and "\r" not in cap.err + caplog.text
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("solve residual: 1 input(s)") and "Adam 40 steps" in lines[0]
    assert 3 <= len(lines) <= 14, lines
    assert "relative L2 error" in lines[-1] and lines[-1].count(" s ") == 1
    # a terminal: one live tqdm bar with stage, step, loss terms and the error
    monkeypatch.setattr(C, "_isatty", lambda stream: True)
    monkeypatch.setenv("COLUMNS", "200")
    caplog.clear()
    solve(_poisson(), MLP([1, 8, 1], seed=0), points=16, stages=[(Adam(lr=1e-2), 40)])
    err = capsys.readouterr().err
    assert "Adam 40/40" in err and "pde=" in err and "rel_l2=" in err and "step/s" in err
    assert "Adam      2/40" not in err + caplog.text     # no table without verbose
    caplog.clear()
    # progress=False: silent
    solve(_poisson(), MLP([1, 8, 1], seed=0), points=16, stages=[(Adam(lr=1e-2), 4)],
          progress=False)
    cap = capsys.readouterr()
    assert cap.out == cap.err == "" and not caplog.records


# ---- clear errors --------------------------------------------------------------------------
def test_bad_stages_points_and_net():
    pb = _poisson()
    net = MLP([1, 8, 1], seed=0)
    with pytest.raises(ValueError, match=r"expected \(optimizer, steps\)"):
        solve(pb, net, stages=[Adam()])
    with pytest.raises(ValueError, match="unknown key"):
        solve(pb, net, points={"inside": 10}, stages=[(Adam(), 1)])
    with pytest.raises(ValueError, match=r"maps 5 points \(shape \(5, 1\)\) to \(5, 2\); the problem needs \(5, 1\)"):
        solve(pb, MLP([1, 4, 2], seed=0), stages=[(Adam(), 1)])
    with pytest.raises(ValueError, match="dtype must be"):
        solve(pb, net, stages=[(Adam(), 1)], dtype="float16")
    with pytest.raises(ValueError, match="unknown term"):
        solve(pb, net, stages=[(Adam(), 1)], weights={"bc": 1.0})


def test_levenberg_marquardt_and_bfgs_stages():
    from sciml.optim import BFGS, LevenbergMarquardt
    for opt in (LevenbergMarquardt(max_iter=10), BFGS(self_scaling=True, max_iter=20)):
        net = MLP([1, 8, 1], activation=sm.tanh, seed=0)
        r = solve(_poisson(), net, points=32, verbose=False,
                  stages=[(Adam(lr=1e-2), 200), (opt, 20)])
        assert r.history["loss"][-1] < 0.1 * r.history["loss"][199], type(opt).__name__
        assert r.rel_l2 < 1e-2
    # 0.5 ||v||^2 of the residual vector is the weighted loss
    from sciml.pinn.problem import Loss
    from sciml.pinn.solver import sample_batch
    pb = _poisson()
    net = MLP([1, 8, 1], seed=1)
    loss = Loss(pb, net, sample_batch(pb, 16, np.random.default_rng(0), "lhs", "float64"))
    p = {"net": net.params()}
    t = loss.terms(p)
    v = loss.residual_vector(p, [1.0, 3.0])
    assert 0.5 * float((v * v).sum()) == pytest.approx(float(t[0]) + 3 * float(t[1]), rel=1e-12)


def test_given_points_are_used_and_checked():
    pts = np.linspace(0.05, 0.95, 10)[:, None]
    r = solve(_poisson(), MLP([1, 8, 1], seed=0), points=pts, stages=[(Adam(), 2)],
              verbose=False)
    np.testing.assert_array_equal(r._loss.batch.interior, pts)
    with pytest.raises(ValueError, match=r"solve\(points=...\): 1 of 2 points lie outside"):
        solve(_poisson(), MLP([1, 8, 1], seed=0), points=np.array([[0.5], [2.0]]),
              stages=[(Adam(), 1)], verbose=False)
    with pytest.raises(ValueError, match=r"expected \(n, 1\)"):
        solve(_poisson(), MLP([1, 8, 1], seed=0), points={"interior": np.zeros((4, 2))},
              stages=[(Adam(), 1)], verbose=False)
