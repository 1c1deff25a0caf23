"""Kernels of the bench_nn MLP / CNN steps (issue 16, item 6): the float32 host-vector dense epilogue
(kernels/nn_dropout_vec.py: the Threefry mask on u32 lanes) against the scalar kernel and the plain-Python stream."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import nn_dropout as K
from sciml.kernels import nn_dropout_vec as KV

R = np.random.default_rng(1)


def _buf(a):
    b = backend.empty(max(a.size, 1), "float32")
    b[:a.size] = a.ravel()
    return b


def _run(vec, act, rows, cols, bias, p, save_d, offset=0):
    """(y, m, d, state, gz, gb) of the forward and adjoint epilogue kernels, vector path on or off."""
    KV.VECTOR = vec
    try:
        n = rows * cols
        h = _buf(np.asarray(HX[:n + offset]))[offset:offset + n]
        b = _buf(np.asarray(BX[:cols])) if bias else None
        y, m, d = (_buf(np.zeros(n, np.float32)) for _ in range(3))
        st = _buf(np.array(K.state_words(987654321), np.float32))
        st[4] = 65535   # the counter carries into the high word after this draw
        K.epilogue(act, h, b, y, m, st if p else None, rows, cols, p, "float32", "float32", d if save_d else None)
        g = _buf(np.asarray(GX[:n]))
        gz, gb = _buf(np.zeros(n, np.float32)), _buf(np.zeros(cols, np.float32))
        if save_d:
            K.epilogue_vjp(act, g, h, b, m if p else None, gz, gb if bias else None, rows, cols, "float32", d)
        return [a.copy() for a in (y[:n], m[:n], d[:n], st[:6], gz[:n], gb[:cols])]
    finally:
        KV.VECTOR = True


HX = R.standard_normal(4096).astype(np.float32) * 3
BX = R.standard_normal(256).astype(np.float32)
GX = R.standard_normal(4096).astype(np.float32)
HX[5] = np.nan


# (each case compiles a vector and a scalar kernel: a few seconds each on a loaded machine)
@pytest.mark.parametrize("act, rows, cols, bias, p", [("silu", 16, 128, True, 0.1), ("identity", 8, 64, False, 0.25),
                                                      ("tanh", 32, 32, True, 0.0), ("relu", 3, 64, True, 0.5),
                                                      ("sigmoid", 2, 96, True, 0.3)])
def test_vector_epilogue_equals_scalar_kernel(act, rows, cols, bias, p):
    save_d = act in K.SAVE_D
    v, s = _run(True, act, rows, cols, bias, p, save_d), _run(False, act, rows, cols, bias, p, save_d)
    np.testing.assert_array_equal(v[1], s[1])   # the mask: the same bits
    np.testing.assert_array_equal(v[3], s[3])   # the counter advanced once (into the high word when drawing)
    if p:
        np.testing.assert_array_equal(v[3][4:], [0, 1])
    for a, c in zip(v[:1] + v[2:3] + v[4:], s[:1] + s[2:3] + s[4:]):
        np.testing.assert_allclose(a, c, rtol=2e-6, atol=2e-6)
    assert np.isnan(v[0][5]) == np.isnan(s[0][5]) and np.isnan(s[0][5]) == (not p or s[1][5] != 0)


def test_vector_epilogue_mask_is_the_reference_stream_and_rate():
    from tests.models.test_nn_fused import dropout_mask_ref
    from sciml.models import Dropout
    d = Dropout(0.3, seed=12345678901)
    x = sm.tensor(np.ones((6, 64)), "float32")   # 384 entries: the vector path (n % 64 == 0)
    m = d(x).numpy().astype(float)
    np.testing.assert_allclose(m.ravel(), dropout_mask_ref(12345678901, 0, 384, 0.3), rtol=1e-6)
    big = Dropout(0.1, seed=0)(sm.ones((256, 128), "float32")).numpy()
    assert abs((big == 0).mean() - 0.1) < 0.006


def test_misaligned_buffers_take_the_scalar_kernel():
    v = _run(True, "silu", 4, 64, True, 0.3, True, offset=1)
    s = _run(False, "silu", 4, 64, True, 0.3, True, offset=1)
    np.testing.assert_array_equal(v[1], s[1])


# --- the fused squared error, as losses.mse now calls it ---------------------------------------------------
def test_mse_loss_is_one_kernel_each_way_and_equals_composed():
    from sciml.models import mse
    from sciml.models._loss_fused import mse_composed
    from tests.launch_count import counting
    p, t = sm.tensor(R.normal(size=(256, 1))), sm.tensor(R.normal(size=(256, 1)))
    p.requires_grad_()
    with counting() as c:
        loss = mse(p, t)
        loss.backward()
    assert c["launch"] <= 3, c.names   # forward, backward (and at most one gradient fill)
    np.testing.assert_allclose(float(loss), float(mse_composed(p, t)), rtol=1e-14)
    np.testing.assert_allclose(p.grad.numpy(), 2 * (p.numpy() - t.numpy()) / 256, rtol=1e-14)


def test_mse_parallel_reduction_is_deterministic_and_accurate():
    from sciml.models import mse
    a, b = R.normal(size=(300, 700)), R.normal(size=(300, 700))   # 210K entries: the parallel partial sums
    p, t = sm.tensor(a), sm.tensor(b)
    vals = {float(mse(p, t)) for _ in range(3)}
    assert len(vals) == 1
    np.testing.assert_allclose(vals.pop(), np.mean((a - b) ** 2), rtol=1e-13)
    g = sm.grad(lambda p: mse(p, t, "sum"))(p)
    np.testing.assert_allclose(g.numpy(), 2 * (a - b), rtol=1e-14)
    a32 = a.astype(np.float32)
    np.testing.assert_allclose(float(mse(sm.tensor(a32, "float32"), sm.tensor(b, "float32"))),
                               np.mean((a32.astype(float) - b.astype(np.float32)) ** 2), rtol=2e-6)


def test_mse_under_vmap_jit_and_second_order():
    from sciml.models import mse
    from sciml.testing import check_grads
    p, t = sm.tensor(R.normal(size=(5, 4, 3))), sm.tensor(R.normal(size=(5, 4, 3)))
    per = sm.vmap(lambda p, t: mse(p, t))(p, t)
    np.testing.assert_allclose(per.numpy(), ((p.numpy() - t.numpy()) ** 2).mean(axis=(1, 2)), rtol=1e-14)
    gper = sm.vmap(sm.grad(lambda p, t: mse(p, t, "sum")))(p, t)
    np.testing.assert_allclose(gper.numpy(), 2 * (p.numpy() - t.numpy()), rtol=1e-14)
    f = sm.jit(sm.value_and_grad(lambda p: mse(p, t)), fallback="raise")
    for k in range(3):
        q = sm.tensor(R.normal(size=(5, 4, 3)))
        v, g = f(q)
        np.testing.assert_allclose(float(v), ((q.numpy() - t.numpy()) ** 2).mean(), rtol=1e-14)
        np.testing.assert_allclose(g.numpy(), 2 * (q.numpy() - t.numpy()) / 60, rtol=1e-14)
    check_grads(lambda p, t: mse(p, t), (sm.tensor(R.normal(size=(3, 2))), sm.tensor(R.normal(size=(3, 2)))),
                order=2)
    h = sm.hessian(lambda p: mse(p, t[0], "sum"))(p[0])
    np.testing.assert_allclose(h.numpy().reshape(12, 12), 2 * np.eye(12), atol=1e-14)


# --- host unfold / fold with the geometry compiled in (kernels/conv_static.py) ----------------------------
@pytest.mark.parametrize("geom", [(3, 16, 4, 4, 3, 3, 1, 1, 1, 1), (2, 3, 9, 8, 3, 2, 2, 3, 1, 0),
                                  (1, 4, 5, 5, 5, 5, 1, 1, 2, 2)])
def test_static_unfold_fold_equal_runtime_geometry_kernels(geom):
    from sciml.kernels import conv as KC
    N, Cc, H, W, kh, kw, sh, sw, ph, pw = geom
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    meta = backend.meta((N, Cc, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo))
    x = R.normal(size=N * Cc * H * W)
    x[3] = np.nan
    n_out = N * Ho * Wo * Cc * kh * kw
    cols = R.normal(size=n_out)
    got = []
    for static in (True, False):
        KC.STATIC = static
        try:
            u, f = np.empty(n_out), np.empty(x.size)
            KC.unfold(x, u, meta, n_out, -7.0, "float64")
            KC.fold(cols, f, meta, x.size, "float64")
            got.append((u, f))
        finally:
            KC.STATIC = True
    np.testing.assert_array_equal(got[0][0], got[1][0])   # the same taps (NaN where x is NaN), pad value -7
    np.testing.assert_array_equal(got[0][1], got[1][1])   # the same sums in the same order


def test_float32_vector_epilogue_under_jit_replays_fresh_masks_as_eager():
    import sciml.models as M

    def net():
        return M.Sequential(M.Linear(8, 64, seed=0), M.SiLU(), M.Dropout(0.2, seed=3), M.Linear(64, 64, seed=1),
                            M.SiLU(), M.Dropout(0.2, seed=4), M.Linear(64, 1, seed=2))
    a, b = net(), net()
    x = sm.tensor(R.normal(size=(32, 8)), "float32")   # 32 x 64 activations: the vector path
    eager = sm.value_and_grad(lambda p: (a.apply(p, x) ** 2).mean())
    jitted = sm.jit(sm.value_and_grad(lambda p: (b.apply(p, x) ** 2).mean()), fallback="raise")
    pa = sm.tree_map(lambda t: t.astype("float32"), a.params())
    pb = sm.tree_map(lambda t: t.astype("float32"), b.params())
    vals = []
    for _ in range(3):
        (v1, g1), (v2, g2) = eager(pa), jitted(pb)
        np.testing.assert_allclose(float(v2), float(v1), rtol=1e-6)
        np.testing.assert_allclose(g2["layers"]["0"]["weight"].numpy(), g1["layers"]["0"]["weight"].numpy(),
                                   rtol=1e-5, atol=1e-7)
        vals.append(float(v1))
    assert len(set(vals)) == 3 and jitted.stats["replays"] == 2
