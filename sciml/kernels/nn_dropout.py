"""Dropout masks from a counter-based generator (Threefry-2x32, as ``kernels/random.py``), in Taichi.

The stream's state is a float buffer of 6 integers < 2**16 (exact in float32 and float64): the key's two
uint32 words as four 16-bit words, then the draw counter (low, high 16 bits). ``mask`` draws
``m[i] = scale if u_i >= round(p 2^16) else 0`` where, for ``i = 64 q + 16 w + l`` (groups of 64 entries, l < 16),
``u_i`` is the 16-bit half ``w % 2`` of word ``w // 2`` of ``threefry(key, (counter, 16 q + l))`` (four mask
entries per Threefry call; p is resolved to 2^-16): 16 consecutive entries come from 16 consecutive calls, so the
host kernels (``nn_dropout_vec.py``) draw them as u32 vectors, 10x faster than one call at a time. ``advance``
adds one to the counter in the buffer. Both kernels read the state from the buffer itself, so a jitted function
that applies Dropout draws a fresh mask on every replay.
"""
from . import _common as C
from .. import backend, runtime
from . import nn_dropout_vec as KV
from .random import _threefry

STATE_WORDS = 6
G = KV.G   # Threefry calls per group of 64 entries


def state_words(seed: int):
    """The initial state of a stream (a list of 6 integers < 2**16) from an integer seed."""
    s = int(seed) % (1 << 64)
    k0, k1 = (s >> 32) & 0xFFFFFFFF, s & 0xFFFFFFFF
    return [k0 & 0xFFFF, k0 >> 16, k1 & 0xFFFF, k1 >> 16, 0, 0]


def _mask_block(T):
    """A ti.func writing the mask entries of Threefry call j (entries 64 (j // 16) + 16 w + j % 16, w < 4, those
    < n) on the stream in ``state``: ``scale`` where the 16-bit uniform is >= ``thr``, else 0 (shared by ``mask``
    and the dense epilogue)."""
    ti = C.ti()
    tf = _threefry(ti)
    u32 = ti.u32

    @ti.func
    def word(x):
        return ti.cast(ti.cast(x, ti.i32), u32)

    @ti.func
    def block(state: ti.template(), m: ti.template(), j, n, thr, scale):
        k0 = word(state[0]) | (word(state[1]) << u32(16))
        k1 = word(state[2]) | (word(state[3]) << u32(16))
        c = word(state[4]) | (word(state[5]) << u32(16))
        x0, x1 = tf(k0, k1, c, ti.cast(j, u32))
        t = ti.cast(thr, u32)
        lo = u32(0xFFFF)
        zero = ti.cast(0, T)
        e = (j // G) * (4 * G) + j % G
        if e < n:
            m[e] = ti.select((x0 & lo) >= t, scale, zero)
        if e + G < n:
            m[e + G] = ti.select((x0 >> u32(16)) >= t, scale, zero)
        if e + 2 * G < n:
            m[e + 2 * G] = ti.select((x1 & lo) >= t, scale, zero)
        if e + 3 * G < n:
            m[e + 3 * G] = ti.select((x1 >> u32(16)) >= t, scale, zero)
    return block


def _build_mask(sdtype, dtype, serial):
    ti = C.ti()
    S, A = C.arr(sdtype), C.arr(dtype)
    T = backend.ti_dtype(dtype)
    block = _mask_block(T)

    @ti.kernel
    def k(state: S, m: A, n: ti.i32, thr: ti.i32, scale: T):
        ti.loop_config(serialize=serial)
        for j in range((n + 4 * G - 1) // (4 * G) * G):
            block(state, m, j, n, thr, scale)
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


# --- the dense epilogue: y = dropout(act(h + b)) in one kernel, its adjoint in one ----------------------------
EPI_ACTS = ("identity", "relu", "tanh", "sigmoid", "silu")


def _epi_funcs(act, dtype):
    """(value, derivative) of ``act`` as Taichi funcs of the pre-activation z (the forms of sciml's ops:
    float32 tanh / sigmoid rational, relu and its step keep NaN)."""
    ti = C.ti()
    from .elementwise import _funcs
    f = _funcs(dtype)
    T = backend.ti_dtype(dtype)
    relu, step, tanh, sig = f["relu"], f["step"], f["tanh"], f["sigmoid"]

    @ti.func
    def val(z):
        r = z
        if ti.static(act == "relu"):
            r = relu(z)
        elif ti.static(act == "tanh"):
            r = tanh(z)
        elif ti.static(act == "sigmoid"):
            r = sig(z)
        elif ti.static(act == "silu"):
            r = z * sig(z)
        return r

    @ti.func
    def der(z):
        d = ti.cast(1, T)
        if ti.static(act == "relu"):
            d = ti.cast(step(z), T)
        elif ti.static(act == "tanh"):
            t = tanh(z)
            d = 1 - t * t
        elif ti.static(act == "sigmoid"):
            s = sig(z)
            d = s * (1 - s)
        elif ti.static(act == "silu"):
            s = sig(z)
            d = s + z * (s * (1 - s))
        return d
    return val, der


def _build_epi_fwd(act, dtype, sdtype, serial, with_b, drop, cols4=False, save_d=False):
    ti = C.ti()
    S, A = C.arr(sdtype), C.arr(dtype)
    T = backend.ti_dtype(dtype)
    block = _mask_block(T)
    val, der = _epi_funcs(act, dtype)

    @ti.kernel
    def k(h: A, b: A, y: A, m: A, d: A, state: S, n: ti.i32, cols: ti.i32, thr: ti.i32, scale: T):
        if ti.static(drop):   # the mask first (four entries per Threefry call, the stream of ``mask`` above)
            ti.loop_config(serialize=serial)
            for j in range((n + 4 * G - 1) // (4 * G) * G):
                block(state, m, j, n, thr, scale)
        ti.loop_config(serialize=serial)   # then the epilogue: plain row / column loops
        for r in range(n // cols):
            for j in range(cols):
                i = r * cols + j
                z = h[i]
                if ti.static(with_b):
                    z = z + b[j]
                a = val(z)
                if ti.static(save_d):   # m act'(z) for the adjoint (the activation's exp / division done here once)
                    dv = der(z)
                    if ti.static(drop):
                        dv = dv * m[i]
                    d[i] = dv
                if ti.static(drop):
                    a = a * m[i]
                y[i] = a
        if ti.static(drop):   # then advance the counter (a second task of the same launch)
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


def _build_epi_bwd(act, dtype, serial, with_b, drop, with_gz, pre=False):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    _, der = _epi_funcs(act, dtype)
    CB = 16   # columns per parallel iteration: bias sums in registers, no atomics

    @ti.func
    def dz(g, z, m):
        v = g
        if ti.static(pre):   # m holds m act'(z) from the forward
            v = v * m
        else:
            if ti.static(drop):
                v = v * m
            if ti.static(act != "identity"):
                v = v * der(z)
        return v

    @ti.kernel
    def k(g: A, h: A, b: A, m: A, gz: A, gb: A, rows: ti.i32, cols: ti.i32):
        if ti.static(with_b and serial):   # one row-major pass, the column sums accumulated in gb (L1-resident)
            ti.loop_config(serialize=True)
            for j in range(cols):
                gb[j] = ti.cast(0, T)
            ti.loop_config(serialize=True)
            for r in range(rows):
                for j in range(cols):
                    i = r * cols + j
                    v = dz(g[i], h[i] + b[j], m[i])
                    if ti.static(with_gz):
                        gz[i] = v
                    gb[j] += v
        elif ti.static(with_b):
            for cb in range((cols + CB - 1) // CB):
                j0 = cb * CB
                acc = ti.Vector.zero(T, CB)
                for r in range(rows):
                    for jj in ti.static(range(CB)):
                        if j0 + jj < cols:
                            i = r * cols + j0 + jj
                            v = dz(g[i], h[i] + b[j0 + jj], m[i])
                            if ti.static(with_gz):
                                gz[r * cols + j0 + jj] = v
                            acc[jj] += v
                for jj in ti.static(range(CB)):
                    if j0 + jj < cols:
                        gb[j0 + jj] = acc[jj]
        else:
            ti.loop_config(serialize=serial)
            for i in range(rows * cols):
                gz[i] = dz(g[i], h[i], m[i])
    return k


SAVE_D = ("tanh", "sigmoid", "silu")   # activations whose derivative the forward stores (m act'(z))


def epilogue(act, h, b, y, m, state, rows, cols, p, dtype, sdtype, d=None):
    """y = dropout(act(h + b)) for h (rows, cols), b (cols,) or None, and the mask m (its entries 1 / (1 - p) or
    0, drawn as :func:`mask` draws them) when ``state`` is a stream (then its counter advances), else no dropout;
    ``d``: a buffer for m act'(h + b) (read by :func:`epilogue_vjp`) or None. One launch."""
    n = rows * cols
    drop = state is not None
    if not n:
        if drop:
            C.cached(("dropout_advance", sdtype), lambda: _build_advance(sdtype))(state)
        return
    with_b = b is not None
    if not drop:
        sdtype = dtype
    # serial up to 256K entries, as ``mask`` (a parallel launch wakes the thread pool: on the loaded 2-core
    # machine it cost more than the serial loop), and whenever every core is busy
    serial = C.launch_mode(n, C.CHEAP) or (C.backend.on_host() and C.busy())
    thr = min(int(round(p * (1 << 16))), 1 << 16) if drop else 0
    scale = 1.0 / (1.0 - p) if drop else 1.0
    cols4 = cols % 4 == 0
    save_d = d is not None
    if dtype == "float32" and KV.epilogue(act, h, b, y, m if drop else None, d, state if drop else None, rows, cols,
                                          thr, scale, serial, sdtype):
        return
    C.cached(("dense_epi", act, dtype, sdtype, serial, with_b, drop, cols4, save_d),
             lambda: _build_epi_fwd(act, dtype, sdtype, serial, with_b, drop, cols4, save_d))(
        h, b if with_b else h, y, m if drop else h, d if save_d else h, state if drop else _dummy_state(sdtype), n,
        cols, thr, scale)


def epilogue_vjp(act, g, h, b, m, gz, gb, rows, cols, dtype, d=None):
    """gz = g * m * act'(h + b) (m: the dropout mask or None; gz skipped if None), gb = its column sums (b given);
    with ``d`` (the forward's m act'(h + b)) gz = g * d."""
    n = rows * cols
    if not n:
        return
    with_b, drop, with_gz = b is not None, m is not None, gz is not None
    serial = C.launch_mode(n, C.CHEAP) or (C.backend.on_host() and (C.busy() or (with_b and cols < 32)))
    pre = d is not None
    if pre and dtype == "float32" and KV.epilogue_vjp(g, d, gz, gb if with_b else None, rows, cols, serial):
        return
    if pre:
        m, drop = d, True
    C.cached(("dense_epi_vjp", act, dtype, serial, with_b, drop, with_gz, pre),
             lambda: _build_epi_bwd(act, dtype, serial, with_b, drop, with_gz, pre))(
        g, h, b if with_b else h, m if drop else h, gz if with_gz else g, gb if with_b else g, rows, cols)


_DUMMY = {}   # a stand-in state buffer for the kernels without dropout
runtime.on_shutdown(_DUMMY.clear)


def _dummy_state(sdtype):
    s = _DUMMY.get(sdtype)
    if s is None:
        s = _DUMMY[sdtype] = backend.zeros(STATE_WORDS, sdtype)
    return s
