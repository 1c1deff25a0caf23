"""The discrete Fourier transform as Taichi kernels (devices; CPU uses scipy.fft by default).

out holds the real parts (first rows * n entries) then the imaginary parts of the DFT of (re + i im)
along rows of length n. Power-of-two n: iterative radix-2 Cooley-Tukey, a bit-reversal gather then log2(n)
butterfly passes, each pass one launch parallel over rows x n/2 butterflies (disjoint pairs, in place).
Other n: a direct O(n^2) DFT, one invocation per output entry, angles from (j k mod n) so they stay in
[0, 2 pi).
"""
from . import _common as C
from .. import backend


def dft(re, im, out, rows: int, n: int, inverse: bool, dtype: str):
    sign = 1.0 if inverse else -1.0
    scale = 1.0 / n if inverse else 1.0
    if n >= 2 and n & (n - 1) == 0:
        logn = n.bit_length() - 1
        C.cached(("fft_bitrev", dtype), lambda: _build_bitrev(dtype))(re, im, out, rows, n, logn, scale)
        k = C.cached(("fft_pass", dtype), lambda: _build_pass(dtype))
        h = 1
        while h < n:
            k(out, rows, n, h, sign)
            h *= 2
        return
    k = C.cached(("dft", dtype), lambda: _build_dft(dtype))
    k(re, im, out, rows, n, sign, scale)


def _build_bitrev(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def bitrev(re: A, im: A, out: A, rows: ti.i32, n: ti.i32, logn: ti.i32, scale: T):
        for t in range(rows * n):
            r = t // n
            k = t % n
            rev = 0
            v = k
            for _ in range(logn):
                rev = (rev << 1) | (v & 1)
                v >>= 1
            out[r * n + rev] = re[t] * scale
            out[rows * n + r * n + rev] = im[t] * scale
    return bitrev


def _build_pass(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def butterfly(x: A, rows: ti.i32, n: ti.i32, h: ti.i32, sign: T):
        half = n // 2
        for t in range(rows * half):
            r = t // half
            b = t % half
            j = b % h
            i0 = r * n + (b // h) * 2 * h + j
            i1 = i0 + h
            th = sign * ti.cast(3.141592653589793, T) * ti.cast(j, T) / ti.cast(h, T)
            c, s = ti.cos(th), ti.sin(th)
            o = rows * n
            ur, ui = x[i0], x[o + i0]
            vr, vi = x[i1], x[o + i1]
            tr = vr * c - vi * s
            tim = vr * s + vi * c
            x[i0] = ur + tr
            x[o + i0] = ui + tim
            x[i1] = ur - tr
            x[o + i1] = ui - tim
    return butterfly


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
