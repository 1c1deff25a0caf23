"""The FMA kernels of sciml/kernels/skinny_gemm.py (fma_tile.py's axpy linked as LLVM bitcode): C = A W and
C = A W^T (register tiles of RB rows, ragged row counts, partial tasks, odd k) and the weight gradient H^T G
(chunked reduction, partial register tiles): close to float64 numpy (as close as float32 BLAS), the same bits
serial and parallel, NaN propagated to exactly the outputs it reaches, the switch and the fallbacks."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import _vec as V
from sciml.kernels import fma_tile as FT
from sciml.kernels import skinny_gemm as SK


@pytest.fixture(autouse=True)
def _fma_on(monkeypatch):
    """The FMA kernels are opt-in (SCIML_SKINNY_FMA=1; skinny_gemm's doc): these tests switch them on."""
    monkeypatch.setattr(SK, "FMA", [True])


pytestmark = pytest.mark.skipif(not (backend.on_host() and FT.available() and V.wide("float32") in FT.AXPY_LANES
                                     and V.wide("float32") >= 16), reason="x86-64 AVX-512 CPU kernels")


def _tol(an, wn):   # float32 rounding of a k-term sum of products, scaled by the operands
    return 4 * np.finfo(np.float32).eps * (np.abs(an).astype(np.float64) @ np.abs(wn).astype(np.float64)) + 1e-30


@pytest.mark.parametrize("m,k,n,tb", [(1030, 32, 32, False), (4099, 17, 16, True), (2051, 24, 16, False),
                                      (1027, 32, 32, True), (257, 32, 32, True)])
def test_fma_gemm_matches_numpy(monkeypatch, m, k, n, tb):
    monkeypatch.setattr(SK, "MIN_WORK", 1)
    rng = np.random.default_rng(m + k)
    an = rng.standard_normal((m, k)).astype(np.float32)
    wn = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    W = wn.T if tb else wn
    a, w = backend.from_numpy(an.ravel(), "float32"), np.ascontiguousarray(wn.ravel())
    outs = []
    for serial in (True, False):
        out = backend.aligned_empty(m * n, "float32")
        out[:] = np.nan
        assert SK.run(a, w, out, m, n, k, tb, "float32", serial, parallel_fma=True)
        outs.append(out.reshape(m, n))
    assert np.array_equal(outs[0], outs[1])   # the sum over k per lane in one order, whatever the split
    ref = an.astype(np.float64) @ W.astype(np.float64)
    assert (np.abs(outs[0] - ref) <= _tol(an, W)).all()
    assert np.abs(outs[0] - ref).max() <= 2 * np.abs((an @ W) - ref).max() + 1e-6   # as close as BLAS
    # NaN in a row of A: that row of C only (the row tiles and the last partial tile)
    for r in (3, m - 1):
        an2 = an.copy()
        an2[r, k // 2] = np.nan
        out = backend.aligned_empty(m * n, "float32")
        assert SK.run(backend.from_numpy(an2.ravel(), "float32"), w, out, m, n, k, tb, "float32", True)
        out = out.reshape(m, n)
        assert np.isnan(out[r]).all() and not np.isnan(np.delete(out, r, axis=0)).any()


@pytest.mark.parametrize("k,m,n", [(5000, 32, 32), (4099, 20, 16), (8192, 2, 32)])
def test_fma_weight_gradient_matches_numpy(monkeypatch, k, m, n):
    monkeypatch.setattr(SK, "TN_MIN_K", 4096)
    rng = np.random.default_rng(k)
    hn = rng.standard_normal((k, m)).astype(np.float32)
    gn = rng.standard_normal((k, n)).astype(np.float32)
    h, g = backend.from_numpy(hn.ravel(), "float32"), backend.from_numpy(gn.ravel(), "float32")
    outs = []
    for serial in (True, False):
        out = np.full(m * n, np.nan, np.float32)   # any alignment (a region of the gradient buffer)
        assert SK.run_tn(h, g, out, m, n, k, "float32", serial)
        outs.append(out.reshape(m, n))
    assert np.array_equal(outs[0], outs[1])   # fixed chunks, partials added in order
    ref = hn.T.astype(np.float64) @ gn.astype(np.float64)
    assert (np.abs(outs[0] - ref) <= _tol(hn.T, gn)).all()
    hn[k - 1, m - 1] = np.nan   # the last chunk's last row: row m-1 of the gradient only
    out = np.empty(m * n, np.float32)
    assert SK.run_tn(backend.from_numpy(hn.ravel(), "float32"), g, out, m, n, k, "float32", True)
    out = out.reshape(m, n)
    assert np.isnan(out[m - 1]).all() and not np.isnan(out[:m - 1]).any()


def test_switch_and_fallbacks(monkeypatch):
    m, k, n = 4096, 32, 32
    out = backend.aligned_empty(m * n, "float32")
    assert SK.lanes(m, n, k, False, True, "float32", False, out) == V.wide("float32")
    a = backend.aligned_empty(m * k, "float32")
    assert not SK.run(a, a, out, m, n, k, False, "float64", True)            # float64: BLAS
    assert not SK.run(a, a, out, m, n, k, False, "float32", False)          # parallel beside BLAS's threads: BLAS
    assert not SK.run_tn(a, a, out, k, n, m, "float64", True)
    assert SK.lanes(m, 20, k, False, False, "float32", False, out) is None   # a width the lanes do not divide
    assert SK.lanes(m, 48, k, False, True, "float32", False, out) is None    # wider than FMA_MAX: BLAS
    assert not SK.run_tn(a, a, out, 48, n, 1 << 15, "float32", True)
    assert SK.lanes(m, n, k, False, False, "float32", True, out) is None     # accumulate
    assert SK.lanes(m, n, k, False, False, "float32", False, out[1:]) is None  # C not aligned for the vectors
    big = backend.aligned_empty(SK.TN_MIN_K * 32 + 16, "float32")
    big[:] = 0
    dw = np.empty(32 * n, np.float32)
    assert SK.run_tn(big, big, dw, 32, n, SK.TN_MIN_K, "float32", True) and not dw.any()
    assert not SK.run_tn(big, big[1:], dw, 32, n, SK.TN_MIN_K, "float32", True)  # G not aligned
    assert not SK.run_tn(a, a, out, 32, n, SK.TN_MIN_K - 1, "float32", True)
    monkeypatch.setattr(SK, "FMA", [False])   # the switch: the opt-in kernel without FMA (no tb), else BLAS
    assert SK.lanes(m, n, k, False, False, "float32", False, out) is None
    assert not SK.run_tn(big, big, dw, 32, n, SK.TN_MIN_K, "float32", True)
    monkeypatch.setattr(SK, "ENABLED", [True])
    assert SK.lanes(m, n, k, False, True, "float32", False, out) is None
    assert SK.lanes(m, n, k, False, False, "float32", False, out) == V.wide("float32")


def test_matmul_op_takes_it(monkeypatch):
    """sm.matmul's float32 2-D products reach the kernel (A @ W and A @ W^T) where BLAS runs on one thread:
    numpy's values; with BLAS's own threads they stay BLAS (not measured faster there)."""
    from sciml.kernels import linalg as LK
    monkeypatch.setattr(LK._blas, "get_threads", lambda: 1)
    calls = []
    real = SK.matmul
    monkeypatch.setattr(SK, "matmul", lambda *a, **kw: calls.append(a[3:6]) or real(*a, **kw))
    rng = np.random.default_rng(1)
    an, wn = rng.standard_normal((2048, 32)).astype(np.float32), rng.standard_normal((32, 32)).astype(np.float32)
    r1 = (sm.tensor(an, "float32") @ sm.tensor(wn, "float32")).numpy()
    r2 = sm.matmul(sm.tensor(an, "float32"), sm.tensor(wn, "float32"), transpose_b=True).numpy()
    assert calls == [(2048, 32, 32)] * 2
    np.testing.assert_allclose(r1, an.astype(np.float64) @ wn, rtol=0, atol=1e-4)
    np.testing.assert_allclose(r2, an.astype(np.float64) @ wn.T, rtol=0, atol=1e-4)
    monkeypatch.setattr(LK._blas, "get_threads", lambda: 2)
    r3 = (sm.tensor(an, "float32") @ sm.tensor(wn, "float32")).numpy()
    assert len(calls) == 2
    np.testing.assert_allclose(r3, r1, rtol=0, atol=1e-4)
