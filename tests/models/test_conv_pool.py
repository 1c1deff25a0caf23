"""Conv1d/Conv2d/pooling vs numpy references; derivatives vs finite differences (second order)."""
import numpy as np
import pytest

import sciml as sm
from sciml.autodiff.ops.conv import fold, unfold
from sciml.models import AvgPool2d, Conv1d, Conv2d, MaxPool2d, conv2d, max_pool2d, avg_pool2d
from sciml.testing import check_grads

R = np.random.default_rng(0)


def _conv_ref(x, w, b, stride, pad):
    N, C, H, W = x.shape
    O, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    Ho, Wo = (H + 2 * pad[0] - kh) // stride[0] + 1, (W + 2 * pad[1] - kw) // stride[1] + 1
    y = np.zeros((N, O, Ho, Wo))
    for i in range(Ho):
        for j in range(Wo):
            patch = xp[:, :, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw]
            y[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return y + (0 if b is None else b[None, :, None, None])


def _pool_ref(x, k, s, op):
    N, C, H, W = x.shape
    Ho, Wo = (H - k) // s + 1, (W - k) // s + 1
    y = np.zeros((N, C, Ho, Wo))
    for i in range(Ho):
        for j in range(Wo):
            y[:, :, i, j] = op(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
    return y


@pytest.mark.parametrize("stride,pad", [((1, 1), (0, 0)), ((2, 1), (1, 2))])
def test_conv2d_matches_numpy(stride, pad):
    layer = Conv2d(3, 4, (3, 2), stride=stride, padding=pad, seed=1)
    layer.bias._assign(R.normal(size=4))
    x = R.normal(size=(2, 3, 6, 5))
    want = _conv_ref(x, layer.weight.numpy(), layer.bias.numpy(), stride, pad)
    np.testing.assert_allclose(layer(sm.tensor(x)).numpy(), want, rtol=1e-12, atol=1e-12)


def test_conv1d_matches_numpy():
    layer = Conv1d(2, 3, 3, stride=2, padding=1, seed=0)
    x = R.normal(size=(2, 2, 7))
    want = _conv_ref(x[:, :, None, :], layer.weight.numpy()[:, :, None, :], layer.bias.numpy(), (1, 2), (0, 1))[:, :, 0]
    np.testing.assert_allclose(layer(sm.tensor(x)).numpy(), want, rtol=1e-12, atol=1e-12)


def test_pooling_matches_numpy():
    x = R.normal(size=(2, 3, 6, 6))
    np.testing.assert_allclose(MaxPool2d(2)(sm.tensor(x)).numpy(), _pool_ref(x, 2, 2, np.max))
    np.testing.assert_allclose(AvgPool2d(3, stride=1)(sm.tensor(x)).numpy(), _pool_ref(x, 3, 1, np.mean), rtol=1e-12)
    # max-pool padding reads -inf, so all-negative inputs keep their own maxima
    neg = -np.abs(x) - 1
    y = max_pool2d(sm.tensor(neg), 3, stride=2, padding=1).numpy()
    assert (y < 0).all()


def test_conv2d_derivatives_second_order():
    x = sm.tensor(R.normal(size=(1, 2, 4, 4)))
    w = sm.tensor(R.normal(size=(2, 2, 2, 2)))
    b = sm.tensor(R.normal(size=2))
    check_grads(lambda x, w, b: conv2d(x, w, b, stride=(2, 1), padding=1), (x, w, b), order=2)
    # a small CNN differentiated twice through tanh: conv, pooling, linear
    check_grads(lambda x, w: avg_pool2d(sm.tanh(conv2d(x, w, None, 1, 1)), 2).sum(), (x, w), order=2)


def test_max_pool_derivatives():
    x = sm.tensor(R.normal(size=(1, 2, 4, 4)))
    check_grads(lambda x: max_pool2d(x, 2), (x,), order=2)
    g = sm.grad(lambda x: max_pool2d(x, 2).sum())(x).numpy()
    assert g.sum() == pytest.approx(8.0) and set(np.unique(g)) <= {0.0, 1.0}


def test_unfold_fold_adjoint():
    x = sm.tensor(R.normal(size=(2, 3, 5, 4)))
    u = unfold(x, 3, 2, 1)
    c = sm.tensor(R.normal(size=u.shape))
    assert float((u * c).sum()) == pytest.approx(float((fold(c, x.shape, 3, 2, 1) * x).sum()), rel=1e-12)
    check_grads(lambda c: fold(c, x.shape, 3, 2, 1), (c,), order=1)


def test_conv_errors():
    with pytest.raises(ValueError, match=r"Conv2d\(in_channels=3\): x has shape \(2, 1, 5, 5\); expected \(N, 3, H, W\)"):
        Conv2d(3, 4, 3)(sm.ones((2, 1, 5, 5)))
    with pytest.raises(ValueError, match="kernel is larger than the padded image"):
        Conv2d(1, 1, 5)(sm.ones((1, 1, 3, 3)))
    with pytest.raises(ValueError, match=r"expected \(N, C, H, W\)"):
        max_pool2d(sm.ones((3, 3)), 2)


def test_conv1d_and_flatten_derivatives():
    x = sm.tensor(R.normal(size=(2, 2, 5)))
    w = sm.tensor(R.normal(size=(3, 2, 2)))
    from sciml.models import conv1d, Flatten
    check_grads(lambda x, w: conv1d(x, w, None, stride=2, padding=1), (x, w), order=2)
    f = Flatten()(sm.tensor(R.normal(size=(2, 3, 2, 2))))
    assert f.shape == (2, 12)


def test_batchnorm2d_gradients():
    from sciml.models import BatchNorm2d
    bn = BatchNorm2d(2)
    x = sm.tensor(R.normal(size=(3, 2, 2, 2)))
    check_grads(lambda x, w, b: bn.apply({"weight": w, "bias": b}, x),
                (x, sm.tensor(R.normal(size=2)), sm.tensor(R.normal(size=2))), order=1)
