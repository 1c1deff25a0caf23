"""Module, Parameter, Linear, MLP, Sequential: discovery, apply, state_dict, save/load, errors."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP, Linear, Module, Parameter, Sequential, ReLU
from sciml.testing import check_grads


def _x(shape, seed=0):
    return sm.tensor(np.random.default_rng(seed).normal(size=shape))


class Net(Module):
    def __init__(self):
        self.blocks = [Linear(3, 4, seed=1), Linear(4, 4, seed=2)]
        self.heads = {"a": Linear(4, 2, seed=3)}
        self.scale = Parameter(np.ones(2))

    def forward(self, x):
        for b in self.blocks:
            x = sm.tanh(b(x))
        return self.heads["a"](x) * self.scale


def test_discovery_in_attributes_lists_dicts():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                     "heads.a.weight", "heads.a.bias", "scale"]
    assert len(net.parameters()) == 7
    p = net.params()
    assert set(p) == {"blocks", "heads", "scale"} and p["heads"]["a"]["weight"].shape == (4, 2)
    assert net.num_parameters() == 3 * 4 + 4 + 16 + 4 + 8 + 2 + 2
    assert "params" in repr(net) and "Linear(in_features=3" in repr(net)


def test_linear_matches_numpy_and_apply_equals_call():
    layer = Linear(3, 2, seed=0)
    x = _x((5, 3))
    W, b = layer.weight.numpy(), layer.bias.numpy()
    np.testing.assert_allclose(layer(x).numpy(), x.numpy() @ W + b, rtol=1e-12)
    net = Net()
    np.testing.assert_allclose(net.apply(net.params(), x).numpy(), net(x).numpy(), rtol=1e-15)
    # apply with other values uses only those
    p2 = sm.tree_map(lambda t: t * 0.0, net.params())
    np.testing.assert_allclose(net.apply(p2, x).numpy(), 0.0)
    assert np.abs(net(x).numpy()).sum() > 0  # own parameters restored


def test_grad_over_params_is_shaped_like_params():
    net = MLP([3, 5, 2], seed=0)
    x = _x((4, 3))
    g = sm.grad(lambda p: (net.apply(p, x) ** 2).sum())(net.params())
    assert sm.tree_map(lambda t: t.shape, g) == sm.tree_map(lambda t: t.shape, net.params())


def test_linear_gradients_second_order():
    layer = Linear(3, 2, seed=0)
    x = _x((4, 3))
    check_grads(lambda W, b, x: layer.apply({"weight": W, "bias": b}, x),
                (layer.weight.detach(), layer.bias.detach(), x), order=2)


def test_mlp_gradients_wrt_params_and_input():
    net = MLP([2, 4, 1], activation=sm.tanh, seed=0)
    x = _x((3, 2))
    leaves = net.parameters()

    def f(x, *ps):
        p = {"layers": {"0": {"weight": ps[0], "bias": ps[1]}, "1": {"weight": ps[2], "bias": ps[3]}}}
        return net.apply(p, x)
    check_grads(f, (x, *[q.detach() for q in leaves]), order=2)


def test_mlp_attributes_for_fused_paths():
    net = MLP([2, 8, 8, 1], activation=sm.sin, seed=3)
    assert [type(l) for l in net.layers] == [Linear] * 3 and net.activation is sm.sin


def test_sequential_and_train_eval():
    seq = Sequential(Linear(3, 4, seed=0, init="xavier_uniform"), ReLU(), Linear(4, 1, seed=1, init="xavier_uniform"))
    x = _x((2, 3))
    ref = np.maximum(x.numpy() @ seq[0].weight.numpy(), 0) @ seq[2].weight.numpy()
    np.testing.assert_allclose(seq(x).numpy(), ref, rtol=1e-12)
    seq.eval()
    assert all(not m.training for m in seq.modules())
    seq.train()
    assert all(m.training for m in seq.modules())


def test_state_dict_save_load_round_trip(tmp_path):
    a, b = Net(), Net()
    for p in b.parameters():
        p._assign(np.zeros(p.shape))
    x = _x((3, 3))
    a.save(tmp_path / "net.npz")
    b.load(tmp_path / "net.npz")
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    sd = a.state_dict()
    assert list(sd) == [n for n, _ in a.named_parameters()]
    sd["scale"] = sd["scale"] + 1
    b.load_state_dict(sd)
    np.testing.assert_array_equal(b.scale.numpy(), a.scale.numpy() + 1)


def test_load_state_dict_errors():
    a, other = MLP([3, 4, 1]), MLP([3, 5, 1])
    with pytest.raises(ValueError, match=r"'layers.0.weight' has shape \(3, 5\) in the state dict; the model expects \(3, 4\)"):
        a.load_state_dict(other.state_dict())
    sd = a.state_dict()
    sd["extra"] = np.zeros(2)
    with pytest.raises(KeyError, match="unexpected keys \\['extra'\\]"):
        a.load_state_dict(sd)
    del sd["extra"], sd["layers.1.bias"]
    with pytest.raises(KeyError, match="missing keys \\['layers.1.bias'\\]"):
        a.load_state_dict(sd)
    assert a.load_state_dict(sd, strict=False) == (["layers.1.bias"], [])


def test_linear_wrong_feature_size():
    with pytest.raises(ValueError, match=r"Linear\(in_features=3\): x has shape \(128, 2\); expected \(n, 3\)\."):
        Linear(3, 2)(sm.ones((128, 2)))


def test_apply_errors():
    net = MLP([2, 3, 1])
    p = net.params()
    p["layers"]["0"]["weight"] = sm.ones((3, 3))
    with pytest.raises(ValueError, match=r"apply: params\['layers.0.weight'\] has shape \(3, 3\); expected \(2, 3\)"):
        net.apply(p, sm.ones((1, 2)))
    with pytest.raises(KeyError, match="no entry 'layers.1.bias'"):
        net.apply({"layers": {"0": net.params()["layers"]["0"], "1": {"weight": net.layers[1].weight}}},
                  sm.ones((1, 2)))


def test_float32_parameters():
    layer = Linear(3, 2, dtype="float32")
    assert layer.weight.dtype == "float32" and layer(sm.ones((2, 3), dtype="float32")).dtype == "float32"


def test_linear_without_bias_and_repr_counts():
    layer = Linear(4, 3, bias=False, seed=2)
    x = _x((2, 4))
    np.testing.assert_allclose(layer(x).numpy(), x.numpy() @ layer.weight.numpy(), rtol=1e-12)
    assert [n for n, _ in layer.named_parameters()] == ["weight"]
    assert "# 12 params" in repr(layer)
    assert repr(MLP([2, 3, 1])).endswith("# 13 params")


def test_safetensors_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    a, b = MLP([3, 4, 2], seed=0), MLP([3, 4, 2], seed=1)
    a.save(tmp_path / "m.safetensors")
    b.load(tmp_path / "m.safetensors")
    x = _x((2, 3))
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
