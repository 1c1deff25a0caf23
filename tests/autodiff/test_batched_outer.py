"""Batched matmul tangents with k = 1 (outer products: a 1-input first layer, a 1-output last layer) run as one
broadcast multiply instead of B GEMMs on a repeated operand (autodiff/ops/linalg.py ``_bmm_left`` /
``_bmm_right``): the same numbers as the GEMM form, and Hessians / third derivatives through them against
finite differences in float64."""
import numpy as np
import pytest

import sciml as sm
from sciml.testing import flat_mlp_loss
from sciml.autodiff.ops import linalg as OL


@pytest.fixture(autouse=True)
def _f64():
    sm.init(arch="cpu", dtype="float64")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_k1_products_equal_the_gemm_form_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    B, m, n = 37, 24, 16
    for ta in (False, True):
        for tb in (False, True):
            a = sm.tensor(rng.standard_normal((1, m) if ta else (m, 1)).astype(dtype), dtype)
            t = sm.tensor(rng.standard_normal((B, n, 1) if tb else (B, 1, n)).astype(dtype), dtype)
            got = OL._bmm_right(a, t, ta, tb).numpy()
            want = OL._mm(OL._repeat(a, B), t, ta=ta, tb=tb).numpy()
            assert got.shape == (B, m, n)
            np.testing.assert_array_equal(got, want)
            tl = sm.tensor(rng.standard_normal((B, 1, m) if ta else (B, m, 1)).astype(dtype), dtype)
            b = sm.tensor(rng.standard_normal((n, 1) if tb else (1, n)).astype(dtype), dtype)
            got = OL._bmm_left(tl, b, ta, tb).numpy()
            want = OL._mm(tl, OL._repeat(b, B), ta=ta, tb=tb).numpy()
            np.testing.assert_array_equal(got, want)


def test_hessian_of_a_1_in_1_out_mlp_against_finite_differences():
    rng = np.random.default_rng(1)
    sizes = (1, 6, 5, 1)
    npar = sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:]))
    x, y = sm.tensor(rng.standard_normal((9, 1))), sm.tensor(rng.standard_normal((9, 1)))
    f = flat_mlp_loss(x, y, sizes)
    th = rng.standard_normal(npar) * 0.7
    H = sm.hessian(f)(sm.tensor(th)).numpy()
    g = lambda v: sm.grad(f)(sm.tensor(v)).numpy()  # noqa: E731
    eps = 1e-6
    Hfd = np.stack([(g(th + eps * e) - g(th - eps * e)) / (2 * eps) for e in np.eye(npar)], axis=1)
    np.testing.assert_allclose(H, Hfd, rtol=1e-6, atol=1e-7)
    # first order too: the gradient against differences of the loss
    fv = lambda v: float(f(sm.tensor(v)).numpy())  # noqa: E731
    gfd = np.array([(fv(th + eps * e) - fv(th - eps * e)) / (2 * eps) for e in np.eye(npar)])
    np.testing.assert_allclose(g(th), gfd, rtol=1e-6, atol=1e-8)
    from sciml.autodiff import curvature as CV
    np.testing.assert_allclose(H, CV.hessian_dense(f, sm.tensor(th), method="rows").numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(sm.jit(sm.hessian(f))(sm.tensor(th)).numpy(), H)


def test_third_derivatives_through_k1_products():
    """Nested batched levels: the k = 1 broadcast multiply is itself differentiated."""
    rng = np.random.default_rng(2)
    sizes = (1, 3, 1)
    npar = sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:]))
    x, y = sm.tensor(rng.standard_normal((5, 1))), sm.tensor(rng.standard_normal((5, 1)))
    f = flat_mlp_loss(x, y, sizes)
    th = rng.standard_normal(npar) * 0.8
    T3 = sm.jacfwd(sm.hessian(f))(sm.tensor(th)).numpy()
    Hf = lambda v: sm.hessian(f)(sm.tensor(v)).numpy()  # noqa: E731
    eps = 1e-5
    fd = np.stack([(Hf(th + eps * e) - Hf(th - eps * e)) / (2 * eps) for e in np.eye(npar)], axis=-1)
    np.testing.assert_allclose(T3, fd, rtol=1e-6, atol=1e-7)
