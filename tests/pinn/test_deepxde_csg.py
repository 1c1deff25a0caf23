"""``Problem.deepxde_points`` on CSG domains: DeepXDE's CSG pool (``num_boundary`` points on
each operand, the survivors shuffled, the first ``num_boundary`` kept) and interior (re-drawn
from the first operand until enough survive, so Hammersley points repeat)."""
import numpy as np
import pytest

from sciml.pinn import Dirichlet, Disk, Neumann, Problem, Rectangle, laplacian
from sciml.pinn import geometry_deepxde as dx

R = 0.25


def _hole_problem():
    outer, hole = Rectangle((-0.5, -0.5), (0.5, 0.5)), Disk((0, 0), R)
    return Problem(outer - hole, lambda u, x, y: laplacian(u),
                   conditions=[Neumann(0.0, on=hole), Dirichlet(0.0, on=outer)]), outer, hole


def test_difference_pool_composition_and_parts():
    problem, outer, hole = _hole_problem()
    for seed in (0, 1, 2):
        p2, x = problem.deepxde_points(num_domain=225, num_boundary=240, seed=seed)
        assert x.shape == (465, 2)
        pool, inner = x[:240], x[240:]
        on_hole = np.abs(np.linalg.norm(pool, axis=1) - R) <= 1e-12
        on_square = np.abs(np.abs(pool).max(axis=1) - 0.5) <= 1e-12
        assert np.all(on_hole ^ on_square)
        # DeepXDE: 240 square points then 240 hole points (all survive), np.random.permutation
        # after np.random.seed(seed), the first 240 kept
        want_hole = int(np.sum(np.random.RandomState(seed).permutation(480)[:240] >= 240))
        assert on_hole.sum() == want_hole and 100 < want_hole < 140
        neu, dir_ = p2.conditions
        assert (neu.n_points, dir_.n_points) == (want_hole, 240 - want_hole)
        np.testing.assert_allclose(np.linalg.norm(neu.given, axis=1), R, rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.abs(dir_.given).max(axis=1), 0.5, rtol=0, atol=1e-12)
        # interior: the square's 225 Hammersley points outside the disk (181), then the first
        # 44 of them again (the deterministic set re-drawn)
        u = np.random.default_rng(0)
        square = outer.sample_interior(225, u, "hammersley")
        first = square[np.linalg.norm(square, axis=1) > R]
        assert len(first) == 181
        np.testing.assert_array_equal(inner, np.concatenate([first, first[:44]]))
    # the shuffle follows the seed; the sets do not
    assert not np.array_equal(problem.deepxde_points(225, 240, seed=0)[1],
                              problem.deepxde_points(225, 240, seed=1)[1])
    np.testing.assert_array_equal(problem.deepxde_points(225, 240, seed=np.random.default_rng(4))[1],
                                  problem.deepxde_points(225, 240, seed=np.random.default_rng(4))[1])


def test_intersection_and_union_draw_each_operand():
    sq, disk = Rectangle((0, 0), (1, 1)), Disk((1, 1), 0.5)
    inter = dx.boundary(sq & disk, 64, np.random.default_rng(0), "hammersley", dx.legacy_state(0))
    # the square's boundary inside the disk, and the disk's arc inside the square
    assert inter.shape == (64, 2)
    assert np.all(np.linalg.norm(inter - 1, axis=1) <= 0.5 + 1e-12)
    assert np.all((inter >= -1e-12) & (inter <= 1 + 1e-12))
    uni = dx.boundary(sq | disk, 64, np.random.default_rng(0), "hammersley", dx.legacy_state(0))
    assert np.all(~((np.linalg.norm(uni - 1, axis=1) < 0.5 - 1e-9)
                    & np.all((uni > 1e-9) & (uni < 1 - 1e-9), axis=1)))   # nothing strictly inside
    x = dx.interior(sq | disk, 100, np.random.default_rng(0), "hammersley", dx.legacy_state(3))
    assert x.shape == (100, 2) and np.all(dx.inside(sq | disk, x))
    x = dx.interior(sq & disk, 50, np.random.default_rng(0), "lhs", dx.legacy_state(3))
    assert x.shape == (50, 2) and np.all(dx.inside(sq & disk, x))
    # a random sampler re-draws: no repeats
    y = dx.interior(sq - disk, 300, np.random.default_rng(0), "uniform", dx.legacy_state(0))
    assert len(np.unique(y, axis=0)) == 300 and not np.any(dx.inside(disk, y))


def test_bad_inputs_keep_their_errors():
    problem = _hole_problem()[0]
    with pytest.raises(TypeError, match="rng"):
        problem.deepxde_points(225, 240, seed=None)
    with pytest.raises(ValueError, match="num_boundary"):
        problem.deepxde_points(225, -1)
    with pytest.raises(ValueError, match="method must be one of"):
        problem.deepxde_points(225, 240, method="halton2")
    # a hole that covers the square: DeepXDE loops forever; here a clear error
    empty = Problem(Rectangle((0, 0), (1, 1)) - Disk((0.5, 0.5), 2), lambda u, x, y: laplacian(u),
                    conditions=[Dirichlet(0.0)])
    with pytest.raises(ValueError, match="none of the interior points drawn for"):
        empty.deepxde_points(10, 0)


def test_pools_are_deepxdes_points():
    dde = pytest.importorskip("deepxde", reason="DeepXDE not installed: the comparison with its "
                                                "own draws needs it (PYTHONPATH=/tmp/pinn_peer/site)")
    o, i = dde.geometry.Rectangle([-0.5, -0.5], [0.5, 0.5]), dde.geometry.Disk([0, 0], R)
    problem = _hole_problem()[0]
    for seed in (0, 1):
        dde.config.set_random_seed(seed)
        want = dde.data.PDE(o - i, lambda x, y: y, [], num_domain=225, num_boundary=240).train_x_all
        got = problem.deepxde_points(225, 240, seed=seed)[1]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)     # DeepXDE rounds to float32
    sq, disk = dde.geometry.Rectangle([0, 0], [1, 1]), dde.geometry.Disk([1, 1], 0.5)
    ours_sq, ours_disk = Rectangle((0, 0), (1, 1)), Disk((1, 1), 0.5)
    for theirs, ours in ((sq & disk, ours_sq & ours_disk), (sq | disk, ours_sq | ours_disk),
                         (disk - sq, ours_disk - ours_sq)):
        dde.config.set_random_seed(7)
        want_in = theirs.random_points(60, random="Hammersley")
        want_b = theirs.random_boundary_points(50, random="Hammersley")
        legacy = dx.legacy_state(7)
        got_in = dx.interior(ours, 60, np.random.default_rng(0), "hammersley", legacy)
        got_b = dx.boundary(ours, 50, np.random.default_rng(0), "hammersley", legacy)
        np.testing.assert_allclose(got_in, want_in, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got_b, want_b, rtol=0, atol=1e-6)
