"""The 16-byte vector forms of the fused dense epilogue (sciml/kernels/conv.py, _vec.py): bias+ReLU /
bias+identity forward and adjoint on CPU (serial and parallel forms, float32 x4 and float64 x2), the
scalar fallback for misaligned buffers, and derivatives through the vector path."""
import numpy as np
import pytest

import sciml as sm
from sciml.autodiff.ops.conv import bias_act
from sciml.kernels import conv as K
from sciml.testing import check_grads

R = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("act", ["identity", "relu"])
@pytest.mark.parametrize("rows,cols", [(5, 32), (7, 20), (530, 512)])  # serial, serial, parallel (> 256K)
def test_bias_act_vector_kernels_match_numpy(act, dtype, rows, cols):
    npd = np.dtype(dtype)
    h, b = R.normal(size=rows * cols).astype(npd), R.normal(size=cols).astype(npd)
    g = R.normal(size=rows * cols).astype(npd)
    z = h.reshape(rows, cols) + b
    y_want = np.maximum(z, 0) if act == "relu" else z
    y = np.empty_like(h)
    K.bias_act(act, h, b, y, rows, cols, dtype)
    np.testing.assert_array_equal(y.reshape(rows, cols), y_want)
    gz_want = g.reshape(rows, cols) * (y_want > 0) if act == "relu" else g.reshape(rows, cols)
    tol = dict(rtol=1e-5, atol=1e-4) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for with_gz, with_gb in ((True, True), (True, False), (False, True)):
        if act == "relu" and not with_gz:
            continue  # the primitive always asks relu's adjoint for gz
        gz = np.full_like(h, np.nan) if with_gz else None
        gb = np.full(cols, np.nan, npd) if with_gb else None
        K.bias_act_vjp(act, g, y, gz, gb, rows, cols, dtype)
        if with_gz:
            np.testing.assert_array_equal(gz.reshape(rows, cols), gz_want)
        if with_gb:
            np.testing.assert_allclose(gb, gz_want.astype(np.float64).sum(0), **tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("act", ["tanh", "sigmoid"])
@pytest.mark.parametrize("rows,cols", [(5, 32), (530, 512)])
def test_tanh_sigmoid_adjoint_vector_kernels(act, dtype, rows, cols):
    npd = np.dtype(dtype)
    y = np.tanh(R.normal(size=rows * cols)).astype(npd) if act == "tanh" else \
        (1 / (1 + np.exp(-R.normal(size=rows * cols)))).astype(npd)
    g = R.normal(size=rows * cols).astype(npd)
    d = 1 - y * y if act == "tanh" else y * (1 - y)
    want = (g * d).reshape(rows, cols)
    gz, gb = np.empty_like(g), np.empty(cols, npd)
    K.bias_act_vjp(act, g, y, gz, gb, rows, cols, dtype)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gz.reshape(rows, cols), want, **tol)
    np.testing.assert_allclose(gb, want.astype(np.float64).sum(0), **(dict(rtol=1e-4, atol=1e-4) if dtype == "float32"
                                                                     else tol))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_misaligned_buffers_take_the_scalar_kernel(dtype):
    rows, cols = 6, 32
    npd = np.dtype(dtype)
    hb = R.normal(size=rows * cols + 1).astype(npd)
    h = hb[1:]                                   # one element off: not 16-byte aligned
    assert h.ctypes.data % 16
    b = R.normal(size=cols).astype(npd)
    y = np.empty(rows * cols + 1, npd)[1:]
    K.bias_act("relu", h, b, y, rows, cols, dtype)
    np.testing.assert_array_equal(y.reshape(rows, cols), np.maximum(h.reshape(rows, cols) + b, 0))
    gb = np.empty(cols + 1, npd)[1:]
    K.bias_act_vjp("relu", h, y, y.copy(), gb, rows, cols, dtype)
    np.testing.assert_allclose(gb, (h.reshape(rows, cols) * (y.reshape(rows, cols) > 0)).sum(0), rtol=1e-5)


def test_derivatives_through_the_vector_path():
    h, b = sm.tensor(R.normal(size=(6, 16))), sm.tensor(R.normal(size=16))
    check_grads(lambda h, b: bias_act(h, b, "relu"), (h, b), order=1)
    check_grads(lambda h, b: bias_act(h, b, "identity"), (h, b), order=2)
    check_grads(lambda h, b: bias_act(h, b, "tanh"), (h, b), order=2)
    check_grads(lambda h, b: bias_act(h, b, "sigmoid"), (h, b), order=2)
    w = sm.tensor(R.normal(size=(6, 16)))
    gf = sm.grad(lambda h, b: (bias_act(h, b, "relu") * w).sum(), argnums=(0, 1))(h, b)
    gc = sm.grad(lambda h, b: (sm.relu(h + b) * w).sum(), argnums=(0, 1))(h, b)
    for a, c in zip(gf, gc):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geom", [(2, 3, 7, 6, 3, 2, 1, 1, 1, 0), (3, 2, 9, 8, 3, 3, 2, 3, 1, 2),
                                  (1, 4, 5, 5, 5, 5, 1, 1, 2, 2), (2, 1, 6, 4, 2, 2, 2, 2, 0, 0)])
def test_cpu_unfold_fold_row_kernels_equal_per_element_kernels(geom, dtype):
    """The CPU unfold/fold (a window / an image row per iteration) against the per-element forms
    that devices run, over strides, paddings and rectangular kernels."""
    from sciml import backend
    N, Cc, H, W, kh, kw, sh, sw, ph, pw = geom
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    meta = backend.meta((N, Cc, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo))
    npd = np.dtype(dtype)
    x = R.normal(size=N * Cc * H * W).astype(npd)
    n_out = N * Ho * Wo * Cc * kh * kw
    a, b = np.empty(n_out, npd), np.empty(n_out, npd)
    K.unfold(x, a, meta, n_out, -7.0, dtype)
    K._build_unfold(dtype, True)(x, b, meta, n_out, -7.0)
    np.testing.assert_array_equal(a, b)
    cols = R.normal(size=n_out).astype(npd)
    fa, fb = np.empty(x.size, npd), np.empty(x.size, npd)
    K.fold(cols, fa, meta, x.size, dtype)
    K._build_fold(dtype, True)(cols, fb, meta, x.size)
    np.testing.assert_array_equal(fa, fb)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mlp_training_vector_kernels_match_scalar_kernels(dtype):
    """A few Adam steps of a ReLU MLP: the CPU vector kernels (epilogues, grouped optimizer launch)
    against the scalar kernels (what devices run). float64: the parameters agree to 1e-10. float32:
    the losses agree; parameters with near-zero gradients may not (Adam divides m by sqrt(v), so
    last-bit differences of a ~1e-9 gradient, e.g. from another column-sum order, change its step)."""
    from sciml.kernels import optim as KO
    from sciml.models import MLP, cross_entropy
    from sciml.optim import Adam
    rng = np.random.default_rng(7)
    x = sm.tensor(rng.normal(size=(40, 64)), dtype)
    y = rng.integers(0, 10, 40).astype(np.int32)
    params, losses = [], []
    for on in (True, False):
        K.VECTOR = KO.VECTOR = on
        try:
            net = MLP([64, 128, 96, 10], activation=sm.relu, seed=3, dtype=dtype)
            opt = Adam(net.parameters(), lr=1e-2, weight_decay=1e-3)
            vg = sm.value_and_grad(lambda p: cross_entropy(net.apply(p, x), y))
            ls = []
            for _ in range(4):
                loss, g = vg(net.params())
                ls.append(float(loss))
                opt.step(g)
            losses.append(ls)
            params.append([p.numpy() for p in net.parameters()])
        finally:
            K.VECTOR = KO.VECTOR = True
    if dtype == "float64":
        for a, b in zip(*params):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4 if dtype == "float32" else 1e-12)
