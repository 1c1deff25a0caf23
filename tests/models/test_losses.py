"""Losses vs numpy; fused softmax cross-entropy and bias+activation == composed ops, any order."""
import numpy as np
import pytest

import sciml as sm
from sciml.autodiff.ops.conv import bias_act, softmax_cross_entropy
from sciml.models import losses as L
from sciml.testing import check_grads

R = np.random.default_rng(0)
X = R.normal(size=(5, 4))
Y = R.normal(size=(5, 4))
LAB = np.array([0, 3, 1, 1, 2])


def _lsm(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def test_regression_losses_match_numpy():
    x, y = sm.tensor(X), sm.tensor(Y)
    d = X - Y
    assert float(L.mse(x, y)) == pytest.approx((d ** 2).mean())
    assert float(L.l1(x, y, reduction="sum")) == pytest.approx(np.abs(d).sum())
    h = np.where(np.abs(d) <= 0.5, 0.5 * d ** 2, 0.5 * (np.abs(d) - 0.25))
    np.testing.assert_allclose(L.huber(x, y, delta=0.5, reduction="none").numpy(), h, rtol=1e-12)
    t = (Y > 0).astype(float)
    bce = -(t * np.log(1 / (1 + np.exp(-X))) + (1 - t) * np.log(1 - 1 / (1 + np.exp(-X))))
    assert float(L.binary_cross_entropy_with_logits(x, sm.tensor(t))) == pytest.approx(bce.mean())


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_numpy(smoothing, reduction):
    q = np.full((5, 4), smoothing / 4)
    q[np.arange(5), LAB] += 1 - smoothing
    ref = -(q * _lsm(X)).sum(-1)
    ref = {"mean": ref.mean(), "sum": ref.sum(), "none": ref}[reduction]
    got = L.cross_entropy(sm.tensor(X), LAB, label_smoothing=smoothing, reduction=reduction)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)
    assert float(L.nll(sm.log_softmax(sm.tensor(X)), LAB)) == pytest.approx(-_lsm(X)[np.arange(5), LAB].mean())


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_fused_cross_entropy_derivatives(reduction):
    q = sm.tensor(np.eye(4)[LAB] * 0.9 + 0.025)
    check_grads(lambda x: softmax_cross_entropy(x, q, reduction), (sm.tensor(X),), order=2)
    # fused first-order path == composed formula
    g_fused = sm.grad(lambda x: softmax_cross_entropy(x, q, reduction).sum())(sm.tensor(X))
    g_comp = sm.grad(lambda x: (-(q * sm.log_softmax(x)).sum(-1)).sum() / (5 if reduction == "mean" else 1))(
        sm.tensor(X))
    np.testing.assert_allclose(g_fused.numpy(), g_comp.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("act", ["identity", "relu", "tanh", "sigmoid"])
def test_bias_act_matches_composed_and_derivatives(act):
    fn = {"identity": lambda z: z, "relu": sm.relu, "tanh": sm.tanh, "sigmoid": sm.sigmoid}[act]
    h, b = sm.tensor(X), sm.tensor(R.normal(size=4))
    np.testing.assert_allclose(bias_act(h, b, act).numpy(), fn(h + b).numpy(), rtol=1e-12)
    gf = sm.grad(lambda h, b: (bias_act(h, b, act) * sm.tensor(Y)).sum(), argnums=(0, 1))(h, b)
    gc = sm.grad(lambda h, b: (fn(h + b) * sm.tensor(Y)).sum(), argnums=(0, 1))(h, b)
    for a, c in zip(gf, gc):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-12, atol=1e-15)
    check_grads(lambda h, b: bias_act(h, b, act), (h, b), order=2 if act != "relu" else 1)


def test_bias_act_float32_large_parallel_path():
    h = sm.tensor(R.normal(size=(300, 256)), dtype="float32")
    b = sm.tensor(R.normal(size=256), dtype="float32")
    np.testing.assert_allclose(bias_act(h, b, "relu").numpy(), np.maximum(h.numpy() + b.numpy(), 0), rtol=1e-6)
    g = sm.grad(lambda b: bias_act(h, b, "relu").sum())(b)
    np.testing.assert_allclose(g.numpy(), (h.numpy() + b.numpy() > 0).sum(0), rtol=1e-6)


def test_loss_errors():
    with pytest.raises(ValueError, match=r"label 7 at index 1 is out of range; expected class indices in \[0, 4\)"):
        L.cross_entropy(sm.tensor(X), [0, 7, 1, 1, 2])
    with pytest.raises(ValueError, match=r"labels have shape \(3,\); expected \(5,\)"):
        L.cross_entropy(sm.tensor(X), [0, 1, 2])
    with pytest.raises(ValueError, match="reduction='avg'"):
        L.mse(sm.tensor(X), sm.tensor(Y), reduction="avg")
    with pytest.raises(ValueError, match=r"pred has shape \(5, 4\) and target \(4,\)"):
        L.mse(sm.tensor(X), sm.tensor(Y[0]))
    with pytest.raises(TypeError, match="expected integer class indices"):
        L.cross_entropy(sm.tensor(X), np.zeros(5))


def test_hvp_through_fused_mlp_and_cross_entropy_matches_finite_differences():
    from sciml.models import MLP
    net = MLP([4, 5, 3], activation=sm.tanh, seed=0)
    x, lab = sm.tensor(X), np.array([0, 2, 1, 1, 0])
    W = net.layers[0].weight.detach()

    def loss(w):
        p = net.params()
        p["layers"]["0"]["weight"] = w
        return L.cross_entropy(net.apply(p, x), lab)
    v = sm.tensor(R.normal(size=W.shape))
    _, (hv,) = sm.hvp(loss, (W,), (v,))
    eps = 1e-5
    gp = sm.grad(loss)(sm.tensor(W.numpy() + eps * v.numpy())).numpy()
    gm = sm.grad(loss)(sm.tensor(W.numpy() - eps * v.numpy())).numpy()
    np.testing.assert_allclose(hv.numpy(), (gp - gm) / (2 * eps), rtol=1e-6, atol=1e-8)
    # reverse-over-reverse gives the same Hessian-vector product
    hv2 = sm.grad(lambda w: (sm.grad(loss)(w) * v).sum())(W)
    np.testing.assert_allclose(hv2.numpy(), hv.numpy(), rtol=1e-10, atol=1e-12)
