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
