"""BatchNorm, LayerNorm, Dropout, Embedding, activations, initialisers."""
import math

import numpy as np
import scipy.special
import pytest

import sciml as sm
from sciml.models import (GELU, BatchNorm1d, BatchNorm2d, Dropout, Embedding, LayerNorm, ReLU, SiLU, Sin, Softplus,
                          Tanh, Sigmoid, init)
from sciml.testing import check_grads

R = np.random.default_rng(0)


def test_batchnorm2d_train_eval_running_stats():
    bn = BatchNorm2d(3)
    x = R.normal(size=(4, 3, 2, 2)) * 2 + 1
    y = bn(sm.tensor(x)).numpy()
    mu, var = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
    np.testing.assert_allclose(y, (x - mu) / np.sqrt(var + 1e-5), rtol=1e-10, atol=1e-12)
    n = 16
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mu.ravel(), rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var.ravel() * n / (n - 1), rtol=1e-12)
    bn.eval()
    ye = bn(sm.tensor(x)).numpy()
    rm, rv = bn.running_mean.numpy()[None, :, None, None], bn.running_var.numpy()[None, :, None, None]
    np.testing.assert_allclose(ye, (x - rm) / np.sqrt(rv + 1e-5), rtol=1e-12)
    assert set(bn.state_dict()) == {"weight", "bias", "running_mean", "running_var"}


def test_batchnorm1d_and_layernorm_gradients():
    bn = BatchNorm1d(3)
    x = sm.tensor(R.normal(size=(5, 3)))
    check_grads(lambda x, w: bn.apply({"weight": w, "bias": bn.bias}, x), (x, sm.tensor(R.normal(size=3))), order=1)
    ln = LayerNorm(3)
    y = ln(x).numpy()
    xn = x.numpy()
    np.testing.assert_allclose(y, (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 1e-5),
                               rtol=1e-10)
    check_grads(lambda x: ln(x), (x,), order=2)


def test_dropout_seeded_and_eval_identity():
    x = sm.ones((200, 50))
    a, b = Dropout(0.3, seed=1)(x).numpy(), Dropout(0.3, seed=1)(x).numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.unique(a), [0.0, 1 / 0.7], rtol=1e-12)
    assert abs((a == 0).mean() - 0.3) < 0.02
    d = Dropout(0.3).eval()
    np.testing.assert_array_equal(d(x).numpy(), 1.0)


def test_embedding():
    e = Embedding(5, 3, seed=0)
    idx = np.array([[0, 4], [2, 2]])
    np.testing.assert_array_equal(e(idx).numpy(), e.weight.numpy()[idx])
    g = sm.grad(lambda p: e.apply(p, idx).sum())(e.params())["weight"].numpy()
    np.testing.assert_array_equal(g[:, 0], [1, 0, 2, 0, 1])
    with pytest.raises(ValueError, match=r"index 5 is out of range; expected indices in \[0, 5\)"):
        e([1, 5])


@pytest.mark.parametrize("mod,fn", [(ReLU, lambda x: np.maximum(x, 0)), (Tanh, np.tanh),
                                    (Sigmoid, lambda x: 1 / (1 + np.exp(-x))), (Sin, np.sin),
                                    (Softplus, lambda x: np.log1p(np.exp(x))), (SiLU, lambda x: x / (1 + np.exp(-x))),
                                    (GELU, lambda x: 0.5 * x * scipy.special.erfc(-x / math.sqrt(2)))])
def test_activations(mod, fn):
    x = R.normal(size=(3, 4))
    np.testing.assert_allclose(mod()(sm.tensor(x)).numpy(), fn(x), rtol=1e-10, atol=1e-12)
    if mod is not ReLU:
        check_grads(mod(), (sm.tensor(x),), order=2)


def test_initialisers():
    w = init.xavier_uniform((400, 300), seed=3).numpy()
    a = math.sqrt(6 / 700)
    assert np.abs(w).max() <= a and np.abs(w).max() > 0.95 * a
    np.testing.assert_array_equal(w, init.glorot_uniform((400, 300), seed=3).numpy())
    assert not np.array_equal(w, init.xavier_uniform((400, 300), seed=4).numpy())
    assert init.xavier_normal((400, 300), seed=0).numpy().std() == pytest.approx(math.sqrt(2 / 700), rel=0.02)
    assert init.kaiming_normal((400, 300), seed=0).numpy().std() == pytest.approx(math.sqrt(2 / 400), rel=0.02)
    kw = init.he_uniform((8, 4, 3, 3), seed=0).numpy()
    assert np.abs(kw).max() <= math.sqrt(6 / 36)
    assert init.normal((1000,), seed=0, std=2.0).numpy().std() == pytest.approx(2.0, rel=0.1)
    assert (init.zeros((3,)).numpy() == 0).all()
    with pytest.raises(ValueError, match="init: got 'bogus'"):
        init.get("bogus")


def test_batchnorm_errors():
    with pytest.raises(ValueError, match=r"BatchNorm2d\(num_features=3\): x has shape \(2, 4, 2, 2\)"):
        BatchNorm2d(3)(sm.ones((2, 4, 2, 2)))
