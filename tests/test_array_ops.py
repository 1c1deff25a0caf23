"""Array ops (sciml/autodiff/ops/array.py): values against numpy in float32 and float64, derivatives against
finite differences to second order (float64), errors (Vulkan: tests/arrays_vulkan_check.py)."""
import numpy as np
import pytest

import sciml as sm
from sciml.autodiff.ops import array as A
from sciml.testing import check_grads

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4))
Y = rng.standard_normal((4, 5))
V = rng.standard_normal(5)
P = rng.uniform(0.5, 1.5, (3, 4))
C3 = rng.standard_normal((2, 3))
D3 = rng.standard_normal((2, 3))

VALUES = [  # name, sciml function, numpy function, args
    ("cumsum0", lambda x: A.cumsum(x, 0), lambda x: np.cumsum(x, 0), (X,)),
    ("cumsum_flat", lambda x: A.cumsum(x), lambda x: np.cumsum(x), (X,)),
    ("cumprod1", lambda x: A.cumprod(x, 1), lambda x: np.cumprod(x, 1), (P,)),
    ("prod", lambda x: A.prod(x, 1), lambda x: np.prod(x, 1), (X,)),
    ("prod_all", lambda x: A.prod(x), lambda x: np.prod(x), (P,)),
    ("prod_keep", lambda x: A.prod(x, 0, keepdims=True), lambda x: np.prod(x, 0, keepdims=True), (X,)),
    ("std", lambda x: A.std(x, 1), lambda x: np.std(x, 1), (X,)),
    ("std_ddof", lambda x: A.std(x, ddof=1), lambda x: np.std(x, ddof=1), (X,)),
    ("sort", lambda x: A.sort(x, 1), lambda x: np.sort(x, 1), (X,)),
    ("sort0", lambda x: A.sort(x, 0), lambda x: np.sort(x, 0), (X,)),
    ("sort_desc", lambda x: A.sort(x, -1, descending=True), lambda x: -np.sort(-x, -1), (X,)),
    ("flip", lambda x: A.flip(x, 1), lambda x: np.flip(x, 1), (X,)),
    ("flip_all", lambda x: A.flip(x), lambda x: np.flip(x), (X,)),
    ("roll", lambda x: A.roll(x, 2, 1), lambda x: np.roll(x, 2, 1), (X,)),
    ("roll_flat", lambda x: A.roll(x, -5), lambda x: np.roll(x, -5), (X,)),
    ("roll_multi", lambda x: A.roll(x, (1, -1), (0, 1)), lambda x: np.roll(x, (1, -1), (0, 1)), (X,)),
    ("tile", lambda x: A.tile(x, (2, 1, 3)), lambda x: np.tile(x, (2, 1, 3)), (X,)),
    ("repeat", lambda x: A.repeat(x, 2, 1), lambda x: np.repeat(x, 2, 1), (X,)),
    ("repeat_list", lambda x: A.repeat(x, [1, 0, 2], 0), lambda x: np.repeat(x, [1, 0, 2], 0), (X,)),
    ("repeat_flat", lambda x: A.repeat(x, 2), lambda x: np.repeat(x, 2), (X,)),
    ("diag_vec", lambda v: A.diag(v), np.diag, (V,)),
    ("diag_vec_k", lambda v: A.diag(v, 2), lambda v: np.diag(v, 2), (V,)),
    ("diag_vec_negk", lambda v: A.diag(v, -1), lambda v: np.diag(v, -1), (V,)),
    ("diag_mat", lambda x: A.diag(x, 1), lambda x: np.diag(x, 1), (X,)),
    ("diagonal3", lambda x: A.diagonal(x.reshape(2, 3, 2), 0, 0, 2),
     lambda x: np.diagonal(x.reshape(2, 3, 2), 0, 0, 2), (X,)),
    ("trace", lambda x: A.trace(x), np.trace, (X,)),
    ("trace_off", lambda x: A.trace(x, -1), lambda x: np.trace(x, -1), (X,)),
    ("outer", lambda a, b: A.outer(a, b), np.outer, (V, X)),
    ("kron", lambda a, b: A.kron(a, b), np.kron, (X, C3)),
    ("kron_vec", lambda a, b: A.kron(a, b), np.kron, (V, X)),
    ("cross", lambda a, b: A.cross(a, b), np.cross, (C3, D3)),
    ("cross_axis0", lambda a, b: A.cross(a, b, axis=0), lambda a, b: np.cross(a, b, axis=0), (C3.T, D3.T)),
    ("pad_const", lambda x: A.pad(x, ((1, 2), (0, 1)), constant_values=1.5),
     lambda x: np.pad(x, ((1, 2), (0, 1)), constant_values=1.5), (X,)),
    ("pad_edge", lambda x: A.pad(x, 2, mode="edge"), lambda x: np.pad(x, 2, mode="edge"), (X,)),
    ("pad_wrap", lambda x: A.pad(x, ((1, 2), (3, 1)), mode="wrap"),
     lambda x: np.pad(x, ((1, 2), (3, 1)), mode="wrap"), (X,)),
    ("pad_reflect", lambda x: A.pad(x, ((2, 1), (1, 3)), mode="reflect"),
     lambda x: np.pad(x, ((2, 1), (1, 3)), mode="reflect"), (X,)),
    ("einsum_mm", lambda a, b: A.einsum("ij,jk->ik", a, b), lambda a, b: np.einsum("ij,jk->ik", a, b), (X, Y)),
    ("einsum_implicit", lambda a, b: A.einsum("ij,jk", a, b), lambda a, b: np.einsum("ij,jk", a, b), (X, Y)),
    ("einsum_trace", lambda a: A.einsum("ii", a), lambda a: np.einsum("ii", a), (X[:, :3],)),
    ("einsum_diag", lambda a: A.einsum("ii->i", a), lambda a: np.einsum("ii->i", a), (X[:, :3],)),
    ("einsum_sum_t", lambda a: A.einsum("ij->j", a), lambda a: np.einsum("ij->j", a), (X,)),
    ("einsum_transpose", lambda a: A.einsum("ij->ji", a), lambda a: np.einsum("ij->ji", a), (X,)),
    ("einsum_batch", lambda a, b: A.einsum("bij,bjk->bik", a, b),
     lambda a, b: np.einsum("bij,bjk->bik", a, b), (X.reshape(3, 2, 2), Y.reshape(2, 2, 5)[:1].repeat(3, 0))),
    ("einsum_three", lambda a, b, c: A.einsum("ij,jk,k->i", a, b, c),
     lambda a, b, c: np.einsum("ij,jk,k->i", a, b, c), (X, Y, V)),
    ("einsum_ellipsis", lambda a, b: A.einsum("...ij,jk->...ik", a, b),
     lambda a, b: np.einsum("...ij,jk->...ik", a, b), (X.reshape(3, 1, 4), Y)),
    ("einsum_outer", lambda a, b: A.einsum("i,j->ij", a, b), lambda a, b: np.einsum("i,j->ij", a, b), (V, V)),
    ("einsum_dot", lambda a, b: A.einsum("i,i->", a, b), lambda a, b: np.einsum("i,i->", a, b), (V, V)),
    ("einsum_bcast_batch", lambda a, b: A.einsum("bij,bjk->bik", a, b),
     lambda a, b: np.einsum("bij,bjk->bik", a, b), (X.reshape(3, 2, 2), Y.reshape(2, 2, 5)[:1])),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", VALUES, ids=[c[0] for c in VALUES])
def test_values_match_numpy(case, dtype):
    name, f, ref, args = case
    got = f(*[sm.tensor(a, dtype) for a in args]).numpy()
    want = ref(*[np.asarray(a, dtype) for a in args])
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-5 if dtype == "float32" else 1e-12)


GRADS = ["cumsum0", "cumsum_flat", "cumprod1", "prod", "prod_all", "std", "sort", "sort0", "flip", "roll_multi",
         "tile", "repeat_list", "diag_vec_k", "diagonal3", "trace_off", "kron", "cross", "pad_reflect",
         "pad_edge", "einsum_three", "einsum_diag", "einsum_ellipsis", "einsum_bcast_batch"]


@pytest.mark.parametrize("name", GRADS)
def test_derivatives_match_finite_differences(name):
    _, f, _, args = next(c for c in VALUES if c[0] == name)
    check_grads(f, tuple(sm.tensor(a, "float64") for a in args), order=2)


def test_prod_gradient_with_zeros_is_exact():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 4.0]])
    g = sm.grad(lambda t: A.prod(t, 1).sum())(sm.tensor(x)).numpy()
    np.testing.assert_allclose(g, [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0]])


def test_indices_match_numpy():
    x = np.array([[3.0, 1.0, np.nan, 2.0, 1.0], [0.5, -1.0, 7.0, 7.0, 0.0]])
    for dt in ("float32", "float64"):
        t = sm.tensor(x, dt)
        np.testing.assert_array_equal(A.argsort(t).numpy(), np.argsort(x, kind="stable"))
        np.testing.assert_array_equal(A.argsort(t, 0).numpy(), np.argsort(x, 0, kind="stable"))
        np.testing.assert_array_equal(A.argmax(t, 1).numpy(), np.argmax(x, 1))
        np.testing.assert_array_equal(A.argmin(t, 1).numpy(), np.argmin(x, 1))
        np.testing.assert_array_equal(A.argmax(t[1]).numpy(), np.argmax(x[1]))
        assert A.argmax(t, 0, keepdims=True).shape == (1, 5)
        np.testing.assert_array_equal(A.sort(t, 1).numpy(), np.sort(x, 1).astype(dt))
    big = rng.standard_normal((3, 1000))
    np.testing.assert_array_equal(A.argsort(sm.tensor(big)).numpy(), np.argsort(big, kind="stable"))
    vals, idx = A.topk(sm.tensor(X), 2)
    np.testing.assert_array_equal(idx.numpy(), np.argsort(-X, 1, kind="stable")[:, :2])
    np.testing.assert_allclose(vals.numpy(), -np.sort(-X, 1)[:, :2])
    check_grads(lambda x: A.topk(x, 3)[0], (sm.tensor(X),), order=2)
    xi = sm.tensor(np.array([3, 1, 2], np.int32))
    np.testing.assert_array_equal(A.argsort(xi).numpy(), [1, 2, 0])


def test_any_all_meshgrid():
    b = np.array([[0.0, 1.0], [0.0, 0.0]])
    t = sm.tensor(b)
    np.testing.assert_array_equal(A.any(t, 1).numpy(), b.any(1))
    np.testing.assert_array_equal(A.all(t + 1.0, 0).numpy(), (b + 1).all(0))
    assert bool(A.any(t)) and not bool(A.all(t))
    np.testing.assert_array_equal(A.any(sm.tensor(b) > 0.5, keepdims=True).numpy(), np.any(b > 0.5, keepdims=True))
    for ind in ("xy", "ij"):
        got = A.meshgrid(sm.tensor(V[:3]), sm.tensor(V), sm.tensor(V[:2]), indexing=ind)
        want = np.meshgrid(V[:3], V, V[:2], indexing=ind)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w)


def test_errors():
    with pytest.raises(ValueError, match="topk: k=7"):
        A.topk(sm.tensor(X), 7)
    with pytest.raises(ValueError, match="cross: a has shape"):
        A.cross(sm.tensor(X), sm.tensor(X))
    with pytest.raises(ValueError, match="reflect"):
        A.pad(sm.tensor(X), 5, mode="reflect")
    with pytest.raises(ValueError, match="einsum: index 'j' has sizes"):
        A.einsum("ij,jk->ik", sm.tensor(X), sm.tensor(X))
    with pytest.raises(ValueError, match="axis=3"):
        A.cumsum(sm.tensor(X), 3)
    with pytest.raises(ValueError, match="empty"):
        A.argmax(sm.tensor(np.zeros((0,))))


def test_array_ops_are_tensor_methods_like_numpy():
    a = np.array([[3.0, 1.0, 4.0], [1.0, 5.0, 9.0]])
    t = sm.tensor(a)
    np.testing.assert_allclose(t.cumsum(1).numpy(), a.cumsum(1))
    np.testing.assert_allclose(t.cumprod(0).numpy(), a.cumprod(0))
    np.testing.assert_allclose(float(t.prod()), a.prod())
    np.testing.assert_allclose(t.std(axis=1).numpy(), a.std(axis=1))
    assert int(t.argmax()) == a.argmax() and int(t.argmin()) == a.argmin()
    np.testing.assert_array_equal(t.argsort(axis=1).numpy(), a.argsort(axis=1))
    np.testing.assert_allclose(t.sort(axis=1).numpy(), np.sort(a, axis=1))
    np.testing.assert_allclose(t.flip(0).numpy(), np.flip(a, 0))
    assert bool(t.any()) and bool(t.all())
    np.testing.assert_allclose(float(t.trace()), a.trace())
    np.testing.assert_allclose(t.diagonal().numpy(), a.diagonal())
