"""PINN checkpoints never lose work: a run stopped by a callback or Ctrl-C records the stage
and step and resumes exactly there; files are written atomically; resume refuses, naming the
path, a checkpoint that does not fit; a bad checkpoint path fails before training."""
import os
import re
import signal

import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Interval, Problem, d, solve
from sciml.pinn import checkpoint as ckpt


def _poisson(conditions=None):
    def residual(u, x):
        return d(u, x, x) + np.pi ** 2 * sm.sin(np.pi * x)
    return Problem(Interval(0, 1), residual, conditions=conditions or [Dirichlet(0.0)],
                   reference=lambda p: np.sin(np.pi * p[:, 0]))


def _stages():
    return [(Adam(lr=1e-2), 12), (LBFGS(history=10, max_iter=3), 6)]


COMMON = dict(points=24, seed=0, log_every=2, progress=False,
              resample={"method": "rad", "every": 4})


def _net():
    return MLP([1, 8, 1], activation=sm.tanh, seed=0)


def _flat(net):
    return np.concatenate([np.ravel(l.numpy()) for l in
                           (net.params()["layers"][k][w] for k in net.params()["layers"]
                            for w in ("weight", "bias"))])


@pytest.fixture(scope="module")
def uninterrupted():
    net = _net()
    r = solve(_poisson(), net, stages=_stages(), **COMMON)
    return r, _flat(net)


def test_a_run_stopped_by_a_callback_resumes_at_its_stage_and_step(tmp_path, uninterrupted):
    ref, w_ref = uninterrupted
    ck = str(tmp_path / "run.npz")
    r1 = solve(_poisson(), _net(), stages=_stages(), checkpoint=ck,
               callbacks=[lambda info: info.step >= 6], **COMMON)
    assert r1.history["step"][-1] == 6
    with np.load(ck) as z:   # the stage is NOT marked finished
        assert int(z["stage"]) == 0 and int(z["step"]) == 6
    assert os.listdir(tmp_path) == ["run.npz"]   # no temporary file left behind
    net = _net()
    r2 = solve(_poisson(), net, stages=_stages(), checkpoint=ck, **COMMON)
    assert r2.history["step"] == ref.history["step"]
    # the same points, random stream, optimizer state and parameters: the same run
    np.testing.assert_allclose(r2.history["loss"], ref.history["loss"], rtol=1e-10)
    np.testing.assert_allclose(_flat(net), w_ref, rtol=1e-9, atol=1e-12)
    with np.load(ck) as z:
        assert int(z["stage"]) == 2 and int(z["step"]) == 0   # finished


def test_ctrl_c_stops_after_the_step_and_saves_it(tmp_path, uninterrupted):
    ref, w_ref = uninterrupted
    ck = str(tmp_path / "run.npz")

    def press_ctrl_c(info):
        if info.step == 4:
            os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="resume"):
        solve(_poisson(), _net(), stages=_stages(), checkpoint=ck, callbacks=[press_ctrl_c],
              **COMMON)
    with np.load(ck) as z:
        assert int(z["stage"]) == 0 and int(z["step"]) in (4, 6)
    net = _net()
    r = solve(_poisson(), net, stages=_stages(), checkpoint=ck, **COMMON)
    np.testing.assert_allclose(r.history["loss"], ref.history["loss"], rtol=1e-10)
    np.testing.assert_allclose(_flat(net), w_ref, rtol=1e-9, atol=1e-12)


@pytest.fixture
def saved(tmp_path):
    ck = str(tmp_path / "run.npz")
    solve(_poisson(), _net(), points=16, stages=[(Adam(lr=1e-2), 3)], checkpoint=ck,
          progress=False)
    return ck


def _rewrite(path, **changes):
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    for k, v in changes.items():
        if v is None:
            data.pop(k)
        else:
            data[k] = v
    np.savez(path, **data)


def _resume(ck, stages=None, problem=None, net=None):
    return solve(problem or _poisson(), net or _net(), points=16,
                 stages=stages or [(Adam(lr=1e-2), 3)], checkpoint=ck, progress=False)


def test_resume_refuses_a_checkpoint_that_does_not_fit(saved):
    with pytest.raises(ValueError, match=rf"{re.escape(saved)}.*parameter 0 has shape"):
        _resume(saved, net=MLP([1, 4, 1], seed=0))
    two = _poisson([Dirichlet(0.0, on="left"), Dirichlet(0.0, on="right")])
    with pytest.raises(ValueError, match=rf"{re.escape(saved)}.*2 loss weight.*3 loss term"):
        _resume(saved, problem=two)
    _rewrite(saved, stage=np.array(3))
    with pytest.raises(ValueError, match=rf"{re.escape(saved)}.*stage 4.*beyond this run's 1 stage"):
        _resume(saved)
    _rewrite(saved, stage=np.array(0), step=np.array(7))
    with pytest.raises(ValueError, match=rf"{re.escape(saved)}.*step 7 of stage 1 is outside"):
        _resume(saved)


def test_resume_refuses_non_finite_missing_and_truncated(saved):
    with np.load(saved) as z:
        p0 = z["p0"].copy()
    p0.flat[0] = np.nan
    _rewrite(saved, p0=p0)
    with pytest.raises(ValueError, match=rf"{re.escape(saved)}.*non-finite"):
        _resume(saved)
    _rewrite(saved, p0=np.zeros_like(p0), weights=None)
    with pytest.raises(ValueError, match=rf"{re.escape(saved)}.*missing key.*'weights'"):
        _resume(saved)
    data = open(saved, "rb").read()
    with open(saved, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(ValueError, match=rf"{re.escape(saved)}.*truncated"):
        _resume(saved)
    with open(saved, "w") as f:
        f.write("not a checkpoint")
    with pytest.raises(ValueError, match=rf"{re.escape(saved)}.*truncated or not a sciml checkpoint"):
        _resume(saved)


def test_a_bad_checkpoint_path_fails_before_training(tmp_path):
    calls = []
    with pytest.raises(FileNotFoundError, match="solve\\(checkpoint=...\\).*does not exist"):
        solve(_poisson(), _net(), points=16, stages=[(Adam(), 5)], progress=False,
              checkpoint=str(tmp_path / "missing" / "x.npz"), callbacks=[calls.append],
              log_every=1)
    with pytest.raises(ValueError, match="suffix '.txt'"):
        solve(_poisson(), _net(), points=16, stages=[(Adam(), 5)], progress=False,
              checkpoint=str(tmp_path / "x.txt"), callbacks=[calls.append], log_every=1)
    assert calls == []
    r = solve(_poisson(), _net(), points=16, stages=[(Adam(), 2)], progress=False,
              checkpoint=str(tmp_path / "noext"))   # the .npz suffix is added
    assert (tmp_path / "noext.npz").exists() and np.isfinite(r.history["loss"][-1])


def test_save_is_atomic_when_the_write_fails(tmp_path, monkeypatch, saved):
    before = open(saved, "rb").read()

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(np, "savez", boom)
    net = _net()
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(saved, {"net": net.params(), "pde": {}}, 0, 1, np.ones(2), {})
    assert open(saved, "rb").read() == before
    assert sorted(os.listdir(os.path.dirname(saved))) == ["run.npz"]


def test_a_checkpoint_inside_an_lbfgs_stage_holds_its_history(tmp_path):
    # stopped after the first L-BFGS call (3 iterations): the (s, y) pairs are saved, so a
    # resumed run can continue with the same curvature estimate
    ck = str(tmp_path / "run.npz")
    net = _net()
    stages = [(Adam(lr=1e-2), 4), (LBFGS(history=10, max_iter=3), 6)]
    solve(_poisson(), net, stages=stages, checkpoint=ck, points=24, seed=0, progress=False,
          callbacks=[lambda info: info.step >= 7])
    lb = stages[1][0]
    with np.load(ck) as z:
        assert int(z["stage"]) == 1 and 0 < int(z["step"]) < 6
        assert {"opt.lbfgs.S", "opt.lbfgs.Y", "opt.lbfgs.rho"} <= set(z.files)
        np.testing.assert_array_equal(z["opt.lbfgs.S"], lb.state_dict()["state"]["lbfgs.S"])
    fresh = _net()
    c = ckpt.load(ck, fresh.params(), 2, stages)
    again = LBFGS(history=10, max_iter=3)
    again.bind(fresh.params())
    again.load_state_dict(c.opt_state)
    for k, v in lb.state_dict()["state"].items():
        np.testing.assert_array_equal(again.state_dict()["state"][k], v)


def test_a_run_stopped_inside_an_lbfgs_stage_resumes_exactly(tmp_path, uninterrupted):
    # the (s, y) history comes back on resume, so the resumed quasi-Newton stage continues the same run
    ref, w_ref = uninterrupted
    ck = str(tmp_path / "run.npz")
    solve(_poisson(), _net(), stages=_stages(), checkpoint=ck, callbacks=[lambda info: info.step >= 14], **COMMON)
    with np.load(ck) as z:
        assert int(z["stage"]) == 1 and 0 < int(z["step"]) < 6 and "opt.lbfgs.S" in z.files
    net = _net()
    r2 = solve(_poisson(), net, stages=_stages(), checkpoint=ck, **COMMON)
    assert r2.history["step"] == ref.history["step"]
    np.testing.assert_allclose(r2.history["loss"], ref.history["loss"], rtol=1e-10)
    np.testing.assert_allclose(_flat(net), w_ref, rtol=1e-9, atol=1e-12)
