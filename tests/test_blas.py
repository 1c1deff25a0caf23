"""CPU GEMM dispatch: MKL's CBLAS (when installed) and numpy's BLAS give numpy's answer."""
import numpy as np
import pytest

import sciml as sm
from sciml.kernels import blas, linalg


@pytest.fixture(params=["mkl", "numpy"])
def which(request, monkeypatch):
    if request.param == "mkl" and not blas.available():
        pytest.skip("MKL not installed (a dependency on Linux x86-64 only; elsewhere numpy's BLAS is used)")
    if request.param == "numpy":
        monkeypatch.setitem(blas._state, "lib", None)
        monkeypatch.setitem(blas._state, "checked", True)
    return request.param


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch", [1, 3, 40])
def test_matmul_dispatch_matches_numpy(which, dtype, ta, tb, batch):
    sm.init(arch="cpu")
    rng = np.random.default_rng(batch + 2 * ta + 4 * tb)
    m, n, k = 7, 5, 9
    A = rng.standard_normal((batch, k, m) if ta else (batch, m, k)).astype(dtype)
    B = rng.standard_normal((batch, n, k) if tb else (batch, k, n)).astype(dtype)
    out = np.full(batch * m * n, np.nan, dtype)
    linalg.matmul(A.ravel(), B.ravel(), out, batch, m, n, k, ta, tb, dtype, True)
    ref = np.matmul(A.transpose(0, 2, 1) if ta else A, B.transpose(0, 2, 1) if tb else B)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out.reshape(batch, m, n), ref, rtol=tol, atol=tol)


def test_matmul_on_offset_views(which):
    """Buffers that are slices of a larger buffer (the fused PINN path splits GEMMs in halves)."""
    sm.init(arch="cpu")
    rng = np.random.default_rng(0)
    big = rng.standard_normal(1000)
    a, b = big[13:13 + 6 * 4], big[101:101 + 4 * 3]
    out = np.zeros(50)
    linalg.matmul(a, b, out[7:], 1, 6, 3, 4, False, False, "float64", True)
    np.testing.assert_allclose(out[7:25].reshape(6, 3), a.reshape(6, 4) @ b.reshape(4, 3), rtol=1e-13)
    assert np.all(out[:7] == 0) and np.all(out[25:] == 0)


def test_empty_dimensions(which):
    sm.init(arch="cpu")
    x = sm.tensor(np.ones((3, 0)))
    y = sm.tensor(np.ones((0, 4)))
    np.testing.assert_array_equal((x @ y).numpy(), np.zeros((3, 4)))


def test_bad_choice_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(blas._state, "checked", False)
    monkeypatch.setitem(blas._state, "lib", None)
    monkeypatch.setenv("SCIML_BLAS", "openblas")
    with pytest.raises(ValueError, match="SCIML_BLAS: expected 'auto', 'mkl' or 'numpy', got 'openblas'"):
        blas.mkl()


def test_threads_roundtrip():
    if not blas.available():
        pytest.skip("MKL not installed (a dependency on Linux x86-64 only; elsewhere numpy's BLAS is used)")
    before = blas.get_threads()
    blas.set_threads(1)
    assert blas.get_threads() == 1
    blas.set_threads(before)
    assert blas.get_threads() == before
    with blas.threads(1):
        pass


@pytest.mark.parametrize("backend_", ["mkl", "numpy", "taichi"])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_matmul_accumulate(backend_, ta, tb, monkeypatch):
    """out += op(a) @ op(b): the second GEMM of matmul2 (JVP of a product of two tangents)."""
    sm.init(arch="cpu")
    if backend_ == "mkl" and not blas.available():
        pytest.skip("MKL not installed (a dependency on Linux x86-64 only; elsewhere numpy's BLAS is used)")
    if backend_ == "numpy":
        monkeypatch.setitem(blas._state, "lib", None)
        monkeypatch.setitem(blas._state, "checked", True)
    rng = np.random.default_rng(1)
    m, n, k, batch = 6, 5, 7, 2
    A = rng.standard_normal((batch, k, m) if ta else (batch, m, k))
    B = rng.standard_normal((batch, n, k) if tb else (batch, k, n))
    C0 = rng.standard_normal((batch, m, n))
    out = C0.ravel().copy()
    linalg.matmul(A.ravel(), B.ravel(), out, batch, m, n, k, ta, tb, "float64", backend_ != "taichi", True)
    ref = C0 + np.matmul(A.transpose(0, 2, 1) if ta else A, B.transpose(0, 2, 1) if tb else B)
    np.testing.assert_allclose(out.reshape(batch, m, n), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(300, 200, 80), (40, 600, 200)])  # split along m, along n
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_large_gemm_split_in_two(shape, ta, tb, accumulate):
    """GEMMs above SPLIT_MIN run as two halves on two threads (MKL "split" mode)."""
    sm.init(arch="cpu")
    if not blas.available():
        pytest.skip("MKL not installed (a dependency on Linux x86-64 only; elsewhere numpy's BLAS is used)")
    m, n, k = shape
    assert m * n * k >= blas.SPLIT_MIN
    rng = np.random.default_rng(m + n)
    A = rng.standard_normal((k, m) if ta else (m, k))
    B = rng.standard_normal((n, k) if tb else (k, n))
    C0 = rng.standard_normal((m, n))
    out = C0.ravel().copy()
    assert blas.gemm(A.ravel(), B.ravel(), out, m, n, k, ta, tb, "float64", accumulate)
    ref = (A.T if ta else A) @ (B.T if tb else B) + (C0 if accumulate else 0.0)
    np.testing.assert_allclose(out.reshape(m, n), ref, rtol=1e-10, atol=1e-10)
    with blas.threads(1):
        assert blas.get_threads() == 1
        out1 = C0.ravel().copy()
        blas.gemm(A.ravel(), B.ravel(), out1, m, n, k, ta, tb, "float64", accumulate)
    np.testing.assert_allclose(out1, out, rtol=1e-12, atol=1e-12)


def test_split_mode_in_its_own_process():
    """SCIML_GEMM_THREADS=split (MKL sequential, large GEMMs in two halves): same results."""
    if not blas.available():
        pytest.skip("MKL not installed (a dependency on Linux x86-64 only; elsewhere numpy's BLAS is used)")
    import os
    import subprocess
    import sys
    code = (
        "import numpy as np\n"
        "from sciml.kernels import blas\n"
        "assert blas.mkl() is not None and blas._state['mode'] == 'split'\n"
        "rng = np.random.default_rng(0)\n"
        "for (m, n, k) in [(300, 200, 80), (40, 600, 200)]:\n"
        "    for ta in (False, True):\n"
        "        for tb in (False, True):\n"
        "            A = rng.standard_normal((k, m) if ta else (m, k)); B = rng.standard_normal((n, k) if tb else (k, n))\n"
        "            C0 = rng.standard_normal((m, n)); out = C0.ravel().copy()\n"
        "            blas.gemm(A.ravel(), B.ravel(), out, m, n, k, ta, tb, 'float64', True)\n"
        "            ref = (A.T if ta else A) @ (B.T if tb else B) + C0\n"
        "            assert np.allclose(out.reshape(m, n), ref, rtol=1e-10, atol=1e-10), (m, n, k, ta, tb)\n"
        "assert blas.get_threads() == 2\n"
        "print('ok')\n")
    env = dict(os.environ, SCIML_GEMM_THREADS="split")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
