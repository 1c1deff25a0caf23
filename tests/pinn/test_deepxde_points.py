"""DeepXDE's point sets in sciml: the Hammersley sampler (DeepXDE's default
``train_distribution``) and ``Problem.deepxde_points`` (``num_domain`` / ``num_boundary`` /
``num_initial`` / ``anchors``: one boundary pool shared by the conditions, the PDE on all)."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import (Dirichlet, Initial, Interval, Neumann, Periodic, Problem, Rectangle,
                        TimeInterval, d, sampling, solve)


def test_hammersley_is_deepxdes_set():
    # DeepXDE: skopt Hammersly(min_skip=1, max_skip=1) in 1-D (van der Corput of 1..n in base 2)
    x = sampling.hammersley(16, 1)[:, 0]
    np.testing.assert_array_equal(np.sort(x), np.r_[1 / 32, 1 / 16, np.arange(2, 16) / 16])
    np.testing.assert_array_equal(x[:4], [0.5, 0.25, 0.75, 0.125])
    # d >= 2: Halton (2, 3, ...) of k = 1..n, the last column k / (n + 1): DeepXDE's
    # Interval x TimeDomain(0, 1) gives x = 0, -0.5, 0.5, -0.75 and t = 1/11, 2/11, ... for n = 10
    u = sampling.hammersley(10, 2)
    np.testing.assert_allclose(2 * u[:4, 0] - 1, [0.0, -0.5, 0.5, -0.75])
    np.testing.assert_allclose(u[:, 1], np.arange(1, 11) / 11)
    np.testing.assert_allclose(sampling.hammersley(3, 3)[:, 1], [1 / 3, 2 / 3, 1 / 9])
    u = sampling.sample("Hammersley", 100, 3, rng=5)         # DeepXDE's spelling; rng unused
    assert np.all((u > 0) & (u < 1)) and np.array_equal(u, sampling.hammersley(100, 3))
    # a rejection stream continues the Halton sequence instead of repeating the set
    draw = sampling.stream("hammersley", 2, rng=0)
    np.testing.assert_array_equal(np.concatenate([draw(3), draw(4)]), sampling.halton(7, 2))
    with pytest.raises(ValueError, match="method must be one of"):
        sampling.sample("hammersly2", 4, 1)


def _periodic():
    return Problem(Interval(-1, 1), lambda u, x: -d(u, x, x) - np.pi ** 2 * sm.sin(np.pi * x),
                   conditions=[Dirichlet(lambda x: np.sin(np.pi * x), on="left"), Periodic("x")],
                   reference=lambda p: np.sin(np.pi * p[:, 0]))


def test_deepxde_points_share_one_boundary_pool_and_the_pde_holds_on_all():
    problem = _periodic()
    p2, x = problem.deepxde_points(num_domain=16, num_boundary=2)
    # DeepXDE's dde.data.PDE(geom, pde, [bc1, bc2], 16, 2).train_x_all: 16 Hammersley + both ends
    np.testing.assert_array_equal(np.sort(x[:, 0]), np.r_[-1, -15 / 16, np.arange(-14, 15, 2) / 16, 1])
    assert len(x) == 18
    assert [c.name for c in p2.conditions] == [c.name for c in problem.conditions]
    np.testing.assert_array_equal(p2.conditions[0].given, [[-1.0]])     # left end of the pool
    np.testing.assert_array_equal(p2.conditions[1].given, [[-1.0]])     # paired with x = 1
    assert all(c.given is None for c in problem.conditions)              # the original unchanged
    # two conditions on different ends split one pool between them
    q = Problem(Interval(0, 1), lambda u, x: d(u, x, x),
                conditions=[Dirichlet(0.0, on="left"), Neumann(1.0, on="right")])
    q2, x = q.deepxde_points(5, 8, method="lhs", seed=3)
    left, right = (c.given[:, 0] for c in q2.conditions)
    assert len(left) + len(right) == 8 and np.all(left == 0) and np.all(right == 1)
    assert len(x) == 13


def test_deepxde_points_space_time_initial_and_anchors():
    heat = Problem(Interval(0, 1) * TimeInterval(0, 1), lambda u, x, t: d(u, t) - d(u, x, x),
                   conditions=[Dirichlet(0.0), Initial(lambda x: np.sin(np.pi * x))])
    anchors = np.array([[0.5, 0.5], [0.0, 0.25]])            # the second lies on x = 0
    h2, x = heat.deepxde_points(25, 8, 6, anchors=anchors)
    assert x.shape == (41, 2)
    bc, ic = h2.conditions
    assert len(bc.given) == 9 and np.all(np.isin(bc.given[:, 0], [0.0, 1.0]))   # pool + anchor
    assert len(ic.given) == 6 and np.all(ic.given[:, 1] == 0)
    np.testing.assert_allclose(np.sort(ic.given[:, 0]), np.sort(sampling.hammersley(6, 1)[:, 0]))
    with pytest.raises(ValueError, match="none of the 14 points lies where Initial"):
        heat.deepxde_points(10, 4)
    with pytest.raises(ValueError, match="no time"):
        Problem(Rectangle((0, 0), (1, 1)), lambda u, x, y: d(u, x, x)).deepxde_points(4, 4, 4)
    with pytest.raises(ValueError, match="anchors"):
        heat.deepxde_points(4, 4, 4, anchors=[[2.0, 0.5]])
    with pytest.raises(TypeError, match="num_boundary"):
        heat.deepxde_points(4, 2.5)


def test_same_weights_and_points_train_as_deepxde():
    # DeepXDE 1.15 (PyTorch, float64) on Poisson_periodic_1d with its 16 + 2 points, a 1-16-16-1
    # tanh net given these weights, 30 Adam steps at lr 0.01 predicts, at x = -1, -0.5, 0, 0.5, 1:
    dde = [0.18286867641796525, -0.12400904911629662, 0.8318935722122784, 1.7286118980219967,
           1.2079172990690543]
    rng, sizes = np.random.default_rng(7), [1, 16, 16, 1]
    net = MLP(sizes, activation=sm.tanh, seed=0, dtype="float64")
    for layer, (a, b) in zip(net.layers, zip(sizes, sizes[1:])):
        layer.weight._assign(rng.uniform(-1, 1, (a, b)) * np.sqrt(6 / (a + b)))
        layer.bias._assign(rng.uniform(-0.1, 0.1, b))
    problem, points = _periodic().deepxde_points(16, 2)
    r = solve(problem, net, points=points, stages=[(Adam(lr=0.01), 30)], dtype="float64",
              progress=False)
    assert {"pde", "dirichlet:left", "periodic:x"} <= set(r.history)   # the terms keep their names
    y = net(sm.tensor(np.linspace(-1, 1, 5)[:, None])).numpy()[:, 0]
    np.testing.assert_allclose(y, dde, rtol=1e-9, atol=1e-12)


def test_kovasznay_points_pde_on_the_boundary_pool_and_conditions_by_component():
    # examples/deepxde/kovasznay_flow.py: DeepXDE's num_domain=2601, num_boundary=400; the PDE
    # holds on all 3001, u and v on the 400 pool points, p on those at x = 1 (114, as in DeepXDE)
    f = lambda x, y: 0 * x   # noqa: E731
    pb = Problem(Rectangle((-0.5, -0.5), (1, 1.5)), lambda u, v, p, x, y: [u, v, p],
                 outputs=("u", "v", "p"),
                 conditions=[Dirichlet(f, component=0), Dirichlet(f, component=1),
                             Dirichlet(f, on="right", component=2)])
    pb2, x = pb.deepxde_points(num_domain=2601, num_boundary=400)
    assert x.shape == (3001, 2)
    assert [c.n_points for c in pb2.conditions] == [400, 400, 114]
    assert np.all(pb2.conditions[2].given[:, 0] == 1.0)
    # the interior: DeepXDE's Hammersley rectangle (Halton base 2 in x, k / 2602 in y)
    np.testing.assert_allclose(x[400:403], [[0.25, -0.5 + 2 / 2602], [-0.125, -0.5 + 4 / 2602],
                                            [0.625, -0.5 + 6 / 2602]], rtol=0, atol=1e-12)
    assert np.all(np.abs(pb.domain._sdf(x[:400])) < 1e-12)      # the pool lies on the boundary
    # the pool: DeepXDE's walk along the perimeter (7 long) from (-0.5, -0.5), counter-clockwise,
    # of the 1-D Hammersley values 0.5, 0.25, 0.75, ...: 3.5 -> top (1, 1.5), 1.75 -> right,
    # 5.25 -> left
    np.testing.assert_allclose(x[:3], [[1.0, 1.5], [1.0, -0.25], [-0.5, 1.25]], rtol=0, atol=1e-12)


def test_rectangle_pool_is_deepxdes_points():
    dde = pytest.importorskip("deepxde")
    for lo, hi, n in (((-0.5, -0.5), (1, 1.5), 400), ((0, 0), (1, 1), 37), ((-1, 0), (3, 0.5), 100)):
        want = dde.geometry.Rectangle(list(lo), list(hi)).random_boundary_points(n, random="Hammersley")
        got = Rectangle(lo, hi)._deepxde_boundary(n, None, "hammersley")
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
