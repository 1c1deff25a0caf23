"""LeakyReLU, ELU, SELU, Mish, Hardtanh, Softsign (and GELU's approximate=): values vs numpy (and torch if
installed), derivatives vs finite differences to second order, PyTorch's conventions at the kinks, NaN."""
import math

import numpy as np
import pytest

import sciml as sm
from sciml.models import ELU, GELU, SELU, Hardtanh, LeakyReLU, Mish, Softsign, elu, hardtanh, leaky_relu, mish, \
    selu, softsign
from sciml.testing import check_grads

A, S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
REF = {
    "leaky_relu": (lambda x: leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    "elu": (lambda x: elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(np.minimum(x, 0)))),
    "selu": (selu, lambda x: S * np.where(x > 0, x, A * np.expm1(np.minimum(x, 0)))),
    "mish": (mish, lambda x: x * np.tanh(np.logaddexp(0, x))),
    "hardtanh": (lambda x: hardtanh(x, -0.5, 1.5), lambda x: np.clip(x, -0.5, 1.5)),
    "softsign": (softsign, lambda x: x / (1 + np.abs(x))),
}
X = np.array([-30.0, -2.3, -0.7, -0.2, 0.3, 0.9, 1.7, 40.0, 800.0])


@pytest.mark.parametrize("name", sorted(REF))
def test_values_and_nan(name):
    f, ref = REF[name]
    for dt, tol in (("float64", 1e-12), ("float32", 1e-6)):
        np.testing.assert_allclose(f(sm.tensor(X, dt)).numpy(), ref(X).astype(dt), rtol=tol, atol=tol)
    out = f(sm.tensor([np.nan, 1.0])).numpy()
    assert np.isnan(out[0]) and np.isfinite(out[1])


@pytest.mark.parametrize("name", sorted(REF))
def test_derivatives_to_second_order(name):
    f, _ = REF[name]
    x = sm.tensor(np.array([-2.3, -0.7, -0.2, 0.3, 0.9, 1.7]))     # away from the kinks
    check_grads(lambda t: f(t), (x,), order=2, rtol=1e-5, atol=1e-7)
    g = sm.grad(lambda t: f(t).sum())(sm.tensor(np.array([-60.0, 60.0, 500.0]))).numpy()
    assert np.all(np.isfinite(g))                                    # no inf * 0 from the unused branch


def test_derivatives_at_the_kinks_follow_pytorch():
    z = sm.tensor([0.0])
    assert float(sm.grad(lambda t: leaky_relu(t, 0.1).sum())(z)) == pytest.approx(0.1)
    assert float(sm.grad(lambda t: elu(t, 0.7).sum())(z)) == pytest.approx(0.7)
    b = sm.tensor([-0.5, 1.5, 0.0])
    np.testing.assert_array_equal(sm.grad(lambda t: hardtanh(t, -0.5, 1.5).sum())(b).numpy(), [0.0, 0.0, 1.0])
    assert float(sm.grad(lambda t: softsign(t).sum())(z)) == 1.0


def test_modules_and_errors():
    x = sm.tensor(X)
    np.testing.assert_array_equal(LeakyReLU(0.1)(x).numpy(), leaky_relu(x, 0.1).numpy())
    np.testing.assert_array_equal(ELU(0.7)(x).numpy(), elu(x, 0.7).numpy())
    np.testing.assert_array_equal(SELU()(x).numpy(), selu(x).numpy())
    np.testing.assert_array_equal(Mish()(x).numpy(), mish(x).numpy())
    np.testing.assert_array_equal(Hardtanh(-0.5, 1.5)(x).numpy(), hardtanh(x, -0.5, 1.5).numpy())
    np.testing.assert_array_equal(Softsign()(x).numpy(), softsign(x).numpy())
    with pytest.raises(ValueError, match="min_val=2 must be below max_val=1"):
        Hardtanh(2, 1)
    with pytest.raises(TypeError, match="negative_slope='a'"):
        LeakyReLU("a")
    with pytest.raises(ValueError, match="approximate='erf'"):
        GELU(approximate="erf")
    np.testing.assert_array_equal(GELU(approximate="tanh")(x).numpy(), sm.gelu(x, approximate="tanh").numpy())
    np.testing.assert_array_equal(GELU()(x).numpy(), sm.gelu(x).numpy())          # exact by default (PyTorch)
    assert sm.models.MLP([2, 3, 1], "selu", seed=0).activation is selu


def test_against_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    xt = torch.tensor(X, requires_grad=True)
    pairs = [(lambda t: F.leaky_relu(t, 0.1), REF["leaky_relu"][0]), (lambda t: F.elu(t, 0.7), REF["elu"][0]),
             (F.selu, selu), (F.mish, mish), (lambda t: F.hardtanh(t, -0.5, 1.5), REF["hardtanh"][0]),
             (F.softsign, softsign)]
    for tf, sf in pairs:
        y = tf(xt)
        (g,) = torch.autograd.grad(y.sum(), xt)
        np.testing.assert_allclose(sf(sm.tensor(X)).numpy(), y.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(sm.grad(lambda t: sf(t).sum())(sm.tensor(X)).numpy(), g.numpy(), rtol=1e-10,
                                   atol=1e-12)
