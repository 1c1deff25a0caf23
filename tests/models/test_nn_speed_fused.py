"""Fused kernels of the conv-net and MLP training steps (issue 16, item 6): 2-D max / average pooling as one
kernel forward and one backward (sciml/kernels/pool.py).

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
GEOMS = [(2, None, 0), (3, 2, 1), (3, 1, 1), ((2, 3), (1, 2), (1, 1))]   # tiling, padded, overlapping, mixed


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
@pytest.mark.parametrize("k, s, p", GEOMS[:3])
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
