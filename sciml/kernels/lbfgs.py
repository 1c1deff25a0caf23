"""Fused vector algebra for the curvature optimizers, on flat buffers (cpu and vulkan).

The optimizers keep ONE flat parameter vector; per iteration they need a handful of
axpys and dot products plus the L-BFGS two-loop recursion over an (m, n) history.
Each function here is one launch (the two-loop recursion is one launch on CPU, where
it runs serialized; on devices, where a serialized loop is forbidden, it is 2 launches
per history pair with parallel loops).

Every dot product is an ordered reduction (``_common.scratch``): partial sums over fixed chunks of
CH elements (``_common.reduce_chunk()``: 4,096 on the CPU, 256 on devices), then the partials added in
order by one more task of the same launch. A ``+=`` into
one location from a parallel loop would compile to atomic adds, whose order changes from run to
run on a GPU: two runs of the same L-BFGS or BFGS solve on an H200 ended at different errors
(tests/repeat_check.py). Up to CH elements the bits are those of one sequential loop.
"""
from .. import backend
from . import _common as C


SERIAL_TWO_LOOP = 1 << 22   # n * history below which the whole recursion is one serial CPU launch


def _par(n):
    return C.launch_mode(n)


def acc_dtype(dtype: str) -> str:
    """Dtype of the scalar outputs (dots, rho, alpha): float64 on CPU; the parameters' dtype on
    devices, where float64 atomics are not portable (Vulkan)."""
    return "float64" if backend.on_host() else dtype


def axpy(x, a: float, d, out, n: int, dtype: str):
    """out = x + a * d."""
    serial = _par(n)
    k = C.cached(("opt_axpy", dtype, serial), lambda: _build_axpy(dtype, serial))
    k(x, float(a), d, out, n)


def _build_axpy(dtype, serial):
    ti, A = C.ti(), C.arr(dtype)
    T = backend.ti_dtype(dtype)
    FT = backend.ti_dtype(acc_dtype(dtype))

    @ti.kernel
    def k(x: A, a: FT, d: A, out: A, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            out[i] = x[i] + ti.cast(a, T) * d[i]
    return k


def _push_chunk_func(dtype):
    """``push_chunk(x_new, x, g_new, g, S, Y, slot, part, n, ch)``: chunk ch of a history push: S[slot] = x_new - x,
    Y[slot] = g_new - g over its CH elements; its partials s.y, y.y, s.s, max |s| into part[4 ch ..]."""
    key = ("push_chunk", dtype)
    if key not in _PUSH:
        ti = C.ti()
        CH = C.reduce_chunk()
        FT = backend.ti_dtype(acc_dtype(dtype))

        @ti.func
        def push_chunk(x_new: ti.template(), x: ti.template(), g_new: ti.template(), g: ti.template(),
                       S: ti.template(), Y: ti.template(), slot, part: ti.template(), n, ch):
            s0 = ti.cast(0.0, FT)
            s1, s2, mx = s0, s0, s0
            for i in range(ch * CH, ti.min(n, ch * CH + CH)):
                s = x_new[i] - x[i]
                y = g_new[i] - g[i]
                S[slot * n + i] = s
                Y[slot * n + i] = y
                sd, yd = ti.cast(s, FT), ti.cast(y, FT)
                s0 += sd * yd
                s1 += yd * yd
                s2 += sd * sd
                mx = ti.max(mx, ti.abs(sd))
            part[4 * ch] = s0
            part[4 * ch + 1] = s1
            part[4 * ch + 2] = s2
            part[4 * ch + 3] = mx
        _PUSH[key] = push_chunk
    return _PUSH[key]


_PUSH: dict = {}


def dots(a, b, c, out, n: int, dtype: str):
    """out[0] = a.b, out[1] = a.c, out[2] = b.b (in ``acc_dtype``), out[3] = max |b|, out[4] = sum |b| (5 entries)."""
    serial, nch = _par(n), C.chunks(n)
    k = C.cached(("opt_dots", dtype, serial), lambda: _build_dots(dtype, serial))
    k(a, b, c, out, C.scratch(5 * nch, acc_dtype(dtype)), n, nch)


def _build_dots(dtype, serial):
    CH = C.reduce_chunk()
    ti, A, F = C.ti(), C.arr(dtype), C.arr(acc_dtype(dtype))
    FT = backend.ti_dtype(acc_dtype(dtype))
    combine = C.combine_func()

    @ti.kernel
    def k(a: A, b: A, c: A, out: F, part: F, n: ti.i32, nch: ti.i32):
        ti.loop_config(serialize=serial)
        for ch in range(nch):
            s0 = ti.cast(0.0, FT)
            s1, s2, mx, s4 = s0, s0, s0, s0
            for i in range(ch * CH, ti.min(n, ch * CH + CH)):
                bi = ti.cast(b[i], FT)
                s0 += ti.cast(a[i], FT) * bi
                s1 += ti.cast(a[i], FT) * ti.cast(c[i], FT)
                s2 += bi * bi
                mx = ti.max(mx, ti.abs(bi))
                s4 += ti.abs(bi)
            part[5 * ch] = s0
            part[5 * ch + 1] = s1
            part[5 * ch + 2] = s2
            part[5 * ch + 3] = mx
            part[5 * ch + 4] = s4
        for _ in range(1):
            combine(part, out, 0, nch, 5, 3, False)
    return k


def push_pair(x_new, x, g_new, g, S, Y, slot: int, out, n: int, dtype: str):
    """S[slot] = x_new - x, Y[slot] = g_new - g; out = [s.y, y.y, s.s, max|s|] (``acc_dtype``)."""
    serial, nch = _par(n), C.chunks(n)
    k = C.cached(("opt_push", dtype, serial), lambda: _build_push(dtype, serial))
    k(x_new, x, g_new, g, S, Y, slot, out, C.scratch(4 * nch, acc_dtype(dtype)), n, nch)


def _build_push(dtype, serial):
    ti, A, F = C.ti(), C.arr(dtype), C.arr(acc_dtype(dtype))
    combine, push_chunk = C.combine_func(), _push_chunk_func(dtype)

    @ti.kernel
    def k(x_new: A, x: A, g_new: A, g: A, S: A, Y: A, slot: ti.i32, out: F, part: F, n: ti.i32, nch: ti.i32):
        ti.loop_config(serialize=serial)
        for ch in range(nch):
            push_chunk(x_new, x, g_new, g, S, Y, slot, part, n, ch)
        for _ in range(1):
            combine(part, out, 0, nch, 4, 3, False)
    return k


def two_loop(g, S, Y, rho, alpha, d, order, used: int, gamma: float, n: int, dtype: str, out=None):
    """d = -H g by the L-BFGS two-loop recursion; then, if ``out`` is given, ``out`` as :func:`dots`
    (g, d, d): out[0] = g.d, out[3] = max |d| (fused into the same launch on CPU).

    ``S``, ``Y``: (m, n) history buffers (row-major, flat); ``rho``: ``acc_dtype`` (m,) with 1/(s.y);
    ``order``: int32 (m,) slot indices, oldest first, of which the first ``used`` are valid;
    ``alpha``: ``acc_dtype`` (2m,) scratch; ``gamma``: the initial inverse-Hessian scale.
    """
    if backend.on_host() and n * max(used, 1) < SERIAL_TWO_LOOP:
        k = C.cached(("opt_twoloop", dtype), lambda: _build_two_loop_serial(dtype))
        k(g, S, Y, rho, alpha, d, order, used, float(gamma), n, alpha if out is None else out,
          0 if out is None else 1)
        return
    ks = {name: C.cached(("opt_twoloop_dev", name, dtype), lambda name=name: _build_two_loop_device(dtype)[name])
          for name in ("neg", "scale", "dot", "axpy1", "axpy2")}
    nch = C.chunks(n)
    part = C.scratch(nch, acc_dtype(dtype))
    ks["neg"](g, d, n)
    for j in range(used - 1, -1, -1):
        ks["dot"](S, d, rho, alpha, order, part, j, n, nch)       # alpha_j = rho_j s_j.q
        ks["axpy1"](Y, d, alpha, order, j, n)          # q -= alpha_j y_j
    ks["scale"](d, float(gamma), n)
    for j in range(used):
        ks["dot"](Y, d, rho, alpha, order, part, j + 1000000, n, nch)  # beta_j = rho_j y_j.r, kept in alpha[m + slot]
        ks["axpy2"](S, d, alpha, order, j, n)          # r += s_j (alpha_j - beta_j)
    if out is not None:
        dots(g, d, d, out, n, dtype)


def _build_two_loop_serial(dtype):
    ti, A, F, I = C.ti(), C.arr(dtype), C.arr(acc_dtype(dtype)), C.arr("int32")
    T = backend.ti_dtype(dtype)
    FT = backend.ti_dtype(acc_dtype(dtype))

    @ti.kernel
    def k(g: A, S: A, Y: A, rho: F, alpha: F, d: A, order: I, used: ti.i32, gamma: FT, n: ti.i32, out: F,
          want: ti.i32):
        ti.loop_config(serialize=True)
        for _ in range(1):
            for i in range(n):
                d[i] = -g[i]                     # q = -g, so d = -H g at the end
            for jj in range(used):
                j = used - 1 - jj
                r = order[j]
                acc = ti.cast(0.0, FT)
                for i in range(n):
                    acc += ti.cast(S[r * n + i], FT) * ti.cast(d[i], FT)
                a = rho[r] * acc
                alpha[r] = a
                for i in range(n):
                    d[i] -= ti.cast(a, T) * Y[r * n + i]
            for i in range(n):
                d[i] *= ti.cast(gamma, T)
            for j in range(used):
                r = order[j]
                acc = ti.cast(0.0, FT)
                for i in range(n):
                    acc += ti.cast(Y[r * n + i], FT) * ti.cast(d[i], FT)
                b = rho[r] * acc
                c = ti.cast(alpha[r] - b, T)
                for i in range(n):
                    d[i] += c * S[r * n + i]
            if want:
                for j in range(5):
                    out[j] = ti.cast(0.0, FT)
                for i in range(n):
                    di = ti.cast(d[i], FT)
                    gi = ti.cast(g[i], FT)
                    out[0] += gi * di
                    out[1] += gi * di
                    out[2] += di * di
                    out[3] = ti.max(out[3], ti.abs(di))
                    out[4] += ti.abs(di)
    return k


def _build_two_loop_device(dtype):
    CH, combine = C.reduce_chunk(), C.combine_func()
    ti, A, F, I = C.ti(), C.arr(dtype), C.arr(acc_dtype(dtype)), C.arr("int32")
    T = backend.ti_dtype(dtype)
    FT = backend.ti_dtype(acc_dtype(dtype))
    BIG = 1000000

    @ti.kernel
    def neg(g: A, d: A, n: ti.i32):
        for i in range(n):
            d[i] = -g[i]

    @ti.kernel
    def scale(d: A, gamma: FT, n: ti.i32):
        for i in range(n):
            d[i] *= ti.cast(gamma, T)

    @ti.kernel
    def dot(M: A, d: A, rho: F, alpha: F, order: I, part: F, jcode: ti.i32, n: ti.i32, nch: ti.i32):
        # jcode < BIG: alpha[r] (first loop); jcode >= BIG: alpha[m + r] (beta, second loop)
        for ch in range(nch):
            r = order[jcode % BIG]
            acc = ti.cast(0.0, FT)
            for i in range(ch * CH, ti.min(n, ch * CH + CH)):
                acc += ti.cast(M[r * n + i], FT) * ti.cast(d[i], FT)
            part[ch] = acc
        for _ in range(1):
            r0 = order[jcode % BIG]
            dst = ti.select(jcode < BIG, r0, order.shape[0] + r0)
            combine(part, alpha, dst, nch, 1, -1, False)
            alpha[dst] *= rho[r0]

    @ti.kernel
    def axpy1(Y: A, d: A, alpha: F, order: I, j: ti.i32, n: ti.i32):
        for i in range(n):
            r = order[j]
            d[i] -= ti.cast(alpha[r], T) * Y[r * n + i]

    @ti.kernel
    def axpy2(S: A, d: A, alpha: F, order: I, j: ti.i32, n: ti.i32):
        for i in range(n):
            r = order[j]
            m = order.shape[0]
            d[i] += ti.cast(alpha[r] - alpha[m + r], T) * S[r * n + i]
    return {"neg": neg, "scale": scale, "dot": dot, "axpy1": axpy1, "axpy2": axpy2}


def matvec(A, v, out, scale: float, n: int, dtype: str):
    """out = scale * A v for a dense (n, n) row-major A."""
    serial = _par(n * n)
    k = C.cached(("opt_matvec", dtype, serial), lambda: _build_matvec(dtype, serial))
    k(A, v, out, float(scale), n)


def _build_matvec(dtype, serial):
    ti, A_ = C.ti(), C.arr(dtype)
    T = backend.ti_dtype(dtype)
    FT = backend.ti_dtype(acc_dtype(dtype))

    @ti.kernel
    def k(A: A_, v: A_, out: A_, scale: FT, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            acc = ti.cast(0.0, FT)
            for j in range(n):
                acc += ti.cast(A[i * n + j], FT) * ti.cast(v[j], FT)
            out[i] = ti.cast(scale * acc, T)
    return k


def bfgs_update(H, s, Hy, tau: float, rho: float, yHy: float, n: int, dtype: str):
    """In place: H <- tau H - rho tau (Hy s^T + s Hy^T) + (rho + rho^2 tau yHy) s s^T
    (the BFGS inverse update of the scaled matrix tau H; ``Hy`` = H y before scaling)."""
    serial = _par(n * n)
    k = C.cached(("opt_bfgs", dtype, serial), lambda: _build_bfgs(dtype, serial))
    k(H, s, Hy, float(tau), float(rho), float(yHy), n)


def _build_bfgs(dtype, serial):
    ti, A = C.ti(), C.arr(dtype)
    T = backend.ti_dtype(dtype)
    FT = backend.ti_dtype(acc_dtype(dtype))

    @ti.kernel
    def k(H: A, s: A, Hy: A, tau: FT, rho: FT, yHy: FT, n: ti.i32):
        ti.loop_config(serialize=serial)
        for ij in range(n * n):
            i = ij // n
            j = ij % n
            c = rho + rho * rho * tau * yHy
            v = tau * ti.cast(H[ij], FT) - rho * tau * (ti.cast(Hy[i], FT) * ti.cast(s[j], FT)
                                                        + ti.cast(s[i], FT) * ti.cast(Hy[j], FT)) \
                + c * ti.cast(s[i], FT) * ti.cast(s[j], FT)
            H[ij] = ti.cast(v, T)
    return k


def cg_step(p, r, d, Hd, alpha: float, out, n: int, dtype: str):
    """In place: p += alpha d, r -= alpha Hd; out[0] = r.r, out[1] = sum |r| (``acc_dtype``)."""
    serial, nch = _par(n), C.chunks(n)
    k = C.cached(("opt_cg", dtype, serial), lambda: _build_cg(dtype, serial))
    k(p, r, d, Hd, float(alpha), out, C.scratch(2 * nch, acc_dtype(dtype)), n, nch)


def _build_cg(dtype, serial):
    CH = C.reduce_chunk()
    ti, A, F = C.ti(), C.arr(dtype), C.arr(acc_dtype(dtype))
    T = backend.ti_dtype(dtype)
    FT = backend.ti_dtype(acc_dtype(dtype))
    combine = C.combine_func()

    @ti.kernel
    def k(p: A, r: A, d: A, Hd: A, alpha: FT, out: F, part: F, n: ti.i32, nch: ti.i32):
        ti.loop_config(serialize=serial)
        for ch in range(nch):
            s0 = ti.cast(0.0, FT)
            s1 = s0
            for i in range(ch * CH, ti.min(n, ch * CH + CH)):
                p[i] += ti.cast(alpha, T) * d[i]
                ri = r[i] - ti.cast(alpha, T) * Hd[i]
                r[i] = ri
                s0 += ti.cast(ri, FT) * ti.cast(ri, FT)
                s1 += ti.abs(ti.cast(ri, FT))
            part[2 * ch] = s0
            part[2 * ch + 1] = s1
        for _ in range(1):
            combine(part, out, 0, nch, 2, -1, False)
            out[2] = ti.cast(0.0, FT)
            out[3] = ti.cast(0.0, FT)
    return k


def adahessian_update(x, m, v, g, D, out, lr: float, b1: float, b2: float, bc1: float, bc2: float, eps: float,
                      power: float, wd: float, n: int, dtype: str):
    """AdaHessian: m <- b1 m + (1-b1) g; v <- b2 v + (1-b2) D^2 (in place);
    out = x - lr * ((m / bc1) / ((v / bc2)^(power/2) + eps) + wd x)."""
    serial = _par(n)
    k = C.cached(("opt_adahessian", dtype, serial), lambda: _build_adahessian(dtype, serial))
    k(x, m, v, g, D, out, lr, b1, b2, bc1, bc2, eps, power, wd, n)


def _build_adahessian(dtype, serial):
    ti, A = C.ti(), C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, m: A, v: A, g: A, D: A, out: A, lr: T, b1: T, b2: T, bc1: T, bc2: T, eps: T, power: T, wd: T,
          n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            mi = b1 * m[i] + (1 - b1) * g[i]
            vi = b2 * v[i] + (1 - b2) * D[i] * D[i]
            m[i] = mi
            v[i] = vi
            denom = ti.pow(vi / bc2, power / 2) + eps
            out[i] = x[i] - lr * ((mi / bc1) / denom + wd * x[i])
    return k


# --- the device L-BFGS iteration: history state on the device, fixed launch counts -------------
# ``st`` (acc dtype, m + 1): rho per slot, then gamma; ``ist`` (int32, m + 2): the slots in age order
# (oldest first), then the number used, then the slot of the last push; ``R`` (acc dtype, RN): what
# one host read returns (the R_* indices below).
R_SY, R_YY, R_SS, R_SINF, R_ACCEPT, R_USED, R_GTD, R_DINF, R_F, R_AB, R_BB, R_BMAX = range(12)
RN = 12


def lbfgs_direction(g, S, Y, st, ist, alpha, d, R, m: int, n: int, dtype: str):
    """ONE launch: d = -H g by the two-loop recursion over the ``ist[m]`` pairs in use (d = -g when
    none), then R[R_GTD] = g.d, R[R_DINF] = max |d|, R[R_USED] = pairs used. The loops over the
    history are unrolled (m is static), each pair's reductions and updates are parallel loops."""
    nch = C.chunks(n)
    k = C.cached(("lbfgs_dir_dev", dtype, m), lambda: _build_lbfgs_direction(dtype, m))
    k(g, S, Y, st, ist, alpha, d, R, C.scratch(2 * nch, acc_dtype(dtype)), n, nch)


def _build_lbfgs_direction(dtype, m):
    CH = C.reduce_chunk()
    ti, A, F, I = C.ti(), C.arr(dtype), C.arr(acc_dtype(dtype)), C.arr("int32")
    T = backend.ti_dtype(dtype)
    FT = backend.ti_dtype(acc_dtype(dtype))
    combine = C.combine_func()

    @ti.kernel
    def k(g: A, S: A, Y: A, st: F, ist: I, alpha: F, d: A, R: F, part: F, n: ti.i32, nch: ti.i32):
        for i in range(n):
            d[i] = -g[i]
        for j in range(2 * m):
            alpha[j] = ti.cast(0.0, FT)
        for jj in ti.static(range(m)):          # q -= alpha_j y_j, newest first
            for ch in range(nch):
                used = ist[m]
                if jj < used:
                    r = ist[used - 1 - jj]
                    acc = ti.cast(0.0, FT)
                    for i in range(ch * CH, ti.min(n, ch * CH + CH)):
                        acc += ti.cast(S[r * n + i], FT) * ti.cast(d[i], FT)
                    part[ch] = acc
            for _ in range(1):
                used = ist[m]
                if jj < used:
                    r = ist[used - 1 - jj]
                    combine(part, alpha, r, nch, 1, -1, False)
                    alpha[r] *= st[r]
            for i in range(n):
                used = ist[m]
                if jj < used:
                    r = ist[used - 1 - jj]
                    d[i] -= ti.cast(alpha[r], T) * Y[r * n + i]
        for i in range(n):
            if ist[m] > 0:
                d[i] *= ti.cast(st[m], T)
        for jj in ti.static(range(m)):          # r += s_j (alpha_j - beta_j), oldest first
            for ch in range(nch):
                if jj < ist[m]:
                    r = ist[jj]
                    acc = ti.cast(0.0, FT)
                    for i in range(ch * CH, ti.min(n, ch * CH + CH)):
                        acc += ti.cast(Y[r * n + i], FT) * ti.cast(d[i], FT)
                    part[ch] = acc
            for _ in range(1):
                if jj < ist[m]:
                    r = ist[jj]
                    combine(part, alpha, m + r, nch, 1, -1, False)
                    alpha[m + r] *= st[r]
            for i in range(n):
                if jj < ist[m]:
                    r = ist[jj]
                    d[i] += ti.cast(alpha[r] - alpha[m + r], T) * S[r * n + i]
        for ch in range(nch):
            s0 = ti.cast(0.0, FT)
            mx = s0
            for i in range(ch * CH, ti.min(n, ch * CH + CH)):
                di = ti.cast(d[i], FT)
                s0 += ti.cast(g[i], FT) * di
                mx = ti.max(mx, ti.abs(di))
            part[2 * ch] = s0
            part[2 * ch + 1] = mx
        for _ in range(1):
            combine(part, R, R_GTD, nch, 2, 1, False)     # R_GTD, R_DINF
            R[R_USED] = ti.cast(ist[m], FT)
    return k


def lbfgs_push(x_new, x, g_new, g, S, Y, st, ist, R, m: int, n: int, dtype: str):
    """ONE launch: the slot (the oldest when the history is full, else the next free one) gets
    s = x_new - x, y = g_new - g; R[R_SY, R_YY, R_SS, R_SINF] = s.y, y.y, s.s, max |s|; the pair is
    kept when s.y > 1e-10 y.y and y.y > 0 (then rho = 1/s.y, gamma = s.y/y.y, R[R_ACCEPT] = 1),
    exactly the host's rule (optim/lbfgs.py ``_History.push``)."""
    nch = C.chunks(n)
    k = C.cached(("lbfgs_push_dev", dtype, m), lambda: _build_lbfgs_push(dtype, m))
    k(x_new, x, g_new, g, S, Y, st, ist, R, C.scratch(4 * nch, acc_dtype(dtype)), n, nch)


def _build_lbfgs_push(dtype, m):
    ti, A, F, I = C.ti(), C.arr(dtype), C.arr(acc_dtype(dtype)), C.arr("int32")
    FT = backend.ti_dtype(acc_dtype(dtype))
    combine, push_chunk = C.combine_func(), _push_chunk_func(dtype)

    @ti.kernel
    def k(x_new: A, x: A, g_new: A, g: A, S: A, Y: A, st: F, ist: I, R: F, part: F, n: ti.i32, nch: ti.i32):
        for _ in range(1):
            used = ist[m]
            slot = 0
            if used == m:
                slot = ist[0]
            else:
                slot = used
                for _t in range(m):               # skip slots in use (after a pop, the order rotates)
                    taken = 0
                    for q in range(used):
                        if ist[q] == slot:
                            taken = 1
                    if taken:
                        slot = (slot + 1) % m
            ist[m + 1] = slot
            for j in range(5):
                R[j] = ti.cast(0.0, FT)
        for ch in range(nch):
            slot = ist[m + 1]
            push_chunk(x_new, x, g_new, g, S, Y, slot, part, n, ch)
        for _ in range(1):
            combine(part, R, R_SY, nch, 4, 3, False)      # R_SY, R_YY, R_SS, R_SINF
            sy, yy = R[R_SY], R[R_YY]
            if sy > 1e-10 * yy and yy > 0:
                used = ist[m]
                slot = ist[m + 1]
                if used == m:
                    for q in range(m - 1):
                        ist[q] = ist[q + 1]
                    used = m - 1
                ist[used] = slot
                ist[m] = used + 1
                st[slot] = 1.0 / sy
                st[m] = sy / yy
                R[R_ACCEPT] = 1.0
    return k


def lbfgs_trial(x, g, d, xt, ist, R, t_desc: float, t_fallback: float, m: int, n: int, dtype: str):
    """ONE launch: the first trial point of an iteration, chosen on the device from the direction's
    R[R_USED], R[R_GTD] (written by ``lbfgs_direction``): when pairs are used and g.d < 0, xt = x +
    t_desc d; otherwise d = -g, xt = x + t_fallback d, and the pairs are forgotten (ist[m] = 0) if
    any were used. The host learns which with the trial's read (``_run_device``)."""
    k = C.cached(("lbfgs_trial_dev", dtype), lambda: _build_lbfgs_trial(dtype))
    k(x, g, d, xt, ist, R, float(t_desc), float(t_fallback), m, n)


def _build_lbfgs_trial(dtype):
    ti, A, F, I = C.ti(), C.arr(dtype), C.arr(acc_dtype(dtype)), C.arr("int32")
    T = backend.ti_dtype(dtype)
    FT = backend.ti_dtype(acc_dtype(dtype))

    @ti.kernel
    def k(x: A, g: A, d: A, xt: A, ist: I, R: F, t_desc: FT, t_fb: FT, m: ti.i32, n: ti.i32):
        for i in range(n):
            if R[R_USED] > 0 and R[R_GTD] < 0:
                xt[i] = x[i] + ti.cast(t_desc, T) * d[i]
            else:
                di = -g[i]
                d[i] = di
                xt[i] = x[i] + ti.cast(t_fb, T) * di
        for _ in range(1):
            if R[R_USED] > 0 and not R[R_GTD] < 0:
                ist[m] = 0
    return k


def lbfgs_reset(ist, m: int):
    """ONE launch: forget the pairs (ist[m] = 0)."""
    k = C.cached(("lbfgs_reset_dev",), lambda: _build_lbfgs_reset())
    k(ist, m)


def _build_lbfgs_reset():
    ti, I = C.ti(), C.arr("int32")

    @ti.kernel
    def k(ist: I, m: ti.i32):
        for _ in range(1):
            ist[m] = 0
    return k


def eval_dots(a, b, f, R, n: int, dtype: str):
    """ONE launch: R[R_F] = f[0] (a loss value on the device), R[R_AB] = a.b, R[R_BB] = b.b,
    R[R_BMAX] = max |b| (``acc_dtype``), so that one read returns a trial point's numbers."""
    nch = C.chunks(n)
    k = C.cached(("lbfgs_evaldots", dtype), lambda: _build_eval_dots(dtype))
    k(a, b, f, R, C.scratch(3 * nch, acc_dtype(dtype)), n, nch)


def _build_eval_dots(dtype):
    CH = C.reduce_chunk()
    ti, A, F = C.ti(), C.arr(dtype), C.arr(acc_dtype(dtype))
    FT = backend.ti_dtype(acc_dtype(dtype))
    combine = C.combine_func()

    @ti.kernel
    def k(a: A, b: A, f: A, R: F, part: F, n: ti.i32, nch: ti.i32):
        for ch in range(nch):
            s0 = ti.cast(0.0, FT)
            s1, mx = s0, s0
            for i in range(ch * CH, ti.min(n, ch * CH + CH)):
                bi = ti.cast(b[i], FT)
                s0 += ti.cast(a[i], FT) * bi
                s1 += bi * bi
                mx = ti.max(mx, ti.abs(bi))
            part[3 * ch] = s0
            part[3 * ch + 1] = s1
            part[3 * ch + 2] = mx
        for _ in range(1):
            R[R_F] = ti.cast(f[0], FT)
            combine(part, R, R_AB, nch, 3, 2, False)      # R_AB, R_BB, R_BMAX
    return k


SPLIT_MAX = 48   # pieces per split / join launch (Taichi's 64-argument limit)


def _build_split(dtype, sizes, join, base):
    """out_k[i] = x[base + off_k + i] for each piece (join: the reverse) in ONE launch; the sizes
    are compiled in (one kernel per parameter layout). Generated: the argument list depends on them."""
    import linecache
    ti = C.ti()
    env = {"ti": ti, "A": C.arr(dtype)}
    offs = [base + sum(sizes[:k]) for k in range(len(sizes))]
    body = "".join(f"    for i in range({n}):\n        " + (f"x[{o} + i] = p{k}[i]\n" if join else f"p{k}[i] = x[{o} + i]\n")
                   for k, (n, o) in enumerate(zip(sizes, offs)))
    name = "join" if join else "split"
    src = f"def {name}(x: A, {', '.join(f'p{k}: A' for k in range(len(sizes)))}):\n" + body
    fname = f"<sciml.kernels.lbfgs:{name}:{dtype}:{base}:{sizes}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    exec(compile(src, fname, "exec"), env)  # noqa: S102 - generated from the fixed names above
    return ti.kernel(env[name])


def split(x, pieces, sizes, dtype: str):
    """In place: the flat buffer ``x`` cut into the buffers ``pieces`` of ``sizes`` (one launch per
    SPLIT_MAX pieces)."""
    _pieces(x, pieces, sizes, dtype, False)


def join(pieces, x, sizes, dtype: str):
    """In place: the buffers ``pieces`` of ``sizes`` laid end to end into ``x``."""
    _pieces(x, pieces, sizes, dtype, True)


def _pieces(x, pieces, sizes, dtype, join_):
    sizes = tuple(int(s) for s in sizes)
    for c0 in range(0, len(pieces), SPLIT_MAX):
        sz, base = sizes[c0:c0 + SPLIT_MAX], sum(sizes[:c0])
        k = C.cached(("lbfgs_pieces", dtype, sz, join_, base), lambda: _build_split(dtype, sz, join_, base))
        k(x, *pieces[c0:c0 + SPLIT_MAX])
