"""Counter-based random numbers: Threefry-2x32 (20 rounds, Salmon et al. 2011, as JAX) in Taichi.

Element i of a draw from key k is a function of (k, i) only, so draws are identical on every arch
(the bits exactly; floats up to the last ulp of the device's log/cos) and replay under ``sm.jit``.
Counters: (0, i) and (3, i) for draws, (1, i) for ``split``, (2, data) for ``fold_in``.
Keys are int32 buffers of 2 words (the bits of two uint32).
"""
from . import _common as C
from .. import backend

ROT = (13, 15, 26, 6, 17, 29, 16, 24)
PARITY = 0x1BD11BDA


def _threefry(ti):
    u32 = ti.u32

    @ti.func
    def rotl(x, r: ti.template()):
        return (x << ti.cast(r, u32)) | (x >> ti.cast(32 - r, u32))

    @ti.func
    def threefry(k0, k1, c0, c1):
        k2 = k0 ^ k1 ^ ti.cast(PARITY, u32)
        x0 = c0 + k0
        x1 = c1 + k1
        for g in ti.static(range(5)):
            for r in ti.static(range(4)):
                x0 += x1
                x1 = rotl(x1, ROT[(g % 2) * 4 + r])
                x1 ^= x0
            if ti.static(g % 3 == 0):
                x0 += k1
                x1 += k2 + ti.cast(g + 1, u32)
            elif ti.static(g % 3 == 1):
                x0 += k2
                x1 += k0 + ti.cast(g + 1, u32)
            else:
                x0 += k0
                x1 += k1 + ti.cast(g + 1, u32)
        return x0, x1
    return threefry


def derive_keys(key, out, num: int, hi: int, data: int):
    """out (num, 2) = threefry(key, (hi, data + i)) for i < num."""
    k = C.cached(("rng_keys",), _build_keys)
    k(key, out, num, hi, data)


def _build_keys():
    ti = C.ti()
    I = C.arr("int32")
    tf = _threefry(ti)

    @ti.kernel
    def keys(key: I, out: I, num: ti.i32, hi: ti.i32, data: ti.i32):
        for i in range(num):
            k0 = ti.bit_cast(key[0], ti.u32)
            k1 = ti.bit_cast(key[1], ti.u32)
            x0, x1 = tf(k0, k1, ti.bit_cast(hi, ti.u32), ti.bit_cast(data, ti.u32) + ti.cast(i, ti.u32))
            out[2 * i] = ti.bit_cast(x0, ti.i32)
            out[2 * i + 1] = ti.bit_cast(x1, ti.i32)
    return keys


def draw(kind: str, key, out, n: int, p0: float, p1: float, dtype: str):
    """out[i] for i < n: 'uniform' p0 + (p1 - p0) u, u in [0, 1); 'normal' p0 + p1 z; 'truncnorm'
    sqrt(2) erfinv(v) with v uniform in (p0, p1); 'gumbel' -log(-log u), u in (0, 1)."""
    serial = C.launch_mode(n, 8)
    k = C.cached(("rng_draw", kind, dtype, serial), lambda: _build_draw(kind, dtype, serial))
    k(key, out, n, p0, p1)


def randint(key, out, n: int, lo: int, span: int):
    """out[i] = lo + bits_i mod span (int32; span in [1, 2^32))."""
    serial = C.launch_mode(n, 8)
    k = C.cached(("rng_int", serial), lambda: _build_int(serial))
    k(key, out, n, lo, span - (1 << 32) if span >= 1 << 31 else span)


def bits(key, out, n: int):
    """out[i] = the first Threefry word for counter (0, i), as int32 bits."""
    serial = C.launch_mode(n, 8)
    k = C.cached(("rng_bits", serial), lambda: _build_bits(serial))
    k(key, out, n)


def _build_bits(serial):
    ti = C.ti()
    I = C.arr("int32")
    tf = _threefry(ti)

    @ti.kernel
    def kb(key: I, out: I, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            x0, x1 = tf(ti.bit_cast(key[0], ti.u32), ti.bit_cast(key[1], ti.u32), ti.u32(0), ti.cast(i, ti.u32))
            out[i] = ti.bit_cast(x0, ti.i32)
    return kb


def _build_int(serial):
    ti = C.ti()
    I = C.arr("int32")
    tf = _threefry(ti)

    @ti.kernel
    def ki(key: I, out: I, n: ti.i32, lo: ti.i32, span: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            x0, x1 = tf(ti.bit_cast(key[0], ti.u32), ti.bit_cast(key[1], ti.u32), ti.u32(0), ti.cast(i, ti.u32))
            out[i] = lo + ti.bit_cast(x0 % ti.bit_cast(span, ti.u32), ti.i32)
    return ki


def _build_draw(kind, dtype, serial):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")
    T = backend.ti_dtype(dtype)
    tf = _threefry(ti)
    f64 = dtype == "float64"

    @ti.func
    def unit(x0, x1, open_: ti.template()):
        """[0, 1) (or (0, 1) when open_) from the words: 24 bits for float32, 53 for float64."""
        u = ti.cast(0, T)
        if ti.static(f64):
            v = ti.cast(x0 >> ti.u32(6), ti.f64) * 134217728.0 + ti.cast(x1 >> ti.u32(5), ti.f64)
            if ti.static(open_):
                v += 0.5
            u = v * (1.0 / 9007199254740992.0)
        else:
            v = ti.cast(x0 >> ti.u32(8), ti.f32)
            if ti.static(open_):
                v += 0.5
            u = v * (1.0 / 16777216.0)
        return u

    @ti.func
    def erfinv(x):
        # Giles (2010), "Approximating the erfinv function" (single-precision coefficients)
        w = -ti.log((1.0 - x) * (1.0 + x))
        p = ti.cast(0, T)
        if w < 5.0:
            w = w - 2.5
            p = 2.81022636e-08
            p = 3.43273939e-07 + p * w
            p = -3.5233877e-06 + p * w
            p = -4.39150654e-06 + p * w
            p = 0.00021858087 + p * w
            p = -0.00125372503 + p * w
            p = -0.00417768164 + p * w
            p = 0.246640727 + p * w
            p = 1.50140941 + p * w
        else:
            w = ti.sqrt(w) - 3.0
            p = -0.000200214257
            p = 0.000100950558 + p * w
            p = 0.00134934322 + p * w
            p = -0.00367342844 + p * w
            p = 0.00573950773 + p * w
            p = -0.0076224613 + p * w
            p = 0.00943887047 + p * w
            p = 1.00167406 + p * w
            p = 2.83297682 + p * w
        return p * x

    @ti.kernel
    def kd(key: I, out: A, n: ti.i32, p0: T, p1: T):
        ti.loop_config(serialize=serial)
        for i in range(n):
            k0 = ti.bit_cast(key[0], ti.u32)
            k1 = ti.bit_cast(key[1], ti.u32)
            x0, x1 = tf(k0, k1, ti.u32(0), ti.cast(i, ti.u32))
            if ti.static(kind == "uniform"):
                out[i] = p0 + (p1 - p0) * unit(x0, x1, False)
            elif ti.static(kind == "gumbel"):
                out[i] = -ti.log(-ti.log(unit(x0, x1, True)))
            elif ti.static(kind == "truncnorm"):
                v = p0 + (p1 - p0) * unit(x0, x1, True)
                out[i] = ti.cast(1.4142135623730951, T) * erfinv(v)
            else:  # normal: Box-Muller on two uniforms
                u1 = ti.cast(0, T)
                u2 = ti.cast(0, T)
                if ti.static(f64):
                    y0, y1 = tf(k0, k1, ti.u32(3), ti.cast(i, ti.u32))
                    u1 = unit(x0, x1, True)
                    u2 = unit(y0, y1, False)
                else:
                    u1 = unit(x0, x0, True)
                    u2 = unit(x1, x1, False)
                z = ti.sqrt(-2.0 * ti.log(u1)) * ti.cos(ti.cast(6.283185307179586, T) * u2)
                out[i] = p0 + p1 * z
    return kd
