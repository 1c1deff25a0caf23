"""PyTorch-like defaults: initialisation, seeding from sm.manual_seed, parameters that require gradients,
frozen parameters on every path, and argument checks of the layer constructors."""
import gc
import math
import weakref

import numpy as np
import pytest

import sciml as sm
from sciml.models import (MLP, BatchNorm1d, Conv1d, Conv2d, Dropout, Embedding, LayerNorm, Linear, Parameter, ReLU,
                          Sequential, init as I)
from sciml.optim import SGD, Adam


def test_linear_initialises_as_pytorch():
    layer = Linear(64, 300, seed=1)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    bound = 1 / math.sqrt(64)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(b).max() > 0.5 * bound                      # the bias is drawn too, not zeros
    assert np.var(w) == pytest.approx(bound ** 2 / 3, rel=0.05)   # U(-a, a) has variance a^2 / 3
    assert not np.allclose(w[:, :1].ravel(), b[:64])            # bias and weight from different streams


def test_conv_initialises_as_pytorch():
    c = Conv2d(3, 8, 3, seed=0)
    bound = 1 / math.sqrt(3 * 9)
    assert np.abs(c.weight.numpy()).max() <= bound and np.abs(c.bias.numpy()).max() <= bound
    assert np.abs(c.bias.numpy()).max() > 0
    c1 = Conv1d(2, 4, 5, seed=0)
    assert np.abs(c1.weight.numpy()).max() <= 1 / math.sqrt(10)


def test_explicit_init_keeps_the_old_values():
    layer = Linear(3, 4, seed=7, init="xavier_uniform")
    np.testing.assert_array_equal(layer.weight.numpy(), I.xavier_uniform((3, 4), seed=7).numpy())
    assert not layer.bias.numpy().any()
    c = Conv2d(2, 3, 3, seed=0, init="kaiming_uniform")
    np.testing.assert_array_equal(c.weight.numpy(), I.kaiming_uniform((3, 2, 3, 3), seed=0).numpy())
    assert not c.bias.numpy().any()


def test_mlp_keeps_glorot_and_zero_bias_and_offers_torch():
    net = MLP([3, 16, 1], seed=0)
    seeds = I.split_seed(0, 2)
    np.testing.assert_array_equal(net.layers[0].weight.numpy(), I.xavier_uniform((3, 16), seed=seeds[0]).numpy())
    assert not net.layers[0].bias.numpy().any()
    t = MLP([3, 16, 1], seed=0, init="torch")
    assert np.abs(t.layers[0].bias.numpy()).max() > 0
    assert np.abs(t.layers[0].weight.numpy()).max() <= 1 / math.sqrt(3)


def test_unseeded_layers_differ_and_manual_seed_reproduces():
    a, b = Linear(3, 4), Linear(3, 4)
    assert not np.allclose(a.weight.numpy(), b.weight.numpy())
    sm.manual_seed(11)
    w1 = [Linear(3, 4).weight.numpy(), MLP([2, 3, 1]).layers[0].weight.numpy(), Embedding(5, 2).weight.numpy()]
    sm.manual_seed(11)
    w2 = [Linear(3, 4).weight.numpy(), MLP([2, 3, 1]).layers[0].weight.numpy(), Embedding(5, 2).weight.numpy()]
    for u, v in zip(w1, w2):
        np.testing.assert_array_equal(u, v)
    sm.manual_seed(11)
    d1 = Dropout(0.5)
    sm.manual_seed(11)
    d2 = Dropout(0.5)
    x = sm.ones((4, 8))
    np.testing.assert_array_equal(d1(x).numpy(), d2(x).numpy())


def test_backward_works_without_requires_grad():
    net = Sequential(Linear(3, 4, seed=0), ReLU(), Linear(4, 1, seed=1))
    x = sm.tensor(np.random.default_rng(0).standard_normal((5, 3)))
    assert all(p.requires_grad for p in net.parameters())
    (net(x) ** 2).mean().backward()
    g = sm.grad(lambda p: (net.apply(p, x) ** 2).mean())(net.params())
    np.testing.assert_allclose(net[0].weight.grad.numpy(), g["layers"]["0"]["weight"].numpy(), rtol=1e-12)
    np.testing.assert_allclose(net[2].bias.grad.numpy(), g["layers"]["2"]["bias"].numpy(), rtol=1e-12)
    # gradients accumulate over two backward calls, as in PyTorch
    (net(x) ** 2).mean().backward()
    np.testing.assert_allclose(net[0].weight.grad.numpy(), 2 * g["layers"]["0"]["weight"].numpy(), rtol=1e-12)
    net.zero_grad()
    assert net[0].weight.grad is None
    # apply over the live params records too
    (net.apply(net.params(), x) ** 2).mean().backward()
    np.testing.assert_allclose(net[0].weight.grad.numpy(), g["layers"]["0"]["weight"].numpy(), rtol=1e-12)


def test_shared_parameter_gets_the_sum_of_both_uses():
    lin = Linear(2, 2, bias=False, seed=0)
    net = Sequential(lin, lin)
    x = sm.tensor(np.ones((1, 2)))
    net(x).sum().backward()
    W = lin.weight.numpy()
    # d/dW sum(x W W) = x^T (1 W^T) + (x W)^T 1
    one = np.ones((1, 2))
    ref = x.numpy().T @ (one @ W.T) + (x.numpy() @ W).T @ one
    np.testing.assert_allclose(lin.weight.grad.numpy(), ref, rtol=1e-12)


def test_frozen_parameter_stays_frozen_on_every_path():
    net = Sequential(Linear(3, 4, seed=0), ReLU(), Linear(4, 1, seed=1))
    x = sm.tensor(np.random.default_rng(0).standard_normal((5, 3)))
    w0 = net[0].weight.numpy()
    net[0].weight.requires_grad_(False)
    assert not net[0].weight.requires_grad
    (net(x) ** 2).mean().backward()
    assert net[0].weight.grad is None and net[0].bias.grad is not None
    assert "weight" not in net.params()["layers"]["0"]              # params() omits frozen parameters
    g = sm.grad(lambda p: (net.apply(p, x) ** 2).mean())(net.params())
    assert "weight" not in g["layers"]["0"]
    for opt in (SGD(net.parameters(), lr=0.1, momentum=0.9), Adam(net.params(), lr=0.1)):
        opt.step(g)
        opt.step()                                                   # .grad path
    np.testing.assert_array_equal(net[0].weight.numpy(), w0)
    assert not np.allclose(net[0].bias.numpy(), 0)
    net.requires_grad_(True)                                         # unfreeze
    assert "weight" in net.params()["layers"]["0"]


def test_jit_over_params_still_replays():
    net = MLP([2, 4, 1], seed=0)
    x = sm.tensor(np.ones((3, 2)))
    vg = sm.jit(sm.value_and_grad(lambda p: (net.apply(p, x) ** 2).mean()), fallback=False)
    for _ in range(3):
        vg(net.params())
    assert vg.stats["replays"] == 2 and vg.stats["eager"] == 0


def test_parameters_are_freed():
    net = MLP([2, 8, 1], seed=0)
    net(sm.ones((3, 2))).sum().backward()
    r = weakref.ref(net.layers[0].weight)
    del net
    gc.collect()
    assert r() is None


@pytest.mark.parametrize("make, match", [
    (lambda: Linear(3.5, 2), r"Linear: in_features=3.5; expected an integer >= 1"),
    (lambda: Linear(3, 0), r"Linear: out_features=0; expected an integer >= 1"),
    (lambda: Linear("3", 2), r"in_features='3'"),
    (lambda: Linear(3, 2, seed=-1), r"Linear\(seed\): got -1"),
    (lambda: Linear(3, 2, init="nope"), r"init: got 'nope'"),
    (lambda: MLP([2, 2.5, 1]), r"MLP\(sizes\)"),
    (lambda: MLP(3), r"MLP\(sizes\)"),
    (lambda: Conv2d(2, 3, 0), r"Conv2d: kernel_size=0"),
    (lambda: Conv2d(2, 3, 3, stride=1.5), r"Conv2d: stride=1.5"),
    (lambda: Conv2d(2, 3, 3, padding=-1), r"Conv2d: padding=-1"),
    (lambda: Conv1d(2, 3, (3, 3)), r"Conv1d: kernel_size=\(3, 3\)"),
    (lambda: Dropout(1.5), r"Dropout: p=1.5"),
    (lambda: BatchNorm1d(0), r"BatchNorm1d: num_features=0"),
    (lambda: BatchNorm1d(3, eps=-1), r"BatchNorm1d: eps=-1"),
    (lambda: BatchNorm1d(3, momentum=2), r"BatchNorm1d: momentum=2"),
    (lambda: LayerNorm(-1), r"LayerNorm: normalized_shape=-1"),
    (lambda: Embedding(4.0, 2), r"Embedding: num_embeddings=4.0"),
    (lambda: sm.models.MaxPool2d(2.5), r"MaxPool2d: kernel_size=2.5"),
    (lambda: sm.models.AvgPool1d(2, stride=0), r"AvgPool1d: stride=0"),
    (lambda: sm.models.max_pool2d(sm.ones((1, 1, 4, 4)), 2, padding=-1), r"max_pool2d: padding=-1"),
])
def test_constructor_arguments_are_checked(make, match):
    with pytest.raises((TypeError, ValueError), match=match):
        make()
