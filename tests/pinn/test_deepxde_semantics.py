"""What a DeepXDE user writes, in sciml: where a condition holds (part names, predicates,
geometries, explicit points), operator / point-set / derivative-observation conditions,
the PDE on boundary points, data references, custom networks, several networks and
feature/output transforms."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.models.module import Parameter as P
from sciml.optim import LBFGS, Adam
from sciml.pinn import (Box, Dirichlet, Disk, Fields, Interval, Neumann, Operator, PointData,
                        Polygon, Problem, Rectangle, TimeInterval, Transformed, d, solve)
from sciml.pinn.solver import sample_batch

RNG = np.random.default_rng(0)


def _sample(cond, domain, n=64):
    cond.check(domain)
    return cond.sample(domain, n, np.random.default_rng(0), "uniform").x


def test_on_selects_by_name_predicate_and_geometry():
    sq = Polygon([(0, 0), (2, 0), (2, 1), (0, 1)])
    assert sq.part_names[1:] == ("edge0", "edge1", "edge2", "edge3")
    x = _sample(Dirichlet(0.0, on="edge1"), sq)          # from (2, 0) to (2, 1)
    np.testing.assert_allclose(x[:, 0], 2.0)
    assert {"x_min", "x_max", "y_min", "y_max", "z_min", "z_max"} <= set(Box((0,) * 3, (1,) * 3).part_names)
    # DeepXDE's boundary(x, on_boundary) as a vectorised predicate of the columns
    x = _sample(Dirichlet(0.0, on=lambda x, y: x < 0.5), Rectangle((0, 0), (1, 1)))
    assert np.all(x[:, 0] < 0.5) and np.all(Rectangle((0, 0), (1, 1)).on_boundary(x))
    # the hole of a CSG difference: on=<the operand>
    hole = Disk((0.5, 0.5), 0.2)
    plate = Rectangle((0, 0), (1, 1)) - hole
    x = _sample(Neumann(0.0, on=hole), plate)
    np.testing.assert_allclose(np.linalg.norm(x - 0.5, axis=1), 0.2, atol=1e-9)
    # time ends and a spatial operand of a space-time domain
    st = plate * TimeInterval(0, 1)
    assert {"initial", "final"} <= set(st.part_names)
    x = _sample(Dirichlet(0.0, on=hole), st)
    np.testing.assert_allclose(np.linalg.norm(x[:, :2] - 0.5, axis=1), 0.2, atol=1e-9)
    with pytest.raises(ValueError, match="bool mask"):
        _sample(Dirichlet(0.0, on=lambda x, y: x), Rectangle((0, 0), (1, 1)))


def _poisson_1d(conditions, reference=None):
    def residual(u, x):
        return d(u, x, x) + np.pi ** 2 * sm.sin(np.pi * x)
    return Problem(Interval(0, 1), residual, conditions=conditions,
                   reference=reference or (lambda p: np.sin(np.pi * p[:, 0])))


STAGES = lambda: [(Adam(lr=1e-2), 100), (LBFGS(max_iter=50), 80)]  # noqa: E731


class PlainNet:
    """A network written by hand: params() and apply(params, x), nothing else."""

    def __init__(self, width=16):
        r = np.random.default_rng(0)
        self.p = {"w1": P(sm.tensor(r.normal(size=(1, width)))), "b1": P(sm.tensor(np.zeros(width))),
                  "w2": P(sm.tensor(r.normal(size=(width, 1)) / 4)), "b2": P(sm.tensor(np.zeros(1)))}

    def params(self):
        return self.p

    def apply(self, p, x):
        return sm.matmul(sm.tanh(sm.matmul(x, p["w1"]) + p["b1"]), p["w2"]) + p["b2"]


def test_plain_network_with_point_set_neumann_and_operator_conditions():
    # u(0) = 0, u'(1) = -pi at a given point (PointSetBC), u'(1) - (-pi) = 0 as an operator
    pb = _poisson_1d([Dirichlet(0.0, on="left"), Neumann(-np.pi, points=np.array([[1.0]])),
                      Operator(lambda u, x: d(u, x) + np.pi, on="right")])
    assert pb.conditions[1].name == "neumann:points" and pb.conditions[2].name == "operator:right"
    r = solve(pb, PlainNet(), points=32, stages=STAGES(), progress=False)
    assert r.rel_l2 < 1e-2 and r.path == "autodiff"
    assert "PlainNet is not an MLP" in r.path_reason


def test_derivative_observations_and_data_reference():
    xs = np.linspace(0.1, 0.9, 9)[:, None]
    grid = np.linspace(0, 1, 201)[:, None]
    pb = _poisson_1d([PointData(xs, np.pi * np.cos(np.pi * xs[:, 0]), derivative="x"),
                      PointData([[0.0]], [0.0])],
                     reference=(grid, np.sin(np.pi * grid)))   # data (e.g. a spectral solution)
    net = MLP([1, 16, 16, 1], activation=sm.tanh, seed=0)
    r = solve(pb, net, points=32, stages=STAGES(), progress=False)
    assert r.rel_l2 < 1e-2 and r.path == "fused"
    exact = np.linalg.norm(r.predict(grid)[:, 0] - np.sin(np.pi * grid[:, 0])) / np.linalg.norm(
        np.sin(np.pi * grid[:, 0]))
    assert r.rel_l2 == pytest.approx(exact, rel=1e-6)
    with pytest.raises(ValueError, match=r"values has shape \(3,\); expected \(201,\)"):
        _poisson_1d([], reference=(grid, np.zeros(3)))


def test_pde_on_boundary_adds_the_condition_points_to_the_pde_points():
    pb = _poisson_1d([Dirichlet(0.0), PointData([[0.5]], [1.0])])
    b = sample_batch(pb, {"interior": 20, "boundary": 6}, np.random.default_rng(0), "lhs",
                     "float64", pde_on_boundary=True)
    assert b.n == 26 and np.sum(np.isin(b.interior[:, 0], [0.0, 1.0])) == 6


def test_fields_keep_the_fused_path_and_transforms_are_exact():
    # two fields u, v with u'' = -pi^2 sin(pi x), v = 2 u
    def residual(u, v, x):
        return [d(u, x, x) + np.pi ** 2 * sm.sin(np.pi * x), v - 2 * u]
    pb = Problem(Interval(0, 1), residual, outputs=("u", "v"), conditions=[Dirichlet(0.0)],
                 reference=lambda p: np.stack([np.sin(np.pi * p[:, 0]),
                                               2 * np.sin(np.pi * p[:, 0])], axis=1))
    net = Fields(MLP([1, 16, 1], activation=sm.tanh, seed=0), MLP([1, 16, 1], activation=sm.tanh, seed=1))
    r = solve(pb, net, points=32, stages=STAGES(), progress=False)
    assert r.path == "fused" and "2 networks" in r.path_reason
    assert r.history["loss"][-1] < 1e-3 * r.history["loss"][0]
    from sciml.pinn.operators import network_derivatives
    x = sm.tensor(RNG.uniform(size=(7, 1)))
    fused, _ = network_derivatives(net, net.params(), x, [(), (0,), (0, 0)])
    ref, used = network_derivatives(net, net.params(), x, [(), (0,), (0, 0)], path="autodiff")
    assert used == "autodiff"
    for k in fused:
        np.testing.assert_allclose(fused[k].numpy(), ref[k].numpy(), rtol=1e-9, atol=1e-12)
    # output transform: u = x (1 - x) N(x) holds the boundary values exactly (DeepXDE's
    # apply_output_transform); feature transform: N sees (x, x^2)
    tnet = Transformed(MLP([2, 16, 1], activation=sm.tanh, seed=0),
                       features=lambda x: sm.concat([x, x * x], axis=1),
                       output=lambda x, y: x * (1 - x) * y)
    r = solve(_poisson_1d([]), tnet, points=32, stages=STAGES(), progress=False)
    np.testing.assert_allclose(r.predict([[0.0], [1.0]]), 0.0, atol=1e-12)
    assert r.rel_l2 < 1e-2 and r.path == "fused" and "Transformed" in r.path_reason


def test_a_pointwise_output_transform_can_keep_the_fused_path():
    from sciml.pinn.operators import network_derivatives
    net = Transformed(MLP([2, 8, 8, 1], activation=sm.tanh, seed=0),
                      output=lambda x, y: x[:, 0:1] * (1 - x[:, 0:1]) * y + sm.sin(x[:, 1:2]) * y * y)
    x = sm.tensor(RNG.uniform(size=(5, 2)))
    D = [(), (0,), (1,), (0, 0), (0, 1), (1, 1)]

    def derivs(p, path):
        vals, used = network_derivatives(net, p, x, D, path)
        return sum((vals[k] * vals[k]).sum() for k in D), vals, used
    (fused, vf, used_f), (ref, vr, used_r) = derivs(net.params(), "fused"), derivs(net.params(), "auto")
    assert (used_f, used_r) == ("fused", "fused")    # 'auto' keeps the fused jet; the transform runs on jets
    for k in D:
        np.testing.assert_allclose(vf[k].numpy(), vr[k].numpy(), rtol=1e-10, atol=1e-13)
    gf = sm.grad(lambda p: derivs(p, "fused")[0])(net.params())
    gr = sm.grad(lambda p: derivs(p, "autodiff")[0])(net.params())
    for a, b in zip(_leaves(gf), _leaves(gr)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12)


def _leaves(t):
    from sciml.autodiff.pytree import flatten
    return flatten(t)[0]
