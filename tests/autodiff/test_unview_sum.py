"""The backward's sum of the cotangents of several strided views of one input (``x[a:b]`` slices of a flat
parameter vector) written straight into one zeroed buffer (``autodiff/ops/unview_sum.py``; the hook in
``autodiff/backward._sweep``): the same numbers as one unview and one add per view (bit for bit, first and
batched second order), overlapping views still summed, and ``unview_sum``'s rules against finite differences."""
import numpy as np
import pytest

import sciml as sm
from sciml.testing import flat_mlp_loss
from sciml.autodiff.ops import unview_sum as U
from sciml.kernels import index as K
from sciml.testing import check_grads


@pytest.fixture(autouse=True)
def _f64():
    sm.init(arch="cpu", dtype="float64")
    yield
    U.ON[0] = True


def _both(fn):
    U.ON[0] = False
    old = fn()
    U.ON[0] = True
    return old, fn()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sliced_mlp_grad_and_hessian_bit_for_bit_as_one_unview_per_slice(dtype, monkeypatch):
    rng = np.random.default_rng(0)
    sizes = (3, 16, 16, 2)
    n = sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:]))
    x, y = (sm.tensor(rng.standard_normal(s).astype(dtype), dtype) for s in ((40, 3), (40, 2)))
    f = flat_mlp_loss(x, y, sizes)
    th = sm.tensor(rng.standard_normal(n).astype(dtype) * 0.5, dtype)
    used = []
    orig = U._usum
    monkeypatch.setattr(U, "_usum", lambda *a, **k: used.append(len(a)) or orig(*a, **k))
    for fn in (lambda: sm.grad(f)(th).numpy(), lambda: sm.hessian(f)(th).numpy(),
               lambda: sm.jit(sm.hessian(f))(th).numpy()):
        old, new = _both(fn)
        assert old.tobytes() == new.tobytes()
    assert 6 in used  # the six slices went through one unview_sum


def test_hessian_through_slices_against_finite_differences():
    rng = np.random.default_rng(1)
    sizes = (2, 5, 1)
    n = sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:]))
    f = flat_mlp_loss(sm.tensor(rng.standard_normal((9, 2))), sm.tensor(rng.standard_normal((9, 1))), sizes)
    th = rng.standard_normal(n) * 0.7
    H = sm.hessian(f)(sm.tensor(th)).numpy()
    g = lambda v: sm.grad(f)(sm.tensor(v)).numpy()  # noqa: E731
    eps = 1e-6
    fd = np.stack([(g(th + eps * e) - g(th - eps * e)) / (2 * eps) for e in np.eye(n)], 1)
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-7)


def test_overlapping_and_strided_views_still_sum():
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal(12)
    f = lambda x: (x[1:] * x[:-1]).sum() + (x[::3] ** 3).sum() + (x[2:5] * x[7:10]).sum()  # noqa: E731
    gr = np.zeros(12)
    gr[1:] += x0[:-1]
    gr[:-1] += x0[1:]
    gr[::3] += 3 * x0[::3] ** 2
    gr[2:5] += x0[7:10]
    gr[7:10] += x0[2:5]
    old, new = _both(lambda: sm.grad(f)(sm.tensor(x0)).numpy())
    np.testing.assert_allclose(new, gr, rtol=1e-13)
    np.testing.assert_array_equal(old, new)
    check_grads(f, (sm.tensor(x0),), order=2)


def test_disjoint():
    m = lambda off, n, st=1: K.view_meta(off, (n,), (st,))  # noqa: E731
    assert U.disjoint([m(0, 4), m(4, 3), m(7, 1)])
    assert not U.disjoint([m(0, 4), m(3, 3)])
    assert not U.disjoint([m(0, 4, 2), m(1, 4, 2)])  # interleaved: ranges overlap, so not claimed disjoint
    assert not U.disjoint([m(0, 0), m(1, 2)])


def test_unview_sum_rules_against_finite_differences():
    rng = np.random.default_rng(3)
    metas = [K.view_meta(0, (2, 2), (5, 1)), K.view_meta(7, (3,), (1,)), K.view_meta(12, (2, 2), (1, 5))]
    shapes = [(2, 2), (3,), (2, 2)]
    gs = tuple(sm.tensor(rng.standard_normal(s)) for s in shapes)
    f = lambda *g: U.unview_sum(list(g), metas, (4, 5))  # noqa: E731
    want = np.zeros(20)
    want[[0, 1, 5, 6]] = gs[0].numpy().ravel()
    want[7:10] = gs[1].numpy()
    want[[12, 17, 13, 18]] = gs[2].numpy().ravel()
    np.testing.assert_array_equal(f(*gs).numpy().ravel(), want)
    check_grads(lambda *g: f(*g) * f(*g), gs, order=2)
    ts = tuple(sm.tensor(rng.standard_normal((4,) + s)) for s in shapes)
    bj = U._bjvp(ts, *gs, out=f(*gs), metas=tuple(metas), in_shape=(4, 5)).numpy()
    for i in range(4):
        _, one = sm.jvp(f, gs, tuple(sm.tensor(t.numpy()[i]) for t in ts))
        np.testing.assert_array_equal(bj[i], one.numpy())
