"""sciml.fft's Taichi kernels on Vulkan (float32), one process (run by tests/test_fft.py::test_fft_on_vulkan): the
truncated real DFT and its inverse, the complex contraction, the radix-2 and direct complex DFTs along a middle
axis, a spectral layer's gradient, and the fused exact GELU, against numpy."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sciml as sm  # noqa: E402
from sciml import fft as F  # noqa: E402


def main():
    used = sm.init(arch="vulkan", dtype="float32", seed=0)
    from sciml import backend
    if used != "vulkan" or backend.on_host():
        print("FAIL: not on vulkan")
        return 1
    rng = np.random.default_rng(0)
    t = lambda a: sm.tensor(a, "float32")
    tol = dict(rtol=1e-4, atol=1e-4)
    v = rng.standard_normal((2, 10, 3))
    w = rng.standard_normal((4, 3, 5)) + 1j * rng.standard_normal((4, 3, 5))
    vh = F.rfft(t(v), axis=1, modes=4)
    np.testing.assert_allclose(vh.numpy(), np.fft.rfft(v, axis=1)[:, :4], **tol)
    out = F.einsum("bki,kio->bko", vh, F.complex(w, dtype="float32"))
    want = np.einsum("bki,kio->bko", np.fft.rfft(v, axis=1)[:, :4], w)
    np.testing.assert_allclose(out.numpy(), want, **tol)
    np.testing.assert_allclose(F.irfft(out, 10, axis=1).numpy(), np.fft.irfft(want, 10, axis=1), **tol)
    z = rng.standard_normal((3, 8, 2)) + 1j * rng.standard_normal((3, 8, 2))
    np.testing.assert_allclose(F.fft(F.complex(z, dtype="float32"), axis=1).numpy(), np.fft.fft(z, axis=1), **tol)
    np.testing.assert_allclose(F.ifft(F.complex(z[:, :6], dtype="float32"), axis=1).numpy(),
                               np.fft.ifft(z[:, :6], axis=1), **tol)
    # gradient of a spectral layer: adjoint transforms on the device, against the float64 CPU formula
    wr, wi = t(w.real), t(w.imag)
    g = sm.grad(lambda a: (F.irfft(F.einsum("bki,kio->bko", F.rfft(a, axis=1, modes=4), F.Complex(wr, wi)), 10,
                                   axis=1) ** 2).sum())(t(v))
    y = np.fft.irfft(want, 10, axis=1)
    gy = np.fft.rfft(2 * y, axis=1)[:, :4] * np.where(np.arange(4) == 0, 1.0, 2.0)[None, :, None] / 10
    gvh = np.einsum("bko,kio->bki", gy, np.conj(w))
    wgt = np.where(np.arange(4) == 0, 1.0, 0.5)[None, :, None]
    full = np.zeros((2, 6, 3), complex)
    full[:, :4] = gvh * wgt
    gv = 10 * np.fft.irfft(full, 10, axis=1)
    np.testing.assert_allclose(g.numpy(), gv, rtol=1e-3, atol=1e-3)
    from scipy.special import erfc
    from sciml.autodiff.ops.gelu_fused import gelu
    x = np.linspace(-6, 6, 25)
    np.testing.assert_allclose(gelu(t(x)).numpy(), 0.5 * x * erfc(-x / np.sqrt(2)), **tol)
    d = sm.grad(lambda a: gelu(a).sum())(t(x)).numpy()
    np.testing.assert_allclose(d, 0.5 * erfc(-x / np.sqrt(2)) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi), **tol)
    print("OK vulkan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
