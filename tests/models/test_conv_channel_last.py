"""conv2d's channel-last im2col (models/_conv_fused.py unfold_cl / fold_cl, kernels/conv_cl.py): values against a
numpy convolution and the taps-innermost path, fold == the adjoint of unfold, derivatives against finite differences
to second order in float64, the vector kernels == the scalar ones, NaN in -> NaN out. (The Vulkan pass runs the
scalar kernels: vulkan_conv_pool_check.py.)"""
import numpy as np
import pytest

import sciml as sm
from sciml.models import _conv_fused as F
from sciml.models import conv2d
from sciml.testing import check_grads

R = np.random.default_rng(3)


def _conv_ref(x, w, b, stride, pad):
    N, Cc, H, W = x.shape
    O, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    Ho, Wo = (H + 2 * pad[0] - kh) // stride[0] + 1, (W + 2 * pad[1] - kw) // stride[1] + 1
    y = np.zeros((N, O, Ho, Wo))
    for i in range(Ho):
        for j in range(Wo):
            patch = xp[:, :, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw]
            y[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return y + b[None, :, None, None]


@pytest.fixture(params=["vector", "scalar"])
def path(request, monkeypatch):
    from sciml.kernels import conv_cl
    if request.param == "scalar":
        monkeypatch.setattr(conv_cl, "VECTOR", False)
    return request.param


@pytest.mark.parametrize("stride,pad", [((1, 1), (1, 1)), ((2, 1), (0, 2))])
def test_conv2d_channel_last_matches_numpy_and_taps_innermost(path, stride, pad):
    x, w, b = R.normal(size=(2, 8, 6, 7)), R.normal(size=(5, 8, 3, 2)), R.normal(size=5)
    assert F.channel_last_ok(sm.tensor(x), 1, (1, 1))
    y = conv2d(sm.tensor(x), sm.tensor(w), sm.tensor(b), stride, pad)
    np.testing.assert_allclose(y.numpy(), _conv_ref(x, w, b, stride, pad), rtol=1e-12, atol=1e-12)
    F.CHANNEL_LAST = False
    try:
        y0 = conv2d(sm.tensor(x), sm.tensor(w), sm.tensor(b), stride, pad)
    finally:
        F.CHANNEL_LAST = True
    np.testing.assert_allclose(y.numpy(), y0.numpy(), rtol=1e-12, atol=1e-12)


def test_fold_is_the_adjoint_of_unfold(path):
    geom = (3, 3, 2, 1, 1, 0)
    x = sm.tensor(R.normal(size=(2, 4, 5, 6)))
    u = F.unfold_cl(x, geom)
    c = sm.tensor(R.normal(size=u.shape))
    lhs = float((u * c).sum())
    rhs = float((x * F.fold_cl(c, geom, x.shape)).sum())
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs))


def test_conv2d_channel_last_derivatives(path):
    x, w, b = (sm.tensor(R.normal(size=s)) for s in ((2, 4, 4, 5), (3, 4, 3, 3), (3,)))
    check_grads(lambda x, w, b: conv2d(x, w, b, 1, 1), (x, w, b), order=2)


def test_vector_kernels_equal_scalar():
    from sciml import backend
    from sciml.kernels import conv_cl as KC
    N, Cc, H, W, geom = 3, 16, 8, 8, (3, 3, 1, 1, 1, 1)
    x = backend.empty(N * Cc * H * W, "float32")
    x[:] = R.normal(size=x.size)
    x[11] = np.nan
    n = N * H * W * 9 * Cc
    outs = []
    for vec in (True, False):
        KC.VECTOR = vec
        try:
            assert (KC._lanes((x,), Cc, "float32") is not None) == vec
            u, f = backend.empty(n, "float32"), backend.empty(x.size, "float32")
            KC.unfold(x, u, N, Cc, H, W, H, W, geom, "float32")
            KC.fold(u, f, N, Cc, H, W, H, W, geom, "float32")
        finally:
            KC.VECTOR = True
        outs.append((u.copy(), f.copy()))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-6, atol=1e-6)
    assert np.isnan(outs[0][0]).sum() == 9 and np.isnan(outs[0][1]).sum() == 1   # NaN in, NaN out (9 taps, 1 pixel)


def test_untaken_for_groups_dilation_and_odd_channels():
    x = sm.tensor(R.normal(size=(1, 6, 5, 5)))
    assert not F.channel_last_ok(x, 1, (1, 1))          # 6 channels: no 16-byte lanes
    x = sm.tensor(R.normal(size=(1, 8, 5, 5)))
    assert not F.channel_last_ok(x, 2, (1, 1)) and not F.channel_last_ok(x, 1, (2, 1))
