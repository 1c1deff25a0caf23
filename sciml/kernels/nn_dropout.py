"""Dropout masks from a counter-based generator (Threefry-2x32, as ``kernels/random.py``), in Taichi.

The stream's state is a float buffer of 6 integers < 2**16 (exact in float32 and float64): the key's two
uint32 words as four 16-bit words, then the draw counter (low, high 16 bits). ``mask`` draws
``m[i] = scale if u_i >= round(p 2^16) else 0`` with ``u_i`` the 16-bit half ``i % 2`` of word ``(i // 2) % 2`` of
``threefry(key, (counter, i // 4))`` (four mask entries per Threefry call: 2x fewer calls than 24-bit uniforms;
p is resolved to 2^-16) and ``advance`` adds one to the counter in the buffer. Both kernels read the state from the
buffer itself, so a jitted function that applies Dropout draws a fresh mask on every replay.
"""
from . import _common as C
from .. import backend
from .random import _threefry

STATE_WORDS = 6


def state_words(seed: int):
    """The initial state of a stream (a list of 6 integers < 2**16) from an integer seed."""
    s = int(seed) % (1 << 64)
    k0, k1 = (s >> 32) & 0xFFFFFFFF, s & 0xFFFFFFFF
    return [k0 & 0xFFFF, k0 >> 16, k1 & 0xFFFF, k1 >> 16, 0, 0]


def _build_mask(sdtype, dtype, serial):
    ti = C.ti()
    S, A = C.arr(sdtype), C.arr(dtype)
    T = backend.ti_dtype(dtype)
    tf = _threefry(ti)
    u32 = ti.u32

    @ti.func
    def word(x):
        return ti.cast(ti.cast(x, ti.i32), u32)

    @ti.kernel
    def k(state: S, m: A, n: ti.i32, thr: ti.i32, scale: T):
        ti.loop_config(serialize=serial)
        for j in range((n + 3) // 4):
            k0 = word(state[0]) | (word(state[1]) << u32(16))
            k1 = word(state[2]) | (word(state[3]) << u32(16))
            c = word(state[4]) | (word(state[5]) << u32(16))
            x0, x1 = tf(k0, k1, c, ti.cast(j, u32))
            t = ti.cast(thr, u32)
            lo = u32(0xFFFF)
            zero = ti.cast(0, T)
            m[4 * j] = ti.select((x0 & lo) >= t, scale, zero)
            if 4 * j + 1 < n:
                m[4 * j + 1] = ti.select((x0 >> u32(16)) >= t, scale, zero)
            if 4 * j + 2 < n:
                m[4 * j + 2] = ti.select((x1 & lo) >= t, scale, zero)
            if 4 * j + 3 < n:
                m[4 * j + 3] = ti.select((x1 >> u32(16)) >= t, scale, zero)
    return k


def _build_advance(sdtype):
    ti = C.ti()
    S = C.arr(sdtype)

    @ti.kernel
    def k(state: S):
        ti.loop_config(serialize=True)
        for _ in range(1):
            lo = ti.cast(state[4], ti.i32) + 1
            hi = ti.cast(state[5], ti.i32)
            if lo >= 65536:
                lo = 0
                hi = (hi + 1) % 65536
            state[4] = lo
            state[5] = hi
    return k


def mask(state, out, n: int, p: float, sdtype: str, dtype: str):
    """out[:n] = 1 / (1 - p) where the i-th uniform draw is >= p, else 0; then advance the counter."""
    thr = min(int(round(p * (1 << 16))), 1 << 16)
    if n:
        # serial up to 256K entries: a parallel launch measured 10 ms on the loaded 2-core machine (65K entries)
        # against 1.3 ms serial at 32K; idle, serial costs ~5 ns an entry
        serial = C.launch_mode(n, C.CHEAP)
        C.cached(("dropout_mask", sdtype, dtype, serial), lambda: _build_mask(sdtype, dtype, serial))(
            state, out, n, thr, 1.0 / (1.0 - p))
    C.cached(("dropout_advance", sdtype), lambda: _build_advance(sdtype))(state)
