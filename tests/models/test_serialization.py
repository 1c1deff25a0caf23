"""sm.save / sm.load: nested checkpoints in one call (npz and safetensors, no pickle, atomic), and the
PyTorch state_dict converter (with torch if installed, else with arrays laid out as torch's)."""
import os

import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP, BatchNorm1d, Linear, Sequential, ReLU
from sciml.optim import Adam
from sciml.serialization import from_torch_state_dict


def _obj():
    return {"model": {"w": sm.tensor(np.arange(6.0).reshape(2, 3)), "b": sm.tensor([1.0, 2.0], "float32")},
            "arr": np.arange(4, dtype=np.int64), "steps": [1, 2.5, None, True, "adam", float("nan"), float("-inf")],
            "pair": (sm.tensor([3], "int32"), np.zeros((0, 2))), "nested": {"a": {"b": []}}}


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_round_trip(tmp_path, suffix):
    path = tmp_path / f"ck{suffix}"
    assert sm.save(_obj(), path) == str(path)
    back = sm.load(path)
    o = _obj()
    assert isinstance(back["model"]["w"], sm.Tensor) and back["model"]["w"].dtype == "float64"
    assert back["model"]["b"].dtype == "float32"
    np.testing.assert_array_equal(back["model"]["w"].numpy(), o["model"]["w"].numpy())
    assert isinstance(back["arr"], np.ndarray) and back["arr"].dtype == np.int64
    assert back["steps"][:5] == [1, 2.5, None, True, "adam"]
    assert np.isnan(back["steps"][5]) and back["steps"][6] == float("-inf")
    assert isinstance(back["pair"], tuple) and back["pair"][0].dtype == "int32" and back["pair"][1].shape == (0, 2)
    assert back["nested"] == {"a": {"b": []}}
    assert sorted(os.listdir(tmp_path)) == [f"ck{suffix}"]          # no temporary file left behind


def test_model_and_optimizer_checkpoint(tmp_path):
    net = MLP([2, 4, 1], seed=0)
    opt = Adam(net.parameters(), lr=1e-2)
    x = sm.ones((3, 2))
    opt.step(sm.grad(lambda p: net.apply(p, x).sum())(net.params()))
    sm.save({"model": net.state_dict(), "opt": opt.state_dict(), "epoch": 3}, tmp_path / "c")
    ck = sm.load(tmp_path / "c")        # ".npz" appended on save, found on load
    net2 = MLP([2, 4, 1], seed=1)
    opt2 = Adam(net2.parameters(), lr=1e-2)
    net2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["opt"])
    assert ck["epoch"] == 3
    g = sm.grad(lambda p: net.apply(p, x).sum())(net.params())
    opt.step(g)
    opt2.step(sm.grad(lambda p: net2.apply(p, x).sum())(net2.params()))
    for a, b in zip(net.parameters(), net2.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_errors(tmp_path):
    with pytest.raises(TypeError, match=r"obj\['f'\] is a builtin"):
        sm.save({"f": len}, tmp_path / "x.npz")
    with pytest.raises(TypeError, match="expected str keys"):
        sm.save({1: 2}, tmp_path / "x.npz")
    with pytest.raises(TypeError, match="object"):
        sm.save(np.array([{}], dtype=object), tmp_path / "x.npz")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sm.save({}, tmp_path / "missing" / "x.npz")
    with pytest.raises(ValueError, match="suffix"):
        sm.save({}, tmp_path / "x.pt")
    assert not os.listdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="no file"):
        sm.load(tmp_path / "nope.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="junk.npz.*cannot read"):
        sm.load(junk)
    sm.save({"a": np.ones(1000)}, tmp_path / "t.npz")
    data = (tmp_path / "t.npz").read_bytes()
    (tmp_path / "t.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="t.npz"):
        sm.load(tmp_path / "t.npz")
    np.savez(tmp_path / "plain.npz", a=np.ones(2))
    with pytest.raises(ValueError, match="not written by sm.save"):
        sm.load(tmp_path / "plain.npz")


def test_save_is_atomic_on_error(tmp_path):
    path = tmp_path / "keep.npz"
    sm.save({"v": 1}, path)
    with pytest.raises(TypeError):
        sm.save({"v": 2, "bad": object()}, path)
    assert sm.load(path) == {"v": 1} and sorted(os.listdir(tmp_path)) == ["keep.npz"]


def _torch_like_state(net):
    """What torch's state_dict of the same network holds: (out, in) Linear weights, nn.Sequential names,
    and BatchNorm's num_batches_tracked."""
    sd = {}
    for n, v in net.state_dict().items():
        name = n[len("layers."):] if n.startswith("layers.") else n
        sd[name] = v.T.copy() if v.ndim == 2 and n.endswith("weight") else v
        if n.endswith("running_var"):
            sd[name.replace("running_var", "num_batches_tracked")] = np.array(5)
    return sd


def test_torch_state_dict_converter_layout():
    net = Sequential(Linear(3, 4, seed=0), BatchNorm1d(4), ReLU(), Linear(4, 2, seed=1))
    ref = net.state_dict()
    sd = _torch_like_state(net)
    other = Sequential(Linear(3, 4, seed=5), BatchNorm1d(4), ReLU(), Linear(4, 2, seed=6))
    other.load_state_dict(from_torch_state_dict(sd, other))
    for k, v in ref.items():
        np.testing.assert_array_equal(other.state_dict()[k], v)
    plain = from_torch_state_dict({"w.weight": np.ones((2, 3)), "w.bias": np.ones(2)})
    assert plain["w.weight"].shape == (3, 2)
    bad = dict(sd)
    bad["0.weight"] = np.ones((5, 3))
    with pytest.raises(ValueError, match=r"'layers.0.weight' has shape \(3, 5\)"):
        from_torch_state_dict(bad, other)
    with pytest.raises(KeyError, match="no counterpart"):
        from_torch_state_dict({**sd, "extra.weight": np.ones(1)}, other)


def test_torch_state_dict_converter_with_torch():
    torch = pytest.importorskip("torch")
    tnet = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    net = Sequential(Linear(3, 4), sm.models.Tanh(), Linear(4, 2))
    net.load_state_dict(from_torch_state_dict(tnet.state_dict(), net))
    x = np.random.default_rng(0).standard_normal((5, 3))
    ref = tnet(torch.tensor(x, dtype=torch.float32)).detach().numpy()
    np.testing.assert_allclose(net(sm.tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-6)
