"""Fused kernels of the conv-net and MLP training steps (issue 16, item 6): 2-D max / average pooling as one
kernel forward and one backward (sciml/kernels/pool.py); the dense epilogue dropout(act(h + b)) as one kernel each
way (sciml/models/_dense_fused.py), which Sequential uses for Linear -> activation -> Dropout and Dropout alone; Conv2d -> ReLU and BatchNorm -> ReLU
(training) in the conv and batch-norm kernels; BatchNorm in eval mode as one kernel; the mean / summed squared error as one kernel each way
(sciml/models/_loss_fused.py).

Each is checked in float64 against finite differences to second order, fused == composed (the im2col route,
which the recorded higher-order rules use), and against PyTorch where installed; the Vulkan float32 pass runs
in its own process (vulkan_nn_cnn_check.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import sciml as sm
from sciml.models.conv import avg_pool2d, max_pool2d
from sciml.testing import check_grads

R = np.random.default_rng(0)
HERE = os.path.dirname(os.path.abspath(__file__))
GEOMS = [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), (1, 1))]   # tiling; padded; overlapping rows, mixed sizes


def _composed(fn, k, s, p):
    """The pooling through the im2col route (the rule the fused primitive differentiates at higher orders)."""
    from sciml.autodiff.ops import max as amax, mean as amean, reshape, transpose
    from sciml.autodiff.ops.conv import unfold
    from sciml.models.conv import _pair
    kh, kw = _pair("k", k)
    st = (kh, kw) if s is None else _pair("s", s)
    red, pad = (amax, float("-inf")) if fn is max_pool2d else (amean, 0.0)

    def f(x):
        cols = unfold(x, (kh, kw), st, _pair("p", p, 0), pad)
        N, Ho, Wo, Cc = cols.shape[:4]
        return transpose(red(reshape(cols, (N, Ho, Wo, Cc, kh * kw)), -1), (0, 3, 1, 2))
    return f


@pytest.mark.parametrize("fn", [max_pool2d, avg_pool2d])
@pytest.mark.parametrize("k, s, p", GEOMS)
def test_pool_fused_equals_composed_with_ties_nan_and_inf(fn, k, s, p):
    a = R.integers(-2, 3, size=(2, 3, 7, 8)).astype(float)   # many tied maxima
    a[0, 0, 1, 1] = np.nan
    a[1, 2, :3, :3] = -np.inf
    x = sm.tensor(a)
    comp = _composed(fn, k, s, p)
    y, pull = sm.vjp(lambda x: fn(x, k, s, p), x)
    yc, pullc = sm.vjp(comp, x)
    np.testing.assert_allclose(y.numpy(), yc.numpy(), rtol=1e-14, atol=0)
    u = sm.tensor(R.normal(size=y.shape))
    np.testing.assert_allclose(pull(u)[0].numpy(), pullc(u)[0].numpy(), rtol=1e-13, atol=1e-15)
    assert np.isnan(y.numpy()[0, 0]).any()   # NaN in, NaN out (the mean's adjoint does not read x)
    assert np.isnan(pull(u)[0].numpy()[0, 0]).any() == (fn is max_pool2d)


@pytest.mark.parametrize("fn", [max_pool2d, avg_pool2d])
@pytest.mark.parametrize("k, s, p", GEOMS[1:])
def test_pool_derivatives_second_order(fn, k, s, p):
    x = sm.tensor(R.normal(size=(2, 2, 5, 6)))
    check_grads(lambda x: fn(x, k, s, p), (x,), order=2)


@pytest.mark.parametrize("fn", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("k, s, p", GEOMS)
def test_pool_matches_torch(fn, k, s, p):
    torch = pytest.importorskip("torch")
    x = R.normal(size=(2, 3, 7, 8))
    xt = torch.tensor(x, requires_grad=True)
    yt = getattr(torch.nn.functional, fn)(xt, k, s, p)
    u = R.normal(size=tuple(yt.shape))
    (yt * torch.tensor(u)).sum().backward()
    ours = {"max_pool2d": max_pool2d, "avg_pool2d": avg_pool2d}[fn]
    y, pull = sm.vjp(lambda x: ours(x, k, s, p), sm.tensor(x))
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(pull(sm.tensor(u))[0].numpy(), xt.grad.numpy(), rtol=1e-13, atol=1e-14)


def test_pool_layers_and_1d_use_the_fused_path_and_train():
    from sciml.models import MaxPool1d, MaxPool2d
    x = sm.tensor(R.normal(size=(2, 3, 6, 6)))
    y = MaxPool2d(2)(x)
    assert y._node is None or y._node.prim.name == "pool2d"
    g = sm.grad(lambda x: (MaxPool1d(3, 2, 1)(x) ** 2).sum())(sm.tensor(R.normal(size=(2, 3, 9))))
    assert g.shape == (2, 3, 9) and np.isfinite(g.numpy()).all()


def test_pool_too_large_window_is_a_clear_error():
    with pytest.raises(ValueError, match=r"max_pool2d: the 3x3 kernel is larger than the padded image 2x2"):
        max_pool2d(sm.ones((1, 1, 2, 2)), 3)


# --- the dense epilogue ------------------------------------------------------------------------------------
ACTS = ["identity", "relu", "tanh", "sigmoid", "silu"]


def _stream(p, seed=5):
    from sciml.models import Dropout
    return Dropout(p, seed=seed).rng_state


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias, p", [(True, 0.0), (True, 0.3), (False, 0.3)])
def test_epilogue_fused_equals_composed_and_draws_dropouts_mask(act, bias, p):
    from sciml.models._dense_fused import epilogue, epilogue_composed
    from sciml.models.norm import _dropout_mask
    h = sm.tensor(R.normal(size=(6, 20)))
    h = sm.tensor(np.where(R.random((6, 20)) < 0.1, 0.0, h.numpy()))   # relu's kink: derivative 0 at 0
    b = sm.tensor(R.normal(size=20)) if bias else None
    ins = (h, b) if bias else (h,)
    ref_state, state = _stream(p), _stream(p)
    mask = _dropout_mask(ref_state, shape=h.shape, dtype=h.dtype, p=p) if p else None   # the unfused mask kernel
    y, pull = sm.vjp(lambda *a: epilogue(a[0], a[1] if bias else None, act, p, state if p else None), *ins)
    yc, pullc = sm.vjp(lambda *a: epilogue_composed(a[0], a[1] if bias else None, act, mask), *ins)
    np.testing.assert_allclose(y.numpy(), yc.numpy(), rtol=1e-14, atol=1e-15)
    np.testing.assert_array_equal(state.numpy(), ref_state.numpy())   # the counter advanced once, as Dropout's
    u = sm.tensor(R.normal(size=y.shape))
    for a, c in zip(pull(u), pullc(u)):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("act", ACTS)
def test_epilogue_derivatives_second_order(act):
    from sciml.models._dense_fused import epilogue
    h, b = sm.tensor(R.normal(size=(4, 5))), sm.tensor(R.normal(size=5))
    state = _stream(0.3)
    start = state.numpy().copy()

    def f(h, b):
        state._assign(start)   # the same mask on every evaluation (finite differences)
        return epilogue(h, b, act, 0.3, state)
    check_grads(f, (h, b), order=2)


def test_epilogue_nan_propagates():
    from sciml.models._dense_fused import epilogue
    a = R.normal(size=(3, 4))
    a[1, 2] = np.nan
    for act in ACTS:
        y, pull = sm.vjp(lambda h: epilogue(h, None, act), sm.tensor(a))
        assert np.isnan(y.numpy()[1, 2]) and np.isfinite(np.delete(y.numpy().ravel(), 6)).all()
        g = pull(sm.ones((3, 4)))[0].numpy()
        assert np.isnan(g[1, 2]) == (act != "identity")


def _mlp(cls, act_cls, p, seed=0):
    from sciml.models import Dropout, Linear
    return cls(Linear(4, 8, seed=seed), act_cls(), Dropout(p, seed=3), Linear(8, 8, seed=seed + 1), act_cls(),
               Linear(8, 2, seed=seed + 2), Dropout(p, seed=4))


def _plain_cls():
    from sciml.models import Sequential

    class Plain(Sequential):   # module by module: no fusion
        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
    return Plain


@pytest.mark.parametrize("name", ["ReLU", "Tanh", "Sigmoid", "SiLU", "GELU"])
def test_sequential_fusion_equals_module_by_module(name):
    import sciml.models as M
    act_cls = getattr(M, name)
    x = sm.tensor(R.normal(size=(5, 4)))
    fused, plain = _mlp(M.Sequential, act_cls, 0.25), _mlp(_plain_cls(), act_cls, 0.25)
    for _ in range(2):   # two steps: the streams advance alike
        v1, g1 = sm.value_and_grad(lambda p: (fused.apply(p, x) ** 2).sum())(fused.params())
        v2, g2 = sm.value_and_grad(lambda p: (plain.apply(p, x) ** 2).sum())(plain.params())
        np.testing.assert_allclose(float(v1), float(v2), rtol=1e-13)
        for k in ("0", "3", "5"):
            np.testing.assert_allclose(g1["layers"][k]["weight"].numpy(), g2["layers"][k]["weight"].numpy(),
                                       rtol=1e-12, atol=1e-14)
    sd1, sd2 = fused.state_dict(), plain.state_dict()
    for k in ("layers.2.rng_state", "layers.6.rng_state"):
        np.testing.assert_array_equal(sd1[k], sd2[k])
    fused.eval()
    plain.eval()
    np.testing.assert_allclose(fused(x).numpy(), plain(x).numpy(), rtol=1e-13)
    fused.train()
    loss = (fused(x) ** 2).sum()   # loss.backward() reaches the parameters through the fused path
    loss.backward()
    assert fused.layers[0].weight.grad is not None and fused.layers[5].bias.grad is not None


def test_sequential_fusion_matches_torch():
    torch = pytest.importorskip("torch")
    import sciml.models as M
    pairs = [(M.ReLU, torch.nn.ReLU), (M.Tanh, torch.nn.Tanh), (M.Sigmoid, torch.nn.Sigmoid), (M.SiLU, torch.nn.SiLU)]
    for ours, theirs in pairs:
        torch.manual_seed(0)
        tn = torch.nn.Sequential(torch.nn.Linear(4, 8), theirs(), torch.nn.Dropout(0.3), torch.nn.Linear(8, 2)).double()
        tn.eval()
        net = M.Sequential(M.Linear(4, 8), ours(), M.Dropout(0.3), M.Linear(8, 2))
        net.eval()
        for i in (0, 3):
            net.layers[i].weight._assign(tn[i].weight.detach().numpy().T.copy())
            net.layers[i].bias._assign(tn[i].bias.detach().numpy())
        x = R.normal(size=(5, 4))
        xt = torch.tensor(x, requires_grad=True)
        yt = tn(xt)
        (yt ** 2).sum().backward()
        np.testing.assert_allclose(net(sm.tensor(x)).numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-14)
        gx = sm.grad(lambda x: (net(x) ** 2).sum())(sm.tensor(x))
        np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-14)
        gp = sm.grad(lambda p: (net.apply(p, sm.tensor(x)) ** 2).sum())(net.params())
        np.testing.assert_allclose(gp["layers"]["0"]["weight"].numpy(), tn[0].weight.grad.numpy().T, rtol=1e-12,
                                   atol=1e-14)
        np.testing.assert_allclose(gp["layers"]["0"]["bias"].numpy(), tn[0].bias.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_sequential_fusion_under_jit_replays_fresh_masks_as_eager():
    import sciml.models as M
    x = sm.tensor(R.normal(size=(6, 4)))
    a, b = _mlp(M.Sequential, M.SiLU, 0.5), _mlp(M.Sequential, M.SiLU, 0.5)
    eager = sm.value_and_grad(lambda p: (a.apply(p, x) ** 2).mean())
    jitted = sm.jit(sm.value_and_grad(lambda p: (b.apply(p, x) ** 2).mean()), fallback="raise")
    vals = []
    for _ in range(3):
        (v1, g1), (v2, g2) = eager(a.params()), jitted(b.params())
        np.testing.assert_allclose(float(v2), float(v1), rtol=1e-13)
        np.testing.assert_allclose(g2["layers"]["0"]["weight"].numpy(), g1["layers"]["0"]["weight"].numpy(),
                                   rtol=1e-12)
        vals.append(float(v1))
    assert len(set(vals)) == 3 and jitted.stats["replays"] == 2


# --- conv -> ReLU and BatchNorm -> ReLU epilogues ---------------------------------------------------------
def _cnn(cls):
    import sciml.models as M
    return cls(M.Conv2d(1, 4, 3, padding=1, seed=0), M.ReLU(), M.MaxPool2d(2), M.Conv2d(4, 6, 3, padding=1, seed=1),
               M.BatchNorm2d(6), M.ReLU(), M.MaxPool2d(2), M.Dropout(0.25, seed=2), M.Flatten(),
               M.Linear(24, 8, seed=3), M.ReLU(), M.Linear(8, 3, seed=4))


def test_sequential_cnn_fusion_equals_module_by_module():
    import sciml.models as M
    from sciml.tree_util import tree_leaves
    a, b = _cnn(M.Sequential), _cnn(_plain_cls())
    x = sm.tensor(R.normal(size=(5, 1, 8, 8)))
    y = R.integers(0, 3, 5).astype(np.int32)
    for _ in range(2):
        v1, g1 = sm.value_and_grad(lambda p: M.cross_entropy(a.apply(p, x), y))(a.params())
        v2, g2 = sm.value_and_grad(lambda p: M.cross_entropy(b.apply(p, x), y))(b.params())
        np.testing.assert_allclose(float(v1), float(v2), rtol=1e-13)
        for u, w in zip(tree_leaves(g1), tree_leaves(g2)):
            np.testing.assert_allclose(u.numpy(), w.numpy(), rtol=1e-11, atol=1e-14)
    for k, v in a.state_dict().items():
        np.testing.assert_allclose(v, b.state_dict()[k], rtol=1e-13, atol=1e-15)
    a.eval()
    b.eval()
    np.testing.assert_allclose(a(x).numpy(), b(x).numpy(), rtol=1e-13)


def test_conv_and_batch_norm_relu_epilogues_second_order():
    from sciml.models._conv_fused import conv_epilogue
    from sciml.models._norm_fused import batch_norm_train
    y, bb = sm.tensor(R.normal(size=(2 * 3 * 2, 4))), sm.tensor(R.normal(size=4))
    check_grads(lambda y, b: conv_epilogue(y, b, (2, 3, 2), relu=True), (y, bb), order=2)
    x, w, b = sm.tensor(R.normal(size=(4, 3, 2, 2))), sm.tensor(R.normal(size=3)), sm.tensor(R.normal(size=3))
    check_grads(lambda x, w, b: batch_norm_train(x, w, b, relu=True), (x, w, b), order=2)


def test_conv_and_batch_norm_relu_nan_propagates():
    from sciml.models._conv_fused import conv_epilogue
    from sciml.models._norm_fused import batch_norm_train
    a = R.normal(size=(2 * 2 * 2, 3))
    a[1, 1] = np.nan
    out, pull = sm.vjp(lambda y: conv_epilogue(y, sm.zeros(3), (2, 2, 2), relu=True), sm.tensor(a))
    assert np.isnan(out.numpy()[0, 1, 0, 1]) and np.isnan(pull(sm.ones(out.shape))[0].numpy()[1, 1])
    xa = R.normal(size=(3, 2, 2))
    xa[0, 1, 1] = np.nan
    out = batch_norm_train(sm.tensor(xa), sm.ones(2), sm.zeros(2), relu=True).numpy()
    assert np.isnan(out[:, 1]).all() and not np.isnan(out[:, 0]).any()


def test_cnn_fusion_matches_torch_train_mode():
    torch = pytest.importorskip("torch")
    import sciml.models as M
    torch.manual_seed(0)
    nn = torch.nn
    tn = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 6, 3, padding=1),
                       nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(24, 3)).double()
    net = M.Sequential(M.Conv2d(1, 4, 3, padding=1), M.ReLU(), M.MaxPool2d(2), M.Conv2d(4, 6, 3, padding=1),
                       M.BatchNorm2d(6), M.ReLU(), M.MaxPool2d(2), M.Flatten(), M.Linear(24, 3))
    for i in (0, 3):
        net.layers[i].weight._assign(tn[i].weight.detach().numpy())
        net.layers[i].bias._assign(tn[i].bias.detach().numpy())
    net.layers[8].weight._assign(tn[8].weight.detach().numpy().T.copy())
    net.layers[8].bias._assign(tn[8].bias.detach().numpy())
    x = R.normal(size=(5, 1, 8, 8))
    lab = R.integers(0, 3, 5)
    xt = torch.tensor(x, requires_grad=True)
    nn.functional.cross_entropy(tn(xt), torch.tensor(lab)).backward()
    gp, gx = sm.grad(lambda p, x: M.cross_entropy(net.apply(p, x), lab.astype(np.int32)), argnums=(0, 1))(
        net.params(), sm.tensor(x))
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(gp["layers"]["0"]["weight"].numpy(), tn[0].weight.grad.numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(gp["layers"]["4"]["weight"].numpy(), tn[4].weight.grad.numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(net.layers[4].running_var.numpy(), tn[4].running_var.numpy(), rtol=1e-12)


# --- BatchNorm in eval mode: one kernel -------------------------------------------------------------------
def _bn_eval_layer(cls=None, affine=True):
    from sciml.models import BatchNorm2d
    bn = (cls or BatchNorm2d)(3, affine=affine)
    bn.running_mean._assign(R.normal(size=3))
    bn.running_var._assign(R.random(3) + 0.5)
    if affine:
        bn.weight._assign(R.normal(size=3))
        bn.bias._assign(R.normal(size=3))
    bn.eval()
    return bn


@pytest.mark.parametrize("affine, relu", [(True, False), (True, True), (False, False)])
def test_batch_norm_eval_fused_equals_composed_and_second_order(affine, relu):
    from sciml.models._norm_fused import batch_norm_eval, batch_norm_eval_composed
    bn = _bn_eval_layer(affine=affine)
    x = sm.tensor(R.normal(size=(4, 3, 2, 5)))
    rm, rv = bn.running_mean, bn.running_var
    ins = (x, bn.weight.detach(), bn.bias.detach()) if affine else (x,)

    def fused(*a):
        return batch_norm_eval(a[0], *(a[1:] if affine else (None, None)), rm, rv, 1e-5, relu)

    def comp(*a):
        return batch_norm_eval_composed(a[0], *(a[1:] if affine else (None, None)), rm, rv, 1e-5, relu)
    np.testing.assert_allclose(fused(*ins).numpy(), comp(*ins).numpy(), rtol=1e-15, atol=1e-15)
    check_grads(fused, ins, order=2)


def test_batch_norm_eval_matches_torch_and_sequential_relu():
    torch = pytest.importorskip("torch")
    from sciml.models import BatchNorm1d, ReLU, Sequential
    for cls, shape, tcls in ((None, (4, 3, 2, 5), torch.nn.BatchNorm2d), (BatchNorm1d, (6, 3), torch.nn.BatchNorm1d)):
        bn = _bn_eval_layer(cls)
        tb = tcls(3).double()
        tb.load_state_dict({k: torch.tensor(v) for k, v in bn.state_dict().items()} |
                           {"num_batches_tracked": torch.tensor(0)})
        tb.eval()
        x = R.normal(size=shape)
        xt = torch.tensor(x, requires_grad=True)
        yt = torch.relu(tb(xt))
        (yt ** 2).sum().backward()
        seq = Sequential(bn, ReLU())
        np.testing.assert_allclose(seq(sm.tensor(x)).numpy(), yt.detach().numpy(), rtol=1e-13, atol=1e-15)
        gx = sm.grad(lambda x: (seq(x) ** 2).sum())(sm.tensor(x))
        np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-14)


# --- fused squared error (for sciml.models.losses.mse) -----------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mse_fused_equals_composed_torch_and_second_order(reduction):
    from sciml.models._loss_fused import fusable, mse, mse_composed
    p, t = sm.tensor(R.normal(size=(300, 2))), sm.tensor(R.normal(size=(300, 2)))
    assert fusable(p, t, reduction) and not fusable(p, t, "none") and not fusable(p, t[:3], reduction)
    np.testing.assert_allclose(float(mse(p, t, reduction)), float(mse_composed(p, t, reduction)), rtol=1e-13)
    g1 = sm.grad(lambda p, t: mse(p, t, reduction), argnums=(0, 1))(p, t)
    g2 = sm.grad(lambda p, t: mse_composed(p, t, reduction), argnums=(0, 1))(p, t)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-14, atol=1e-16)
    check_grads(lambda p, t: mse(p, t, reduction), (sm.tensor(R.normal(size=(4, 3))), sm.tensor(R.normal(size=(4, 3)))),
                order=2)
    a = p.numpy().copy()
    a[7, 1] = np.nan
    assert np.isnan(float(mse(sm.tensor(a), t, reduction)))
    torch = pytest.importorskip("torch")
    pt = torch.tensor(p.numpy(), requires_grad=True)
    lt = torch.nn.functional.mse_loss(pt, torch.tensor(t.numpy()), reduction=reduction)
    lt.backward()
    np.testing.assert_allclose(float(mse(p, t, reduction)), lt.item(), rtol=1e-13)
    np.testing.assert_allclose(g1[0].numpy(), pt.grad.numpy(), rtol=1e-13, atol=1e-16)


def test_fused_cnn_kernels_on_vulkan():
    from tests.test_vulkan import _vulkan_available
    if not _vulkan_available():
        if os.environ.get("SCIML_REQUIRE_VULKAN"):   # set by .ci/run: CI must really run this pass
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    env = dict(os.environ)
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "vulkan_nn_cnn_check.py")], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan nn cnn" in r.stdout, (r.stdout + r.stderr)[-4000:]
