"""sciml.linalg: values against numpy/scipy, derivatives against finite differences (orders 1 and 2,
float64), the Taichi kernels (the device path) on CPU, jit replay, errors, and a Vulkan pass."""
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg as sl

import sciml as sm
from sciml import linalg as LA
from sciml.testing import check_grads

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(0)
A = rng.standard_normal((2, 4, 4))
SPD = A @ A.transpose(0, 2, 1) + 4 * np.eye(4)
B = rng.standard_normal((2, 4, 3))
TALL = rng.standard_normal((2, 5, 3))
WIDE = rng.standard_normal((2, 3, 5))
L = np.linalg.cholesky(SPD)


def t(a):
    return sm.tensor(a, "float64")


@pytest.fixture(params=["lapack", "taichi"])
def path(request):
    prev = LA.use_lapack(request.param == "lapack")
    yield request.param
    LA.use_lapack(prev)


def test_values_match_numpy_and_scipy(path):
    np.testing.assert_allclose(LA.cholesky(t(SPD)).numpy(), np.linalg.cholesky(SPD), atol=1e-12)
    np.testing.assert_allclose(LA.cholesky(t(SPD), upper=True).numpy(),
                               np.linalg.cholesky(SPD).transpose(0, 2, 1), atol=1e-12)
    np.testing.assert_allclose(LA.solve(t(A), t(B)).numpy(), np.linalg.solve(A, B), atol=1e-12)
    np.testing.assert_allclose(LA.solve(t(A[0]), t(B[0, :, 0])).numpy(), np.linalg.solve(A[0], B[0, :, 0]),
                               atol=1e-12)
    np.testing.assert_allclose(LA.inv(t(A)).numpy(), np.linalg.inv(A), atol=1e-12)
    for lower in (True, False):
        for trans in (0, 1):
            m = L if lower else L.transpose(0, 2, 1)
            want = np.stack([sl.solve_triangular(m[i], B[i], trans=trans, lower=lower) for i in range(2)])
            got = LA.triangular_solve(t(m), t(B), trans=trans, lower=lower).numpy()
            np.testing.assert_allclose(got, want, atol=1e-12)
    got = LA.triangular_solve(t(L[0]), t(B[0]), lower=True, unit_diagonal=True).numpy()
    want = sl.solve_triangular(L[0], B[0], lower=True, unit_diagonal=True)
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_batch_broadcasting_and_vector_rhs():
    x = LA.solve(t(A), t(B[0]))  # (2, 4, 4) with (4, 3): b broadcasts
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(A, B[0]), atol=1e-12)


def test_decompositions_match_numpy():
    w, v = LA.eigh(t(SPD))
    wn, vn = np.linalg.eigh(SPD)
    np.testing.assert_allclose(w.numpy(), wn, atol=1e-12)
    np.testing.assert_allclose(np.abs(v.numpy()), np.abs(vn), atol=1e-10)
    np.testing.assert_allclose(LA.eigvalsh(t(SPD)).numpy(), wn, atol=1e-12)
    for m in (TALL, WIDE, A):
        q, r = LA.qr(t(m))
        np.testing.assert_allclose(q.numpy() @ r.numpy(), m, atol=1e-12)
        np.testing.assert_allclose(r.numpy(), np.linalg.qr(m)[1], atol=1e-12)
        u, s, vt = LA.svd(t(m), full_matrices=False)
        np.testing.assert_allclose(s.numpy(), np.linalg.svd(m, compute_uv=False), atol=1e-12)
        np.testing.assert_allclose((u.numpy() * s.numpy()[..., None, :]) @ vt.numpy(), m, atol=1e-12)
        np.testing.assert_allclose(LA.pinv(t(m)).numpy(), np.linalg.pinv(m), atol=1e-12)
    s, ld = LA.slogdet(t(A))
    sn, ldn = np.linalg.slogdet(A)
    np.testing.assert_allclose(s.numpy(), sn)
    np.testing.assert_allclose(ld.numpy(), ldn, atol=1e-12)
    np.testing.assert_allclose(LA.det(t(A)).numpy(), np.linalg.det(A), rtol=1e-12)


def test_norms_match_numpy():
    v = rng.standard_normal(7)
    for ord in (None, 1, np.inf, 3):
        np.testing.assert_allclose(LA.norm(t(v), ord).numpy(), np.linalg.norm(v, ord), rtol=1e-12)
    m = A[0]
    for ord in ("fro", "nuc", 1, -2, np.inf):
        np.testing.assert_allclose(LA.norm(t(m), ord).numpy(), np.linalg.norm(m, ord), rtol=1e-12)
    np.testing.assert_allclose(LA.norm(t(A), axis=-1, keepdims=True).numpy(),
                               np.linalg.norm(A, axis=-1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(LA.norm(t(A), 2, axis=(1, 2)).numpy(), np.linalg.norm(A, 2, axis=(1, 2)),
                               rtol=1e-12)
    np.testing.assert_allclose(LA.norm(t(A)).numpy(), np.linalg.norm(A), rtol=1e-12)


def test_lstsq_matches_numpy():
    a, b = TALL[0], rng.standard_normal((5, 2))
    x, res, rank, s = LA.lstsq(t(a), t(b))
    xn, resn, rankn, sn = np.linalg.lstsq(a, b, rcond=None)
    np.testing.assert_allclose(x.numpy(), xn, atol=1e-12)
    np.testing.assert_allclose(res.numpy(), resn, atol=1e-12)
    assert int(rank) == rankn
    np.testing.assert_allclose(s.numpy(), sn, atol=1e-12)
    xw = LA.lstsq(t(WIDE[0]), t(b[:3]))[0]  # minimum-norm solution
    np.testing.assert_allclose(xw.numpy(), np.linalg.lstsq(WIDE[0], b[:3], rcond=None)[0], atol=1e-12)


CASES = {
    "cholesky": (lambda a: LA.cholesky(a), (SPD[0],)),
    "solve": (lambda a, b: LA.solve(a, b), (A, B)),
    "triangular_solve": (lambda a, b: LA.triangular_solve(a, b, lower=True), (L, B)),
    "triangular_solve_T": (lambda a, b: LA.triangular_solve(a, b, trans=1), (L[0].T, B[0])),
    "inv": (lambda a: LA.inv(a), (A[0],)),
    "slogdet": (lambda a: LA.slogdet(a)[1], (A,)),
    "det": (lambda a: LA.det(a), (A[0],)),
    "eigh_w": (lambda a: LA.eigh(a)[0], (SPD[0],)),
    "eigh_v": (lambda a: LA.eigh(a)[1] ** 2, (SPD[0],)),
    "qr_tall": (lambda a: LA.qr(a)[0] * 1.5 + 0 * LA.qr(a)[1].sum(), (TALL[0],)),
    "qr_r_tall": (lambda a: LA.qr(a)[1], (TALL[0],)),
    "qr_wide": (lambda a: LA.qr(a)[1], (WIDE[0],)),
    "svd_s": (lambda a: LA.svd(a, full_matrices=False)[1], (TALL,)),
    "svd_uv": (lambda a: LA.svd(a, full_matrices=False)[0] ** 2, (WIDE[0],)),
    "svd_vt": (lambda a: LA.svd(a, full_matrices=False)[2] ** 2, (TALL[0],)),
    "pinv": (lambda a: LA.pinv(a), (WIDE[0],)),
    "lstsq": (lambda a, b: LA.lstsq(a, b)[0], (TALL[0], B[0, :, :2].repeat(2, 0)[:5])),
    "norm_2": (lambda a: LA.norm(a, axis=-1), (A[0],)),
    "norm_nuc": (lambda a: LA.norm(a, "nuc"), (A[0],)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_derivatives_match_finite_differences(name):
    f, args = CASES[name]
    check_grads(f, tuple(t(a) for a in args), order=2, rtol=2e-5, atol=2e-6)


def test_taichi_kernel_derivatives():
    prev = LA.use_lapack(False)
    try:
        check_grads(lambda a, b: LA.solve(LA.cholesky(a), b), (t(SPD[0]), t(B[0])), order=2)
    finally:
        LA.use_lapack(prev)


def test_gp_marginal_likelihood_gradient_closed_form():
    """d/dK of log det K is K^{-1}: an independent reference through cholesky."""
    k = t(SPD[0])
    g = sm.grad(lambda m: 2.0 * sm.log(sm.abs(LA.cholesky(m) * sm.eye(4))
                                      .sum(-1)).sum())(k)
    np.testing.assert_allclose(g.numpy(), np.linalg.inv(SPD[0]), atol=1e-12)


def test_non_spd_and_singular_give_nan():
    assert np.isnan(LA.cholesky(t(-np.eye(3))).numpy()).all()
    x = LA.solve(t(np.zeros((2, 2))), t(np.ones((2, 1)))).numpy()
    assert not np.isfinite(x).all()


def test_jit_replays_host_factorizations():
    f = sm.jit(lambda a, b: LA.solve(LA.cholesky(a), b).sum() + LA.eigvalsh(a).sum())
    want = lambda s, b: np.linalg.solve(np.linalg.cholesky(s), b).sum() + np.linalg.eigvalsh(s).sum()
    for i in range(2):
        s = SPD[i]
        np.testing.assert_allclose(float(f(t(s), t(B[i]))), want(s, B[i]), rtol=1e-12)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="cholesky: a has shape \\(2, 3\\); expected square"):
        LA.cholesky(t(np.ones((2, 3))))
    with pytest.raises(ValueError, match="solve: a has shape"):
        LA.solve(t(A), t(np.ones((3, 2))))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        LA.inv(t(np.ones(3)))
    with pytest.raises(TypeError, match="one float dtype"):
        LA.solve(t(A), sm.tensor(B, "float32"))
    with pytest.raises(NotImplementedError, match="no derivative.*svd\\(full_matrices=False\\)"):
        sm.grad(lambda a: LA.svd(a)[0].sum())(t(TALL))
    with pytest.raises(NotImplementedError, match="no derivative.*qr\\(mode='reduced'\\)"):
        sm.grad(lambda a: LA.qr(a, mode="complete")[1].sum())(t(TALL))
    with pytest.raises(ValueError, match="mode='bogus'"):
        LA.qr(t(TALL), mode="bogus")
    with pytest.raises(ValueError, match="not a matrix norm"):
        LA.norm(t(A[0]), "bogus")


def test_on_vulkan():
    """One process for linalg, array ops and random on Vulkan (tests/arrays_vulkan_check.py)."""
    from tests.test_vulkan import _vulkan_available
    if not _vulkan_available():
        if os.environ.get("SCIML_REQUIRE_VULKAN"):   # set by .ci/run: CI must really run this pass
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    env.pop("SCIML_ARCH", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "arrays_vulkan_check.py")], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan" in r.stdout, (r.stdout + r.stderr)[-4000:]


def test_complete_qr_and_full_svd_of_non_square_matrices():
    """numpy's complete forms: values (q orthogonal, a = q r; u, vh orthogonal, a = u s vh), the derivative of s
    through svd(full_matrices=True), complete == reduced QR (with derivatives) for wide a, vmap == loop."""
    for a in (TALL, WIDE):
        q, r = LA.qr(t(a), mode="complete")
        qn, rn = np.linalg.qr(a, mode="complete")
        np.testing.assert_allclose(np.abs(q.numpy()), np.abs(qn), atol=1e-12)
        np.testing.assert_allclose(q.numpy() @ r.numpy(), a, atol=1e-12)
        u, s, vh = LA.svd(t(a))
        un, sn, vhn = np.linalg.svd(a)
        assert u.shape == un.shape and vh.shape == vhn.shape
        np.testing.assert_allclose(s.numpy(), sn, atol=1e-12)
        m, n = a.shape[-2:]
        eye = np.eye(m)
        utu = np.swapaxes(u.numpy(), -1, -2) @ u.numpy()
        np.testing.assert_allclose(utu, np.broadcast_to(eye, u.shape), atol=1e-12)
        smat = np.zeros(a.shape)
        k = min(m, n)
        smat[..., np.arange(k), np.arange(k)] = sn
        np.testing.assert_allclose(u.numpy() @ smat @ vh.numpy(), a, atol=1e-12)
    g = sm.grad(lambda x: LA.svd(x)[1].sum())(t(TALL)).numpy()
    g_ref = sm.grad(lambda x: LA.svd(x, full_matrices=False)[1].sum())(t(TALL)).numpy()
    np.testing.assert_allclose(g, g_ref, atol=1e-12)
    check_grads(lambda x: LA.qr(x, mode="complete")[1], (t(WIDE[0]),), order=2)
    v = sm.vmap(lambda x: LA.qr(x, mode="complete")[1])(t(TALL))
    np.testing.assert_allclose(v.numpy(), np.stack([LA.qr(t(x), mode="complete")[1].numpy() for x in TALL]),
                               atol=1e-12)
