"""sciml.linalg on Vulkan (float32): Taichi kernels for cholesky / triangular_solve / solve, the host
fallback for the rest, and first derivatives. Run as its own process by tests/test_linalg.py."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sciml as sm  # noqa: E402
from sciml import linalg as LA  # noqa: E402


def main():
    used = sm.init(arch="vulkan", dtype="float32", seed=0)
    from sciml import backend
    if used != "vulkan" or backend.on_host():
        print("FAIL: not on vulkan")
        return 1
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 6, 6))
    spd = (a @ a.transpose(0, 2, 1) + 6 * np.eye(6)).astype(np.float32)
    b = rng.standard_normal((3, 6, 2)).astype(np.float32)
    a = a.astype(np.float32)
    t = lambda x: sm.tensor(x, "float32")
    tol = dict(rtol=2e-4, atol=2e-4)
    L = np.linalg.cholesky(spd.astype(np.float64))
    np.testing.assert_allclose(LA.cholesky(t(spd)).numpy(), L, **tol)
    np.testing.assert_allclose(LA.solve(t(a), t(b)).numpy(), np.linalg.solve(a.astype(np.float64), b), **tol)
    import scipy.linalg as sl
    want = np.stack([sl.solve_triangular(L[i], b[i], lower=True) for i in range(3)])
    np.testing.assert_allclose(LA.triangular_solve(t(L.astype(np.float32)), t(b), lower=True).numpy(), want, **tol)
    np.testing.assert_allclose(LA.eigvalsh(t(spd)).numpy(), np.linalg.eigvalsh(spd.astype(np.float64)), **tol)
    np.testing.assert_allclose(LA.det(t(a[0])).numpy(), np.linalg.det(a[0].astype(np.float64)), rtol=1e-3)
    # d/dA of sum(solve(A, b)) = -A^{-T} 1 x^T ; d log det(S)/dS via cholesky = S^{-1}
    g = sm.grad(lambda m: LA.solve(m, t(b[0])).sum())(t(a[0]))
    a64 = a[0].astype(np.float64)
    x = np.linalg.solve(a64, b[0])
    gb = np.linalg.solve(a64.T, np.ones_like(b[0]))
    np.testing.assert_allclose(g.numpy(), -gb @ x.T, rtol=1e-3, atol=1e-3)
    g2 = sm.grad(lambda m: (2.0 * sm.log((LA.cholesky(m) * sm.eye(6)).sum(-1))).sum())(t(spd[0]))
    np.testing.assert_allclose(g2.numpy(), np.linalg.inv(spd[0].astype(np.float64)), rtol=1e-3, atol=1e-4)
    print("OK vulkan linalg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
