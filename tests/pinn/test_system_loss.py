"""A system's PDE loss term is the sum over its equations of each one's mean square (DeepXDE's
convention: one loss term per equation), on the fused and the unfused path; the residual used
for resampling stays unscaled."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.pinn import Initial, Problem, TimeInterval, d
from sciml.pinn import fused_loss as FL
from sciml.pinn.problem import Batch, Loss


@pytest.fixture
def mode(monkeypatch):
    sm.init(arch="cpu", dtype="float64")
    monkeypatch.setattr(FL, "MODE", [None])
    yield FL.MODE


def _ode_system():
    # DeepXDE's ode_system: y1' = y2, y2' = -y1, y1(0) = 0, y2(0) = 1
    return Problem(TimeInterval(0, 10), lambda y1, y2, t: [d(y1, t) - y2, d(y2, t) + y1],
                   outputs=("y1", "y2"),
                   conditions=[Initial(0.0, component=0), Initial(1.0, component=1)])


@pytest.mark.parametrize("fused", [False, True])
def test_system_pde_term_is_the_sum_of_the_equations_mean_squares(mode, fused):
    mode[0] = fused
    pb = _ode_system()
    net = MLP([1, 8, 8, 2], activation=sm.tanh, seed=3, dtype="float64")
    t = np.linspace(0, 10, 13)[:, None]
    t0 = np.zeros((1, 1))
    cond = [c.sample(pb.domain, 1, np.random.default_rng(0), "uniform") for c in pb.soft_conditions]
    loss = Loss(pb, net, Batch(pb, t, cond, "float64"))
    terms = [float(v) for v in loss.terms({"net": net.params()})]
    # the same by hand: y and dy/dt by central differences of the network (float64)
    h = 1e-5
    y = net(sm.tensor(t)).numpy()
    dy = (net(sm.tensor(t + h)).numpy() - net(sm.tensor(t - h)).numpy()) / (2 * h)
    r1, r2 = dy[:, 0] - y[:, 1], dy[:, 1] + y[:, 0]
    np.testing.assert_allclose(terms[0], np.mean(r1 ** 2) + np.mean(r2 ** 2), rtol=1e-7)
    y0 = net(sm.tensor(t0)).numpy()[0]
    np.testing.assert_allclose(terms[1:], [y0[0] ** 2, (y0[1] - 1) ** 2], rtol=1e-9)
    # resampling ranks points by the unscaled residual norm sqrt(r1^2 + r2^2)
    np.testing.assert_allclose(loss.residual_at({"net": net.params()}, t),
                               np.sqrt(r1 ** 2 + r2 ** 2), rtol=1e-6)


def test_scalar_pde_term_unchanged(mode):
    pb = Problem(TimeInterval(0, 1), lambda u, t: d(u, t) + u, conditions=[Initial(1.0)])
    net = MLP([1, 8, 1], activation=sm.tanh, seed=1, dtype="float64")
    t = np.linspace(0, 1, 9)[:, None]
    cond = [c.sample(pb.domain, 1, np.random.default_rng(0), "uniform") for c in pb.soft_conditions]
    loss = Loss(pb, net, Batch(pb, t, cond, "float64"))
    h = 1e-5
    u = net(sm.tensor(t)).numpy()[:, 0]
    du = (net(sm.tensor(t + h)).numpy() - net(sm.tensor(t - h)).numpy())[:, 0] / (2 * h)
    np.testing.assert_allclose(float(loss.terms({"net": net.params()})[0]),
                               np.mean((du + u) ** 2), rtol=1e-7)


@pytest.mark.parametrize("fused", [False, True])
def test_multi_column_condition_term_is_the_sum_of_the_columns_mean_squares(mode, fused):
    # DeepXDE's Lorenz inverse: one PointSetBC per component; here one PointData of 3 columns
    from sciml.pinn import PointData
    mode[0] = fused
    t_obs = np.linspace(0.5, 2.5, 5)[:, None]
    y_obs = np.random.default_rng(1).normal(size=(5, 2))
    pb = Problem(TimeInterval(0, 3), lambda y1, y2, t: [d(y1, t), d(y2, t)], outputs=("y1", "y2"),
                 conditions=[Initial([1.0, -1.0]), PointData(t_obs, y_obs)])
    net = MLP([1, 8, 2], activation=sm.tanh, seed=2, dtype="float64")
    rng = np.random.default_rng(0)
    cond = [c.sample(pb.domain, 1, rng, "uniform") for c in pb.soft_conditions]
    loss = Loss(pb, net, Batch(pb, np.linspace(0, 3, 7)[:, None], cond, "float64"))
    terms = [float(v) for v in loss.terms({"net": net.params()})]
    y0 = net(sm.tensor(np.zeros((1, 1)))).numpy()[0]
    y = net(sm.tensor(t_obs)).numpy()
    np.testing.assert_allclose(terms[1], (y0[0] - 1) ** 2 + (y0[1] + 1) ** 2, rtol=1e-9)
    np.testing.assert_allclose(terms[2], np.sum(np.mean((y - y_obs) ** 2, axis=0)), rtol=1e-9)
