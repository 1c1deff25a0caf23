"""Tensor construction, properties, indexing with gradients, shape ops."""
import numpy as np
import pytest

import sciml as sm
from sciml.testing import check_grads


def test_creation_functions_equal_numpy():
    np.testing.assert_array_equal(sm.zeros((2, 3)).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(sm.ones(4).numpy(), np.ones(4))
    np.testing.assert_array_equal(sm.full((2, 2), 7.5).numpy(), np.full((2, 2), 7.5))
    assert sm.arange(5).dtype == "int32"
    np.testing.assert_array_equal(sm.arange(5).numpy(), np.arange(5))
    np.testing.assert_allclose(sm.arange(0.0, 1.0, 0.25).numpy(), np.arange(0.0, 1.0, 0.25))
    np.testing.assert_allclose(sm.linspace(-1, 1, 5).numpy(), np.linspace(-1, 1, 5))
    np.testing.assert_array_equal(sm.eye(3).numpy(), np.eye(3))
    np.testing.assert_array_equal(sm.eye(2, 3).numpy(), np.eye(2, 3))
    x = sm.tensor([[1.0, 2.0]], "float32")
    assert sm.zeros_like(x).dtype == "float32" and sm.zeros_like(x).shape == (1, 2)
    np.testing.assert_array_equal(sm.ones_like(x).numpy(), np.ones((1, 2), np.float32))
    assert sm.full((0, 3), 1.0).shape == (0, 3)
    assert sm.full(3, 2, dtype="int32").dtype == "int32"


def test_rand_randn_are_seeded():
    a, b = sm.rand(3, 4, seed=1), sm.rand((3, 4), seed=1)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(a.numpy(), np.random.default_rng(1).random((3, 4)))
    assert ((a.numpy() >= 0) & (a.numpy() < 1)).all()
    n = sm.randn(1000, seed=2)
    np.testing.assert_array_equal(n.numpy(), np.random.default_rng(2).standard_normal(1000))
    assert not np.array_equal(sm.randn(5, seed=3).numpy(), sm.randn(5, seed=4).numpy())
    assert sm.randn(2, 2, dtype="float32").dtype == "float32"


def test_properties_and_conversions():
    x = sm.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and x.dtype == "float64" and len(x) == 2
    a = x.numpy()
    assert isinstance(a, np.ndarray) and a.dtype == np.float64
    a[0, 0] = 100.0  # numpy() is a copy
    assert x.numpy()[0, 0] == 1.0
    s = x.sum()
    assert s.shape == () and s.item() == 21.0 and float(s) == 21.0 and isinstance(s.item(), float)
    assert int(sm.tensor(3)) == 3 and sm.tensor(3).dtype == "int32"
    assert sm.tensor(True).dtype == "bool"
    assert sm.tensor([1.0], "float32").dtype == "float32"
    assert sm.tensor(np.float32(1.0)).dtype == "float64"  # float data takes the default float dtype
    r = repr(x)
    assert r.startswith("Tensor([[1., 2., 3.],") and "dtype" not in r
    assert "dtype=float32" in repr(sm.tensor([1.0], "float32"))
    np.testing.assert_array_equal(np.asarray(x), x.numpy())
    y = sm.Tensor([1.0, 2.0])
    assert y.shape == (2,)
    assert [float(v) for v in sm.tensor([1.0, 2.0])] == [1.0, 2.0]


def test_astype_round_trip():
    x = sm.tensor([1.7, -2.2, 0.0])
    assert x.astype("int32").numpy().tolist() == [1, -2, 0]
    assert x.astype("bool").numpy().tolist() == [True, True, False]
    assert x.astype("float32").dtype == "float32"
    g = sm.grad(lambda t: (t.astype("float32").astype("float64") * t).sum())(x)
    np.testing.assert_allclose(g.numpy(), 2 * x.numpy(), rtol=1e-6)


def test_numbers_take_tensor_dtype():
    x = sm.tensor([1.0, 2.0], "float32")
    assert (x * 2).dtype == "float32" and (2.5 + x).dtype == "float32" and (1 - x).dtype == "float32"
    assert (sm.arange(3) * 2).dtype == "int32"
    assert (sm.arange(3) * 0.5).dtype == "float64"
    np.testing.assert_allclose((np.array([1.0, 2.0]) * sm.tensor([3.0, 4.0])).numpy(), [3.0, 8.0])


INDEX_CASES = [
    (0,), (-1,), (slice(None), slice(1, 2)), (slice(None, None, -1),), (slice(None), slice(None, None, -2)),
    (None, 1), (Ellipsis, 0), (0, Ellipsis, None), (slice(1, None), 2, slice(None)),
    (slice(5, 10),), (1, -1, -1), (slice(None, None, 2), None, slice(3, 0, -1)),
]


@pytest.mark.parametrize("idx", INDEX_CASES, ids=str)
def test_basic_indexing_equals_numpy_with_gradients(idx):
    a = np.random.default_rng(0).standard_normal((3, 4, 5))
    x = sm.tensor(a)
    got = x[idx]
    want = a[idx]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    if want.size:
        check_grads(lambda t: t[idx] * t[idx], (x,), order=2)


def test_index_with_int_tensor_and_list():
    a = np.random.default_rng(1).standard_normal((5, 3))
    x = sm.tensor(a)
    idx = sm.tensor([4, 0, 0, -1], "int32")
    np.testing.assert_array_equal(x[idx].numpy(), a[[4, 0, 0, -1]])
    np.testing.assert_array_equal(x[[1, 2]].numpy(), a[[1, 2]])
    np.testing.assert_array_equal(x[np.array([[0, 1], [2, 3]])].numpy(), a[np.array([[0, 1], [2, 3]])])
    np.testing.assert_array_equal(x[[3, 1], 1:].numpy(), a[[3, 1], 1:])
    g = sm.grad(lambda t: (t[idx] ** 2).sum())(x)
    want = np.zeros_like(a)
    np.add.at(want, [4, 0, 0, -1], 2 * a[[4, 0, 0, -1]])
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-14)
    check_grads(lambda t: sm.sin(t[idx]), (x,), order=2)


def test_scatter_add_duplicates_sum():
    v = sm.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    r = sm.scatter_add(v, [2, 0, 2], rows=4)
    np.testing.assert_array_equal(r.numpy(), [[3, 4], [0, 0], [6, 8], [0, 0]])
    check_grads(lambda t: sm.scatter_add(t, [2, 0, 2], rows=4) ** 2, (v,), order=2)


def test_shape_ops_equal_numpy():
    a = np.arange(24.0).reshape(2, 3, 4)
    x = sm.tensor(a)
    np.testing.assert_array_equal(x.reshape(4, 6).numpy(), a.reshape(4, 6))
    np.testing.assert_array_equal(x.reshape((-1, 4)).numpy(), a.reshape(-1, 4))
    np.testing.assert_array_equal(x.flatten().numpy(), a.ravel())
    np.testing.assert_array_equal(x.T.numpy(), a.T)
    np.testing.assert_array_equal(x.transpose(1, 0, 2).numpy(), a.transpose(1, 0, 2))
    np.testing.assert_array_equal(x.transpose((2, 1, 0)).numpy(), a.transpose(2, 1, 0))
    np.testing.assert_array_equal(sm.broadcast_to(sm.tensor([1.0, 2.0]), (3, 2)).numpy(),
                                  np.broadcast_to([1.0, 2.0], (3, 2)))
    np.testing.assert_array_equal(sm.concat([x, x], -1).numpy(), np.concatenate([a, a], -1))
    np.testing.assert_array_equal(sm.stack([x, x], 1).numpy(), np.stack([a, a], 1))
    for got, want in zip(sm.split(x, 2, axis=-1), np.split(a, 2, axis=-1)):
        np.testing.assert_array_equal(got.numpy(), want)
    for got, want in zip(sm.split(x, [1, 3], axis=2), np.split(a, [1, 3], axis=2)):
        np.testing.assert_array_equal(got.numpy(), want)
    y = sm.tensor(np.zeros((1, 3, 1)))
    assert y.squeeze().shape == (3,) and y.squeeze(0).shape == (3, 1) and y.squeeze((0, -1)).shape == (3,)
    assert x.unsqueeze(0).shape == (1, 2, 3, 4) and x.unsqueeze(-1).shape == (2, 3, 4, 1)
    assert sm.concat([sm.zeros((0, 2)), sm.ones((2, 2))]).shape == (2, 2)


def test_shape_op_gradients():
    x = sm.tensor(np.random.default_rng(2).standard_normal((2, 3, 4)))
    check_grads(lambda t: sm.concat([t, t * t], 1), (x,), order=2)
    check_grads(lambda t: sm.stack(sm.split(t, 2, -1), 0) ** 2, (x,), order=2)
    check_grads(lambda t: sm.broadcast_to(t[:, :1], (5, 2, 3, 4)) * 1.5, (x,), order=1)
    check_grads(lambda t: t.transpose(2, 0, 1).reshape(4, 6) ** 2, (x,), order=2)


def test_zero_size_tensors():
    x = sm.zeros((0, 3))
    assert (x + 1.0).shape == (0, 3)
    assert x.sum(0).shape == (3,)
    np.testing.assert_array_equal(x.sum(0).numpy(), np.zeros(3))
    assert sm.exp(x).shape == (0, 3)
    assert x[1:].shape == (0, 3)
    assert (sm.zeros((2, 0)) @ sm.zeros((0, 3))).numpy().tolist() == [[0.0] * 3] * 2


def test_default_float32_context():
    x = sm.tensor(np.linspace(0, 1, 8), "float32")
    y = sm.tanh(x * 2.0 + 1.0).sum()
    assert y.dtype == "float32"
    np.testing.assert_allclose(y.item(), np.tanh(np.linspace(0, 1, 8) * 2 + 1).sum(), rtol=1e-6)
