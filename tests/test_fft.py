"""sciml.fft and Complex: values against numpy.fft (scipy path and the Taichi DFT kernel), derivatives against
finite differences to second order, the adjoint identity, vmap / jit, complex arithmetic, errors."""
import numpy as np
import pytest

import sciml as sm
from sciml import fft as F
from sciml.testing import check_grads

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 8))
Z = X + 1j * rng.standard_normal((3, 8))


def t(a):
    return sm.tensor(a, "float64")


@pytest.fixture(params=["scipy", "taichi"])
def path(request):
    prev = F.use_scipy(request.param == "scipy")
    yield
    F.use_scipy(prev)


def test_values_match_numpy(path):
    c = lambda got, want: np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    c(F.fft(t(X)), np.fft.fft(X))
    c(F.ifft(F.complex(Z)), np.fft.ifft(Z))
    c(F.fft(t(X), n=11, axis=0, norm="ortho"), np.fft.fft(X, n=11, axis=0, norm="ortho"))
    c(F.ifft(F.complex(Z), n=5, norm="forward"), np.fft.ifft(Z, n=5, norm="forward"))
    c(F.rfft(t(X)), np.fft.rfft(X))
    c(F.rfft(t(X[:, :7])), np.fft.rfft(X[:, :7]))
    c(F.irfft(F.complex(np.fft.rfft(X))), X)
    c(F.irfft(F.complex(Z[:, :5]), 9), np.fft.irfft(Z[:, :5], 9))
    c(F.fft2(F.complex(Z)), np.fft.fft2(Z))
    c(F.ifft2(F.complex(Z)), np.fft.ifft2(Z))
    c(F.rfft2(t(X)), np.fft.rfft2(X))
    c(F.irfft2(F.complex(np.fft.rfft2(X)), X.shape), X)
    c(F.fftn(t(X.reshape(3, 2, 4))), np.fft.fftn(X.reshape(3, 2, 4)))
    c(F.ifftn(F.complex(Z), axes=(0,)), np.fft.ifftn(Z, axes=(0,)))
    np.testing.assert_allclose(F.fftfreq(8, 0.1).numpy(), np.fft.fftfreq(8, 0.1))
    np.testing.assert_allclose(F.rfftfreq(9).numpy(), np.fft.rfftfreq(9))


CASES = {
    "fft": lambda a, b: F.fft(F.Complex(a, b)).re * 1.3 + F.fft(F.Complex(a, b)).im,
    "ifft_abs": lambda a, b: F.ifft(F.Complex(a, b)).abs(),
    "rfft_power": lambda a, b: (F.rfft(a) * F.rfft(b).conj()).re,
    "irfft": lambda a, b: F.irfft(F.Complex(a[:, :5], b[:, :5]), 8),
    "spectral_conv_2d": lambda a, b: F.irfft2(F.rfft2(a) * F.rfft2(b), a.shape),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_derivatives_match_finite_differences(name):
    check_grads(CASES[name], (t(X), t(Z.imag)), order=2)


def test_fft_vjp_is_the_adjoint():
    """<F x, y> = <x, F^H y> for the real inner product on (re, im) pairs: vjp(fft) = n ifft."""
    y = F.complex(rng.standard_normal(8) + 1j * rng.standard_normal(8))
    x = t(rng.standard_normal(8))
    _, pull = sm.vjp(lambda a: F.fft(F.Complex(a)), x)
    (gx,) = pull(y)
    np.testing.assert_allclose(gx.numpy(), (8 * np.fft.ifft(y.numpy())).real, atol=1e-12)


def test_vmap_and_jit():
    v = sm.vmap(lambda a: F.rfft(a).abs())(t(X))
    np.testing.assert_allclose(v.numpy(), np.abs(np.fft.rfft(X)), atol=1e-12)
    f = sm.jit(lambda a: F.irfft(F.rfft(a) * 2.0, 8))
    for s in range(2):
        a = np.random.default_rng(s).standard_normal((2, 8))
        np.testing.assert_allclose(f(t(a)).numpy(), 2 * a, atol=1e-12)
    assert f.stats["replays"] == 1


def test_complex_arithmetic():
    a, b = Z[0], Z[1] + 0.5
    za, zb = F.complex(a), F.complex(b)
    for got, want in [(za + zb, a + b), (za - zb, a - b), (za * zb, a * b), (za / zb, a / b), (-za, -a),
                      (za.conj(), np.conj(a)), (za * 2.0, a * 2), (2.0 - za, 2 - a), (za + 1j, a + 1j),
                      (za.sum(), a.sum()), (za[2:5], a[2:5]), (za.reshape(2, 4).T, a.reshape(2, 4).T)]:
        np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    np.testing.assert_allclose(abs(za).numpy(), np.abs(a), atol=1e-12)
    m = F.complex(Z[:, :3]) @ F.complex(Z[:, :4].T[:3])
    np.testing.assert_allclose(m.numpy(), Z[:, :3] @ Z[:, :4].T[:3], atol=1e-12)
    e = F.einsum("ij,jk->ik", F.complex(Z[:, :3]), F.complex(Z[:, :4].T[:3]))
    np.testing.assert_allclose(e.numpy(), Z[:, :3] @ Z[:, :4].T[:3], atol=1e-12)
    np.testing.assert_allclose(F.einsum("ij->j", F.complex(Z)).numpy(), Z.sum(0), atol=1e-12)
    np.testing.assert_allclose(F.einsum("i,i->", F.complex(Z[0]), t(X[1])).numpy(), Z[0] @ X[1], atol=1e-12)
    check_grads(lambda u, v: F.einsum("ij,jk->ik", F.Complex(u, v), F.Complex(v, u)).abs(), (t(X[:, :3]),
                t(Z.imag[:, :3].T)), order=2)
    g = sm.grad(lambda z: (z * z.conj()).re.sum())(za)  # |z|^2: gradient 2 (re, im)
    np.testing.assert_allclose(g.re.numpy(), 2 * a.real)
    np.testing.assert_allclose(g.im.numpy(), 2 * a.imag)
    assert za.dtype == "complex128" and za.shape == (8,)


def test_errors():
    with pytest.raises(ValueError, match="norm="):
        F.fft(t(X), norm="bogus")
    with pytest.raises(ValueError, match="n=0"):
        F.fft(t(X), n=0)
    with pytest.raises(TypeError, match="rfft: x is complex"):
        F.rfft(F.complex(Z))
    with pytest.raises(ValueError, match="0-d"):
        F.fft(sm.tensor(1.0))


# --- the primitives of sciml/_dft.py: truncated real DFTs, complex contractions, the interleaved form --------
from sciml import _dft as D  # noqa: E402

V = rng.standard_normal((2, 10, 3))  # (batch, grid, channels): transforms along axis 1
W = rng.standard_normal((4, 3, 5)) + 1j * rng.standard_normal((4, 3, 5))


def test_rfft_modes_and_irfft_padding_match_numpy(path):
    for n, m, axis in [(10, 4, 1), (9, 5, 1), (10, 6, 1), (10, 3, 0), (8, 5, -1)]:
        x = rng.standard_normal((n, 3, 2)) if axis == 0 else V[:, :n] if axis == 1 else rng.standard_normal((3, n))
        got = F.rfft(t(x), axis=axis, modes=m)
        want = np.take(np.fft.rfft(x, axis=axis), np.arange(min(m, n // 2 + 1)), axis=axis)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
        np.testing.assert_allclose(F.irfft(got, n, axis=axis).numpy(), np.fft.irfft(want, n, axis=axis), atol=1e-12)
    for norm in ("ortho", "forward"):
        np.testing.assert_allclose(F.rfft(t(V), axis=1, norm=norm, modes=3).numpy(),
                                   np.fft.rfft(V, axis=1, norm=norm)[:, :3], atol=1e-12)
        z = np.fft.rfft(V, axis=1)[:, :4]
        np.testing.assert_allclose(F.irfft(F.complex(z), 10, axis=1, norm=norm).numpy(),
                                   np.fft.irfft(z, 10, axis=1, norm=norm), atol=1e-12)


@pytest.mark.parametrize("n", [10, 9])
def test_real_dft_primitives_are_transposes(path, n):
    """<rdft(x; s, a), y> = <x, irdft(y; s, not a)> and the same with the roles swapped, for both weightings:
    the identities every derivative rule of rfft / irfft rests on."""
    x = t(rng.standard_normal((2, n, 3)))
    y = t(rng.standard_normal((2, 4, 3, 2)))
    for adj in (False, True):
        lhs = float((D.rdft(x, axis=1, m=4, adj=adj, scale=0.7) * y).sum())
        rhs = float((x * D.irdft(y, axis=1, n=n, adj=not adj, scale=0.7)).sum())
        assert lhs == pytest.approx(rhs, rel=1e-12)


def test_complex_einsum_matches_numpy(path):
    z = F.complex(np.fft.rfft(V, axis=1)[:, :4])            # (2, 4, 3)
    w = F.complex(W)
    want = np.einsum("bki,kio->bko", z.numpy(), W)
    got = F.einsum("bki,kio->bko", z, w)
    assert got._re is None  # one contraction primitive, interleaved result
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    np.testing.assert_allclose(F.einsum("bki,kio->obk", z, w).numpy(), np.einsum("bki,kio->obk", z.numpy(), W),
                               atol=1e-12)
    np.testing.assert_allclose(F.einsum("bki,bkj->kij", z, z).numpy(),
                               np.einsum("bki,bkj->kij", z.numpy(), z.numpy()), atol=1e-12)
    A, B = Z[:, :3], Z[:, :4].T[:3]
    np.testing.assert_allclose((F.complex(A) @ F.complex(B)).numpy(), A @ B, atol=1e-12)
    for ca in (False, True):
        for cb in (False, True):
            got = D.ceinsum(z.packed, w.packed, spec="bki,kio->bko", ca=ca, cb=cb)
            want = np.einsum("bki,kio->bko", np.conj(z.numpy()) if ca else z.numpy(), np.conj(W) if cb else W)
            np.testing.assert_allclose(F.Complex.from_packed(got).numpy(), want, atol=1e-12)


def test_spectral_layer_derivatives(path):
    """rfft(modes) -> einsum -> irfft, the Fourier layer, in value, gradient and Hessian-vector products
    against finite differences (float64, second order), for the input and both weight parts."""
    def layer(v, wr, wi):
        vh = F.rfft(v, axis=1, modes=4)
        return F.irfft(F.einsum("bki,kio->bko", vh, F.Complex(wr, wi)), 9, axis=1) ** 2
    check_grads(layer, (t(V[:, :9]), t(W.real), t(W.imag)), order=2)
    check_grads(lambda a, b: (D.ceinsum(a, b, spec="ij,jk->ik", ca=True, cb=False) ** 2).sum(),
                (t(rng.standard_normal((2, 3, 2))), t(rng.standard_normal((3, 4, 2)))), order=2)


def test_complex_gradient_convention():
    """grad of |einsum(z, w)|^2 w.r.t. z is dL/dRe + i dL/dIm = 2 conj(w) (z w) summed (PyTorch's convention)."""
    z0, w0 = Z[0, :3], Z[1, :3] + 0.3
    g = sm.grad(lambda z: (F.einsum("i,i->i", z, F.complex(w0)).abs() ** 2).sum())(F.complex(z0))
    np.testing.assert_allclose(g.numpy(), 2 * np.conj(w0) * (z0 * w0), atol=1e-12)


def test_packed_complex_ops():
    z = F.rfft(t(V), axis=1)
    a = np.fft.rfft(V, axis=1)
    assert z._re is None and z.packed.shape == a.shape + (2,)
    for got, want in [(z[:, 1:3], a[:, 1:3]), (z[..., 0], a[..., 0]), (z.reshape(2, -1), a.reshape(2, -1)),
                      (z.transpose(2, 0, 1), a.transpose(2, 0, 1)), (-z, -a), (z.conj(), np.conj(a)),
                      (z * 2.0, 2 * a), (z / 4.0, a / 4), (z.T, a.T)]:
        np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    np.testing.assert_allclose(z.re.numpy(), a.real)
    np.testing.assert_allclose(z.im.numpy(), a.imag)
    assert z.shape == a.shape and z.dtype == "complex128" and z.size == a.size
    with pytest.raises(ValueError, match="last axis has size 2"):
        F.Complex.from_packed(t(V))


def test_angle():
    z = Z[0] + 0.1
    np.testing.assert_allclose(F.angle(F.complex(z)).numpy(), np.angle(z), atol=1e-12)
    np.testing.assert_allclose(F.angle(t(np.array([-2.0, 3.0]))).numpy(), np.angle([-2.0, 3.0]))
    check_grads(lambda a, b: F.Complex(a, b).angle(), (t(Z.real[0] + 0.1), t(Z.imag[0])), order=2)


def test_vmap_and_jit_of_the_spectral_layer():
    w = F.Complex(t(W.real), t(W.imag))
    layer = lambda v: F.irfft(F.einsum("ki,kio->ko", F.rfft(v, axis=0, modes=4), w), 9, axis=0)
    v = t(V[:, :9])
    loop = np.stack([layer(t(V[b, :9])).numpy() for b in range(2)])
    np.testing.assert_allclose(sm.vmap(layer)(v).numpy(), loop, atol=1e-12)
    per_ex = sm.vmap(sm.grad(lambda a: (layer(a) ** 2).sum()))(v)
    for b in range(2):
        np.testing.assert_allclose(per_ex.numpy()[b], sm.grad(lambda a: (layer(a) ** 2).sum())(t(V[b, :9])).numpy(),
                                   atol=1e-12)
    jf = sm.jit(sm.value_and_grad(lambda a: (layer(a) ** 2).sum()))
    for s in range(3):
        a = t(np.random.default_rng(s).standard_normal((9, 3)))
        val, g = jf(a)
        val2, g2 = sm.value_and_grad(lambda a: (layer(a) ** 2).sum())(a)
        np.testing.assert_allclose(g.numpy(), g2.numpy(), atol=1e-12)
    assert jf.stats["replays"] == 2
    H = sm.hessian(lambda a: (layer(a) ** 2).sum())(t(V[0, :9]))       # jacfwd over jacrev: batched tangents
    hv = sm.jvp(sm.grad(lambda a: (layer(a) ** 2).sum()), (t(V[0, :9]),), (t(V[1, :9]),))[1]
    np.testing.assert_allclose(np.einsum("ijkl,kl->ij", H.numpy(), V[1, :9]), hv.numpy(), atol=1e-10)


def test_fft_modes_errors():
    with pytest.raises(ValueError, match="modes=0"):
        F.rfft(t(V), axis=1, modes=0)
    with pytest.raises(ValueError, match="axis=3"):
        F.rfft(t(V), axis=3)


# --- the fused exact GELU (sciml/autodiff/ops/gelu_fused.py) --------------------------------------------------
def test_fused_gelu_matches_the_composed_one():
    from scipy.special import erfc
    from sciml.autodiff.ops.gelu_fused import gelu
    x = np.concatenate([np.linspace(-9, 9, 37), [np.nan]])
    want = 0.5 * x * erfc(-x / np.sqrt(2))
    np.testing.assert_allclose(gelu(t(x)).numpy(), want, rtol=1e-13, atol=1e-15, equal_nan=True)
    np.testing.assert_allclose(gelu(t(x)).numpy(), sm.gelu(t(x)).numpy(), rtol=1e-13, atol=1e-15, equal_nan=True)
    xs = t(x[:-1])
    d1 = sm.grad(lambda a: gelu(a).sum())(xs).numpy()
    np.testing.assert_allclose(d1, sm.grad(lambda a: sm.gelu(a).sum())(xs).numpy(), rtol=1e-12, atol=1e-14)
    d2 = sm.grad(lambda a: sm.grad(lambda b: gelu(b).sum())(a).sum())(xs).numpy()
    phi = np.exp(-x[:-1] ** 2 / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(d2, phi * (2 - x[:-1] ** 2), rtol=1e-12, atol=1e-14)
    check_grads(lambda a: gelu(a * a - 1.0), (t(rng.standard_normal(6)),), order=2)
    v = sm.vmap(sm.grad(lambda a: gelu(a).sum()))(t(rng.standard_normal((3, 4))))
    assert v.shape == (3, 4)
    H = sm.hessian(lambda a: gelu(a).sum())(t(x[:4]))
    np.testing.assert_allclose(np.diag(H.numpy()), phi[:4] * (2 - x[:4] ** 2), rtol=1e-12)


def test_fft_on_vulkan():
    """The Taichi kernels of sciml.fft (truncated real DFTs, the complex contraction, radix-2 along a middle axis)
    and the fused GELU on Vulkan, float32, in their own process (tests/fft_vulkan_check.py)."""
    import os
    import subprocess
    import sys
    from tests.test_vulkan import _vulkan_available
    if not _vulkan_available():
        if os.environ.get("SCIML_REQUIRE_VULKAN"):
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(here), os.environ.get("PYTHONPATH", "")]))
    env.pop("SCIML_ARCH", None)
    r = subprocess.run([sys.executable, os.path.join(here, "fft_vulkan_check.py")], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan" in r.stdout, (r.stdout + r.stderr)[-4000:]
