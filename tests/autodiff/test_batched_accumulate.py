"""Batched matmul tangents T_A B + A T_B without a separate sum pass (autodiff/ops/linalg.py ``_mm_bjvp``):
the stacked GEMM of T_A B accumulates (BLAS beta = 1) into the output of A T_B, either a batched GEMM
(``matmul2`` with a reshaped second pair) or a per-block transpose (``matmul_tadd``). The same numbers as
the sum of the two products, bit for bit, and the new forms' derivatives against finite differences."""
import numpy as np
import pytest

import sciml as sm
from sciml.testing import flat_mlp_loss
from sciml.autodiff.ops import linalg as OL
from sciml.testing import check_grads


@pytest.fixture(autouse=True)
def _f64():
    sm.init(arch="cpu", dtype="float64")


def _count(monkeypatch):
    used = []
    for name in ("_mm2", "_tmm"):
        prim = getattr(OL, name)
        monkeypatch.setattr(OL, name, lambda *a, _p=prim, **k: used.append(_p.name) or _p(*a, **k))
    return used


def _t(rng, shape, dtype="float64"):
    return sm.tensor(rng.standard_normal(shape).astype(dtype), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("n", [3, 40])  # tb with n <= k: the transpose path (matmul_tadd); else matmul2
def test_fused_tangent_sum_equals_the_sum_bit_for_bit(dtype, tb, n, monkeypatch):
    used = _count(monkeypatch)
    rng = np.random.default_rng(0)
    B, m, k = 29, 24, 16
    a, b = _t(rng, (m, k), dtype), _t(rng, (n, k) if tb else (k, n), dtype)
    ta_, tb_ = _t(rng, (B, m, k), dtype), _t(rng, (B, n, k) if tb else (B, k, n), dtype)
    got = OL._mm_bjvp((ta_, tb_), a, b, None, False, tb)
    assert used == (["matmul_tadd"] if tb and n <= k else ["matmul2"])
    want = (OL._bmm_left(ta_, b, False, tb) + OL._bmm_right(a, tb_, False, tb)).numpy()
    np.testing.assert_array_equal(got.numpy(), want)
    ref = np.einsum("bmk,kn->bmn", ta_.numpy().astype(np.float64), b.numpy().T if tb else b.numpy()) + \
        np.einsum("mk,bkn->bmn", a.numpy().astype(np.float64), np.swapaxes(tb_.numpy(), 1, 2) if tb else tb_.numpy())
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-5)


def test_matmul_tadd_derivatives_against_finite_differences():
    rng = np.random.default_rng(1)
    r, c, d = _t(rng, (3, 4, 5)), _t(rng, (15, 2)), _t(rng, (4, 2))  # out (3, 5, 4) = r^T + c @ d^T
    f = lambda r, c, d: OL._tmm(r, c, d, tc=False, td=True)  # noqa: E731
    want = np.swapaxes(r.numpy(), 1, 2) + (c.numpy() @ d.numpy().T).reshape(3, 5, 4)
    np.testing.assert_allclose(f(r, c, d).numpy(), want, rtol=1e-13)
    check_grads(lambda r, c, d: f(r, c, d) * f(r, c, d), (r, c, d), order=2)
    # batched tangents (vmap of its JVP) against per-tangent JVPs
    ts = [_t(rng, (6,) + x.shape) for x in (r, c, d)]
    bj = OL._tmm_bjvp(tuple(ts), r, c, d, f(r, c, d), False, True).numpy()
    for i in range(6):
        _, one = sm.jvp(f, (r, c, d), tuple(sm.tensor(t.numpy()[i]) for t in ts))
        np.testing.assert_allclose(bj[i], one.numpy(), rtol=1e-12, atol=1e-12)


def test_matmul2_with_a_reshaped_second_pair_against_finite_differences():
    rng = np.random.default_rng(2)
    a, b, c, d = _t(rng, (3, 5, 2)), _t(rng, (3, 2, 4)), _t(rng, (15, 6)), _t(rng, (6, 4))
    f = lambda a, b, c, d: OL._mm2(a, b, c, d, ta=False, tb=False, tc=False, td=False)  # noqa: E731
    np.testing.assert_allclose(f(a, b, c, d).numpy(), a.numpy() @ b.numpy() + (c.numpy() @ d.numpy()).reshape(3, 5, 4),
                               rtol=1e-13)
    check_grads(lambda *x: f(*x) * f(*x), (a, b, c, d), order=2)


@pytest.mark.parametrize("sizes", [(2, 4, 6, 2), (1, 5, 5, 1)])  # a hidden fan-in <= fan-out: the transpose path
def test_mlp_hessian_through_both_fused_forms_against_finite_differences(sizes, monkeypatch):
    used = _count(monkeypatch)
    rng = np.random.default_rng(3)
    npar = sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:]))
    x, y = _t(rng, (7, sizes[0])), _t(rng, (7, sizes[-1]))

    f = flat_mlp_loss(x, y, sizes)
    th = rng.standard_normal(npar) * 0.7
    H = sm.hessian(f)(sm.tensor(th)).numpy()
    assert "matmul2" in used and "matmul_tadd" in used
    g = lambda v: sm.grad(f)(sm.tensor(v)).numpy()  # noqa: E731
    eps = 1e-6
    fd = np.stack([(g(th + eps * e) - g(th - eps * e)) / (2 * eps) for e in np.eye(npar)], 1)
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(H, sm.hessian(f, batched=False)(sm.tensor(th)).numpy(), rtol=1e-12, atol=1e-13)


def test_vmap_of_a_sliced_mlp_hessian_equals_the_per_point_hessians():
    """vmap over sm.hessian: the fused forms (matmul2 with a reshaped pair, matmul_tadd) and the backward's
    unview_sum under vmap's batching rules."""
    rng = np.random.default_rng(4)
    x = _t(rng, (5, 2))

    def f(th):
        w, b, v = sm.reshape(th[:6], (2, 3)), th[6:9], th[9:12]
        return (sm.matmul(sm.tanh(sm.matmul(x, w) + b), v) ** 2).sum()
    ths = _t(rng, (3, 12))
    H = sm.vmap(sm.hessian(f))(ths).numpy()
    ref = np.stack([sm.hessian(f)(sm.tensor(t)).numpy() for t in ths.numpy()])
    np.testing.assert_allclose(H, ref, rtol=1e-12, atol=1e-12)
