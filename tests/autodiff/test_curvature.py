"""Curvature primitives: hvp, dense Hessian, Hutchinson diagonal, residual jvp/vjp, Gauss-Newton product."""
import numpy as np
import pytest

import sciml as sm
from sciml.autodiff import curvature as CV


def _f(p):
    return (sm.sin(p["a"]) * p["b"] ** 2).sum() + (p["a"] ** 3).sum() * p["c"].sum()


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {"a": sm.tensor(rng.normal(size=3)), "b": sm.tensor(rng.normal(size=3)),
            "c": sm.tensor(rng.normal(size=(1,)))}


def _flat(p):
    return np.concatenate([p[k].numpy().ravel() for k in sorted(p)])


def _unflat(x):
    return {"a": sm.tensor(x[0:3]), "b": sm.tensor(x[3:6]), "c": sm.tensor(x[6:7])}


def _grad_np(x):
    return _flat(sm.grad(_f)(_unflat(x)))


def test_hvp_matches_dense_hessian_and_finite_differences():
    p = _params()
    v = _params(1)
    hv = _flat(CV.hvp(_f, p, v))
    H = CV.hessian_dense(_f, p).numpy()
    assert H.shape == (7, 7)
    np.testing.assert_allclose(H, H.T, atol=1e-12)
    np.testing.assert_allclose(hv, H @ _flat(v), rtol=1e-10, atol=1e-12)
    x, d, eps = _flat(p), _flat(v), 1e-5
    fd = (_grad_np(x + eps * d) - _grad_np(x - eps * d)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-7)
    # and the core's jacfwd(jacrev) Hessian
    Hc = sm.hessian(lambda x: _f(_unflat_t(x)))(sm.tensor(x)).numpy()
    np.testing.assert_allclose(H, Hc, rtol=1e-10, atol=1e-12)


def _unflat_t(x):
    return {"a": x[0:3], "b": x[3:6], "c": x[6:7]}


def test_hvp_operator_matches_hvp():
    p = _params()
    op = CV.hvp_operator(_f, p)
    for seed in (1, 2):
        v = _params(seed)
        np.testing.assert_allclose(_flat(op(v)), _flat(CV.hvp(_f, p, v)), rtol=1e-12, atol=1e-13)


def test_grad_and_hvp_returns_gradient():
    p, v = _params(), _params(2)
    g, hv = CV.grad_and_hvp(_f, p, v)
    np.testing.assert_allclose(_flat(g), _flat(sm.grad(_f)(p)), rtol=1e-12)


def test_hutchinson_diagonal_converges_to_true_diagonal():
    p = _params()
    true = np.diag(CV.hessian_dense(_f, p).numpy())
    errs = []
    for k in (1, 16, 256):
        est = _flat(CV.hutchinson_diag(_f, p, probes=k, seed=3))
        errs.append(np.abs(est - true).max())
    assert errs[2] < errs[0] and errs[2] < 0.25 * np.abs(true).max()
    a = _flat(CV.hutchinson_diag(_f, p, probes=4, seed=7))
    b = _flat(CV.hutchinson_diag(_f, p, probes=4, seed=7))
    np.testing.assert_array_equal(a, b)   # seeded
    # exact for a diagonal Hessian, whatever the probe
    d = CV.hutchinson_diag(lambda q: (q["w"] ** 4).sum(), {"w": sm.tensor([1.0, 2.0])}, probes=1)
    np.testing.assert_allclose(d["w"].numpy(), [12.0, 48.0])


def test_residual_products_and_gauss_newton():
    t = np.linspace(0, 1, 5)
    T = sm.tensor(t)

    def r(p):
        return p["a"] * sm.exp(-p["k"] * T) - 1.0
    p = {"a": sm.tensor([2.0]), "k": sm.tensor([0.5])}
    v = {"a": sm.tensor([0.3]), "k": sm.tensor([-1.1])}
    J = np.stack([np.exp(-0.5 * t), -2.0 * t * np.exp(-0.5 * t)], 1)   # columns: a, k (sorted keys)
    _, jv = CV.residual_jvp(r, p, v)
    np.testing.assert_allclose(jv.numpy(), J @ np.array([0.3, -1.1]), rtol=1e-12)
    u = np.arange(5.0)
    _, jtu = CV.residual_vjp(r, p, sm.tensor(u))
    np.testing.assert_allclose([jtu["a"].item(), jtu["k"].item()], J.T @ u, rtol=1e-12)
    gn = CV.gauss_newton_product(r, p, v)
    np.testing.assert_allclose([gn["a"].item(), gn["k"].item()], J.T @ J @ np.array([0.3, -1.1]), rtol=1e-12)
    r0, op, jt = CV.gauss_newton_operator(r, p)
    for w in (v, {"a": sm.tensor([-2.0]), "k": sm.tensor([0.7])}):
        gn2 = op(w)
        wv = np.array([w["a"].item(), w["k"].item()])
        np.testing.assert_allclose([gn2["a"].item(), gn2["k"].item()], J.T @ J @ wv, rtol=1e-12)
    jtu = jt(sm.tensor(u))
    np.testing.assert_allclose([jtu["a"].item(), jtu["k"].item()], J.T @ u, rtol=1e-12)


def test_curvature_errors():
    p = {"w": sm.tensor([1.0, 2.0])}
    with pytest.raises(ValueError, match="v leaf 0 has shape \\(3,\\); expected \\(2,\\)"):
        CV.hvp(lambda q: q["w"].sum(), p, {"w": sm.tensor([1.0, 2.0, 3.0])})
    with pytest.raises(ValueError, match="v has 2 leaves"):
        CV.hvp(lambda q: q["w"].sum(), p, {"w": sm.tensor([1.0, 2.0]), "z": sm.tensor([1.0])})
    with pytest.raises(ValueError, match="probes must be a positive integer; got 0"):
        CV.hutchinson_diag(lambda q: q["w"].sum(), p, probes=0)
    with pytest.raises(ValueError, match="u has shape \\(3,\\); expected the residual's shape \\(2,\\)"):
        CV.residual_vjp(lambda q: q["w"] * 2.0, p, sm.tensor([1.0, 2.0, 3.0]))
