import sys

import numpy as np
import pytest

from sciml.pinn import sampling
from sciml.pinn.sampling import (as_rng, grid, latin_hypercube, rad_resample, rar_add, sample,
                                 sobol, stream, uniform, unit_sphere)

RANDOM = [uniform, latin_hypercube, sobol]


@pytest.mark.parametrize("fn", RANDOM, ids=lambda f: f.__name__)
def test_shape_range_and_dtype(fn):
    x = fn(100, 3, 0)
    assert x.shape == (100, 3) and x.dtype == np.float64
    assert np.all((x >= 0) & (x < 1))
    assert fn(0, 3, 0).shape == (0, 3)


@pytest.mark.parametrize("fn", RANDOM, ids=lambda f: f.__name__)
def test_seed_makes_points_repeatable(fn):
    np.testing.assert_array_equal(fn(64, 2, 7), fn(64, 2, 7))
    np.testing.assert_array_equal(fn(64, 2, np.random.default_rng(7)),
                                  fn(64, 2, np.random.default_rng(7)))
    assert not np.array_equal(fn(64, 2, 7), fn(64, 2, 8))


def _one_per_stratum(x):
    n = len(x)
    return all(np.array_equal(np.sort(np.floor(col * n)), np.arange(n)) for col in x.T)


def test_latin_hypercube_has_one_point_per_stratum_in_every_coordinate():
    assert _one_per_stratum(latin_hypercube(37, 5, 0))


def test_sobol_power_of_two_is_balanced_in_every_coordinate():
    assert _one_per_stratum(sobol(128, 4, 3))


def test_sobol_first_two_coordinates_form_a_net():
    """Scrambled Sobol' points in dims (0, 1) are a (0, m, 2)-net: every dyadic box of
    area 1/n holds exactly one point."""
    m = 6
    x = sobol(2 ** m, 2, 1)
    for a in range(m + 1):
        cells = np.floor(x[:, 0] * 2 ** a) * 2 ** (m - a) + np.floor(x[:, 1] * 2 ** (m - a))
        assert len(np.unique(cells)) == 2 ** m


def test_sobol_is_more_uniform_than_random():
    from scipy.stats import qmc
    assert qmc.discrepancy(sobol(256, 2, 0)) < qmc.discrepancy(uniform(256, 2, 0)) / 3


def test_sobol_without_scipy_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    with pytest.raises(ImportError, match="needs scipy.*pip install scipy"):
        sobol(8, 2, 0)


def test_grid_is_regular_and_close_to_n():
    x = grid(100, 2)
    assert x.shape == (100, 2)
    np.testing.assert_allclose(np.unique(x[:, 0]), (np.arange(10) + 0.5) / 10)
    assert grid(1000, 3).shape == (1000, 3)
    assert grid(4, 1, endpoint=True)[:, 0].tolist() == [0.0, 1 / 3, 2 / 3, 1.0]


def test_grid_with_extents_keeps_spacing_equal():
    x = grid(200, 2, extents=[2.0, 1.0])
    assert len(np.unique(x[:, 0])) == 20 and len(np.unique(x[:, 1])) == 10


def test_sample_dispatches_and_rejects_unknown_methods():
    np.testing.assert_array_equal(sample("lhs", 10, 2, 0), latin_hypercube(10, 2, 0))
    np.testing.assert_array_equal(sample("latin_hypercube", 10, 2, 0), latin_hypercube(10, 2, 0))
    with pytest.raises(ValueError, match="method must be one of 'uniform', 'lhs'.*got 'halton'"):
        sample("halton", 10, 2, 0)


def test_rng_must_be_generator_or_int():
    assert isinstance(as_rng(3), np.random.Generator)
    with pytest.raises(TypeError, match="needs rng.*got None"):
        uniform(3, 2, None)
    with pytest.raises(TypeError, match="rng must be a np.random.Generator or an int seed, "
                                        "got str"):
        latin_hypercube(3, 2, "seed")


def test_bad_counts():
    with pytest.raises(ValueError, match="non-negative int, got -1"):
        uniform(-1, 2, 0)
    with pytest.raises(TypeError, match="non-negative int, got 2.5"):
        uniform(2.5, 2, 0)


def test_stream_continues_the_sobol_sequence():
    draw = stream("sobol", 2, 5)
    x = np.concatenate([draw(32), draw(32)])
    assert _one_per_stratum(x)
    with pytest.raises(ValueError, match="not a stream"):
        stream("grid", 2, 0)


def test_unit_sphere_gives_unit_vectors():
    for k, d in [(1, 2), (2, 3), (4, 4), (6, 6)]:
        v = unit_sphere(uniform(50, k, 0))
        assert v.shape == (50, d)
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0)


# ---- residual-adaptive resampling -----------------------------------------------------
def test_rar_add_returns_largest_residuals_first():
    cand = np.arange(10.0)[:, None]
    r = np.array([0, 5, 1, 9, 2, 8, 3, 0, 0, 7.0])
    np.testing.assert_array_equal(rar_add(cand, r, 3)[:, 0], [3, 5, 9])
    np.testing.assert_array_equal(rar_add(cand, -r[:, None], 2)[:, 0], [3, 5])   # |r|, (m, 1)
    assert rar_add(cand, r, 0).shape == (0, 1)


def test_rar_add_errors():
    with pytest.raises(ValueError, match="k=11 but there are only 10 candidates"):
        rar_add(np.zeros((10, 2)), np.ones(10), 11)
    with pytest.raises(ValueError, match=r"residual_abs has shape \(9,\); expected \(10,\)"):
        rar_add(np.zeros((10, 2)), np.ones(9), 1)
    with pytest.raises(ValueError, match="non-finite"):
        rar_add(np.zeros((3, 2)), np.array([1.0, np.nan, 0.0]), 1)


def test_rad_resample_draws_without_replacement_and_is_seeded():
    cand = uniform(200, 2, 0)
    r = np.abs(np.sin(10 * cand[:, 0]))
    x = rad_resample(cand, r, 50, 1)
    assert x.shape == (50, 2) and len(np.unique(x, axis=0)) == 50
    np.testing.assert_array_equal(x, rad_resample(cand, r, 50, 1))
    assert len(rad_resample(cand, r, 200, 1)) == 200


def test_rad_resample_follows_the_residual():
    cand = np.arange(1000.0)[:, None]
    r = np.where(cand[:, 0] < 500, 1.0, 0.0)
    pure = rad_resample(cand, r, 300, 0, k=1.0, c=0.0)      # only where r > 0
    assert np.all(pure[:, 0] < 500)
    flat = rad_resample(cand, r, 300, 0, k=1.0, c=100.0)    # nearly uniform
    assert 0.4 < np.mean(flat[:, 0] < 500) < 0.6
    mixed = rad_resample(cand, r, 300, 0, k=1.0, c=1.0)     # p = 3:1
    assert 0.65 < np.mean(mixed[:, 0] < 500) < 0.85
    assert len(rad_resample(cand, np.zeros(1000), 10, 0, c=0.0)) == 10   # all zero: uniform


def test_rad_resample_errors():
    with pytest.raises(ValueError, match="n=11 but there are only 10 candidates"):
        rad_resample(np.zeros((10, 2)), np.ones(10), 11, 0)
    with pytest.raises(ValueError, match="need k >= 0 and c >= 0"):
        rad_resample(np.zeros((10, 2)), np.ones(10), 2, 0, c=-1.0)
    with pytest.raises(TypeError, match="needs rng"):
        rad_resample(np.zeros((10, 2)), np.ones(10), 2, None)


def test_methods_constant():
    assert sampling.METHODS == ("uniform", "lhs", "sobol", "hammersley", "grid")
