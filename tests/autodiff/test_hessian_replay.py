"""Dense Hessians under ``sciml.jit``: the replay of a batched-tangent pass runs its GEMMs with the
single BLAS thread the pass was traced with, and gives the eager Hessian (float64, checked against
finite differences of the gradient)."""
import importlib

import numpy as np

import sciml as sm
from sciml.testing import flat_mlp_loss
from sciml.kernels import blas
from sciml.kernels import linalg as KL

sm.init(arch="cpu", dtype="float64")
JM = importlib.import_module("sciml.autodiff.jit")


def setup(seed=0):
    rng = np.random.default_rng(seed)
    sizes = [1, 5, 4, 1]
    n = sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:]))
    x = sm.tensor(rng.normal(size=(7, 1)))
    y = sm.tensor(rng.normal(size=(7, 1)))
    return flat_mlp_loss(x, y, sizes), sm.tensor(rng.normal(size=n) * 0.7), n


def test_jit_hessian_matches_eager_and_finite_differences():
    f, th, n = setup()
    H = sm.hessian(f)(th).numpy()
    Hj = sm.jit(sm.hessian(f))(th).numpy()
    np.testing.assert_allclose(Hj, H, rtol=0, atol=1e-12)
    g = sm.grad(f)
    eps = 1e-6
    fd = np.empty((n, n))
    for j in range(n):
        e = np.zeros(n)
        e[j] = eps
        fd[:, j] = (g(sm.tensor(th.numpy() + e)).numpy() - g(sm.tensor(th.numpy() - e)).numpy()) / (2 * eps)
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(H, H.T, atol=1e-12)
    th2 = sm.tensor(th.numpy() * 0.5)  # a replay at another point is the eager Hessian there
    np.testing.assert_allclose(sm.jit(sm.hessian(f))(th2).numpy(), sm.hessian(f)(th2).numpy(), atol=1e-12)


def test_replayed_gemms_keep_the_traced_thread_count(monkeypatch):
    if not blas.available():
        import pytest
        pytest.skip("no ctypes BLAS: numpy's matmul has no thread setting here")
    seen = []
    orig = KL._host_matmul

    def spy(*a):  # every CPU GEMM, with the thread count it runs with
        seen.append(blas.get_threads())
        return orig(*a)
    monkeypatch.setattr(KL, "_host_matmul", spy)
    f, th, _ = setup(1)
    J = sm.jit(sm.hessian(f))
    H0 = J(th).numpy()
    n_trace = len(seen)
    assert n_trace > 0 and set(seen) == {1}  # the batched pass traced its GEMMs single-threaded
    plan = next(iter(J.plans.values()))
    assert any(fn is KL._host_matmul_1t for fn, _ in plan.prog)
    prev = blas.get_threads()
    blas.set_threads(2)
    try:
        H1 = J(th).numpy()  # replayed with 2 threads process-wide: the GEMMs still run on one
    finally:
        blas.set_threads(prev)
    assert len(seen) > n_trace and set(seen) == {1}
    np.testing.assert_allclose(H1, H0, atol=1e-12)
    # outside a single-threaded block a traced GEMM is the plain call (the thread count of the replay)
    a = sm.tensor(np.ones((4, 3)))
    J2 = sm.jit(lambda a: sm.matmul(a, a.T))
    if blas.get_threads() != 1:
        J2(a)
        prog = next(iter(J2.plans.values())).prog
        assert any(fn is spy for fn, _ in prog) and not any(fn is KL._host_matmul_1t for fn, _ in prog)
