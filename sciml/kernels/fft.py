"""The discrete Fourier transform as a Taichi kernel (devices; CPU uses scipy.fft by default).

out[0] / out[1] hold the real / imaginary parts of the DFT of (re + i im) along rows of length n: one
invocation per output entry, O(n) each (O(n^2) per row). Angles use (j k mod n) so they stay in [0, 2 pi).
"""
from . import _common as C
from .. import backend


def dft(re, im, out, rows: int, n: int, inverse: bool, dtype: str):
    k = C.cached(("dft", dtype), lambda: _build_dft(dtype))
    k(re, im, out, rows, n, 1.0 if inverse else -1.0, 1.0 / n if inverse else 1.0)


def _build_dft(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def dft(re: A, im: A, out: A, rows: ti.i32, n: ti.i32, sign: T, scale: T):
        for t in range(rows * n):
            r = t // n
            k = t % n
            ar = ti.cast(0, T)
            ai = ti.cast(0, T)
            w = sign * ti.cast(6.283185307179586, T) / ti.cast(n, T)
            for j in range(n):
                th = w * ti.cast((j * k) % n, T)
                c, s = ti.cos(th), ti.sin(th)
                xr, xi = re[r * n + j], im[r * n + j]
                ar += xr * c - xi * s
                ai += xr * s + xi * c
            out[t] = ar * scale
            out[rows * n + t] = ai * scale
    return dft


