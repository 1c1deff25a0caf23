"""Conditions: residuals vanish on functions that satisfy them, hard constraints hold exactly,
and mistakes get clear errors."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP, Parameter
from sciml.pinn import (Dirichlet, Initial, Interval, Neumann, Periodic, PointData, Problem,
                        Rectangle, Robin, TimeInterval, d)
from sciml.pinn.problem import Loss
from sciml.pinn.solver import sample_batch


class _Fn:
    """A 'network' that is a known function of its inputs."""

    def __init__(self, fn):
        self.fn, self.a = fn, Parameter(np.array([1.0]))

    def params(self):
        return {"a": self.a}

    def apply(self, params, z):
        return self.fn(params["a"], *[z[:, i:i + 1] for i in range(z.shape[1])])


def _terms(problem, net, n=16):
    batch = sample_batch(problem, n, np.random.default_rng(0), "lhs", "float64")
    loss = Loss(problem, net, batch)
    return dict(zip(loss.term_names, [float(t) for t in loss.terms({"net": net.params()})]))


def _zero(u, x):
    return d(u, x) * 0.0


def test_dirichlet_neumann_robin_vanish_on_sin():
    # u = sin(pi x) on [0, 1]: u = 0 at both ends; du/dn = -pi at both ends (n = -1, +1)
    net = _Fn(lambda a, x: a * sm.sin(np.pi * x))
    pb = Problem(Interval(0, 1), _zero,
                 conditions=[Dirichlet(0.0), Neumann(-np.pi), Robin(2.0, 1.0, -np.pi),
                             Dirichlet(lambda x: np.sin(np.pi * x), on="right")])
    for name, v in _terms(pb, net).items():
        assert v < 1e-26, name
    bad = Problem(Interval(0, 1), _zero, conditions=[Neumann(1.0)])
    assert _terms(bad, net)["neumann:boundary"] == pytest.approx((np.pi + 1) ** 2)


def test_neumann_uses_outward_normals_in_2d():
    # u = x^2 + y on the unit square: du/dn = 2 (right), 0 (left), 1 (top), -1 (bottom)
    net = _Fn(lambda a, x, y: a * x ** 2 + y)
    pb = Problem(Rectangle((0, 0), (1, 1)), lambda u, x, y: d(u, x) * 0.0,
                 conditions=[Neumann(2.0, on="right"), Neumann(0.0, on="left"),
                             Neumann(1.0, on="top"), Neumann(-1.0, on="bottom")])
    for name, v in _terms(pb, net).items():
        assert v < 1e-26, name


def test_periodic_value_and_derivative():
    net = _Fn(lambda a, x, t: a * sm.sin(2 * np.pi * x) * sm.exp(-t))
    pb = Problem(Interval(0, 1) * TimeInterval(0, 1), lambda u, x, t: d(u, x) * 0.0,
                 conditions=[Periodic("x", derivatives=1)])
    assert _terms(pb, net)["periodic:x"] < 1e-26
    shifted = _Fn(lambda a, x, t: a * sm.sin(np.pi * x))     # u(0) = u(1) but u' differs
    assert _terms(pb, shifted)["periodic:x"] > 1.0


def test_initial_value_and_velocity():
    net = _Fn(lambda a, x, t: a * sm.sin(np.pi * x) * sm.cos(t))
    pb = Problem(Interval(0, 1) * TimeInterval(0, 1), lambda u, x, t: d(u, t) * 0.0,
                 conditions=[Initial(lambda x: np.sin(np.pi * x)), Initial(0.0, derivative=1)])
    terms = _terms(pb, net)
    assert terms["initial"] < 1e-26 and terms["initial:u_t"] < 1e-26


def test_point_data_residual():
    pts = np.array([[0.25], [0.5], [0.75]])
    net = _Fn(lambda a, x: a * x ** 2)
    pb = Problem(Interval(0, 1), _zero, conditions=[PointData(pts, pts[:, 0] ** 2 + 0.1)])
    assert _terms(pb, net)["data"] == pytest.approx(0.01)


def test_hard_dirichlet_and_initial_hold_exactly():
    net = MLP([2, 8, 1], seed=0)
    pb = Problem(Interval(-1, 1) * TimeInterval(0, 1), lambda u, x, t: d(u, t) - d(u, x, x),
                 conditions=[Dirichlet(0.0, hard=True),
                             Initial(lambda x: -np.sin(np.pi * x), hard=True)])
    batch = sample_batch(pb, 8, np.random.default_rng(0), "lhs", "float64")
    loss = Loss(pb, net, batch)
    assert loss.term_names == ["pde"] and len(batch.cond_points) == 0   # exact: no penalty
    x = np.linspace(-1, 1, 9)
    u0 = loss.predict({"net": net.params()}, np.stack([x, np.zeros(9)], 1))[:, 0]
    np.testing.assert_allclose(u0, -np.sin(np.pi * x), atol=1e-14)
    t = np.linspace(0, 1, 5)
    for side in (-1.0, 1.0):
        ub = loss.predict({"net": net.params()}, np.stack([np.full(5, side), t], 1))[:, 0]
        np.testing.assert_allclose(ub, 0.0, atol=1e-14)


def test_hard_transform_derivatives_match_autodiff():
    # u = x(1-x)... with hard Dirichlet: derivatives through the product rule == nested autodiff
    net = MLP([1, 6, 1], activation=sm.tanh, seed=1)
    seen = {}

    def residual(u, x):
        seen["uxx"] = d(u, x, x)
        return d(u, x, x)
    pb = Problem(Interval(0, 1), residual, conditions=[Dirichlet(0.0, hard=True)])
    batch = sample_batch(pb, 5, np.random.default_rng(0), "lhs", "float64")
    Loss(pb, net, batch).terms({"net": net.params()})
    x = sm.tensor(batch.interior)
    f = lambda z: 4 * z * (1 - z) * net.apply(net.params(), z)  # noqa: E731
    uxx = sm.grad(lambda z: sm.grad(lambda w: f(w).sum())(z).sum())(x)
    np.testing.assert_allclose(seen["uxx"].numpy(), uxx.numpy(), rtol=1e-7, atol=1e-8)


# ---- clear errors --------------------------------------------------------------------------
def test_condition_on_a_missing_boundary_part():
    with pytest.raises(ValueError, match=r"Dirichlet\(on='top'\).*no boundary part 'top'.*'left'"):
        Problem(Interval(0, 1), _zero, conditions=[Dirichlet(0.0, on="top")])


def test_initial_condition_without_time():
    with pytest.raises(ValueError, match="no time coordinate 't'"):
        Problem(Interval(0, 1), _zero, conditions=[Initial(0.0)])


def test_observations_outside_the_domain():
    with pytest.raises(ValueError, match=r"PointData points: 1 of 2 points lie outside"):
        Problem(Interval(0, 1), _zero, conditions=[PointData([[0.5], [1.5]], [0.0, 0.0])])


def test_condition_value_of_the_wrong_shape():
    pb = Problem(Interval(0, 1), _zero, conditions=[Dirichlet(lambda x: np.zeros(5))])
    with pytest.raises(ValueError, match=r"Dirichlet\(on='boundary'\): value returned shape"):
        _terms(pb, _Fn(lambda a, x: a * x))


def test_hard_dirichlet_on_a_part_is_refused():
    with pytest.raises(ValueError, match="hard enforcement needs"):
        Problem(Interval(0, 1), _zero, conditions=[Dirichlet(0.0, on="left", hard=True)])


def test_residual_argument_that_is_not_a_coordinate():
    with pytest.raises(ValueError, match=r"takes 2 output argument\(s\) \['u', 'y'\]"):
        Problem(Interval(0, 1), lambda u, y: u, conditions=[])
