"""Self-scaled BFGS / Broyden updates of sciml.optim.BFGS (update='ssbfgs' / 'ssbroyden')."""
import math

import numpy as np
import pytest

import sciml as sm
from sciml.optim import BFGS, bfgs
from sciml.optim.bfgs import scaling_parameters


def rosen(x):
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


def _quadratic(n=6, seed=0):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((n, n))
    A = Q @ Q.T + n * np.eye(n) * np.logspace(0, 2, n)     # SPD, condition ~ 1e2..1e3
    bvec = rng.standard_normal(n)
    At, bt = sm.tensor(A), sm.tensor(bvec)
    return A, bvec, lambda x: 0.5 * (x * (At @ x)).sum() - (bt * x).sum()


def _reference_update(H, s, y, g, t, update):
    """The dense formula of Urban et al. (2024), written out directly in numpy."""
    n = len(s)
    sy, Hy = s @ y, H @ y
    yHy = y @ Hy
    b, h = -t * (s @ g) / sy, yHy / sy
    if update == "ssbfgs":
        tau, phi = min(1.0, 1.0 / b), 1.0
    else:
        a = b * h - 1.0
        c = math.sqrt(a / (1.0 + a))
        rho = min(1.0, h * (1.0 - c))
        theta = max((rho - 1.0) / a, min(1.0 / rho, (1.0 - b) / b))
        sigma = 1.0 + a * theta
        sn = abs(sigma) ** (1.0 / (1.0 - n))
        tau = min(min(1.0, 1.0 / b) * sn, sigma) if theta <= 0 else min(1.0, 1.0 / b) * min(sn, 1.0 / theta)
        phi = (1.0 - theta) / (1.0 + a * theta)
    v = s / sy - Hy / yHy
    return (H - np.outer(Hy, Hy) / yHy + phi * yHy * np.outer(v, v)) / tau + np.outer(s, s) / sy


def test_scaling_parameters_special_cases():
    assert scaling_parameters("bfgs", 10, 3.0, 2.0) == (1.0, 1.0)
    assert scaling_parameters("ssbfgs", 10, 4.0, 2.0) == (0.25, 1.0)
    assert scaling_parameters("ssbfgs", 10, 0.5, 2.0) == (1.0, 1.0)
    # b h = 1 (no curvature information beyond the secant pair): falls back to SSBFGS
    assert scaling_parameters("ssbroyden", 10, 2.0, 0.5) == (0.5, 1.0)
    tau, phi = scaling_parameters("ssbroyden", 10, 2.0, 3.0)
    assert tau > 0 and math.isfinite(phi)


@pytest.mark.parametrize("update", ["ssbfgs", "ssbroyden"])
def test_second_update_matches_the_dense_formula(update):
    A, bvec, f = _quadratic()
    from sciml.models.module import Parameter
    x = Parameter(np.full(6, 0.3))
    opt = BFGS([x], update=update, max_iter=1, max_eval=50, gtol=0, ftol=0, xtol=0)
    grad = lambda v: A @ v - bvec                                  # noqa: E731
    opt.step(lambda p: f(p[0]))                                    # first update: H0 = (s.y/y.y) I + BFGS
    x1 = x.numpy().copy()
    H1 = np.array(opt._hist.H).reshape(6, 6)                       # CPU: a flat numpy buffer
    opt.step(lambda p: f(p[0]))                                    # second update: the self-scaled one
    x2 = x.numpy().copy()
    H2 = np.asarray(opt._hist.H).reshape(6, 6)
    g1 = grad(x1)
    d = -H1 @ g1
    s, y = x2 - x1, grad(x2) - g1
    t = (s @ d) / (d @ d)
    np.testing.assert_allclose(s, t * d, rtol=1e-10, atol=1e-14)   # the step is along d = -H g
    expected = _reference_update(H1, s, y, g1, t, update)
    np.testing.assert_allclose(H2, expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())
    np.testing.assert_allclose(H2 @ y, s, rtol=1e-8, atol=1e-12)   # secant condition


@pytest.mark.parametrize("update", ["bfgs", "ssbfgs", "ssbroyden"])
def test_quadratic_converges(update):
    A, bvec, f = _quadratic()
    r = bfgs(f, sm.tensor(np.zeros(6)), update=update, gtol=1e-8, ftol=0, xtol=0, max_iter=200)
    assert r.reason in ("gtol", "line_search"), r.message   # line_search: at the rounding floor
    assert r.iterations < 60
    np.testing.assert_allclose(r.params.numpy(), np.linalg.solve(A, bvec), rtol=0, atol=1e-6)


@pytest.mark.parametrize("update", ["ssbfgs", "ssbroyden"])
@pytest.mark.parametrize("n", [2, 10])
def test_rosenbrock_converges(update, n):
    x0 = np.tile([-1.2, 1.0], n // 2)
    r = bfgs(rosen, sm.tensor(x0), update=update, gtol=1e-8, ftol=0, xtol=0, max_iter=2000)
    assert r.reason == "gtol", r.message
    np.testing.assert_allclose(r.params.numpy(), np.ones(n), atol=1e-6)
    assert r.loss < 1e-12


def test_self_scaling_beats_bfgs_on_an_ill_conditioned_problem():
    # condition 1e6 and H0 scaled for the smallest curvature: plain BFGS corrects the scale
    # one eigen-direction at a time; the self-scaled updates shrink H as they go
    n = 20
    S = sm.tensor(np.logspace(0, 6, n))
    f = lambda x: (S * x ** 2).sum() + 0.1 * ((x ** 2).sum()) ** 2   # noqa: E731
    res = {u: bfgs(f, sm.tensor(np.ones(n)), update=u, gtol=0, ftol=0, xtol=0, max_iter=100,
                   max_eval=1000).loss for u in ("bfgs", "ssbfgs", "ssbroyden")}
    assert res["bfgs"] > 1e-3
    assert res["ssbfgs"] < 1e-10 and res["ssbroyden"] < 1e-10


def test_bad_update_is_a_clear_error():
    with pytest.raises(ValueError, match="update must be one of"):
        BFGS(update="dfp")
    with pytest.raises(ValueError, match="self_scaling=True"):
        BFGS(update="ssbroyden", self_scaling=True)
