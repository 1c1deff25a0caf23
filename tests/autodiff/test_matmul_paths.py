"""matmul's CPU fast paths (issue 18, skinny PINN GEMMs): ``ops.matmul``'s 2-D shortcut and ``_host_matmul``
calling numpy's matmul when numpy's OpenBLAS is the ctypes BLAS. Both must give what the general paths give:
the same bits (the same cblas call), the same errors, gradients through the same primitive."""
import numpy as np
import pytest

import sciml as sm
from sciml.autodiff.ops import linalg as LA
from sciml.kernels import blas
from sciml.kernels import linalg as KL

SHAPES = [(10000, 32, 32), (41600 // 8, 32, 32), (7, 5, 3), (2, 1, 2), (33, 17, 33)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_host_matmul_numpy_call_matches_ctypes_call(monkeypatch, dtype, m, k, n, ta, tb):
    if blas.lib() is None or not blas.numpy_same():
        pytest.skip("no ctypes OpenBLAS (numpy's) here: nothing to compare")
    rng = np.random.default_rng(m * 31 + n)
    a = rng.standard_normal(m * k).astype(dtype)
    b = rng.standard_normal(k * n).astype(dtype)
    got = np.full(m * n + 3, 7.0, dtype)  # a longer buffer: the GEMM writes its first m*n only
    KL._host_matmul(a, b, got, 1, m, n, k, ta, tb, dtype, False)
    monkeypatch.setattr(blas, "numpy_same", lambda: False)  # the ctypes call
    ref = np.full(m * n + 3, 7.0, dtype)
    KL._host_matmul(a, b, ref, 1, m, n, k, ta, tb, dtype, False)
    assert np.array_equal(got, ref)
    A = a.reshape((k, m) if ta else (m, k))
    B = b.reshape((n, k) if tb else (k, n))
    want = (A.T if ta else A).astype(np.float64) @ (B.T if tb else B).astype(np.float64)
    np.testing.assert_allclose(got[:m * n].reshape(m, n), want, rtol=1e-4 if dtype == "float32" else 1e-12,
                               atol=1e-4 if dtype == "float32" else 1e-12)
    assert np.all(got[m * n:] == 7.0)


def test_numpy_same_follows_the_library(monkeypatch):
    """The answer follows the library in use (tests swap it), and is False for MKL."""
    class Fake:
        sciml_kind = "mkl"
    monkeypatch.setitem(blas._state, "lib", Fake())
    monkeypatch.setitem(blas._state, "checked", True)
    assert blas.numpy_same() is False
    Fake.sciml_kind = "openblas"
    monkeypatch.setitem(blas._state, "lib", Fake())
    assert blas.numpy_same() is True
    monkeypatch.setitem(blas._state, "lib", None)
    assert blas.numpy_same() is True


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_2d_shortcut_matches_general_path(monkeypatch, dtype):
    rng = np.random.default_rng(3)
    an, bn = rng.standard_normal((40, 6)).astype(dtype), rng.standard_normal((6, 5)).astype(dtype)
    a, b = sm.tensor(an, dtype), sm.tensor(bn, dtype)
    fast = (a @ b).numpy()
    ref = LA._mm(a, b, ta=False, tb=False).numpy()  # the primitive the general path calls
    assert fast.dtype == np.dtype(dtype) and np.array_equal(fast, ref)
    # np.bool_ flags take the general path: the same result
    assert np.array_equal(sm.matmul(a, b, transpose_a=np.bool_(False)).numpy(), fast)


def test_2d_shortcut_errors_and_gradients():
    a = sm.tensor(np.ones((4, 3)), "float64")
    with pytest.raises(ValueError, match="do not align"):
        a @ sm.tensor(np.ones((4, 2)), "float64")
    with pytest.raises(TypeError, match="transpose_a"):
        sm.matmul(a, a, transpose_a=1)
    with pytest.raises(TypeError, match="float32 or float64"):
        sm.matmul(sm.tensor(np.ones((2, 2), np.int32)), sm.tensor(np.ones((2, 2), np.int32)))
    # a float32 @ float64 pair goes to the general path and its error (no silent promotion)
    with pytest.raises(TypeError, match="does not promote"):
        sm.tensor(np.ones((2, 3)), "float32") @ sm.tensor(np.ones((3, 2)), "float64")
    # gradients through the shortcut: d/dA sum(A @ B) = ones @ B.T, d/dB = A.T @ ones
    rng = np.random.default_rng(0)
    An, Bn = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    gA, gB = sm.grad(lambda A, B: (A @ B).sum(), argnums=(0, 1))(sm.tensor(An), sm.tensor(Bn))
    np.testing.assert_allclose(gA.numpy(), np.ones((5, 3)) @ Bn.T, rtol=1e-13)
    np.testing.assert_allclose(gB.numpy(), An.T @ np.ones((5, 3)), rtol=1e-13)


@pytest.mark.parametrize("m,k,n", [(10000, 32, 32), (4100, 12, 64), (2048, 17, 32), (4099, 64, 16)])
def test_skinny_kernel_matches_numpy_and_is_split_independent(monkeypatch, m, k, n):
    """The opt-in skinny float32 kernel (SCIML_SKINNY_GEMM=1): close to float64 numpy, and the serial and the
    parallel compilations give the same bits (the sum over k per lane in one order)."""
    from sciml import backend
    from sciml.kernels import _vec as V
    from sciml.kernels import skinny_gemm as SK
    if V.wide("float32") < 16 or n % V.wide("float32"):
        pytest.skip("the skinny kernel runs on AVX-512 hosts only")
    monkeypatch.setattr(SK, "ENABLED", [True])
    rng = np.random.default_rng(m)
    an, wn = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    a, w = backend.from_numpy(an.ravel(), "float32"), np.ascontiguousarray(wn.ravel())
    L = SK.lanes(m, n, k, False, False, "float32", False, backend.empty(m * n, "float32"))
    assert L == V.wide("float32")
    outs = []
    for serial in (True, False):
        out = backend.empty(m * n, "float32")
        SK.matmul(a, w, out, m, n, k, L, serial)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])
    ref = an.astype(np.float64) @ wn.astype(np.float64)
    np.testing.assert_allclose(outs[0].reshape(m, n), ref, rtol=0, atol=2e-5 * np.sqrt(k))
    # through the op, and NaN in a row of A gives NaN in that row of C only
    an[5, 3] = np.nan
    r = (sm.tensor(an, "float32") @ sm.tensor(wn, "float32")).numpy()
    assert np.isnan(r[5]).all() and not np.isnan(np.delete(r, 5, axis=0)).any()
    # not taken: transposes, accumulation, float64, a width the lanes do not divide
    out = backend.empty(m * n, "float32")
    assert SK.lanes(m, n, k, True, False, "float32", False, out) is None
    assert SK.lanes(m, n, k, False, False, "float32", True, out) is None
    assert SK.lanes(m, n, k, False, False, "float64", False, out) is None
    assert SK.lanes(m, 20, k, False, False, "float32", False, out) is None
