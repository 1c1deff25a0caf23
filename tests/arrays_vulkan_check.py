"""The array API on Vulkan (float32), one process (run by tests/test_linalg.py::test_on_vulkan):
sciml.linalg (Taichi kernels for cholesky / triangular_solve / solve, the host fallback for the rest, first
derivatives), array ops (scans, sort kernels, composed ops, a gradient), and sciml.random (bits identical
to a plain-Python Threefry, floats to float32 rounding)."""
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
    check_array_ops(rng)
    check_random()
    check_fft(rng)
    print("OK vulkan linalg, array ops, random")
    return 0


def check_array_ops(rng):
    from sciml.autodiff.ops import array as A
    x = rng.standard_normal((3, 40)).astype(np.float32)
    t = sm.tensor(x, "float32")

    def c(a, b):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-4, atol=1e-4)
    c(A.cumsum(t, 1), np.cumsum(x, 1))
    c(A.sort(t, 1), np.sort(x, 1))
    c(A.prod(t[:, :5], 1), np.prod(x[:, :5], 1))
    np.testing.assert_array_equal(A.argsort(t).numpy(), np.argsort(x, kind="stable"))
    np.testing.assert_array_equal(A.argmax(t, 1).numpy(), np.argmax(x, 1))
    c(A.einsum("ij,kj->ik", t, t), x @ x.T)
    c(A.pad(t, 1, mode="reflect"), np.pad(x, 1, mode="reflect"))
    c(A.roll(t, 3, 1), np.roll(x, 3, 1))
    c(A.trace(t), np.trace(x))
    c(A.kron(t[:2, :2], t[:2, :3]), np.kron(x[:2, :2], x[:2, :3]))
    g = sm.grad(lambda a: (A.cumsum(a, 1) * A.sort(a, 1)).sum())(t)
    order = np.argsort(x, 1, kind="stable")
    want = np.cumsum(np.sort(x, 1)[:, ::-1], 1)[:, ::-1].copy()  # d/dx of sum(cumsum(x) * s) through cumsum
    ws = np.zeros_like(x)
    np.put_along_axis(ws, order, np.cumsum(x, 1), 1)  # ... and through the sorted values
    c(g, want + ws)
    v = sm.vmap(lambda r: A.sort(r) * 2.0)(t)
    c(v, 2 * np.sort(x, 1))


def check_fft(rng):
    from sciml import fft as F
    x = rng.standard_normal((2, 12)).astype(np.float32)
    np.testing.assert_allclose(F.rfft(sm.tensor(x, "float32")).numpy(), np.fft.rfft(x), rtol=1e-4, atol=1e-4)
    x16 = rng.standard_normal((3, 16)) + 1j * rng.standard_normal((3, 16))  # radix-2 path
    np.testing.assert_allclose(F.ifft(F.complex(x16, dtype="float32")).numpy(), np.fft.ifft(x16), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(F.irfft2(F.rfft2(sm.tensor(x, "float32")), x.shape).numpy(), x, rtol=1e-4,
                               atol=1e-4)
    g = sm.grad(lambda a: (F.rfft(a).abs() ** 2).sum())(sm.tensor(x, "float32"))
    # d/dx sum_k |Y_k|^2 (Y = rfft x) = rfft's adjoint applied to 2 Y = 12 irfft(w 2Y), w = 1 at k = 0, 6, else 1/2
    y = np.fft.rfft(x.astype(np.float64))
    want = 2 * 12 * np.fft.irfft(np.where(np.arange(7) % 6 == 0, 1.0, 0.5) * y, 12)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-3, atol=1e-3)


def threefry_ref(k0, k1, c0, c1):
    m = 0xFFFFFFFF
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (c0 + ks[0]) & m, (c1 + ks[1]) & m
    for g in range(5):
        for r in range(4):
            x0 = (x0 + x1) & m
            s = rot[(g % 2) * 4 + r]
            x1 = (((x1 << s) | (x1 >> (32 - s))) & m) ^ x0
        x0 = (x0 + ks[(g + 1) % 3]) & m
        x1 = (x1 + ks[(g + 2) % 3] + g + 1) & m
    return x0, x1


def check_random():
    from sciml import random as R
    k = R.key(0x0123456789ABCDEF)
    k0, k1 = 0x01234567, 0x89ABCDEF
    ks = R.split(k, 3)
    want = np.array([w for i in range(3) for w in threefry_ref(k0, k1, 1, i)], np.uint32).view(np.int32)
    np.testing.assert_array_equal(ks.numpy().reshape(-1), want)
    bits = [threefry_ref(k0, k1, 0, i) for i in range(300)]
    u = R.uniform(k, (300,)).numpy()
    np.testing.assert_array_equal(u, np.float32([(a >> 8) / 2.0 ** 24 for a, _ in bits]))
    z = R.normal(k, (300,)).numpy()
    u1 = np.array([((a >> 8) + 0.5) / 2.0 ** 24 for a, _ in bits])
    u2 = np.array([(b >> 8) / 2.0 ** 24 for _, b in bits])
    np.testing.assert_allclose(z, np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2), rtol=2e-5, atol=2e-5)
    r = R.randint(k, (300,), -50, 50).numpy()
    np.testing.assert_array_equal(r, [-50 + a % 100 for a, _ in bits])
    p = R.permutation(k, 50).numpy()
    assert sorted(p.tolist()) == list(range(50))
    np.testing.assert_array_equal(p, np.argsort(np.array([a for a, _ in bits[:50]], np.uint32).view(np.int32),
                                                 kind="stable"))


if __name__ == "__main__":
    sys.exit(main())
