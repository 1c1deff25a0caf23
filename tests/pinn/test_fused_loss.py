"""pinn/fused_loss: the loss terms as fused regions (one kernel each) equal the unfused terms and
their gradients, fall back where a region cannot hold the residual, and give solve the same run."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Initial, Interval, Neumann, Problem, TimeInterval, d, solve
from sciml.pinn import fused_loss as FL
from sciml.pinn.problem import Batch, Loss


@pytest.fixture
def forced(monkeypatch):
    sm.init(arch="cpu", dtype="float64")
    monkeypatch.setattr(FL, "MODE", [None])
    yield FL.MODE


def _burgers():
    def residual(u, x, t):
        return d(u, t) + u * d(u, x) - 0.01 / np.pi * d(u, x, x)
    return Problem(Interval(-1, 1) * TimeInterval(0, 1), residual,
                   conditions=[Dirichlet(0.0, on="boundary"), Initial(lambda x: -np.sin(np.pi * x))])


def _terms_and_grads(loss, params, mode):
    FL.MODE[0] = mode

    def f(p):
        ts = loss.terms({"net": p, "pde": {}})
        return ts[0] + 2.0 * ts[1] + 3.0 * ts[2], ts
    (v, ts), g = sm.value_and_grad(f, has_aux=True)(params)
    return [t.numpy() for t in ts], g


def test_fused_terms_and_gradients_equal_the_unfused_ones(forced):
    pb = _burgers()
    net = MLP([2, 8, 8, 1], activation=sm.tanh, seed=0)
    rng = np.random.default_rng(0)
    pts = [rng.uniform([-1, 0], [1, 1], (40, 2))]
    cond = [c.sample(pb.domain, 12, rng, "uniform") for c in pb.soft_conditions]
    loss = Loss(pb, net, Batch(pb, pts[0], cond, "float64"))
    params = net.params()
    a, ga = _terms_and_grads(loss, params, False)
    b, gb = _terms_and_grads(loss, params, True)
    assert loss.__dict__.get("_fused_terms"), "the fused regions were not used"
    (fns,) = [v for k, v in loss._fused_terms.items() if k != "owner"]
    for fn, _keys, _seen in fns:   # (region, the derivatives it takes, those its trace read)
        assert fn.fallback is None, fn.fallback
    for x, y in zip(a, b):
        np.testing.assert_allclose(y, x, rtol=1e-13)
    for x, y in zip(sm.tree_leaves(ga), sm.tree_leaves(gb)):
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-12, atol=1e-14)


def test_solve_gives_the_same_run_fused_and_unfused(forced):
    hs = []
    for mode in (False, True):
        FL.MODE[0] = mode
        r = solve(_burgers(), MLP([2, 8, 8, 1], activation=sm.tanh, seed=0), points=60,
                  stages=[(Adam(lr=1e-3), 12), (LBFGS(history=3), 4)], log_every=4, progress=False, verbose=False)
        hs.append(r.history)
    for k in ("loss", "pde", "initial"):
        np.testing.assert_allclose(hs[1][k], hs[0][k], rtol=1e-11)
    assert hs[0]["step"] == hs[1]["step"]


def test_trainable_coefficients_and_unfusable_residuals_run_unfused(forced):
    from sciml.pinn import Parameter
    FL.MODE[0] = True
    C = Parameter(1.5)

    def residual(u, x):
        return d(u, x, x) - C * sm.sin(x)
    pb = Problem(Interval(0, 1), residual, conditions=[Dirichlet(0.0, on="boundary")], parameters={"C": C})
    r = solve(pb, MLP([1, 6, 1], activation=sm.tanh, seed=0), points=20, stages=[(Adam(lr=1e-3), 3)],
              progress=False, verbose=False)
    assert np.isfinite(r.history["loss"]).all()

    def where_residual(u, x):   # sm.where: not a region op, so the PDE term runs unfused
        return d(u, x, x) - sm.where(x > 0.5, 1.0, -1.0)
    pb2 = Problem(Interval(0, 1), where_residual, conditions=[Neumann(0.0, on="boundary")])
    a = []
    for mode in (False, True):
        FL.MODE[0] = mode
        a.append(solve(pb2, MLP([1, 6, 1], activation=sm.tanh, seed=0), points=20, stages=[(Adam(lr=1e-3), 3)],
                       progress=False, verbose=False).history["loss"])
    np.testing.assert_allclose(a[1], a[0], rtol=1e-12)


def test_switch(monkeypatch, forced):
    monkeypatch.setenv("SCIML_FUSE_LOSS", "1")
    assert FL.enabled()
    monkeypatch.setenv("SCIML_FUSE_LOSS", "0")
    assert not FL.enabled()
    monkeypatch.delenv("SCIML_FUSE_LOSS")
    assert FL.enabled() is True    # on by default, host included
    FL.MODE[0] = False
    assert not FL.enabled()
