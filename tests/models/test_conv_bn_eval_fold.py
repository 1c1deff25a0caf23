"""Sequential's eval-mode Conv2d -> BatchNorm2d folded into one conv (models/_conv_fused.py, issue 16 item 6):
equal to the layers one by one, derivatives against finite differences to second order, PyTorch's eval output."""
from types import SimpleNamespace

import numpy as np
import pytest

import sciml as sm
from sciml.models import BatchNorm2d, Conv2d, MaxPool2d, ReLU, Sequential
from sciml.models import _conv_fused as CF
from sciml.testing import check_grads


def _net(tail, bias=True, affine=True, seed=0):
    rng = np.random.default_rng(seed)
    conv = Conv2d(4, 8, 3, padding=1, bias=bias, seed=1)
    bn = BatchNorm2d(8, affine=affine)
    bn.running_mean._assign(sm.tensor(rng.standard_normal(8)))
    bn.running_var._assign(sm.tensor(rng.uniform(0.5, 2.0, 8)))
    if affine:
        bn.weight._assign(sm.tensor(rng.uniform(0.5, 1.5, 8)))
        bn.bias._assign(sm.tensor(rng.standard_normal(8)))
    layers = [conv, bn] + {"none": [], "relu": [ReLU()], "relu_pool": [ReLU(), MaxPool2d(2)]}[tail]
    net = Sequential(*layers)
    net.eval()
    return net


def _unfused(net, x):
    CF.FOLD_EVAL_BN = False
    try:
        return net(x)
    finally:
        CF.FOLD_EVAL_BN = True


@pytest.mark.parametrize("tail", ["none", "relu", "relu_pool"])
@pytest.mark.parametrize("bias,affine", [(True, True), (False, True), (True, False)])
def test_folded_equals_layers_in_float64(tail, bias, affine, monkeypatch):
    net = _net(tail, bias, affine)
    x = sm.tensor(np.random.default_rng(2).standard_normal((2, 4, 6, 6)))
    y_u = _unfused(net, x).numpy()
    g_u = sm.grad(lambda x: (_unfused(net, x) ** 2).sum())(x).numpy()

    def no_bn_pass(*a, **k):
        raise AssertionError("the batch norm ran as its own pass: the fold did not apply")
    monkeypatch.setattr(BatchNorm2d, "forward", no_bn_pass)
    monkeypatch.setattr(BatchNorm2d, "_forward", no_bn_pass, raising=False)
    np.testing.assert_allclose(net(x).numpy(), y_u, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sm.grad(lambda x: (net(x) ** 2).sum())(x).numpy(), g_u, rtol=1e-10, atol=1e-12)


def test_folded_derivatives_against_finite_differences():
    """x, the conv's weight and bias, gamma and beta: first and second order against finite differences."""
    rng = np.random.default_rng(3)
    rm, rv = sm.tensor(rng.standard_normal(3)), sm.tensor(rng.uniform(0.5, 2.0, 3))

    def f(x, w, cb, g, b):
        conv = SimpleNamespace(out_channels=3, weight=w, bias=cb, stride=1, padding=1, dilation=1, groups=1,
                               _check_x=lambda x: x)
        bn = SimpleNamespace(running_mean=rm, running_var=rv, eps=1e-5, weight=g, bias=b)
        return (CF._conv_bn_eval(conv, bn, x) ** 2).sum()
    args = (rng.standard_normal((1, 2, 3, 3)), rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3),
            rng.uniform(0.5, 1.5, 3), rng.standard_normal(3))
    check_grads(f, tuple(sm.tensor(a) for a in args), order=2)


def test_nan_in_gives_nan_out():
    net = _net("relu_pool")
    a = np.random.default_rng(4).standard_normal((1, 4, 4, 4))
    a[0, 0, 1, 1] = np.nan
    y = net(sm.tensor(a)).numpy()
    assert np.isnan(y).any()


def test_eval_output_matches_pytorch():
    torch = pytest.importorskip("torch")
    net = _net("relu_pool")
    conv, bn = net[0], net[1]
    tc = torch.nn.Conv2d(4, 8, 3, padding=1).double()
    tb = torch.nn.BatchNorm2d(8).double()
    with torch.no_grad():
        tc.weight.copy_(torch.from_numpy(conv.weight.numpy()))
        tc.bias.copy_(torch.from_numpy(conv.bias.numpy()))
        tb.weight.copy_(torch.from_numpy(bn.weight.numpy()))
        tb.bias.copy_(torch.from_numpy(bn.bias.numpy()))
        tb.running_mean.copy_(torch.from_numpy(bn.running_mean.numpy()))
        tb.running_var.copy_(torch.from_numpy(bn.running_var.numpy()))
    tnet = torch.nn.Sequential(tc, tb, torch.nn.ReLU(), torch.nn.MaxPool2d(2)).eval()
    a = np.random.default_rng(5).standard_normal((2, 4, 6, 6))
    np.testing.assert_allclose(net(sm.tensor(a)).numpy(), tnet(torch.from_numpy(a)).detach().numpy(), rtol=1e-10,
                               atol=1e-12)
