import warnings

import numpy as np
import pytest

from sciml.pinn.reference import (burgers_cole_hopf, heat_sin, helmholtz_sin, poisson_sin,
                                  wave_sin)

NU = 0.01 / np.pi


@pytest.fixture(scope="module")
def burgers():
    return burgers_cole_hopf(NU)


def _xt(x, t):
    x, t = np.broadcast_arrays(np.asarray(x, float), np.asarray(t, float))
    return np.stack([x.ravel(), t.ravel()], axis=1)


# ---- Burgers (Cole–Hopf) ----------------------------------------------------------------
def test_burgers_initial_condition_is_exact(burgers):
    x = np.linspace(-1, 1, 101)
    np.testing.assert_array_equal(burgers(_xt(x, 0.0)), -np.sin(np.pi * x))


def test_burgers_boundary_values_are_zero(burgers):
    t = np.linspace(0.05, 1, 20)
    np.testing.assert_allclose(burgers(_xt(-1.0, t)), 0, atol=1e-12)
    np.testing.assert_allclose(burgers(_xt(1.0, t)), 0, atol=1e-12)


def test_burgers_is_antisymmetric_with_a_shock_at_zero(burgers):
    x = np.linspace(0.001, 1, 200)
    for t in (0.25, 0.5, 1.0):
        np.testing.assert_allclose(burgers(_xt(-x, t)), -burgers(_xt(x, t)), atol=1e-12)
    u = burgers(_xt([-0.02, 0.0, 0.02], 1.0))
    assert abs(u[1]) < 1e-12 and u[0] > 0.5 and u[2] < -0.5


def test_burgers_steepest_slope_matches_basdevant(burgers):
    """Basdevant et al. (1986): max |u_x| = 152.00516, reached at x = 0, t = 1.6037/pi."""
    x = np.linspace(-0.005, 0.005, 10001)
    slope = np.abs(np.gradient(burgers(_xt(x, 1.6037 / np.pi)), x)).max()
    assert slope == pytest.approx(152.00516, rel=1e-3)
    earlier = np.abs(np.gradient(burgers(_xt(x, 1 / np.pi)), x)).max()
    assert earlier == pytest.approx(34.2263, rel=1e-3)      # regression value, t = 1/pi


def test_burgers_satisfies_the_pde_by_finite_differences():
    for nu in (NU, 0.1):
        ref = burgers_cole_hopf(nu)
        x, t = np.meshgrid(np.linspace(0.3, 0.9, 7), np.linspace(0.05, 0.3, 6))
        x, t, h = x.ravel(), t.ravel(), 1e-4
        u = ref(_xt(x, t))
        ux = (ref(_xt(x + h, t)) - ref(_xt(x - h, t))) / (2 * h)
        uxx = (ref(_xt(x + h, t)) - 2 * u + ref(_xt(x - h, t))) / h ** 2
        ut = (ref(_xt(x, t + h)) - ref(_xt(x, t - h))) / (2 * h)
        scale = np.abs(ut).max() + np.abs(u * ux).max()
        assert np.abs(ut + u * ux - nu * uxx).max() < 1e-5 * scale


def test_burgers_quadrature_has_converged(burgers):
    pts = _xt(*np.meshgrid(np.linspace(-1, 1, 65), np.linspace(0, 1, 11)))
    np.testing.assert_allclose(burgers_cole_hopf(NU, nodes=128)(pts), burgers(pts), atol=1e-12)


def test_burgers_does_not_overflow_for_small_viscosity():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        u = burgers_cole_hopf(0.001 / np.pi)(_xt(np.linspace(-1, 1, 51), 0.7))
    assert np.all(np.isfinite(u)) and np.abs(u).max() <= 1 + 1e-12


def test_burgers_grid_and_domain(burgers):
    X, T, U = burgers.grid(64, 20)
    assert X.shape == T.shape == U.shape == (20, 64)
    assert burgers.domain.names == burgers.names == ("x", "t")
    np.testing.assert_array_equal(U[0], -np.sin(np.pi * X[0]))
    assert burgers.name == "burgers_cole_hopf(nu=0.0031831)"


@pytest.mark.parametrize("make, message", [
    (lambda: burgers_cole_hopf(0.0), "nu must be a positive number"),
    (lambda: burgers_cole_hopf(NU, nodes=1000), r"nodes must be an int in \[2, 360\]"),
    (lambda: burgers_cole_hopf(NU)(np.zeros(4)), r"points has shape \(4,\); expected \(n, 2\) "
                                                 r"with columns \('x', 't'\)"),
    (lambda: burgers_cole_hopf(NU)(_xt(0.0, -0.1)), "t must be >= 0"),
    (lambda: heat_sin(alpha=-1.0), "alpha must be a positive number"),
    (lambda: poisson_sin()(np.zeros((3, 3))), r"expected \(n, 2\) with columns \('x', 'y'\)"),
])
def test_bad_input(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ---- manufactured and closed-form solutions ------------------------------------------
def _laplacian(f, pts, h=1e-4):
    out = -4 * f(pts)
    for i in range(2):
        e = np.zeros(2)
        e[i] = h
        out += f(pts + e) + f(pts - e)
    return out / h ** 2


@pytest.mark.parametrize("k", [1, 2])
def test_poisson_source_is_minus_laplacian(k):
    ref = poisson_sin(k)
    pts = ref.domain.sample_interior(50, 0)
    np.testing.assert_allclose(-_laplacian(ref, pts), ref.source(pts), atol=1e-4 * k ** 4)
    b = ref.domain.sample_boundary(50, 0)
    np.testing.assert_allclose(ref(b), 0, atol=1e-12)


def test_helmholtz_source():
    ref = helmholtz_sin(k=1.0, a1=1, a2=4)
    pts = ref.domain.sample_interior(50, 0)
    lhs = _laplacian(ref, pts, h=1e-4) + ref.k ** 2 * ref(pts)
    np.testing.assert_allclose(lhs, ref.source(pts), atol=1e-2)
    np.testing.assert_allclose(ref(ref.domain.sample_boundary(50, 0)), 0, atol=1e-12)
    assert ref.domain.bbox[0].tolist() == [-1, -1]


def test_heat_satisfies_pde_initial_and_boundary():
    alpha, h = 0.3, 1e-4
    ref = heat_sin(alpha)
    pts = ref.domain.sample_interior(50, 0)
    ex, et = np.array([h, 0]), np.array([0, h])
    ut = (ref(pts + et) - ref(pts - et)) / (2 * h)
    uxx = (ref(pts + ex) - 2 * ref(pts) + ref(pts - ex)) / h ** 2
    np.testing.assert_allclose(ut, alpha * uxx, atol=1e-5)
    x = np.linspace(0, 1, 11)
    np.testing.assert_allclose(ref(_xt(x, 0.0)), ref.initial(x))
    np.testing.assert_allclose(ref(_xt([0.0, 1.0], 0.7)), 0, atol=1e-12)


@pytest.mark.parametrize("c, a2", [(1.0, 0.0), (2.0, 0.5)])
def test_wave_satisfies_pde_initial_and_boundary(c, a2):
    h = 1e-4
    ref = wave_sin(c, a2=a2, k2=4)
    pts = ref.domain.sample_interior(50, 0)
    ex, et = np.array([h, 0]), np.array([0, h])
    utt = (ref(pts + et) - 2 * ref(pts) + ref(pts - et)) / h ** 2
    uxx = (ref(pts + ex) - 2 * ref(pts) + ref(pts - ex)) / h ** 2
    np.testing.assert_allclose(utt, c ** 2 * uxx, atol=2e-2)
    x = np.linspace(0, 1, 11)
    np.testing.assert_allclose(ref(_xt(x, 0.0)), ref.initial(x))
    ut0 = (ref(_xt(x, h)) - ref(_xt(x, -h))) / (2 * h)
    np.testing.assert_allclose(ut0, 0, atol=1e-8)
    np.testing.assert_allclose(ref(_xt([0.0, 1.0], 0.3)), 0, atol=1e-12)


def test_grid_of_a_stationary_problem():
    X, Y, U = poisson_sin().grid(11, 21)
    assert U.shape == (21, 11)
    assert U[10, 5] == pytest.approx(1.0)       # x = y = 1/2
