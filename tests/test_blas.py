"""CPU GEMM dispatch: MKL's and numpy's OpenBLAS's CBLAS via ctypes (when found) and numpy's matmul
give numpy's answer; the SCIML_BLAS / CPU-vendor selection."""
import numpy as np
import pytest

import sciml as sm
from sciml.kernels import blas, linalg


_MISSING = {"mkl": "MKL not installed (optional: pip install \"sciml[mkl]\")",
            "openblas": "numpy's bundled OpenBLAS not found (numpy 2.x wheels ship numpy.libs/libscipy_openblas64_)"}


def _use(kind, monkeypatch):
    """Route sciml's CPU GEMM through ``kind`` ("mkl", "openblas" or "numpy") for one test."""
    lib = None
    if kind != "numpy":
        lib = blas.load(kind)
        if lib is None:
            pytest.skip(_MISSING[kind])
    monkeypatch.setitem(blas._state, "lib", lib)
    monkeypatch.setitem(blas._state, "checked", True)
    return lib


@pytest.fixture(params=["mkl", "openblas", "numpy"])
def which(request, monkeypatch):
    _use(request.param, monkeypatch)
    return request.param


@pytest.fixture(params=["mkl", "openblas"])
def ctypes_blas(request, monkeypatch):
    return _use(request.param, monkeypatch)


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
    monkeypatch.setenv("SCIML_BLAS", "goto")
    with pytest.raises(ValueError, match="SCIML_BLAS: expected 'auto', 'mkl', 'openblas', 'numpy', got 'goto'"):
        blas.mkl()


def test_threads_roundtrip(ctypes_blas):
    before = blas.get_threads()
    blas.set_threads(1)
    assert blas.get_threads() == 1
    blas.set_threads(before)
    assert blas.get_threads() == before
    with blas.threads(1):
        assert blas.get_threads() == 1
    assert blas.get_threads() == before


@pytest.mark.parametrize("backend_", ["mkl", "openblas", "numpy", "taichi"])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_matmul_accumulate(backend_, ta, tb, monkeypatch):
    """out += op(a) @ op(b): the second GEMM of matmul2 (JVP of a product of two tangents)."""
    sm.init(arch="cpu")
    if backend_ != "taichi":
        _use(backend_, monkeypatch)
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
def test_large_gemm_split_in_two(ctypes_blas, shape, ta, tb, accumulate):
    """Large GEMMs (MKL "split" mode: two halves on two threads), and with ``threads(1)``."""
    sm.init(arch="cpu")
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
    if blas.load("mkl") is None:
        pytest.skip(_MISSING["mkl"])
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
    env = dict(os.environ, SCIML_GEMM_THREADS="split", SCIML_BLAS="mkl")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# --- numpy's bundled OpenBLAS through ctypes (ILP64 ``scipy_cblas_?gemm64_``) ------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(7, 5, 9), (33, 17, 65), (1, 13, 4), (6, 1, 3), (5, 4, 1), (1, 1, 1),
                                   (130, 70, 257)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_openblas_gemm_matches_numpy(monkeypatch, dtype, shape, ta, tb, accumulate):
    lib = _use("openblas", monkeypatch)
    assert lib.sciml_kind == "openblas" and blas.name().startswith("openblas (libscipy_openblas")
    m, n, k = shape
    rng = np.random.default_rng(m * 100 + n * 10 + k + 2 * ta + tb)
    A = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    B = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    C0 = rng.standard_normal((m, n)).astype(dtype)
    out = np.concatenate([C0.ravel(), np.full(3, 7.0, dtype)])  # 3 guard elements past m*n
    assert blas.gemm(A.ravel(), B.ravel(), out, m, n, k, ta, tb, dtype, accumulate)
    ref = np.matmul(A.T if ta else A, B.T if tb else B) + (C0 if accumulate else 0)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out[:m * n].reshape(m, n), ref, rtol=tol, atol=tol)
    assert np.all(out[m * n:] == 7.0)


def test_openblas_is_numpys_instance(monkeypatch):
    """The library loaded is the one numpy's matmul uses: one thread count for both."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import os
    lib = _use("openblas", monkeypatch)
    before = blas.get_threads()
    try:
        blas.set_threads(1)  # (scipy may bring an OpenBLAS of its own: only numpy's is ours)
        counts = [i["num_threads"] for i in threadpoolctl.threadpool_info()
                  if os.path.realpath(i["filepath"]) == lib.sciml_path]
        assert counts == [1]
    finally:
        blas.set_threads(before)
    assert blas.get_threads() == before


def test_zero_sized_gemm(ctypes_blas):
    out = np.full(6, 5.0)
    assert blas.gemm(np.empty(0), np.empty(0), out, 2, 3, 0, False, False, "float64", True)
    assert np.all(out == 5.0)
    assert blas.gemm(np.empty(0), np.empty(0), out, 2, 3, 0, True, True, "float64", False)
    assert np.all(out == 0.0)


# --- selection: SCIML_BLAS and the CPU vendor ---------------------------------------------------------

class _Fake:
    def __init__(self, kind):
        self.sciml_kind, self.sciml_path, self.sciml_core = kind, f"/x/lib{kind}.so", "Core"


@pytest.fixture
def select(monkeypatch):
    """``select(env, vendor, found)``: the library kind ``blas.lib()`` picks (None: numpy's matmul)
    with SCIML_BLAS=env, /proc/cpuinfo's vendor_id=vendor and the libraries in ``found`` present."""
    def run(env, vendor, found):
        monkeypatch.setitem(blas._state, "checked", False)
        monkeypatch.setitem(blas._state, "lib", None)
        monkeypatch.setattr(blas, "_loaded", {k: (_Fake(k), None) if k in found else (None, f"no {k}")
                                              for k in ("mkl", "openblas")})
        monkeypatch.setattr(blas, "_cpu_vendor", lambda: vendor)
        if env is None:
            monkeypatch.delenv("SCIML_BLAS", raising=False)
        else:
            monkeypatch.setenv("SCIML_BLAS", env)
        lib = blas.lib()
        assert blas.available() == (lib is not None)
        assert (blas.mkl() is not None) == (lib is not None and lib.sciml_kind == "mkl")
        return None if lib is None else lib.sciml_kind
    return run


@pytest.mark.parametrize("env", [None, "auto", " Auto "])
@pytest.mark.parametrize("vendor,found,expected", [
    ("GenuineIntel", {"mkl", "openblas"}, "mkl"),
    ("GenuineIntel", {"openblas"}, "openblas"),
    ("GenuineIntel", {"mkl"}, "mkl"),
    ("GenuineIntel", set(), None),
    ("AuthenticAMD", {"mkl", "openblas"}, "openblas"),
    ("AuthenticAMD", {"mkl"}, "mkl"),
    ("AuthenticAMD", {"openblas"}, "openblas"),
    ("AuthenticAMD", set(), None),
    ("", {"mkl", "openblas"}, "openblas"),  # vendor unknown
])
def test_auto_selection(select, env, vendor, found, expected):
    assert select(env, vendor, found) == expected
    assert blas.name().split()[0] == (expected or "numpy")


@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD"])
def test_explicit_selection(select, vendor):
    both = {"mkl", "openblas"}
    assert select("mkl", vendor, both) == "mkl"
    assert select("openblas", vendor, both) == "openblas"
    assert select("OpenBLAS", vendor, both) == "openblas"
    assert select("numpy", vendor, both) is None
    assert blas.name() == "numpy"
    with pytest.raises(RuntimeError, match="SCIML_BLAS=openblas but openblas could not be loaded: no openblas"):
        select("openblas", vendor, {"mkl"})
    with pytest.raises(RuntimeError, match="SCIML_BLAS=mkl but mkl could not be loaded: no mkl"):
        select("mkl", vendor, {"openblas"})


def test_auto_selection_with_the_real_libraries(monkeypatch):
    """The libraries present here, on a pretended AMD and Intel CPU."""
    if blas.load("openblas") is None:
        pytest.skip(_MISSING["openblas"])
    monkeypatch.delenv("SCIML_BLAS", raising=False)
    for vendor, first in (("AuthenticAMD", "openblas"), ("GenuineIntel", "mkl")):
        monkeypatch.setitem(blas._state, "checked", False)
        monkeypatch.setattr(blas, "_cpu_vendor", lambda vendor=vendor: vendor)
        want = first if blas.load(first) is not None else "openblas"
        assert blas.lib().sciml_kind == want and blas.lib() is blas.load(want)
        assert blas.name().startswith(want + " (")


def test_cpu_vendor_is_read():
    import os
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo")
    assert blas._cpu_vendor() in ("GenuineIntel", "AuthenticAMD") or blas._cpu_vendor()


def test_auto_in_a_fresh_process():
    """The default selection in a process of its own (it is made once per process)."""
    import os
    import subprocess
    import sys
    code = ("from sciml.kernels import blas\n"
            "lib = blas.lib()\n"
            "print(blas._cpu_vendor(), lib.sciml_kind if lib is not None else 'numpy',"
            " blas.load('mkl') is not None, blas.load('openblas') is not None)\n")
    env = {k: v for k, v in os.environ.items() if k != "SCIML_BLAS"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    vendor, kind, has_mkl, has_ob = r.stdout.split()
    has_mkl, has_ob = has_mkl == "True", has_ob == "True"
    if vendor == "GenuineIntel" and has_mkl:
        assert kind == "mkl"
    else:
        assert kind == ("openblas" if has_ob else "mkl" if has_mkl else "numpy")


# --- the device GEMM (kernels/blas.py: device_gemm) and column sums (kernels/colsum.py) ---------------

_DEVICE_CASES = [  # batch, m, n, k, ta, tb
    (1, 32, 32, 41600, True, False),   # a PINN weight gradient: H^T G, split over k
    (1, 10400, 32, 32, False, False),  # a PINN forward layer
    (1, 10400, 32, 32, False, True),   # dH = G W^T
    (1, 1, 32, 10400, False, False),   # ones @ G: a bias gradient (weighted column sum)
    (3, 1, 7, 999, True, True),
    (1, 41600, 1, 32, False, False),   # one output column: A @ v
    (1, 32, 1, 41600, True, False),    # ... with A transposed and k split
    (2, 13, 11, 5000, True, True), (3, 5, 7, 3, False, False), (2, 9, 6, 130, True, False),
    (1, 17, 19, 1, False, True), (4, 33, 35, 4097, False, False), (1, 6, 5, 0, False, False),
]

_DEVICE_CHECK = r'''
import sys, numpy as np, sciml as sm
sm.init(arch=sys.argv[1], dtype=sys.argv[2])
from sciml import backend, runtime
from sciml.kernels import blas, colsum as CS
dt = sys.argv[2]
tol = 2e-6 if dt == "float32" else 1e-12
rng = np.random.default_rng(0)
worst = 0.0
def buf(x):  # a device-style buffer (a ti.ndarray, also on CPU: the kernels' argument kinds stay fixed)
    return backend.from_numpy(x.ravel(), dt) if runtime.arch() != "cpu" else _nd(x.ravel())
def _nd(x):
    import taichi as ti
    b = ti.ndarray(backend.ti_dtype(dt), max(x.size, 1))
    if x.size:
        b.from_numpy(x.astype(dt))
    return b
for batch, m, n, k, ta, tb in CASES:
    A = rng.standard_normal((batch, k, m) if ta else (batch, m, k)).astype(dt)
    B = rng.standard_normal((batch, n, k) if tb else (batch, k, n)).astype(dt)
    C0 = rng.standard_normal((batch, m, n)).astype(dt)
    ref = (A.transpose(0, 2, 1) if ta else A).astype(np.float64) @ (B.transpose(0, 2, 1) if tb else B).astype(np.float64)
    for acc in (False, True):
        c = buf(C0)
        blas.device_gemm(buf(A), buf(B), c, batch, m, n, k, ta, tb, dt, accumulate=acc)
        got = c.to_numpy()[: batch * m * n].reshape(batch, m, n)
        want = ref + C0 if acc else ref
        err = float(np.abs(got - want).max()) / (np.sqrt(max(k, 1)) + 4) if want.size else 0.0
        worst = max(worst, err)
        assert err < tol, (batch, m, n, k, ta, tb, acc, err)
    big = buf(np.full(batch * m * n + 8, 7.0, dt))   # C written in place at an offset of a larger buffer
    blas.device_gemm(buf(A), buf(B), big, batch, m, n, k, ta, tb, dt, out_off=5)
    got = big.to_numpy()[: batch * m * n + 8]
    assert np.all(got[:5] == 7) and np.all(got[-3:] == 7), (batch, m, n, k)
    assert float(np.abs(got[5:-3] - ref.ravel()).max(initial=0)) / (np.sqrt(max(k, 1)) + 4) < tol
X = rng.standard_normal((2, 41600, 32)).astype(dt)
o = buf(np.zeros(64, dt))
CS.colsum(buf(X), o, 2, 41600, 32, dt)
err = float(np.abs(o.to_numpy()[:64] - X.astype(np.float64).sum(1).ravel()).max()) / np.sqrt(41600)
assert err < tol, err
print("DEVICE-GEMM-OK", worst, err)
'''


def _device_check(arch, dtype, cases):
    import os
    import subprocess
    import sys
    code = f"CASES = {cases!r}\n" + _DEVICE_CHECK
    env = dict(os.environ, SCIML_ARCH=arch)
    r = subprocess.run([sys.executable, "-c", code, arch, dtype], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0 and "DEVICE-GEMM-OK" in r.stdout, (r.stdout + r.stderr)[-4000:]


def test_device_plans_fill_threads_and_keep_loops_short():
    """The split of k (GEMM) and of rows (column sums): enough threads, at most DEVICE_MAX_K /
    MAX_CHUNK per thread, chunks covering k exactly once, no split of short sums."""
    from sciml.kernels import colsum
    for batch, m, n, k in [(1, 32, 32, 41600), (1, 32, 32, 166400), (1, 10400, 32, 32), (3, 5, 7, 1),
                           (1, 8, 4, 10 ** 7), (1, 32, 1, 41600), (2, 13, 11, 5000)]:
        kc, nch = blas.device_plan(batch, m, n, k)
        assert kc * nch >= k > kc * (nch - 1) and kc <= blas.DEVICE_MAX_K
        tiles = batch * -(-m // 8) * -(-n // 4)
        if k > blas.DEVICE_SPLIT_MIN:
            assert tiles * (nch + 1) >= min(blas.DEVICE_TARGET_THREADS, tiles * max(1, k // blas.DEVICE_MIN_K))
    assert blas.device_plan(1, 10400, 32, 32) == (32, 1)       # the forward GEMM: one launch
    assert blas.device_plan(1, 32, 32, 1000) == (1000, 1)      # a short sum: not split
    assert colsum.plan(1, 2000, 32) == (2000, 1)
    assert blas.device_plan(1, 32, 32, 41600)[1] >= 64          # the weight gradient: >= 2048 threads
    for batch, rows, cols in [(1, 41600, 32), (5, 10400, 32), (1, 10, 3), (1, 10 ** 7, 1), (1, 0, 4)]:
        ch, nch = colsum.plan(batch, rows, cols)
        assert ch * nch >= rows and ch <= max(colsum.MAX_CHUNK, 1) and (rows == 0 or ch * (nch - 1) < rows)
    assert colsum.plan(1, 41600, 32)[1] * 32 >= colsum.TARGET_THREADS


def test_device_gemm_kernels_float64_on_cpu():
    """The device kernels (strided operands, split k + partial sums, weighted column sums) in float64,
    run on arch=cpu against numpy (the CPU's own GEMMs stay on BLAS)."""
    _device_check("cpu", "float64", [(1, 16, 8, 9000, True, False), (1, 300, 32, 32, False, True),
                                     (3, 1, 7, 999, True, True), (1, 9, 1, 3000, True, False),
                                     (2, 13, 11, 500, False, True), (1, 6, 5, 0, False, False)])


def test_device_gemm_on_vulkan_float32():
    """matmul's device path on Vulkan (float32) against numpy, PINN shapes included."""
    import os

    from tests.test_vulkan import _vulkan_available
    if not _vulkan_available():
        if os.environ.get("SCIML_REQUIRE_VULKAN"):
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    _device_check("vulkan", "float32", _DEVICE_CASES)
