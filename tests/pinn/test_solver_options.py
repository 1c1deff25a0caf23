"""solve(loss_transform=...), resample={'restart': False}, the self-scaled BFGS stages and the
Burgers recipe of the CLI (one for float32 and float64)."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import BFGS, Adam
from sciml.pinn import Dirichlet, Interval, Problem, d, solve


def _poisson():
    def residual(u, x):
        return d(u, x, x) + np.pi ** 2 * sm.sin(np.pi * x)
    return Problem(Interval(0, 1), residual, conditions=[Dirichlet(0.0)],
                   reference=lambda p: np.sin(np.pi * p[:, 0]))


@pytest.mark.parametrize("transform", [None, "sqrt", "log"])
def test_ssbroyden_stage_with_each_loss_transform(transform):
    net = MLP([1, 12, 12, 1], activation=sm.tanh, seed=0)
    r = solve(_poisson(), net, points=48, seed=0, verbose=False, loss_transform=transform,
              stages=[(Adam(lr=1e-2), 100), (BFGS(update="ssbroyden", max_iter=50), 200)])
    assert r.rel_l2 < 1e-3, r.rel_l2
    h = r.history
    # the logged loss is the loss itself (sum of the terms), whatever the stage minimised
    np.testing.assert_allclose(h["loss"][-1], h["pde"][-1] + h["dirichlet:boundary"][-1], rtol=1e-6)


def test_bad_loss_transform_is_a_clear_error():
    with pytest.raises(ValueError, match="loss_transform"):
        solve(_poisson(), MLP([1, 4, 1], seed=0), points=8, stages=[(Adam(), 1)], verbose=False,
              loss_transform="square")


@pytest.mark.parametrize("restart,expect_binds", [(True, 4), (False, 1)])
def test_resample_restart_controls_the_curvature_history(restart, expect_binds):
    opt = BFGS(update="ssbroyden", max_iter=10)
    calls = []
    orig = opt.bind
    opt.bind = lambda *a, **k: (calls.append(1), orig(*a, **k))[1]
    solve(_poisson(), MLP([1, 8, 1], activation=sm.tanh, seed=0), points=32, verbose=False,
          stages=[(opt, 40)], resample={"method": "rad", "every": 10, "restart": restart})
    assert len(calls) == expect_binds                 # one bind per stage, plus one per resample
    if not restart:
        assert opt._hist.H is not None


def test_cli_burgers_runs_the_ssbroyden_recipe_in_both_dtypes(capsys):
    from sciml.cli import main
    assert main(["solve", "burgers", "--dtype", "float64", "--steps", "2,2", "--points", "64"]) == 0
    out = capsys.readouterr().out        # the CLI's header line names the recipe
    assert "net [2, 20, 20, 20, 1]" in out and "SSBROYDEN" in out and "sqrt(loss)" in out
    assert main(["solve", "burgers", "--dtype", "float64", "--steps", "2,2", "--points", "64",
                 "--optimizer", "lbfgs", "--loss", "mse"]) == 0
    out = capsys.readouterr().out
    assert "LBFGS" in out and "sqrt" not in out
    from sciml.pinn.problems import get      # float32 (the CLI's default) runs the same recipe
    s = get("burgers")
    s32, s64 = s.for_dtype("float32"), s.for_dtype("float64")
    assert s32 is s64 and s32.sizes == [2, 20, 20, 20, 1] and s32.steps == (2000, 4000)
    assert (s32.optimizer, s32.loss_transform, s32.points["interior"]) == ("ssbroyden", "sqrt", 8192)
    assert s32.resample == {"method": "rad", "every": 500, "restart": False}


def test_failed_line_search_draws_new_points_instead_of_ending_the_stage(monkeypatch):
    from sciml.optim import LBFGS
    from sciml.pinn.stages import ResamplePolicy
    resamples = []
    orig = ResamplePolicy.resample
    monkeypatch.setattr(ResamplePolicy, "resample",
                        lambda *a, **k: (resamples.append(1), orig(*a, **k))[1])

    class FailsOnce(LBFGS):          # the first chunk reports a failed line search after progress
        calls, first = 0, None

        def _minimize(self, loss_fn, values):
            res = super()._minimize(loss_fn, values)
            FailsOnce.calls += 1
            if FailsOnce.calls == 1:
                res.reason, FailsOnce.first = "line_search", res.iterations
            return res
    common = dict(points=32, verbose=False, seed=0)
    r = solve(_poisson(), MLP([1, 8, 1], activation=sm.tanh, seed=0),
              stages=[(FailsOnce(max_iter=5), 20)], resample={"method": "rad", "every": 1000}, **common)
    assert resamples == [1] and r.history["step"][-1] == 20     # resampled at once, stage went on
    FailsOnce.calls = 0
    r = solve(_poisson(), MLP([1, 8, 1], activation=sm.tanh, seed=0),
              stages=[(FailsOnce(max_iter=5), 20)], **common)  # no resampling: the stage ends
    assert r.history["step"][-1] == FailsOnce.first > 0
