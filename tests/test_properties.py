"""Property-based tests (hypothesis) of shapes, axes, broadcasting and dtypes against numpy: reductions,
reshape / transpose / moveaxis / concat / stack / squeeze / unsqueeze, broadcasting binary ops and
indexing. Bad axes must raise where numpy raises (numpy semantics, negative axes allowed).

Few examples per property (the whole file runs in seconds): hypothesis explores shapes of rank 0-3
with sizes 0-4, where the corner cases live."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import sciml as sm

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
nonempty = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


def arrays(shape):
    return hnp.arrays(np.float64, shape, elements=st.floats(-8, 8, allow_nan=False, width=64))


def axis_arg(ndim):
    """None, one axis or a tuple of distinct axes, negative allowed."""
    one = st.integers(-ndim, ndim - 1) if ndim else st.nothing()
    many = st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).flatmap(
        lambda axes: st.tuples(*[st.sampled_from([a, a - ndim]) for a in axes])) if ndim else st.just(())
    return st.one_of(st.none(), one, many)


def outcome(fn):
    """('ok', value) or ('error', type) so numpy and sciml can be compared either way."""
    try:
        return "ok", fn()
    except (ValueError, IndexError, TypeError) as e:
        return "error", type(e)


@SETTINGS
@given(st.data())
def test_reductions_match_numpy(data):
    a = data.draw(shapes.flatmap(arrays))
    axis = data.draw(axis_arg(a.ndim))
    keep = data.draw(st.booleans())
    x = sm.tensor(a, "float64")
    np.testing.assert_allclose(sm.sum(x, axis, keep).numpy(), np.sum(a, axis, keepdims=keep), atol=1e-12)
    if a.size and all(a.shape[d] for d in range(a.ndim)):
        for f, g in ((sm.max, np.max), (sm.min, np.min), (sm.mean, np.mean), (sm.var, np.var)):
            r = f(x, axis, keepdims=keep)
            np.testing.assert_allclose(r.numpy(), g(a, axis, keepdims=keep), rtol=1e-12, atol=1e-12)
            assert r.shape == g(a, axis, keepdims=keep).shape


@SETTINGS
@given(st.data())
def test_bad_axes_raise_like_numpy(data):
    a = data.draw(shapes.flatmap(arrays))
    axis = data.draw(st.integers(-6, 6))
    x = sm.tensor(a, "float64")
    for ours, theirs in ((lambda: sm.sum(x, axis), lambda: np.sum(a, axis)),
                         (lambda: sm.unsqueeze(x, axis), lambda: np.expand_dims(a, axis)),
                         (lambda: sm.moveaxis(x, axis, 0) if a.ndim else sm.moveaxis(x, axis, axis),
                          lambda: np.moveaxis(a, axis, 0) if a.ndim else np.moveaxis(a, axis, axis)),
                         (lambda: sm.concat([x, x], axis), lambda: np.concatenate([a, a], axis)),
                         (lambda: sm.stack([x, x], axis), lambda: np.stack([a, a], axis))):
        o, t = outcome(ours), outcome(theirs)
        if a.ndim == 0 and ours is not None and t[0] == "ok" and o[0] == "error":
            continue  # numpy's ufunc reductions let a 0-d array reduce over axis 0 / -1 (np.mean does not); sciml
            # raises, as np.mean and JAX do (issue 13: "sum of a 0-d tensor over axis 0 works")
        assert o[0] == t[0], (a.shape, axis, o, t)
        if o[0] == "ok":
            np.testing.assert_array_equal(o[1].numpy(), t[1])


@SETTINGS
@given(st.data())
def test_reshape_matches_numpy(data):
    a = data.draw(shapes.flatmap(arrays))
    sizes = data.draw(st.permutations(_factors(a.size) + [1] * data.draw(st.integers(0, 2))))
    new = list(sizes)
    if new and data.draw(st.booleans()) and a.size:
        new[data.draw(st.integers(0, len(new) - 1))] = -1
    x = sm.tensor(a, "float64")
    np.testing.assert_array_equal(sm.reshape(x, tuple(new)).numpy(), a.reshape(tuple(new)))
    bad = tuple(new) + (a.size + 1,) if a.size else (2, -1, -1)
    assert outcome(lambda: sm.reshape(x, bad))[0] == outcome(lambda: a.reshape(bad))[0] == "error"


def _factors(n):
    out, p = [], 2
    while n > 1 and p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out if n else [0]


@SETTINGS
@given(st.data())
def test_transpose_moveaxis_squeeze_unsqueeze_match_numpy(data):
    a = data.draw(shapes.flatmap(arrays))
    x = sm.tensor(a, "float64")
    perm = data.draw(st.permutations(range(a.ndim)))
    np.testing.assert_array_equal(sm.transpose(x, tuple(perm)).numpy(), np.transpose(a, perm))
    np.testing.assert_array_equal(x.T.numpy(), a.T)
    if a.ndim:
        k = data.draw(st.integers(1, a.ndim))
        src = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=k, max_size=k,
                                 unique_by=lambda v: v % a.ndim))
        dst = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=k, max_size=k,
                                 unique_by=lambda v: v % a.ndim))
        np.testing.assert_array_equal(sm.moveaxis(x, src, dst).numpy(), np.moveaxis(a, src, dst))
    ax = data.draw(st.integers(-a.ndim - 1, a.ndim))
    np.testing.assert_array_equal(sm.unsqueeze(x, ax).numpy(), np.expand_dims(a, ax))
    np.testing.assert_array_equal(sm.squeeze(x).numpy(), np.squeeze(a))
    ones = [d for d in range(a.ndim) if a.shape[d] == 1]
    if ones:
        d = data.draw(st.sampled_from(ones))
        np.testing.assert_array_equal(sm.squeeze(x, d - a.ndim).numpy(), np.squeeze(a, d - a.ndim))


@SETTINGS
@given(st.data())
def test_concat_and_stack_match_numpy(data):
    shape = data.draw(nonempty)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    parts = []
    for _ in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        s[axis] = data.draw(st.integers(0, 3))
        parts.append(data.draw(arrays(tuple(s))))
    xs = [sm.tensor(p, "float64") for p in parts]
    np.testing.assert_array_equal(sm.concat(xs, axis).numpy(), np.concatenate(parts, axis))
    same = [data.draw(arrays(shape)) for _ in range(len(parts))]
    sax = data.draw(st.integers(-len(shape) - 1, len(shape)))
    np.testing.assert_array_equal(sm.stack([sm.tensor(p, "float64") for p in same], sax).numpy(),
                                  np.stack(same, sax))


@SETTINGS
@given(st.data())
def test_broadcasting_binary_ops_match_numpy(data):
    (sa, sb), _ = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3))
    a, b = data.draw(arrays(sa)), data.draw(arrays(sb))
    x, y = sm.tensor(a, "float64"), sm.tensor(b, "float64")
    for ours, theirs in ((sm.add, np.add), (sm.sub, np.subtract), (sm.mul, np.multiply),
                         (sm.maximum, np.maximum), (sm.less, np.less)):
        r = ours(x, y)
        assert r.shape == theirs(a, b).shape
        np.testing.assert_array_equal(r.numpy(), theirs(a, b))


@SETTINGS
@given(st.data())
def test_mismatched_shapes_raise_like_numpy(data):
    sa, sb = data.draw(shapes), data.draw(shapes)
    a, b = np.zeros(sa), np.zeros(sb)
    o = outcome(lambda: sm.tensor(a, "float64") + sm.tensor(b, "float64"))
    assert o[0] == outcome(lambda: a + b)[0]
    if len(sa) and len(sb):
        o = outcome(lambda: sm.matmul(sm.tensor(a, "float64"), sm.tensor(b, "float64")))
        t = outcome(lambda: np.matmul(a, b))
        assert o[0] == t[0], (sa, sb, o, t)
        if o[0] == "ok":
            assert o[1].shape == t[1].shape


@SETTINGS
@given(st.data())
def test_reduction_dtypes_match_numpy(data):
    shape = data.draw(nonempty)
    kind = data.draw(st.sampled_from(["float32", "float64", "int32", "bool"]))
    a = data.draw(hnp.arrays(np.dtype(kind), shape, elements=(st.booleans() if kind == "bool" else
                                                              st.integers(-50, 50))))
    x = sm.tensor(a, kind)
    axis = data.draw(axis_arg(a.ndim))
    for ours, theirs in ((sm.sum, np.sum), (sm.max, np.max), (sm.min, np.min)):
        r, w = ours(x, axis), theirs(a, axis)
        np.testing.assert_array_equal(r.numpy(), w)
        assert np.dtype(r.numpy().dtype).kind == np.asarray(w).dtype.kind  # int stays int, bool max stays bool


@SETTINGS
@given(st.data())
def test_basic_indexing_matches_numpy(data):
    a = data.draw(shapes.flatmap(arrays))
    idx = data.draw(hnp.basic_indices(a.shape, allow_newaxis=True, allow_ellipsis=True))
    np.testing.assert_array_equal(sm.tensor(a, "float64")[idx].numpy(), a[idx])


@SETTINGS
@given(st.data())
def test_advanced_indexing_matches_numpy(data):
    a = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4).flatmap(arrays))
    bshape = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3))
    idx = []
    for d in range(a.ndim):
        kind = data.draw(st.sampled_from(["slice", "array", "int", "full"]))
        n = a.shape[d]
        if kind == "array":
            sub = bshape[data.draw(st.integers(0, len(bshape))):]  # broadcasts against bshape
            idx.append(data.draw(hnp.arrays(np.int64, sub, elements=st.integers(-n, n - 1))))
        elif kind == "int":
            idx.append(data.draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            idx.append(data.draw(st.slices(n)))
        else:
            idx.append(slice(None))
    if data.draw(st.booleans()):
        idx.insert(data.draw(st.integers(0, len(idx))), None)
    idx = tuple(idx)
    x = sm.tensor(a, "float64")
    np.testing.assert_array_equal(x[idx].numpy(), a[idx])
    mask = data.draw(hnp.arrays(np.bool_, a.shape[:1]))
    np.testing.assert_array_equal(x[mask].numpy(), a[mask])


@SETTINGS
@given(st.data())
def test_out_of_range_indices_raise_like_numpy(data):
    a = data.draw(nonempty.flatmap(arrays))
    d = data.draw(st.integers(0, a.ndim - 1))
    bad = data.draw(st.sampled_from([a.shape[d], -a.shape[d] - 1, a.shape[d] + 3]))
    as_array = data.draw(st.booleans())
    idx = (slice(None),) * d + (([0, bad] if as_array else bad),)
    with pytest.raises(IndexError):
        a[idx]
    with pytest.raises(IndexError, match=f"index {bad} is out of range for axis {d}"):
        sm.tensor(a, "float64")[idx]


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_at_updates_and_take_along_axis_match_numpy(data):
    a = data.draw(nonempty.flatmap(arrays))
    d = data.draw(st.integers(0, a.ndim - 1))
    n = a.shape[d]
    idx = data.draw(hnp.arrays(np.int64, data.draw(st.integers(0, 5)), elements=st.integers(-n, n - 1)))
    index = (slice(None),) * d + (idx,)
    v = data.draw(arrays(a[index].shape))
    x = sm.tensor(a, "float64")
    mode = data.draw(st.sampled_from(["set", "add", "multiply", "min", "max"]))
    want = a.copy()
    if mode == "set":
        want[index] = v
    else:
        {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}[mode].at(want, index, v)
    np.testing.assert_allclose(getattr(x.at[index], mode)(sm.tensor(v, "float64")).numpy(), want, rtol=1e-14)
    shape = list(a.shape)
    shape[d] = data.draw(st.integers(0, 4))
    ind = data.draw(hnp.arrays(np.int64, tuple(shape), elements=st.integers(-n, n - 1)))
    np.testing.assert_array_equal(sm.take_along_axis(x, ind, d).numpy(), np.take_along_axis(a, ind, d))
