"""The curvature optimizers' dot products and the gradient-norm sum are ordered reductions
(kernels/_common.scratch): partials over fixed chunks, added in order. Their values against numpy in
float64, the same bits from the serialized and the parallel compilation (a ``+=`` into one location
from a parallel loop would be atomic adds in whatever order the threads arrive), and up to one chunk
the bits of one sequential loop."""
import numpy as np
import pytest

from sciml import backend
from sciml.kernels import _common as C
from sciml.kernels import lbfgs as K
from sciml.kernels import optim as KO

SIZES = [1, 7, C.REDUCE_CHUNK, C.REDUCE_CHUNK + 1, 3 * C.REDUCE_CHUNK + 5, 300_000]


def _bufs(n, k, dtype="float64", seed=0):
    rng = np.random.default_rng(seed + n)
    arrs = [rng.standard_normal(n) for _ in range(k)]
    return arrs, [backend.from_numpy(a, dtype) for a in arrs]


def _run(build, args, n, width):
    """The kernel compiled serialized and parallel, on the same inputs: both outputs."""
    outs = []
    for serial in (True, False):
        out = backend.zeros(8, "float64")
        build(serial)(*args(out), C.scratch(width * C.chunks(n), "float64"), n, C.chunks(n))
        outs.append(backend.to_numpy(out, (8,), "float64").copy())
    return outs


@pytest.mark.parametrize("n", SIZES)
def test_dots_match_numpy_and_serial_equals_parallel(n):
    (a, b, c), (A, B, Cb) = _bufs(n, 3)
    s, p = _run(lambda serial: K._build_dots("float64", serial), lambda out: (A, B, Cb, out), n, 5)
    assert np.array_equal(s, p)
    np.testing.assert_allclose(s[:5], [a @ b, a @ c, b @ b, np.abs(b).max(), np.abs(b).sum()], rtol=1e-12)
    if n <= C.REDUCE_CHUNK:   # one chunk: the bits of a sequential loop
        assert s[0] == np.cumsum(a * b)[-1] and s[2] == np.cumsum(b * b)[-1]


@pytest.mark.parametrize("n", SIZES)
def test_push_pair_matches_numpy_and_serial_equals_parallel(n):
    (xn, x, gn, g), bufs = _bufs(n, 4)
    S, Y = backend.zeros(2 * n, "float64"), backend.zeros(2 * n, "float64")
    s, p = _run(lambda serial: K._build_push("float64", serial), lambda out: (*bufs, S, Y, 1, out), n, 4)
    assert np.array_equal(s, p)
    sv, yv = xn - x, gn - g
    np.testing.assert_allclose(s[:4], [sv @ yv, yv @ yv, sv @ sv, np.abs(sv).max()], rtol=1e-12)
    np.testing.assert_array_equal(backend.to_numpy(S, (2, n), "float64")[1], sv)


@pytest.mark.parametrize("n", SIZES)
def test_cg_step_matches_numpy_and_serial_equals_parallel(n):
    (p0, r0, d, Hd), _ = _bufs(n, 4)
    outs = []
    for serial in (True, False):
        P, R, D, H = (backend.from_numpy(v, "float64") for v in (p0, r0, d, Hd))
        out = backend.zeros(4, "float64")
        K._build_cg("float64", serial)(P, R, D, H, 0.25, out, C.scratch(2 * C.chunks(n), "float64"), n, C.chunks(n))
        outs.append(backend.to_numpy(out, (4,), "float64").copy())
    assert np.array_equal(outs[0], outs[1])
    r = r0 - 0.25 * Hd
    np.testing.assert_allclose(outs[0][:2], [r @ r, np.abs(r).sum()], rtol=1e-12)


@pytest.mark.parametrize("n", SIZES)
def test_sumsq_adds_to_its_slot_in_order(n):
    (x,), (X,) = _bufs(n, 1)
    outs = []
    for serial in (True, False):
        out = backend.from_numpy(np.array([0.0, 1.5]), "float64")
        KO._build("sumsq", "float64", serial)(X, out, C.scratch(C.chunks(n), "float64"), n, 1, C.chunks(n))
        outs.append(backend.to_numpy(out, (2,), "float64").copy())
    assert np.array_equal(outs[0], outs[1]) and outs[0][0] == 0.0
    np.testing.assert_allclose(outs[0][1], 1.5 + x @ x, rtol=1e-12)


def test_nan_in_nan_out():
    (a, b, c), (A, B, Cb) = _bufs(10_000, 3)
    b[5000] = np.nan
    B = backend.from_numpy(b, "float64")
    out = backend.zeros(8, "float64")
    K.dots(A, B, Cb, out, 10_000, "float64")
    o = backend.to_numpy(out, (8,), "float64")
    assert np.isnan(o[0]) and np.isnan(o[2]) and np.isnan(o[4]) and np.isfinite(o[1])


def test_scratch_is_reused_and_grows():
    a = C.scratch(10, "float64")
    assert C.scratch(5, "float64") is a
    big = C.scratch(100_000, "float64")
    assert big.shape[0] >= 100_000 and C.scratch(10, "float64") is big
