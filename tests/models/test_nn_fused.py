"""Fused NN kernels (issue 16, speed): the LSTM layer against torch (its fused kernels: test_rnn_fused.py), Dropout,
BatchNorm, LayerNorm and the conv epilogue.

Each is checked in float64 against finite differences to second order, fused == composed, and against PyTorch
where installed; the Vulkan pass runs in its own process (vulkan_nn_fused_check.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import sciml as sm
from sciml.models import LSTM
from sciml.testing import check_grads

R = np.random.default_rng(0)
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("layers, bidir, batch_first", [(1, False, True), (2, True, False)])
def test_lstm_matches_torch_values_and_gradients(layers, bidir, batch_first):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tl = torch.nn.LSTM(3, 5, num_layers=layers, bidirectional=bidir, batch_first=batch_first).double()
    m = LSTM(3, 5, num_layers=layers, bidirectional=bidir, batch_first=batch_first)
    m.load_state_dict({k: v.detach().numpy() for k, v in tl.state_dict().items()})
    x = R.normal(size=(4, 6, 3))
    D = 2 if bidir else 1
    h0, c0 = R.normal(size=(layers * D, 4 if batch_first else 6, 5)), R.normal(size=(layers * D, 4 if batch_first
                                                                                     else 6, 5))
    xt, ht, ct = (torch.tensor(a, requires_grad=True) for a in (x, h0, c0))
    out_t, (hn_t, cn_t) = tl(xt, (ht, ct))
    ((out_t ** 2).sum() + (hn_t * 0.3).sum() + (cn_t ** 3).sum()).backward()

    def loss(p, x, h, c):
        out, (hn, cn) = m.apply(p, x, (h, c))
        return (out ** 2).sum() + (hn * 0.3).sum() + (cn ** 3).sum()
    gp, gx, gh, gc = sm.grad(loss, argnums=(0, 1, 2, 3))(m.params(), sm.tensor(x), sm.tensor(h0), sm.tensor(c0))
    out, (hn, cn) = m(sm.tensor(x), (sm.tensor(h0), sm.tensor(c0)))
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(cn.numpy(), cn_t.detach().numpy(), rtol=1e-12, atol=1e-13)
    for a, t in ((gx, xt), (gh, ht), (gc, ct)):
        np.testing.assert_allclose(a.numpy(), t.grad.numpy(), rtol=1e-11, atol=1e-12)
    for name, p in tl.named_parameters():
        np.testing.assert_allclose(gp[name].numpy(), p.grad.numpy(), rtol=1e-11, atol=1e-12, err_msg=name)


def test_lstm_layer_second_derivative_through_fused_path():
    m = LSTM(2, 3, seed=0)
    x = sm.tensor(R.normal(size=(4, 2, 2)))
    check_grads(lambda t: m(t)[0], (x,), order=2)


def test_fused_nn_kernels_on_vulkan():
    from tests.test_vulkan import _vulkan_available
    if not _vulkan_available():
        if os.environ.get("SCIML_REQUIRE_VULKAN"):   # set by .ci/run: CI must really run this pass
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    env = dict(os.environ)
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "vulkan_nn_fused_check.py")], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan nn fused" in r.stdout, (r.stdout + r.stderr)[-4000:]


# --- Dropout from the counter-based kernel -------------------------------------------------------------
M32 = 0xFFFFFFFF


def threefry_ref(k0, k1, c0, c1):
    """Threefry-2x32-20 in plain Python (Salmon et al. 2011; as tests/test_random.py)."""
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (c0 + ks[0]) & M32, (c1 + ks[1]) & M32
    for g in range(5):
        for r in range(4):
            x0 = (x0 + x1) & M32
            s = rot[(g % 2) * 4 + r]
            x1 = ((x1 << s) | (x1 >> (32 - s))) & M32
            x1 ^= x0
        x0 = (x0 + ks[(g + 1) % 3]) & M32
        x1 = (x1 + ks[(g + 2) % 3] + g + 1) & M32
    return x0, x1


def dropout_mask_ref(seed, counter, n, p):
    s = seed % (1 << 64)
    k0, k1 = s >> 32, s & M32
    thr = round(p * (1 << 16))
    bits = []
    for q in range((n + 63) // 64):   # entry 64 q + 16 w + l: half w % 2 of word w // 2 of call 16 q + l
        words = [threefry_ref(k0, k1, counter, 16 * q + l) for l in range(16)]
        bits += [(x[w // 2] >> (16 * (w % 2))) & 0xFFFF for w in range(4) for x in words]
    return np.array([1 / (1 - p) if b >= thr else 0.0 for b in bits[:n]])


def test_dropout_masks_follow_the_threefry_stream():
    from sciml.models import Dropout
    d = Dropout(0.3, seed=12345678901)
    x = sm.tensor(R.normal(size=(7, 5)))
    for counter in range(3):
        want = x.numpy() * dropout_mask_ref(12345678901, counter, 35, 0.3).reshape(7, 5)
        np.testing.assert_allclose(d(x).numpy(), want, rtol=1e-15)
    np.testing.assert_array_equal(d.rng_state.numpy()[4:], [3, 0])
    big = Dropout(0.25, seed=0)(sm.ones((400, 100))).numpy()
    assert abs((big == 0).mean() - 0.25) < 0.01


def test_dropout_counter_carries_into_the_high_word():
    from sciml.models import Dropout
    d = Dropout(0.5, seed=7)
    st = d.rng_state.numpy().copy()
    st[4] = 65535
    d.rng_state._assign(st)
    x = sm.ones((3, 4))
    np.testing.assert_allclose(d(x).numpy().reshape(-1), dropout_mask_ref(7, 65535, 12, 0.5))
    np.testing.assert_array_equal(d.rng_state.numpy()[4:], [0, 1])
    np.testing.assert_allclose(d(x).numpy().reshape(-1), dropout_mask_ref(7, 65536, 12, 0.5))


def test_dropout_gradient_is_the_mask_and_second_order_zero():
    from sciml.models import Dropout
    d = Dropout(0.4, seed=3)
    x = sm.tensor(R.normal(size=(6, 4)))
    m = dropout_mask_ref(3, 0, 24, 0.4).reshape(6, 4)
    g = sm.grad(lambda t: (d(t) * t).sum())(x)  # d/dx (m x . x) = 2 m x
    np.testing.assert_allclose(g.numpy(), 2 * m * x.numpy(), rtol=1e-14)
    d.rng_state._assign(np.array([3, 0, 0, 0, 0, 0], float))  # seed 3: key words (0, 3)
    st = d.rng_state.numpy().copy()

    def f(t):
        d.rng_state._assign(st)  # the same mask on every evaluation (finite differences)
        return d(t) ** 2
    check_grads(f, (x,), order=2)


@pytest.mark.parametrize("verify", [True, False])
def test_dropout_under_jit_replays_fresh_masks_as_eager(verify):
    # verify=True: jit's checking runs restore the rng_state they advance, so the streams stay in step
    from sciml.models import Dropout, Linear, Sequential
    x = sm.tensor(R.normal(size=(8, 5)))

    def make():
        return Sequential(Linear(5, 6, seed=0), Dropout(0.5, seed=3), Linear(6, 1, seed=1))
    a, b = make(), make()
    eager = sm.value_and_grad(lambda p: (a.apply(p, x) ** 2).mean())
    jitted = sm.jit(sm.value_and_grad(lambda p: (b.apply(p, x) ** 2).mean()), verify=verify, fallback="raise")
    vals = []
    for _ in range(4):
        (v1, g1), (v2, g2) = eager(a.params()), jitted(b.params())
        np.testing.assert_allclose(float(v2), float(v1), rtol=1e-13)
        np.testing.assert_allclose(g2["layers"]["0"]["weight"].numpy(), g1["layers"]["0"]["weight"].numpy(), rtol=1e-12)
        vals.append(float(v1))
    assert len(set(vals)) == 4 and jitted.stats["replays"] == 3
    np.testing.assert_array_equal(a.state_dict()["layers.1.rng_state"], b.state_dict()["layers.1.rng_state"])


def test_batch_norm_running_stats_under_jit_with_verification_match_eager():
    from sciml.models import BatchNorm1d, Linear, Sequential
    x = sm.tensor(R.normal(size=(8, 5)))
    a, b = (Sequential(Linear(5, 4, seed=0), BatchNorm1d(4)) for _ in range(2))
    eager = sm.value_and_grad(lambda p: (a.apply(p, x) ** 2).mean())
    jitted = sm.jit(sm.value_and_grad(lambda p: (b.apply(p, x) ** 2).mean()))  # verify=True
    for _ in range(3):
        eager(a.params()), jitted(b.params())
    for k in ("layers.1.running_mean", "layers.1.running_var"):
        np.testing.assert_allclose(b.state_dict()[k], a.state_dict()[k], rtol=1e-13)


# --- BatchNorm: one fused kernel forward, one backward -------------------------------------------------
def test_batch_norm_fused_derivatives_to_second_order_and_equal_composed():
    from sciml.models._norm_fused import batch_norm_composed, batch_norm_train
    x, w, b = sm.tensor(R.normal(size=(4, 3, 2, 3))), sm.tensor(R.normal(size=3)), sm.tensor(R.normal(size=3))
    check_grads(lambda x, w, b: batch_norm_train(x, w, b, 1e-3), (x, w, b), order=2)
    np.testing.assert_allclose(batch_norm_train(x, w, b).numpy(), batch_norm_composed(x, w, b, 1e-5).numpy(),
                               rtol=1e-13, atol=1e-14)
    u = sm.tensor(R.normal(size=x.shape))
    got = sm.vjp(lambda x, w, b: batch_norm_train(x, w, b), x, w, b)[1](u)
    want = sm.vjp(lambda x, w, b: batch_norm_composed(x, w, b, 1e-5), x, w, b)[1](u)
    for a, c in zip(got, want):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("shape, affine", [((4, 3, 5, 2), True), ((6, 3), False), ((5, 3, 4), True)])
def test_batch_norm_matches_torch_values_gradients_running_stats(shape, affine):
    torch = pytest.importorskip("torch")
    from sciml.models import BatchNorm1d, BatchNorm2d
    tcls, cls = (torch.nn.BatchNorm2d, BatchNorm2d) if len(shape) == 4 else (torch.nn.BatchNorm1d, BatchNorm1d)
    tb, m = tcls(3, momentum=0.2, affine=affine).double(), cls(3, momentum=0.2, affine=affine)
    if affine:
        with torch.no_grad():
            tb.weight.copy_(torch.tensor(R.normal(size=3)))
            tb.bias.copy_(torch.tensor(R.normal(size=3)))
    m.load_state_dict({k: v.numpy() for k, v in tb.state_dict().items() if k != "num_batches_tracked"})
    x, gy = R.normal(size=shape), R.normal(size=shape)
    xt = torch.tensor(x, requires_grad=True)
    yt = tb(xt)
    (yt * torch.tensor(gy)).sum().backward()
    y = m(sm.tensor(x))
    if affine:
        (y * sm.tensor(gy)).sum().backward()
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(m.running_mean.numpy(), tb.running_mean.numpy(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(m.running_var.numpy(), tb.running_var.numpy(), rtol=1e-13, atol=1e-15)
    gx = sm.grad(lambda x: (m(x) * sm.tensor(gy)).sum())(sm.tensor(x))
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-11, atol=1e-12)
    if affine:
        np.testing.assert_allclose(m.weight.grad.numpy(), tb.weight.grad.numpy(), rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(m.bias.grad.numpy(), tb.bias.grad.numpy(), rtol=1e-11, atol=1e-12)


# --- conv epilogue: bias + (N*Ho*Wo, O) -> (N, O, Ho, Wo) in one kernel ---------------------------------
def test_conv_epilogue_derivatives_and_equal_composed():
    from sciml.models._conv_fused import conv_epilogue, conv_epilogue_composed
    y, b = sm.tensor(R.normal(size=(2 * 3 * 4, 5))), sm.tensor(R.normal(size=5))
    check_grads(lambda y, b: conv_epilogue(y, b, (2, 3, 4)), (y, b), order=2)
    np.testing.assert_array_equal(conv_epilogue(y, b, (2, 3, 4)).numpy(),
                                  conv_epilogue_composed(y, b, (2, 3, 4)).numpy())
    u = sm.tensor(R.normal(size=(2, 5, 3, 4)))
    got = sm.vjp(lambda y, b: conv_epilogue(y, b, (2, 3, 4)), y, b)[1](u)
    want = sm.vjp(lambda y, b: conv_epilogue_composed(y, b, (2, 3, 4)), y, b)[1](u)
    for a, c in zip(got, want):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-14, atol=1e-14)


def test_conv2d_with_bias_matches_torch():
    torch = pytest.importorskip("torch")
    from sciml.models import Conv2d
    tc = torch.nn.Conv2d(3, 4, 3, padding=1, stride=2).double()
    m = Conv2d(3, 4, 3, padding=1, stride=2)
    m.load_state_dict({k: v.detach().numpy() for k, v in tc.state_dict().items()})
    x, gy = R.normal(size=(2, 3, 7, 6)), R.normal(size=(2, 4, 4, 3))
    xt = torch.tensor(x, requires_grad=True)
    yt = tc(xt)
    (yt * torch.tensor(gy)).sum().backward()
    gp, gx = sm.grad(lambda p, x: (m.apply(p, x) * sm.tensor(gy)).sum(), argnums=(0, 1))(m.params(), sm.tensor(x))
    np.testing.assert_allclose(m(sm.tensor(x)).numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gp["bias"].numpy(), tc.bias.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gp["weight"].numpy(), tc.weight.grad.numpy(), rtol=1e-12, atol=1e-13)


# --- LayerNorm: one fused kernel forward, one backward -------------------------------------------------
def test_layer_norm_fused_derivatives_to_second_order_and_equal_composed():
    from sciml.models._norm_fused import layer_norm, layer_norm_composed
    x, w, b = sm.tensor(R.normal(size=(3, 2, 4))), sm.tensor(R.normal(size=(2, 4))), sm.tensor(R.normal(size=(2, 4)))
    check_grads(lambda x, w, b: layer_norm(x, w, b, 1e-3), (x, w, b), order=2)
    u = sm.tensor(R.normal(size=x.shape))
    np.testing.assert_allclose(layer_norm(x, w, b).numpy(), layer_norm_composed(x, w, b, 1e-5).numpy(), rtol=1e-13,
                               atol=1e-14)
    got = sm.vjp(lambda x, w, b: layer_norm(x, w, b), x, w, b)[1](u)
    want = sm.vjp(lambda x, w, b: layer_norm_composed(x, w, b, 1e-5), x, w, b)[1](u)
    for a, c in zip(got, want):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-12, atol=1e-13)


def test_layer_norm_matches_torch():
    torch = pytest.importorskip("torch")
    from sciml.models import LayerNorm
    tl, m = torch.nn.LayerNorm(6).double(), LayerNorm(6)
    with torch.no_grad():
        tl.weight.copy_(torch.tensor(R.normal(size=6)))
        tl.bias.copy_(torch.tensor(R.normal(size=6)))
    m.load_state_dict({k: v.numpy() for k, v in tl.state_dict().items()})
    x, gy = R.normal(size=(4, 5, 6)), R.normal(size=(4, 5, 6))
    xt = torch.tensor(x, requires_grad=True)
    yt = tl(xt)
    (yt * torch.tensor(gy)).sum().backward()
    gp, gx = sm.grad(lambda p, x: (m.apply(p, x) * sm.tensor(gy)).sum(), argnums=(0, 1))(m.params(), sm.tensor(x))
    np.testing.assert_allclose(m(sm.tensor(x)).numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(gp["weight"].numpy(), tl.weight.grad.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(gp["bias"].numpy(), tl.bias.grad.numpy(), rtol=1e-11, atol=1e-12)
