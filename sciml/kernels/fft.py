"""Fourier transforms and complex contractions as Taichi kernels (devices; CPU uses scipy.fft / numpy).

Complex arrays are interleaved real pairs (numpy's complex layout): element (p, k, q) of a complex array of
shape (pre, n, post) sits at ``2 ((p n + k) post + q)`` (real part) and the next entry (imaginary part), so a
transform runs along the middle axis of any array without moving axes.

- ``dft``: the complex DFT along the middle axis. Power-of-two n: iterative radix-2 Cooley-Tukey (a
  bit-reversal gather, then log2(n) butterfly passes, each one launch parallel over lines x n/2 disjoint
  butterflies, in place). Other n: a direct O(n^2) DFT, one invocation per output entry, angles from
  (j k mod n) so they stay in [0, 2 pi).
- ``rdft`` / ``irdft``: the real DFT truncated to its m lowest frequencies and its transpose-family inverse
  (see ``sciml/_dft.py`` for the weights), direct O(n m) sums: for the truncated spectra of spectral layers
  (m << n) as cheap as a fast transform.
- ``cein``: a complex two-operand contraction out[o] = sum_c A[o, c] B[o, c] (either operand conjugated), its
  index arithmetic from a stride table.
- ``pack`` / ``part``: interleave two real arrays into a complex one, and take its real or imaginary part.
"""
from . import _common as C
from .. import backend


def dft(x, out, pre: int, n: int, post: int, inverse: bool, scale: float, dtype: str):
    sign = 1.0 if inverse else -1.0
    lines = pre * post
    if n >= 2 and n & (n - 1) == 0:
        logn = n.bit_length() - 1
        C.cached(("fft_bitrev2", dtype), lambda: _build_bitrev(dtype))(x, out, pre, n, post, logn, scale)
        k = C.cached(("fft_pass2", dtype), lambda: _build_pass(dtype))
        h = 1
        while h < n:
            k(out, lines, n, post, h, sign)
            h *= 2
        return
    C.cached(("dft2", dtype), lambda: _build_dft(dtype))(x, out, pre, n, post, sign, scale)


def rdft(x, out, pre: int, n: int, post: int, m: int, adj: bool, scale: float, dtype: str):
    C.cached(("rdft", dtype), lambda: _build_rdft(dtype))(x, out, pre, n, post, m, int(adj), scale)


def irdft(y, out, pre: int, n: int, post: int, m: int, adj: bool, scale: float, dtype: str):
    C.cached(("irdft", dtype), lambda: _build_irdft(dtype))(y, out, pre, n, post, m, int(adj), scale)


def cein(a, b, out, n_out: int, meta: tuple, ca: bool, cb: bool, dtype: str):
    """meta = (ndo, ndc, sizes_o, sa_o, sb_o, sizes_c, sa_c, sb_c) flattened, strides in complex elements."""
    C.cached(("cein", dtype), lambda: _build_cein(dtype))(a, b, out, n_out, backend.meta(meta),
                                                           -1.0 if ca else 1.0, -1.0 if cb else 1.0)


def pack(re, im, out, n: int, dtype: str):
    serial = C.launch_mode(n, C.CHEAP)
    C.cached(("cpack", dtype, serial), lambda: _build_pack(dtype, serial))(re, im, out, n)


def part(p, out, n: int, which: int, dtype: str):
    serial = C.launch_mode(n, C.CHEAP)
    C.cached(("cpart", dtype, serial), lambda: _build_part(dtype, serial))(p, out, n, which)


def _build_bitrev(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def bitrev(x: A, out: A, pre: ti.i32, n: ti.i32, post: ti.i32, logn: ti.i32, scale: T):
        for t in range(pre * n * post):
            p = t // (n * post)
            k = (t // post) % n
            q = t % post
            rev = 0
            v = k
            for _ in range(logn):
                rev = (rev << 1) | (v & 1)
                v >>= 1
            d = ((p * n + rev) * post + q) * 2
            out[d] = x[2 * t] * scale
            out[d + 1] = x[2 * t + 1] * scale
    return bitrev


def _build_pass(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def butterfly(x: A, lines: ti.i32, n: ti.i32, post: ti.i32, h: ti.i32, sign: T):
        half = n // 2
        for t in range(lines * half):
            r = t // half
            b = t % half
            p = r // post
            q = r % post
            j = b % h
            k0 = (b // h) * 2 * h + j
            i0 = ((p * n + k0) * post + q) * 2
            i1 = i0 + h * post * 2
            th = sign * ti.cast(3.141592653589793, T) * ti.cast(j, T) / ti.cast(h, T)
            c, s = ti.cos(th), ti.sin(th)
            ur, ui = x[i0], x[i0 + 1]
            vr, vi = x[i1], x[i1 + 1]
            tr = vr * c - vi * s
            tim = vr * s + vi * c
            x[i0] = ur + tr
            x[i0 + 1] = ui + tim
            x[i1] = ur - tr
            x[i1 + 1] = ui - tim
    return butterfly


def _build_dft(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def dft(x: A, out: A, pre: ti.i32, n: ti.i32, post: ti.i32, sign: T, scale: T):
        for t in range(pre * n * post):
            p = t // (n * post)
            k = (t // post) % n
            q = t % post
            ar = ti.cast(0, T)
            ai = ti.cast(0, T)
            w = sign * ti.cast(6.283185307179586, T) / ti.cast(n, T)
            for j in range(n):
                th = w * ti.cast((j * k) % n, T)
                c, s = ti.cos(th), ti.sin(th)
                src = ((p * n + j) * post + q) * 2
                xr, xi = x[src], x[src + 1]
                ar += xr * c - xi * s
                ai += xr * s + xi * c
            out[2 * t] = ar * scale
            out[2 * t + 1] = ai * scale
    return dft


def _build_rdft(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def rdft(x: A, out: A, pre: ti.i32, n: ti.i32, post: ti.i32, m: ti.i32, adj: ti.i32, scale: T):
        for t in range(pre * m * post):
            p = t // (m * post)
            k = (t // post) % m
            q = t % post
            ar = ti.cast(0, T)
            ai = ti.cast(0, T)
            w = ti.cast(6.283185307179586, T) / ti.cast(n, T)
            for j in range(n):
                th = w * ti.cast((j * k) % n, T)
                xv = x[(p * n + j) * post + q]
                ar += xv * ti.cos(th)
                ai -= xv * ti.sin(th)
            wk = scale
            if adj != 0:  # the transpose of irdft: c_k / n, c_k = 1 at k = 0 and k = n / 2, else 2
                ck = ti.cast(2, T)
                if k == 0 or 2 * k == n:
                    ck = ti.cast(1, T)
                wk = scale * ck / ti.cast(n, T)
            out[2 * t] = ar * wk
            out[2 * t + 1] = ai * wk
    return rdft


def _build_irdft(dtype):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def irdft(y: A, out: A, pre: ti.i32, n: ti.i32, post: ti.i32, m: ti.i32, adj: ti.i32, scale: T):
        for t in range(pre * n * post):
            p = t // (n * post)
            j = (t // post) % n
            q = t % post
            acc = ti.cast(0, T)
            w = ti.cast(6.283185307179586, T) / ti.cast(n, T)
            for k in range(m):
                th = w * ti.cast((j * k) % n, T)
                src = ((p * m + k) * post + q) * 2
                yr = y[src]
                yi = y[src + 1]
                ck = ti.cast(2, T)
                if k == 0 or 2 * k == n:  # irfft reads only the real part of these two
                    ck = ti.cast(1, T)
                    yi = ti.cast(0, T)
                e = scale * ck / ti.cast(n, T)
                if adj != 0:  # weights n h_k with h_k c_k = 1
                    e = scale
                acc += e * (yr * ti.cos(th) - yi * ti.sin(th))
            out[t] = acc
    return irdft


def _build_cein(dtype):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def cein(a: A, b: A, out: A, n_out: ti.i32, meta: I, sa: T, sb: T):
        for t in range(n_out):
            ndo = meta[0]
            ndc = meta[1]
            oa = 0
            ob = 0
            rem = t
            for j in range(ndo):
                d = ndo - 1 - j
                s = meta[2 + d]
                i = rem % s
                rem = rem // s
                oa += i * meta[2 + ndo + d]
                ob += i * meta[2 + 2 * ndo + d]
            base = 2 + 3 * ndo
            kc = 1
            for d in range(ndc):
                kc *= meta[base + d]
            ar_ = ti.cast(0, T)
            ai_ = ti.cast(0, T)
            for u in range(kc):
                ca = oa
                cb = ob
                r2 = u
                for j in range(ndc):
                    d = ndc - 1 - j
                    s = meta[base + d]
                    i = r2 % s
                    r2 = r2 // s
                    ca += i * meta[base + ndc + d]
                    cb += i * meta[base + 2 * ndc + d]
                xr, xi = a[2 * ca], sa * a[2 * ca + 1]
                yr, yi = b[2 * cb], sb * b[2 * cb + 1]
                ar_ += xr * yr - xi * yi
                ai_ += xr * yi + xi * yr
            out[2 * t] = ar_
            out[2 * t + 1] = ai_
    return cein


def _build_pack(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def pack(re: A, im: A, out: A, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            out[2 * i] = re[i]
            out[2 * i + 1] = im[i]
    return pack


def _build_part(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def part(p: A, out: A, n: ti.i32, which: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            out[i] = p[2 * i + which]
    return part
