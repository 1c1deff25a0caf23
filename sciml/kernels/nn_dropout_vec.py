"""The dense epilogue ``y = dropout(act(h + b))`` and its adjoint on host vectors (CPU, float32; see ``_vec.py``).

The same Threefry mask stream as ``nn_dropout.py`` (entry ``64 q + 16 w + l`` from 16-bit half ``w % 2`` of word
``w // 2`` of ``threefry(key, (counter, 16 q + l))``), computed for L lanes of Threefry calls at once: u32 vector
adds, shifts and xors, where the scalar kernel costs ~100 ns a call here (a 32K mask: 1.0 ms scalar, ~0.1 ms on
16 lanes). The activation runs on the same vectors (tanh / sigmoid / silu: the rational tanh with f32-typed
constants, ``elementwise.exp_funcs``' ``tanh``; the scalar epilogue uses the same rational form). Used where
``n % 64 == 0``, ``cols % L == 0`` and every buffer is aligned for L lanes; else the scalar kernels run.
"""
from . import _common as C
from . import _vec as V
from .random import _threefry

G = 16   # Threefry calls per group of 64 mask entries (the stream's layout; nn_dropout.G)
VECTOR = True   # False: the scalar kernels only (benchmarks compare)
# 16 lanes (AVX-512) ran no faster here and LLVM took 30-200 s to compile one such kernel (u32 vector shifts on a
# loaded machine) against ~3 s for 8 lanes: at most 8
MAX_LANES = 8


def _act_v(act, L):
    """(value, derivative) of ``act`` on f32 vectors of L lanes (+ - * / and selects only)."""
    ti = C.ti()
    from .elementwise import exp_funcs
    tanh = exp_funcs(L)["tanh"]
    f = ti.f32

    @ti.func
    def sig(z):
        h = ti.cast(0.5, f)
        return h * tanh(h * z) + h

    @ti.func
    def val(z):
        r = z
        if ti.static(act == "relu"):
            r = ti.select(z > 0, z, ti.select(z <= 0, ti.cast(0, f), z))   # NaN kept (ordered compares)
        elif ti.static(act == "tanh"):
            r = tanh(z)
        elif ti.static(act == "sigmoid"):
            r = sig(z)
        elif ti.static(act == "silu"):
            r = z * sig(z)
        return r

    @ti.func
    def der(z):
        one = ti.cast(1, f)
        d = z * ti.cast(0, f) + one
        if ti.static(act == "relu"):
            d = ti.select(z > 0, one, ti.select(z <= 0, ti.cast(0, f), z))
        elif ti.static(act == "tanh"):
            t = tanh(z)
            d = one - t * t
        elif ti.static(act == "sigmoid"):
            s = sig(z)
            d = s * (one - s)
        elif ti.static(act == "silu"):
            s = sig(z)
            d = s + z * (s * (one - s))
        return d

    @ti.func
    def both(z):   # (value, derivative) sharing the tanh
        r, dr = z, z
        if ti.static(act == "tanh"):
            r = tanh(z)
            dr = ti.cast(1, f) - r * r
        elif ti.static(act in ("sigmoid", "silu")):
            s = sig(z)
            dr = s * (ti.cast(1, f) - s)
            r = s
            if ti.static(act == "silu"):
                r = z * s
                dr = s + z * dr
        else:
            r = val(z)
            dr = der(z)
        return r, dr
    return val, der, both


def _build_fwd(act, L, serial, with_b, drop, save_d):
    ti = C.ti()
    f, u32 = ti.f32, ti.u32
    VT, VU = ti.types.vector(L, f), ti.types.vector(L, u32)
    A = ti.types.ndarray(dtype=VT, ndim=1)
    S = ti.types.ndarray(ndim=1)
    tf = _threefry(ti)
    val, der, both = _act_v(act, L)
    P = G // L            # vectors per word of a group
    NV = 64 // L          # vectors per group

    @ti.func
    def word(x):
        return ti.cast(ti.cast(x, ti.i32), u32)

    @ti.kernel
    def k(h: A, b: A, y: A, m: A, d: A, state: S, groups: ti.i32, cv: ti.i32, thr: ti.i32, scale: f):
        ti.loop_config(serialize=serial)
        for q in range(groups):
            for p in ti.static(range(P)):
                mk = VT(0.0)
                if ti.static(drop):
                    k0 = word(state[0]) | (word(state[1]) << u32(16))
                    k1 = word(state[2]) | (word(state[3]) << u32(16))
                    c = word(state[4]) | (word(state[5]) << u32(16))
                    base = ti.cast(q * G + p * L, u32)
                    c1 = VU([base + u32(l) for l in ti.static(range(L))])
                    c0 = VU([c for _ in ti.static(range(L))])
                    x0, x1 = tf(k0, k1, c0, c1)
                    t = ti.cast(thr, u32)
                    lo = u32(0xFFFF)
                    sv, zv = VT(scale), VT(0.0)
                    for w in range(4):   # a runtime loop: the activation's code is compiled once, not 4 times
                        x = x0
                        if w >= 2:
                            x = x1
                        bits = x & lo
                        if w % 2 == 1:
                            bits = x >> u32(16)
                        mk = ti.select(bits >= t, sv, zv)
                        v = q * NV + w * P + p
                        z = h[v]
                        if ti.static(with_b):
                            z = z + b[v % cv]
                        if ti.static(save_d):
                            a, dz = both(z)
                            d[v] = dz * mk
                            y[v] = a * mk
                        else:
                            y[v] = val(z) * mk
                        m[v] = mk
                else:
                    for w in range(4):
                        v = q * NV + w * P + p
                        z = h[v]
                        if ti.static(with_b):
                            z = z + b[v % cv]
                        if ti.static(save_d):
                            a, dz = both(z)
                            d[v] = dz
                            y[v] = a
                        else:
                            y[v] = val(z)
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


def _build_bwd(L, serial, with_b, with_gz):
    """gz = g * d (d: the forward's m act'(z)), gb = column sums of gz (serial: one row-major pass, the sums
    accumulated in gb; parallel: one column-vector per iteration)."""
    ti = C.ti()
    VT = ti.types.vector(L, ti.f32)
    A = ti.types.ndarray(dtype=VT, ndim=1)

    @ti.kernel
    def k(g: A, d: A, gz: A, gb: A, rows: ti.i32, cv: ti.i32):
        if ti.static(serial and with_b):
            ti.loop_config(serialize=True)
            for j in range(cv):
                gb[j] = VT(0.0)
            ti.loop_config(serialize=True)
            for r in range(rows):
                for j in range(cv):
                    v = g[r * cv + j] * d[r * cv + j]
                    if ti.static(with_gz):
                        gz[r * cv + j] = v
                    gb[j] += v
        elif ti.static(with_b):
            for j in range(cv):
                acc = VT(0.0)
                for r in range(rows):
                    v = g[r * cv + j] * d[r * cv + j]
                    if ti.static(with_gz):
                        gz[r * cv + j] = v
                    acc += v
                gb[j] = acc
        else:
            ti.loop_config(serialize=serial)
            for i in range(rows * cv):
                gz[i] = g[i] * d[i]
    return k


def _lanes(arrays, n, cols, dtype):
    """(L, pointers) for the vector kernels, or None where they do not apply."""
    if not (VECTOR and dtype == "float32" and C.backend.on_host() and n and n % 64 == 0):
        return None
    ptrs = [C.address(a) for a in arrays]
    L = V.lanes_for(ptrs, dtype)
    if L is not None:
        L = min(L, MAX_LANES)
    if L is None or G % L or cols % L:
        return None
    return L, ptrs


def epilogue(act, h, b, y, m, d, state, rows, cols, thr, scale, serial, sdtype) -> bool:
    """The vector form of ``nn_dropout.epilogue`` (state None: no dropout; b, d None: no bias / no saved
    derivative); False (nothing done) where it does not apply."""
    drop, with_b, save_d = state is not None, b is not None, d is not None
    n = rows * cols
    arrays = (h, b if with_b else h, y, m if drop else y, d if save_d else y)
    got = _lanes(arrays, n, cols, "float32")
    if got is None:
        return False
    L, ptrs = got
    st = state if drop else h
    k = V.cached(("dense_epi_vec", act, L, serial, with_b, drop, save_d, sdtype if drop else None),
                 lambda: _build_fwd(act, L, serial, with_b, drop, save_d), (L, L, L, L, L, 1))
    nv = n // L
    k(arrays + (st,), ptrs + [C.address(st)], (nv, cols // L if with_b else 1, nv, nv if drop else 1,
                                               nv if save_d else 1, 6 if drop else 1),
      (n // 64, max(cols // L, 1), thr, scale))
    return True


def epilogue_vjp(g, d, gz, gb, rows, cols, serial) -> bool:
    """gz = g * d, gb = column sums (gz / gb None: skipped) on vectors; False where it does not apply."""
    with_b, with_gz = gb is not None, gz is not None
    n = rows * cols
    arrays = (g, d, gz if with_gz else g, gb if with_b else g)
    got = _lanes(arrays, n, cols, "float32")
    if got is None:
        return False
    L, ptrs = got
    k = V.cached(("dense_epi_vjp_vec", L, serial, with_b, with_gz), lambda: _build_bwd(L, serial, with_b, with_gz), L)
    nv, cv = n // L, cols // L
    k(arrays, ptrs, (nv, nv, nv if with_gz else 1, cv if with_b else 1), (rows, cv))
    return True
