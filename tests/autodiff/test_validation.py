"""Indexing like numpy (integer arrays on any axis, boolean masks, take_along_axis), functional updates
``x.at[idx].set/add/multiply/min/max`` (JAX), and numpy's answers on edge inputs (empty means, bool
dtypes, empty Jacobians): values against numpy, derivatives against finite differences to second order."""
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import sciml as sm
from sciml.testing import check_grads

A = np.arange(60.0).reshape(3, 4, 5)
MASK2 = A[..., 0] > 20
INDICES = [
    (slice(None), [0, 2]),
    ([0, 1], None, [0, 1]),                       # None separates the arrays: B goes first
    (0, slice(None), [1, 2]),                     # an int and an array apart: B first (numpy's rule)
    (slice(None), 0, [1, 2]),                     # adjacent: B in place
    ([[0], [2]], [1, 3]),                         # broadcasting index arrays
    (Ellipsis, [4, 0]),
    (MASK2,),                                     # a 2-d mask on the first two axes
    (A > 30,),
    (True,), (False,),
    (np.array([True, False, True]), slice(1, 3)),
    (slice(None), [1, -1], slice(None, None, -2)),
    ([2, 0], slice(None), [-1]),
    (1, [0, 3], 2),
    (np.array(1), [0, 1]),
    (None, [1], Ellipsis, None),
    ([],), (slice(None), []),
    (slice(None), [0, 2], slice(1, 4)),
    ((0, 2),),                                    # a tuple inside the index is an array
]


@pytest.mark.parametrize("idx", INDICES, ids=[str(i)[:40] for i in range(len(INDICES))])
def test_getitem_matches_numpy(idx):
    np.testing.assert_array_equal(sm.tensor(A, "float64")[idx].numpy(), A[idx])


def test_getitem_with_index_tensors():
    x = sm.tensor(A, "float64")
    np.testing.assert_array_equal(x[sm.tensor([2, 0]), 1].numpy(), A[[2, 0], 1])
    np.testing.assert_array_equal(x[:, sm.tensor([[1], [2]]), sm.tensor([0, 4])].numpy(), A[:, [[1], [2]], [0, 4]])
    np.testing.assert_array_equal(x[sm.tensor(A > 30)].numpy(), A[A > 30])
    np.testing.assert_array_equal(x[sm.tensor([-1, 0])].numpy(), A[[-1, 0]])


def test_getitem_derivatives():
    rng = np.random.default_rng(0)
    x = sm.tensor(rng.normal(size=(3, 4)), "float64")
    check_grads(lambda x: x[:, [0, 2, 0]] * x[:, [1, 1, 3]], (x,), order=2)
    check_grads(lambda x: x[[1, 0, 1], 1:] ** 2, (x,), order=2)
    check_grads(lambda x: x[x.numpy() > 0] ** 3, (x,), order=2)
    g = sm.grad(lambda x: (x[:, [0, 2, 0]] * 2.0).sum())(x).numpy()
    want = np.zeros((3, 4))
    np.add.at(want, (slice(None), [0, 2, 0]), 2.0)
    np.testing.assert_allclose(g, want)


def test_take_along_axis_matches_numpy_with_derivatives():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(3, 4))
    x = sm.tensor(a, "float64")
    for idx, axis in [(np.argsort(a, axis=1), 1), (np.array([[2, 0, 1, 1]]), 0), (np.array([[3], [0], [-1]]), 1),
                      (np.array([5, 0, 11]), None)]:
        np.testing.assert_array_equal(sm.take_along_axis(x, idx, axis).numpy(), np.take_along_axis(a, idx, axis))
    np.testing.assert_array_equal(sm.take_along_axis(x, sm.tensor(np.argsort(a, 1).astype(np.int32)), 1).numpy(),
                                  np.sort(a, 1))
    check_grads(lambda x: sm.take_along_axis(x, np.array([[0, 0], [3, 1], [2, 2]]), 1), (x,), order=2)


IDX = ([0, 2, 0], [1, 3, 1])  # (0, 1) repeats


@pytest.mark.parametrize("mode, ufunc", [("set", None), ("add", np.add), ("multiply", np.multiply),
                                         ("min", np.minimum), ("max", np.maximum)])
def test_at_updates_match_numpy(mode, ufunc):
    rng = np.random.default_rng(2)
    a, v = rng.normal(size=(3, 4)), rng.normal(size=3)
    want = a.copy()
    if ufunc is None:
        want[IDX] = v                      # repeated index: the last value wins, as numpy
    else:
        ufunc.at(want, IDX, v)             # repeated index: combined, as np.<ufunc>.at
    x = sm.tensor(a, "float64")
    got = getattr(x.at[IDX], mode)(sm.tensor(v, "float64"))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-15)
    np.testing.assert_array_equal(x.numpy(), a)  # functional: x is unchanged
    check_grads(lambda x, v: getattr(x.at[IDX], mode)(v), (x, sm.tensor(v, "float64")), order=2)


def test_at_with_slices_broadcast_and_get():
    a = np.arange(12.0).reshape(3, 4)
    x = sm.tensor(a, "float64")
    want = a.copy()
    want[1:, ::2] = 7.0
    np.testing.assert_array_equal(x.at[1:, ::2].set(7.0).numpy(), want)
    want = a.copy()
    want[:, 1] += np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.at[:, 1].add(sm.tensor([1.0, 2.0, 3.0], "float64")).numpy(), want)
    np.testing.assert_array_equal(x.at[0].get().numpy(), a[0])
    m = a > 5
    want = a.copy()
    want[m] = 0.0
    np.testing.assert_array_equal(x.at[m].set(0.0).numpy(), want)
    check_grads(lambda x: x.at[1:, ::2].multiply(x[:2, 1::2]), (sm.tensor(a + 1.0, "float64"),), order=2)


def test_at_updates_keep_nan_and_inf_elsewhere():
    x = sm.tensor([np.inf, np.nan, 1.0], "float64")
    np.testing.assert_array_equal(x.at[2].set(5.0).numpy(), [np.inf, np.nan, 5.0])
    np.testing.assert_array_equal(x.at[0].set(5.0).numpy()[[0, 2]], [5.0, 1.0])


def test_indexing_under_jit():
    a = np.arange(12.0).reshape(3, 4)
    x = sm.tensor(a, "float64")
    f = sm.jit(lambda x, j: x[:, j] * 2.0, fallback=False)
    np.testing.assert_array_equal(f(x, sm.tensor([3, 0], "int32")).numpy(), a[:, [3, 0]] * 2)
    np.testing.assert_array_equal(f(x, sm.tensor([-1, 1], "int32")).numpy(), a[:, [-1, 1]] * 2)  # replayed
    h = sm.jit(lambda x, j: x.at[j].add(1.0), fallback=False)
    np.testing.assert_array_equal(h(x, sm.tensor([0, 0], "int32")).numpy()[0], a[0] + 2)
    np.testing.assert_array_equal(h(x, sm.tensor([2, 2], "int32")).numpy()[2], a[2] + 2)
    g = sm.jit(lambda x: x[x > 3.0].sum(), fallback=False)
    with pytest.raises(sm.JitError, match="boolean mask computed from the inputs: the result's shape depends on"):
        g(x)
    k = sm.jit(lambda x: x[np.array([True, False, True])].sum(), fallback=False)  # a constant mask is fine
    assert float(k(x)) == a[[0, 2]].sum()


def test_out_of_range_indices_under_jit_never_read_outside_the_buffer():
    """Indices traced by jit cannot be checked on the host: gathers clamp (as JAX), scatters drop."""
    x = sm.tensor([1.0, 2.0, 3.0], "float64")
    f = sm.jit(lambda x, j: sm.take(x, j), fallback=False)
    f(x, sm.tensor([0], "int32"))
    np.testing.assert_array_equal(f(x, sm.tensor([7], "int32")).numpy(), [3.0])
    s = sm.jit(lambda v, j: sm.scatter_add(v, j, 3), fallback=False)
    s(x, sm.tensor([0, 1, 2], "int32"))
    np.testing.assert_array_equal(s(x, sm.tensor([0, 9, 2], "int32")).numpy(), [1.0, 0.0, 3.0])


def test_mean_and_var_of_empty_follow_numpy():
    for fn in (sm.mean, sm.var):
        with pytest.warns(RuntimeWarning, match="empty slice is NaN"):
            r = fn(sm.zeros(0))
        assert r.shape == () and np.isnan(float(r))
        with pytest.warns(RuntimeWarning):
            r = fn(sm.zeros((0, 3)), axis=0)
        assert r.shape == (3,) and np.isnan(r.numpy()).all()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert fn(sm.zeros((0, 3)), axis=1).shape == (0,)  # no output: no warning (numpy)
    assert float(sm.sum(sm.zeros(0))) == 0.0


def test_bool_and_int_creation():
    np.testing.assert_array_equal(sm.ones((3,), "bool").numpy(), np.ones(3, bool))
    np.testing.assert_array_equal(sm.full((2,), 7, "int32").numpy(), [7, 7])
    np.testing.assert_array_equal(sm.ones(2, "int32").numpy(), [1, 1])
    np.testing.assert_array_equal(sm.tensor([0.5, 0.0], "bool").numpy(), [True, False])
    assert sm.max(sm.tensor([True, False])).dtype == "bool"
    assert int(sm.sum(sm.tensor([True, True, False]))) == 2


def test_grad_of_int_function_output_is_clear_and_int_numbers_become_floats():
    g = sm.grad(lambda a: a * a)(3)  # a Python int is a float input, as numpy ints are
    assert float(g) == 6.0


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian"])
def test_empty_inputs_give_empty_jacobians(transform):
    t = getattr(sm, transform)
    if transform == "hessian":
        assert t(lambda a: (a * a).sum())(sm.zeros(0, "float64")).shape == (0, 0)
        return
    assert t(lambda a: a * 2.0)(sm.zeros(0, "float64")).shape == (0, 0)
    assert t(lambda a: a[:0])(sm.zeros(3, "float64")).shape == (0, 3)
    assert t(lambda a: a.sum() * sm.ones(2, "float64"))(sm.zeros((0, 2), "float64")).shape == (2, 0, 2)


def test_indexing_on_vulkan():
    """The same indexing, updates and kernel guards on arch=vulkan (float32), in its own process."""
    from tests.test_vulkan import _vulkan_available
    if not _vulkan_available():
        if os.environ.get("SCIML_REQUIRE_VULKAN"):
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(here, "vulkan_indexing_check.py")], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan indexing" in r.stdout, (r.stdout + r.stderr)[-4000:]


def test_forward_and_reverse_jacobians_agree_through_indexing():
    """jacfwd pushes batched tangents through take / scatter_add / where (their batching rules)."""
    rng = np.random.default_rng(3)
    x = sm.tensor(rng.normal(size=(3, 4)), "float64")

    def f(x):
        y = x.at[[0, 2, 0], [1, 3, 1]].multiply(x[1, :3])
        return sm.take_along_axis(y, np.array([[3, 0], [1, 1], [2, 0]]), 1) * y[y.numpy() > 0].sum()
    np.testing.assert_allclose(sm.jacfwd(f)(x).numpy(), sm.jacrev(f)(x).numpy(), rtol=1e-12, atol=1e-12)
    h = sm.hessian(lambda x: (x[:, [0, 2]] ** 3).sum() + (x.at[1].max(0.5) ** 2).sum())(x).numpy()
    check = np.zeros((3, 4, 3, 4))
    a = x.numpy()
    for i in range(3):
        for j in (0, 2):
            check[i, j, i, j] += 6 * a[i, j]
    for j in range(4):
        check[1, j, 1, j] += 2.0 if a[1, j] > 0.5 else 0.0
    for i in (0, 2):
        for j in range(4):
            check[i, j, i, j] += 2.0
    np.testing.assert_allclose(h, check, rtol=1e-12, atol=1e-12)
