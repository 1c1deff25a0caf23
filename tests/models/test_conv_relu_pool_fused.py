"""Sequential's Conv2d -> ReLU -> MaxPool2d and BatchNorm2d -> ReLU -> MaxPool2d in fused kernels
(models/_conv_fused.py conv_epilogue_pool, models/_norm_fused.py batch_norm_train(pool=...)): values and gradients
equal to the layer-by-layer path and to numpy / PyTorch, derivatives against finite differences to second order in
float64, ties and NaN as the composed rules, the float32 vector adjoint == the scalar one, a Vulkan pass."""
import os
import subprocess
import sys

import numpy as np
import pytest

import sciml as sm
from sciml.models import BatchNorm2d, Conv2d, MaxPool2d, ReLU, Sequential
from sciml.models._conv_fused import (conv_bn_pool, conv_bn_pool_composed, conv_epilogue_pool,
                                     conv_epilogue_pool_composed)
from sciml.models._norm_fused import batch_norm_composed, batch_norm_train
from sciml.testing import check_grads

R = np.random.default_rng(0)
HERE = os.path.dirname(os.path.abspath(__file__))


def _forward_backward(net, x, dtype, layerwise):
    y = x
    if layerwise:
        for l in net.layers:
            y = l(y)
    else:
        y = net(x)
    loss = (y * sm.tensor(np.linspace(-1, 1, y.size).reshape(y.shape), dtype)).sum()
    loss.backward()
    return y.numpy(), {n: p.grad.numpy() for n, p in net.named_parameters()}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_sequential_equals_layer_by_layer(dtype):
    def make():
        return Sequential(Conv2d(2, 8, 3, padding=1, seed=1, dtype=dtype), ReLU(), MaxPool2d(2),
                          Conv2d(8, 16, 3, padding=1, seed=2, dtype=dtype), BatchNorm2d(16, dtype=dtype), ReLU(),
                          MaxPool2d(2))
    x = sm.tensor(R.normal(size=(3, 2, 8, 8)), dtype)
    a, b = make(), make()
    ya, ga = _forward_backward(a, x, dtype, False)
    yb, gb = _forward_backward(b, x, dtype, True)
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(ya, yb, rtol=tol, atol=tol)
    for name in ("running_mean", "running_var"):   # the fused forward updates the running statistics too
        np.testing.assert_allclose(getattr(a.layers[4], name).numpy(), getattr(b.layers[4], name).numpy(), rtol=tol)
    for k in ga:
        np.testing.assert_allclose(ga[k], gb[k], rtol=10 * tol, atol=10 * tol, err_msg=k)


def test_fused_path_is_taken():
    net = Sequential(Conv2d(1, 4, 3, padding=1, seed=0), ReLU(), MaxPool2d(2), Conv2d(4, 8, 3, padding=1, seed=1),
                     BatchNorm2d(8), ReLU(), MaxPool2d(2))
    from sciml.autodiff import primitive as P
    seen = []
    orig = P.apply

    def spy(prim, inputs, params):
        seen.append(prim.name)
        return orig(prim, inputs, params)
    P.apply = spy
    try:
        net(sm.tensor(R.normal(size=(2, 1, 8, 8))))
    finally:
        P.apply = orig
    assert "conv_epilogue_pool" in seen and "conv_bn_pool" in seen, seen
    assert not {"pool2d", "batch_norm", "conv_epilogue"} & set(seen), seen


def test_untiled_pool_falls_back():
    """7x7 images: a 2x2 max-pool does not tile them; the unfused path (floor, PyTorch's size) runs."""
    net = Sequential(Conv2d(1, 4, 3, padding=1, seed=0), ReLU(), MaxPool2d(2))
    x = sm.tensor(R.normal(size=(2, 1, 7, 7)), "float64")
    y = net(x)
    assert y.shape == (2, 4, 3, 3)
    z = x
    for l in net.layers:
        z = l(z)
    np.testing.assert_allclose(y.numpy(), z.numpy(), rtol=1e-12)


def _conv_case(dtype="float64", N=2, H=4, W=6, O=3):
    y = sm.tensor(R.normal(size=(N * H * W, O)), dtype)
    b = sm.tensor(R.normal(size=O), dtype)
    return y, b, (N, H, W)


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("k", [(2, 2), (2, 3)])
def test_conv_epilogue_pool_matches_composed_and_fd(relu, k):
    y, b, shape = _conv_case()
    f = lambda y, b: conv_epilogue_pool(y, b, shape, relu, k)                     # noqa: E731
    c = lambda y, b: conv_epilogue_pool_composed(y, b, shape, relu, k)            # noqa: E731
    np.testing.assert_allclose(f(y, b).numpy(), c(y, b).numpy(), rtol=1e-14)
    N, H, W = shape
    z = (y.numpy() + b.numpy()).reshape(N, H, W, -1).transpose(0, 3, 1, 2)
    z = np.maximum(z, 0) if relu else z
    ref = z.reshape(N, -1, H // k[0], k[0], W // k[1], k[1]).max((3, 5))
    np.testing.assert_allclose(f(y, b).numpy(), ref, rtol=1e-14)
    check_grads(f, (y, b), order=2)


@pytest.mark.parametrize("relu", [True, False])
def test_batch_norm_pool_matches_composed_and_fd(relu):
    x = sm.tensor(R.normal(size=(3, 2, 4, 6)), "float64")
    w, b = sm.tensor(R.normal(size=2) + 1.5, "float64"), sm.tensor(R.normal(size=2), "float64")
    from sciml.models import max_pool2d
    f = lambda x, w, b: batch_norm_train(x, w, b, 1e-5, 0.1, None, relu, (2, 2))            # noqa: E731
    c = lambda x, w, b: max_pool2d(batch_norm_composed(x, w, b, 1e-5, relu), 2)              # noqa: E731
    np.testing.assert_allclose(f(x, w, b).numpy(), c(x, w, b).numpy(), rtol=1e-12, atol=1e-14)
    check_grads(f, (x, w, b), order=2)
    _, pf = sm.vjp(f, x, w, b)
    _, pc = sm.vjp(c, x, w, b)
    g = sm.tensor(R.normal(size=(3, 2, 2, 3)), "float64")
    for a, e in zip(pf(g), pc(g)):
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-10, atol=1e-12)


def _cbp_case(dtype="float64", N=3, H=4, W=6, O=4):
    y = sm.tensor(R.normal(size=(N * H * W, O)), dtype)
    cb, b = sm.tensor(R.normal(size=O), dtype), sm.tensor(R.normal(size=O), dtype)
    w = sm.tensor(R.normal(size=O) + 1.5, dtype)
    return (y, cb, w, b), (N, H, W)


@pytest.fixture(params=["vector", "scalar"])
def cbp_path(request, monkeypatch):
    """conv_bn_pool's CPU vector kernels, or (lanes() None) the scalar chain that devices run."""
    if request.param == "scalar":
        from sciml.kernels import conv_bn
        monkeypatch.setattr(conv_bn, "lanes", lambda *a: None)
    return request.param


@pytest.mark.parametrize("k", [(2, 2), (2, 3)])
def test_conv_bn_pool_matches_composed_numpy_and_fd(cbp_path, k):
    args, shape = _cbp_case()
    f = lambda *a: conv_bn_pool(*a, shape, 1e-5, 0.1, None, True, k)                # noqa: E731
    c = lambda *a: conv_bn_pool_composed(*a, shape, 1e-5, True, k)                  # noqa: E731
    np.testing.assert_allclose(f(*args).numpy(), c(*args).numpy(), rtol=1e-12, atol=1e-13)
    y, cb, w, b = (a.numpy() for a in args)
    N, H, W = shape
    x = (y + cb).reshape(N, H, W, -1).transpose(0, 3, 1, 2)
    z = (x - x.mean((0, 2, 3), keepdims=True)) / np.sqrt(x.var((0, 2, 3), keepdims=True) + 1e-5)
    z = np.maximum(z * w[:, None, None] + b[:, None, None], 0)
    ref = z.reshape(N, -1, H // k[0], k[0], W // k[1], k[1]).max((3, 5))
    np.testing.assert_allclose(f(*args).numpy(), ref, rtol=1e-12, atol=1e-13)
    g = sm.tensor(R.normal(size=ref.shape), "float64")
    _, pf = sm.vjp(f, *args)
    _, pc = sm.vjp(c, *args)
    for a, e in zip(pf(g), pc(g)):
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-9, atol=1e-11)
    check_grads(f, args, order=2)


def test_conv_bn_pool_running_stats_and_float32(cbp_path):
    from sciml.models import BatchNorm2d as BN
    args, shape = _cbp_case("float32", N=4, H=4, W=4, O=16)
    bn_a, bn_b = BN(16, dtype="float32"), BN(16, dtype="float32")
    out = conv_bn_pool(*args, shape, 1e-5, 0.1, (bn_a.running_mean, bn_a.running_var), True, (2, 2))
    from sciml.models._conv_fused import conv_epilogue
    from sciml.models._norm_fused import batch_norm_train
    from sciml.models import max_pool2d
    y, cb, w, b = args
    ref = max_pool2d(batch_norm_train(conv_epilogue(y, cb, shape), w, b, 1e-5, 0.1,
                                      (bn_b.running_mean, bn_b.running_var), True), 2)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(bn_a.running_mean.numpy(), bn_b.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn_a.running_var.numpy(), bn_b.running_var.numpy(), rtol=1e-5, atol=1e-6)


def test_conv_bn_pool_nan(cbp_path):
    args, shape = _cbp_case()
    y = args[0].numpy().copy()
    y[7, 2] = np.nan
    args = (sm.tensor(y, "float64"),) + args[1:]
    out, pull = sm.vjp(lambda *a: conv_bn_pool(*a, shape, relu=True, k=(2, 2)), *args)
    o = out.numpy()
    assert np.isnan(o[:, 2]).all() and not np.isnan(np.delete(o, 2, 1)).any()   # the channel's statistics are NaN
    gy, gcb, gw, gb = pull(sm.tensor(np.ones(o.shape), "float64"))
    assert np.isnan(gy.numpy()[:, 2]).all() and np.isnan(gw.numpy()[2]) and np.isnan(gb.numpy()[2])
    assert not np.isnan(np.delete(gy.numpy(), 2, 1)).any()


def test_ties_and_nan_follow_the_composed_rules():
    N, H, W, O = 2, 4, 4, 4
    yv = np.round(R.normal(size=(N * H * W, O)) * 2) / 2   # ties inside windows
    yv[5, 1] = np.nan
    y, b = sm.tensor(yv, "float64"), sm.tensor(np.zeros(O), "float64")
    g = sm.tensor(R.normal(size=(N, O, 2, 2)), "float64")
    out, pull = sm.vjp(lambda y, b: conv_epilogue_pool(y, b, (N, H, W), True, (2, 2)), y, b)
    outc, pullc = sm.vjp(lambda y, b: conv_epilogue_pool_composed(y, b, (N, H, W), True, (2, 2)), y, b)
    np.testing.assert_array_equal(out.numpy(), outc.numpy())
    assert np.isnan(out.numpy()[0, 1, 0, 0]) and np.isnan(out.numpy()).sum() == 1
    (gy, gb), (gyc, gbc) = pull(g), pullc(g)
    win = np.zeros((N * H * W, O), bool)
    win[[0, 1, 4, 5], 1] = True   # the 2x2 window holding the NaN (row 5, channel 1)
    assert np.isnan(gy.numpy()[win]).all() and np.isnan(gyc.numpy()[5, 1])   # NaN in, NaN out (the whole window:
    np.testing.assert_array_equal(gy.numpy()[~win], gyc.numpy()[~win])      # the composed ReLU rule zeroes g
    assert np.isnan(gb.numpy()[1]) and np.isnan(gbc.numpy()[1])             # at z <= 0, NaN or not)
    np.testing.assert_allclose(np.delete(gb.numpy(), 1), np.delete(gbc.numpy(), 1), rtol=1e-14)
    x = R.normal(size=(2, 2, 4, 4))
    x[1, 0, 2, 3] = np.nan
    yb = batch_norm_train(sm.tensor(x, "float64"), sm.tensor(np.ones(2), "float64"), sm.tensor(np.zeros(2), "float64"),
                          relu=True, pool=(2, 2)).numpy()
    assert np.isnan(yb[:, 0]).all() and not np.isnan(yb[:, 1]).any()


def test_vector_kernels_equal_scalar():
    from sciml import backend
    from sciml.kernels import nn_conv as K
    for N, H, W, O in ((4, 8, 8, 16), (3, 4, 6, 8), (2, 4, 4, 12)):
        y = backend.empty(N * H * W * O, "float32")
        y[:] = np.round(R.normal(size=y.size) * 2) / 2
        y[7] = np.nan
        b = backend.empty(O, "float32")
        b[:] = R.normal(size=O)
        g = backend.empty(N * O * H * W // 4, "float32")
        g[:] = R.normal(size=g.size)
        outs = []
        for vec in (True, False):
            K.VECTOR = vec
            try:
                assert (K._vec_lanes((g, y, b), O, "float32") is not None) == vec
                out = backend.empty(g.size, "float32")
                K.conv_epilogue_pool(y, b, out, N, H, W, O, (2, 2), "float32", True)
                gy, gb = backend.empty(y.size, "float32"), backend.empty(O, "float32")
                K.conv_epilogue_pool_vjp(g, y, b, gy, gb, N, H, W, O, (2, 2), "float32", True)
            finally:
                K.VECTOR = True
            outs.append((out.copy(), gy.copy(), gb.copy()))
        np.testing.assert_array_equal(outs[0][0], outs[1][0])
        np.testing.assert_array_equal(outs[0][1], outs[1][1])
        np.testing.assert_allclose(outs[0][2], outs[1][2], rtol=1e-5, atol=1e-6)
        assert np.isnan(outs[0][0]).sum() == 1 and np.isnan(outs[0][1]).sum() == 4


def test_digits_cnn_matches_torch():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    tnet = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1),
                         nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2)).double()
    net = Sequential(Conv2d(1, 16, 3, padding=1, dtype="float64"), ReLU(), MaxPool2d(2),
                     Conv2d(16, 32, 3, padding=1, dtype="float64"), BatchNorm2d(32, dtype="float64"), ReLU(),
                     MaxPool2d(2))
    for i in (0, 3):
        net.layers[i].weight._assign(tnet[i].weight.detach().numpy().astype(np.float64))
        net.layers[i].bias._assign(tnet[i].bias.detach().numpy().astype(np.float64))
    xv = R.normal(size=(8, 1, 8, 8))
    x, tx = sm.tensor(xv, "float64"), torch.tensor(xv, requires_grad=True)
    gv = R.normal(size=(8, 32, 2, 2))
    ty = tnet(tx)
    (ty * torch.tensor(gv)).sum().backward()
    y = net(x)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(net.layers[4].running_mean.numpy(), tnet[4].running_mean.numpy(), rtol=1e-10)
    np.testing.assert_allclose(net.layers[4].running_var.numpy(), tnet[4].running_var.numpy(), rtol=1e-10)
    (y * sm.tensor(gv, "float64")).sum().backward()
    for i, name in ((0, "weight"), (0, "bias"), (3, "weight"), (4, "weight"), (4, "bias")):
        np.testing.assert_allclose(getattr(net.layers[i], name).grad.numpy(), getattr(tnet[i], name).grad.numpy(),
                                   rtol=1e-8, atol=1e-10, err_msg=f"{i}.{name}")


ICD = [d for d in ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d") if os.path.isdir(d) and os.listdir(d)]


def test_fused_conv_pool_on_vulkan():
    if not ICD:
        if os.environ.get("SCIML_REQUIRE_VULKAN"):
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    env = dict(os.environ)
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "vulkan_conv_pool_check.py")], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan conv pool" in r.stdout, (r.stdout + r.stderr)[-4000:]


def test_fused_blocks_under_jit_equal_eager():
    """sm.jit replays the fused kernels (vector kernels included, float32) with the eager values and running stats."""
    def make():
        return Sequential(Conv2d(1, 16, 3, padding=1, seed=1, dtype="float32"), ReLU(), MaxPool2d(2),
                          Conv2d(16, 32, 3, padding=1, seed=2, dtype="float32"), BatchNorm2d(32, dtype="float32"),
                          ReLU(), MaxPool2d(2))
    a, b = make(), make()
    xs = [sm.tensor(R.normal(size=(4, 1, 8, 8)), "float32") for _ in range(3)]
    jitted = sm.jit(sm.value_and_grad(lambda p, x: (b.apply(p, x) ** 2).mean()), fallback="raise")
    for x in xs:
        v1, g1 = sm.value_and_grad(lambda p: (a.apply(p, x) ** 2).mean())(a.params())
        v2, g2 = jitted(b.params(), x)
        np.testing.assert_allclose(float(v2), float(v1), rtol=1e-6)
        for i in ("0", "3", "4"):
            np.testing.assert_allclose(g2["layers"][i]["weight"].numpy(), g1["layers"][i]["weight"].numpy(),
                                       rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b.layers[4].running_var.numpy(), a.layers[4].running_var.numpy(), rtol=1e-5)
    assert jitted.stats["replays"] == 2
