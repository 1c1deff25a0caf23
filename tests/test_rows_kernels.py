"""The row-wise kernels of ``sciml/kernels/rows.py`` against numpy, bit for bit: the blocked loops (one
index division chain per group of rows), the vector forms (16-byte and 64-byte lanes, vector or broadcast
operands, the L x L tile transpose) and their fallbacks (misaligned buffers, short or odd rows), serialized
and parallel, float32 and float64."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import _common as C
from sciml.kernels import rows as R


@pytest.fixture(autouse=True)
def _cpu():
    sm.init(arch="cpu", dtype="float64")


def _buf(a, shift=0):
    """A flat host buffer holding ``a``: sciml's 64-byte aligned one, or (shift > 0) a view ``shift``
    elements past an aligned start (16-byte aligned only, or not even that for odd float32 shifts)."""
    b = backend.aligned_empty(a.size + shift, a.dtype.name)
    b = b[shift:]
    b[:] = a.ravel()
    return b


def _meta(view, base):
    """(offset, rank, shape..., strides...) in elements of a numpy view of the flat ``base``."""
    it = base.itemsize
    off = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // it
    return (off, view.ndim, *view.shape, *(s // it for s in view.strides))


def _views(x):
    B = x.shape[0]
    return [x.transpose(0, 2, 1), x.transpose(2, 0, 1), x.transpose(1, 0, 2), x[:, 1:, :], x[:, ::-2, :],
            x[:, :, 16:], np.broadcast_to(x[0], (3,) + x.shape[1:]), np.broadcast_to(x[:, :1, :], x.shape),
            x.reshape(B, -1)[:, ::-1]]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("serial", [True, False])
@pytest.mark.parametrize("shape", [(7, 32, 64), (5, 48, 16), (6, 33, 40), (3, 64, 9)])
def test_gather_and_scatter_equal_numpy(dtype, serial, shape, monkeypatch):
    monkeypatch.setattr(C, "launch_mode", lambda n, cost=4: serial)
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape).astype(dtype)
    for shift in (0, 1, 4):
        src = _buf(a, shift)
        x = src.reshape(shape)
        for v in _views(x):
            out = backend.aligned_empty(v.size, dtype)
            out[:] = np.nan
            done = R.gather(src, out, v.size, _meta(v, src), dtype)
            if done:
                np.testing.assert_array_equal(out.reshape(v.shape), v)
            if v.base is not None and all(s != 0 for s in v.strides):  # distinct addresses: the scatter
                g = _buf(rng.standard_normal(v.shape).astype(dtype))
                dst = np.zeros(src.size, dtype)
                if R.scatter(g, dst, v.size, _meta(v, src), dtype):
                    want = np.zeros_like(dst)
                    want_v = np.lib.stride_tricks.as_strided(want[_meta(v, src)[0]:], v.shape, v.strides)
                    want_v[...] = g.reshape(v.shape)
                    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("serial", [True, False])
def test_general_binary_equals_numpy(dtype, serial, monkeypatch):
    monkeypatch.setattr(C, "launch_mode", lambda n, cost=4: serial)
    rng = np.random.default_rng(5)
    cases = [((21, 64, 16), (21, 1, 16)), ((64, 1), (21, 1, 16)), ((21, 1, 16), (64, 1)), ((21, 64, 32), (1, 64, 32)),
             ((9, 40, 24), (9, 1, 24)), ((5, 17, 48), (5, 17, 1)), ((6, 8, 12), (6, 1, 12)), ((33, 10), (1, 10))]
    for op, fn in (("add", np.add), ("mul", np.multiply), ("sub", np.subtract), ("div", np.divide)):
        for xs, ys in cases:
            a = rng.standard_normal(xs).astype(dtype)
            b = rng.standard_normal(ys).astype(dtype) + (3.0 if op == "div" else 0.0)
            outs = np.broadcast_shapes(xs, ys)
            for shift in (0, 1):
                xb, yb = _buf(a, shift), _buf(b)
                out = backend.aligned_empty(int(np.prod(outs)), dtype)
                if R.general_binary(op, xb, yb, out, xs, ys, outs, dtype):
                    np.testing.assert_array_equal(out.reshape(outs), fn(a, b))


def test_wide_lanes_and_tiles_are_taken_on_aligned_buffers(monkeypatch):
    """On sciml's 64-byte aligned buffers the vector forms run (a transpose by L x L tiles, a broadcast by
    vector copies, a (B, m, n) + (B, 1, n) add by vectors): counted through the kernel cache keys."""
    from sciml.kernels import _vec as V
    from sciml.kernels import elementwise as E
    if not E.VECTOR:
        pytest.skip("vector kernels off")
    L = V.mem_lanes("float32")
    x = _buf(np.arange(8 * 64 * 32, dtype=np.float32)).reshape(8, 64, 32)
    src = x.reshape(-1)
    for v, kind in ((x.transpose(0, 2, 1), "tile"), (np.broadcast_to(x[0], (4, 64, 32)), True)):
        out = backend.aligned_empty(v.size, "float32")
        assert R.gather(src, out, v.size, _meta(v, src), "float32")
        np.testing.assert_array_equal(out.reshape(v.shape), v)
        assert any(k[:1] == ("rows_gather_lanes",) and k[3] == L and k[4] == kind for k in C._cache)
    y = _buf(np.ones(8 * 32, np.float32))
    out = backend.aligned_empty(x.size, "float32")
    assert R.general_binary("add", src, y, out, (8, 64, 32), (8, 1, 32), (8, 64, 32), "float32")
    np.testing.assert_array_equal(out.reshape(8, 64, 32), x + 1)
    assert any(k[:1] == ("rows_gbinary_lanes",) and k[-1] == L for k in C._cache)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("serial", [True, False])
def test_suffix_binary_and_pair_sum_equal_numpy(dtype, serial, monkeypatch):
    """The suffix broadcast ((rows, inner) op (inner,)) and the product-rule pair sum at 64-byte, 16-byte
    and no vectors (inner 64 / 48 / 20 / 33 at float32 and float64), aligned and misaligned."""
    monkeypatch.setattr(C, "launch_mode", lambda n, cost=4: serial)
    rng = np.random.default_rng(7)
    for rows, inner in ((300, 64), (200, 48), (257, 20), (150, 33)):
        a = rng.standard_normal((rows, inner)).astype(dtype)
        c = rng.standard_normal((rows, inner)).astype(dtype)
        p, q = rng.standard_normal(inner).astype(dtype), rng.standard_normal(inner).astype(dtype)
        for shift in (0, 1):
            ab, cb, pb, qb = _buf(a, shift), _buf(c), _buf(p), _buf(q, shift)
            out = backend.aligned_empty(rows * inner, dtype)
            for op, fn in (("mul", np.multiply), ("sub", np.subtract)):
                assert R.suffix_binary(op, ab, pb, out, rows, inner, True, dtype)
                np.testing.assert_array_equal(out.reshape(rows, inner), fn(a, p))
                assert R.suffix_binary(op, pb, ab, out, rows, inner, False, dtype)
                np.testing.assert_array_equal(out.reshape(rows, inner), fn(p, a))
            R.pair_sum("mul", "mul", ab, pb, qb, cb, out, rows, inner, dtype)
            np.testing.assert_array_equal(out.reshape(rows, inner), a * p + q * c)
