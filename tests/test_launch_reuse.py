"""Reused launch contexts (kernels/_vec.py: VecLaunch keeps the contexts it built, by argument values):
a relaunch must compute exactly what a fresh launch would, whatever changed between calls."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend as B
from sciml.kernels import _common as C
from sciml.kernels import _vec as V
from sciml.kernels import elementwise as E


@pytest.fixture(autouse=True)
def _cpu():
    sm.init(arch="cpu")


def _scale_kernel():
    ti = C.ti()
    VA = ti.types.ndarray(dtype=ti.types.vector(V.LANES["float32"], ti.f32), ndim=1)

    @ti.kernel
    def k(x: VA, out: VA, s: ti.f32, m: ti.i32):
        for i in range(m):
            out[i] = x[i] * s
    return V.VecLaunch(k, V.LANES["float32"])


def test_float_scalars_and_signed_zero_are_not_confused():
    k = _scale_kernel()
    n = 64
    x = B.empty(n, "float32")
    x[:] = np.arange(1, n + 1, dtype=np.float32)
    out = B.empty(n, "float32")
    m = n // V.LANES["float32"]
    ptrs = (C.address(x), C.address(out))
    for s in (2.0, 0.0, -0.0, 3.0, 2.0, -0.0, 0.0, 2, 0, -0.0):
        out[:] = np.nan
        k((x, out), ptrs, (m, m), (s, m))
        np.testing.assert_array_equal(out, x * np.float32(s))
        assert np.all(np.signbit(out) == np.signbit(x * np.float32(s))), s
    # zero scalars are never kept: a context for 0 must not be reused for -0.0 (they compare equal)
    assert sorted(key[4] for key in k.ctxs) == [2.0, 3.0]  # key: (*ptrs, *counts, s, m)


def test_new_buffers_at_reused_addresses_and_cache_bound():
    """Outputs freed and reallocated (glibc hands back the same address), inputs changed in place, and more
    distinct argument sets than the cache keeps: every result right, the cache bounded."""
    n, dt = 5000, "float32"
    rng = np.random.default_rng(0)
    x = sm.tensor(rng.standard_normal(n).astype(np.float32))
    ys = [sm.tensor(rng.standard_normal(n).astype(np.float32)) for _ in range(V.CTX_CACHE + 5)]
    for rep in range(2):
        for y in ys:
            np.testing.assert_array_equal((x + y).numpy(), x.numpy() + y.numpy())
            np.testing.assert_array_equal((x * y).numpy(), x.numpy() * y.numpy())
    sizes = [len(k.ctxs) for key, k in C._cache.items() if isinstance(k, V.VecLaunch) and key[0] == "binary_lanes"]
    assert sizes and max(sizes) <= V.CTX_CACHE
    # a buffer written between two launches with the same arguments: the relaunch reads the new values
    out = B.empty(n, dt)
    a, b = B.empty(n, dt), B.empty(n, dt)
    for v in (1.0, 2.0, -3.5):
        a[:], b[:] = v, np.arange(n, dtype=np.float32)
        E.binary("add", a, b, out, (n,), (n,), (n,), dt, dt)
        np.testing.assert_array_equal(out, a + b)


def test_scalar_kernels_reuse_contexts_and_keep_signed_zeros():
    """FastLaunch (the scalar kernels) keeps contexts of host-buffer launches too: fill with 0.0, -0.0 and
    others in turn, into the same and into new buffers; and Python scalars -0.0 / 0.0 in expressions."""
    n, dt = 100, "float32"
    out = B.empty(n, dt)
    for v in (2.0, 0.0, -0.0, 2.0, -0.0, 0.0, 0, -1.5, 2.0):
        out[:] = np.nan
        E.fill(out, v, n, dt)
        np.testing.assert_array_equal(out, np.float32(v))
        assert np.all(np.signbit(out) == np.signbit(np.float32(v))), v
    k = next(fl for key, fl in C._cache.items() if key[:2] == ("fill", dt))
    vals = {key[-2] for key in k.ctxs or ()}  # key: (ptr, size, value, n); earlier tests may have cached others
    assert {2.0, -1.5} <= vals and not any(v == 0 for v in vals), vals  # signed zeros are never cached
    x = sm.tensor(np.ones(5, np.float32))
    for s in (0.0, -0.0, 0.0, -0.0):
        r = (x * s).numpy()
        assert np.all(np.signbit(r) == (np.copysign(1.0, s) < 0)), s
