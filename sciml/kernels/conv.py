"""Neural-network layer kernels (Taichi only; flat buffers in/out):

* fused dense epilogues: ``bias_act`` (y = act(h + b), one pass) and its adjoint ``bias_act_vjp``
  (gz = g * act'(y) and gb = column sums of gz, one pass);
* fused softmax cross-entropy: ``xent`` (per-row losses and their scaled sum) and ``xent_grad``;
* ``unfold`` (im2col gather) and ``fold`` (col2im scatter-add), for conv and pooling;
* window max for max-pooling (value and arg-max index).

Shapes are (rows, cols) row-major for the dense kernels. For images, x is (N, C, H, W) and the
unfolded column matrix is (N, Ho, Wo, C, kh, kw), so conv = unfold @ W^T as one GEMM.
"""
from . import _common as C
from . import _vec as V
from . import conv_static as KS

STATIC = True   # host unfold / fold with the window geometry compiled in (conv_static.py); False: runtime geometry

ACTS = ("identity", "relu", "tanh", "sigmoid")


def _act_funcs(dtype):
    from .elementwise import _funcs
    f = _funcs(dtype)
    ti = C.ti()

    @ti.func
    def ident(x):
        return x

    @ti.func
    def d_ident(y):
        return y * 0 + 1

    @ti.func
    def d_relu(y):  # step(y): 0 for y <= 0 (PyTorch), NaN for NaN y (NaN in, NaN out)
        r = y * 0
        if y > 0:
            r = r + 1
        elif not (y <= 0):
            r = y
        return r

    @ti.func
    def d_tanh(y):
        return 1 - y * y

    @ti.func
    def d_sigmoid(y):
        return y * (1 - y)

    return {"identity": (ident, d_ident), "relu": (f["relu"], d_relu), "tanh": (f["tanh"], d_tanh),
            "sigmoid": (f["sigmoid"], d_sigmoid)}


def _build_bias_act(act, dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    f, _ = _act_funcs(dtype)[act]

    @ti.kernel
    def k(h: A, b: A, y: A, rows: ti.i32, cols: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(rows):
            for j in range(cols):
                y[r * cols + j] = f(h[r * cols + j] + b[j])
    return k


def bias_act(act, h, b, y, rows, cols, dtype):
    """y[r, j] = act(h[r, j] + b[j])."""
    serial = C.launch_mode(rows * cols) or (rows < 4 and C.backend.on_host())
    if act in VEC_ACTS and _vec_ok(cols, dtype):
        ptrs = V.pointers((h, b, y))
        if ptrs is not None:
            L = V.LANES[dtype]
            serial = C.launch_mode(rows * cols, C.CHEAP)  # measured: serial 31 us vs parallel 34 at 256x512
            n, cv = rows * cols // L, cols // L
            k = V.cached(("bias_act_vec", act, dtype, serial), lambda: _build_bias_act_vec(act, dtype, serial), L)
            k((h, b, y), ptrs, (n, cv, n), (rows, cv))
            return
    C.cached(("bias_act", act, dtype, serial), lambda: _build_bias_act(act, dtype, serial))(h, b, y, rows, cols)


# --- 16-byte vector forms (CPU; see _vec.py): rows of cols/L vectors ----------------------------
VEC_ACTS = ("identity", "relu")  # forward (tanh/sigmoid forwards stay on the scalar rational form)
VEC_VJP_ACTS = ("identity", "relu", "tanh", "sigmoid")  # adjoint: act'(y) is + - * only
VECTOR = True  # False: the scalar kernels only (what devices run; benchmarks compare)
VEC_MIN_COLS = 16  # narrower rows (e.g. 10 logits) stay scalar: launch-bound anyway


def _vec_ok(cols, dtype):
    L = V.LANES.get(dtype)
    return VECTOR and L is not None and cols >= VEC_MIN_COLS and cols % L == 0 and C.backend.on_host()


def _build_bias_act_vec(act, dtype, serial):
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    A = ti.types.ndarray(dtype=ti.types.vector(V.LANES[dtype], T), ndim=1)
    relu = act == "relu"

    @ti.kernel
    def k(h: A, b: A, y: A, rows: ti.i32, cv: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(rows):
            for j in range(cv):
                z = h[r * cv + j] + b[j]
                if ti.static(relu):
                    # max(z, 0) that keeps NaN (ti.max drops it); typed: a f64 literal would make a f64 vector
                    z = ti.select(z > 0, z, ti.select(z <= 0, ti.cast(0, T), z))
                y[r * cv + j] = z
    return k


def _build_bias_act_vjp_vec(act, dtype, serial, with_b, with_gz):
    """gz = g * act'(y), gb = column sums. Serial: one row-major pass, the column sums
    accumulated in gb itself (zeroed first; L1-resident). Parallel: one column-vector per
    iteration, its sum in a register."""
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    VT = ti.types.vector(V.LANES[dtype], T)
    A = ti.types.ndarray(dtype=VT, ndim=1)
    relu = act == "relu"

    @ti.func
    def dz(g, y):
        v = g
        if ti.static(relu):
            # g * step(y) as the scalar kernel (NaN/inf g propagate; NaN y gives NaN)
            v = ti.select(y > 0, g, ti.select(y <= 0, g * ti.cast(0, T), y))
        elif ti.static(act == "tanh"):
            v = g * (1 - y * y)
        elif ti.static(act == "sigmoid"):
            v = g * (y * (1 - y))
        return v

    @ti.kernel
    def k(g: A, y: A, gz: A, gb: A, rows: ti.i32, cv: ti.i32):
        if ti.static(serial):
            ti.loop_config(serialize=True)
            for j in range(cv):
                if ti.static(with_b):
                    gb[j] = VT(0.0)
            ti.loop_config(serialize=True)
            for r in range(rows):
                for j in range(cv):
                    v = dz(g[r * cv + j], y[r * cv + j])
                    if ti.static(with_gz):
                        gz[r * cv + j] = v
                    if ti.static(with_b):
                        gb[j] += v
        else:
            for j in range(cv):
                acc = VT(0.0)
                for r in range(rows):
                    v = dz(g[r * cv + j], y[r * cv + j])
                    if ti.static(with_gz):
                        gz[r * cv + j] = v
                    acc += v
                if ti.static(with_b):
                    gb[j] = acc
    return k


def _build_bias_act_vjp(act, dtype, serial, with_b, with_gz=True):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)
    _, d = _act_funcs(dtype)[act]
    CB = 16  # columns per parallel iteration: rows are walked with unit-stride inner loops

    @ti.kernel
    def k(g: A, y: A, gz: A, gb: A, rows: ti.i32, cols: ti.i32):
        ti.loop_config(serialize=serial)
        for cb in range((cols + CB - 1) // CB):
            j0 = cb * CB
            acc = ti.Vector.zero(T, CB)  # column sums in registers (static indices), no atomics
            for r in range(rows):
                for jj in ti.static(range(CB)):
                    if j0 + jj < cols:
                        v = g[r * cols + j0 + jj] * d(y[r * cols + j0 + jj])
                        if ti.static(with_gz):
                            gz[r * cols + j0 + jj] = v
                        if ti.static(with_b):
                            acc[jj] += v
            if ti.static(with_b):
                for jj in ti.static(range(CB)):
                    if j0 + jj < cols:
                        gb[j0 + jj] = acc[jj]
    return k


def bias_act_vjp(act, g, y, gz, gb, rows, cols, dtype):
    """gz = g * act'(y) (from the output y; skipped if gz is None), gb[j] = sum_r gz[r, j] (skipped if gb
    is None)."""
    serial = C.launch_mode(rows * cols) or (cols < 32 and C.backend.on_host())
    with_b, with_gz = gb is not None, gz is not None
    if act in VEC_VJP_ACTS and _vec_ok(cols, dtype) and (with_gz or act == "identity"):
        arrays = (g, y if act != "identity" else g, gz if with_gz else g, gb if with_b else g)
        ptrs = V.pointers(arrays)
        if ptrs is not None:
            L = V.LANES[dtype]
            serial = C.launch_mode(rows * cols, C.CHEAP)  # measured at 256x512: serial 53 us, parallel 122
            n, cv = rows * cols // L, cols // L
            k = V.cached(("bias_act_vjp_vec", act, dtype, serial, with_b, with_gz),
                         lambda: _build_bias_act_vjp_vec(act, dtype, serial, with_b, with_gz), L)
            k(arrays, ptrs, (n, n, n if with_gz else 1, cv if with_b else 1), (rows, cv))
            return
    k = C.cached(("bias_act_vjp", act, dtype, serial, with_b, with_gz),
                 lambda: _build_bias_act_vjp(act, dtype, serial, with_b, with_gz))
    k(g, y, gz if with_gz else g, gb if with_b else g, rows, cols)


def _build_xent(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, q: A, rowloss: A, total: A, rows: ti.i32, cols: ti.i32, scale: T):
        ti.loop_config(serialize=serial)
        for r in range(rows):
            mx = x[r * cols]
            for j in range(1, cols):
                mx = ti.max(mx, x[r * cols + j])
            s = ti.cast(0.0, T)
            qs = ti.cast(0.0, T)
            qx = ti.cast(0.0, T)
            for j in range(cols):
                xv = x[r * cols + j]
                s += ti.exp(xv - mx)
                qs += q[r * cols + j]
                qx += q[r * cols + j] * xv
            L = (mx + ti.log(s)) * qs - qx
            rowloss[r] = L
        for _ in range(1):  # the total in row order (not atomic adds from the parallel rows: same bits every run)
            t = total[0]
            for r in range(rows):
                t += rowloss[r] * scale
            total[0] = t
    return k


def xent(x, q, rowloss, total, rows, cols, scale, dtype):
    """rowloss[r] = logsumexp(x[r]) * sum(q[r]) - q[r] . x[r]; total[0] += scale * sum(rowloss) (zero it first)."""
    serial = C.launch_mode(rows * cols)
    C.cached(("xent", dtype, serial), lambda: _build_xent(dtype, serial))(x, q, rowloss, total, rows, cols, scale)


def _build_xent_grad(dtype, per_row, serial):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, q: A, g: A, gx: A, rows: ti.i32, cols: ti.i32, scale: T):
        ti.loop_config(serialize=serial)
        for r in range(rows):
            gr = g[0] * scale
            if ti.static(per_row):
                gr = g[r] * scale
            mx = x[r * cols]
            for j in range(1, cols):
                mx = ti.max(mx, x[r * cols + j])
            s = ti.cast(0.0, T)
            qs = ti.cast(0.0, T)
            for j in range(cols):
                s += ti.exp(x[r * cols + j] - mx)
                qs += q[r * cols + j]
            for j in range(cols):
                gx[r * cols + j] = gr * (ti.exp(x[r * cols + j] - mx) / s * qs - q[r * cols + j])
    return k


def xent_grad(x, q, g, gx, rows, cols, scale, per_row, dtype):
    """gx[r, j] = g_r * scale * (softmax(x[r])_j * sum(q[r]) - q[r, j]); g_r = g[r] if per_row else g[0]."""
    serial = C.launch_mode(rows * cols)
    k = C.cached(("xent_grad", dtype, per_row, serial), lambda: _build_xent_grad(dtype, per_row, serial))
    k(x, q, g, gx, rows, cols, scale)


# --- unfold (im2col) and fold (col2im) ----------------------------------------------------------
# meta = (N, C, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo); cols laid out (N, Ho, Wo, C, kh, kw).
def _build_unfold(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    I = C.arr("int32")
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, out: A, meta: I, n_out: ti.i32, pad_value: T):
        ti.loop_config(serialize=serial)
        for o in range(n_out):
            Cc, H, W = meta[1], meta[2], meta[3]
            kh, kw, sh, sw, ph, pw = meta[4], meta[5], meta[6], meta[7], meta[8], meta[9]
            Ho, Wo = meta[10], meta[11]
            kj = o % kw
            r = o // kw
            ki = r % kh
            r = r // kh
            c = r % Cc
            r = r // Cc
            ow = r % Wo
            r = r // Wo
            oh = r % Ho
            n = r // Ho
            h = oh * sh - ph + ki
            w = ow * sw - pw + kj
            v = pad_value
            if 0 <= h < H and 0 <= w < W:
                v = x[((n * Cc + c) * H + h) * W + w]
            out[o] = v
    return k


def unfold(x, out, meta_buf, n_out, pad_value, dtype):
    """out (N, Ho, Wo, C, kh, kw) = windows of x (N, C, H, W); out-of-image taps read ``pad_value``."""
    if C.backend.on_host():  # one window per iteration (see _build_unfold_rows)
        if STATIC and KS.unfold(x, out, meta_buf, n_out, pad_value, dtype):   # the geometry compiled in
            return
        serial = C.launch_mode(n_out, C.CHEAP)
        k = C.cached(("unfold_rows", dtype, serial), lambda: _build_unfold_rows(dtype, serial))
        k(x, out, meta_buf, n_out, pad_value)
        return
    serial = C.launch_mode(n_out)
    C.cached(("unfold", dtype, serial), lambda: _build_unfold(dtype, serial))(x, out, meta_buf, n_out, pad_value)


def _build_unfold_rows(dtype, serial):
    """CPU unfold: one output window (n, oh, ow) per iteration, its C*kh*kw taps in an inner loop
    with running indices. The per-element form above pays ten integer divisions per element (scalar
    idiv): measured at N=64, C=16, 8x8, 3x3 (590K taps), serial, 8.9 -> 0.66 ms."""
    ti = C.ti()
    A = C.arr(dtype)
    I = C.arr("int32")
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, out: A, meta: I, n_out: ti.i32, pad_value: T):
        Cc, H, W = meta[1], meta[2], meta[3]
        kh, kw, sh, sw, ph, pw = meta[4], meta[5], meta[6], meta[7], meta[8], meta[9]
        Ho, Wo = meta[10], meta[11]
        win = Cc * kh * kw
        ti.loop_config(serialize=serial)
        for o in range(n_out // win):
            ow = o % Wo
            r = o // Wo
            oh = r % Ho
            n = r // Ho
            h0 = oh * sh - ph
            w0 = ow * sw - pw
            q = o * win
            for c in range(Cc):
                xb = (n * Cc + c) * H
                for ki in range(kh):
                    h = h0 + ki
                    for kj in range(kw):
                        w = w0 + kj
                        v = pad_value
                        if 0 <= h < H and 0 <= w < W:
                            v = x[(xb + h) * W + w]
                        out[q] = v
                        q += 1
    return k


def _build_fold(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    I = C.arr("int32")
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(cols: A, out: A, meta: I, n_in: ti.i32):
        ti.loop_config(serialize=serial)
        for xi in range(n_in):
            Cc, H, W = meta[1], meta[2], meta[3]
            kh, kw, sh, sw, ph, pw = meta[4], meta[5], meta[6], meta[7], meta[8], meta[9]
            Ho, Wo = meta[10], meta[11]
            w = xi % W
            r = xi // W
            h = r % H
            r = r // H
            c = r % Cc
            n = r // Cc
            acc = ti.cast(0.0, T)
            for ki in range(kh):
                t = h + ph - ki
                if t >= 0 and t % sh == 0 and t // sh < Ho:
                    oh = t // sh
                    for kj in range(kw):
                        u = w + pw - kj
                        if u >= 0 and u % sw == 0 and u // sw < Wo:
                            ow = u // sw
                            acc += cols[((((n * Ho + oh) * Wo + ow) * Cc + c) * kh + ki) * kw + kj]
            out[xi] = acc
    return k


def fold(cols, out, meta_buf, n_in, dtype):
    """out (N, C, H, W) = sum of the window entries of cols (N, Ho, Wo, C, kh, kw) that read each pixel
    (the adjoint of unfold); a gather per pixel, so no atomics."""
    if C.backend.on_host():
        if STATIC and KS.fold(cols, out, meta_buf, n_in, dtype):   # the geometry compiled in
            return
        serial = C.launch_mode(n_in, C.CHEAP)
        C.cached(("fold_rows", dtype, serial), lambda: _build_fold_rows(dtype, serial))(cols, out, meta_buf, n_in)
        return
    serial = C.launch_mode(n_in)
    C.cached(("fold", dtype, serial), lambda: _build_fold(dtype, serial))(cols, out, meta_buf, n_in)


def _build_fold_rows(dtype, serial):
    """CPU fold: one image row (n, c, h) per iteration; stride-1 windows skip the divisions (same
    summation order as the per-pixel form: measured 3.3 -> 0.87 ms at the unfold size above)."""
    ti = C.ti()
    A = C.arr(dtype)
    I = C.arr("int32")
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(cols: A, out: A, meta: I, n_in: ti.i32):
        Cc, H, W = meta[1], meta[2], meta[3]
        kh, kw, sh, sw, ph, pw = meta[4], meta[5], meta[6], meta[7], meta[8], meta[9]
        Ho, Wo = meta[10], meta[11]
        ti.loop_config(serialize=serial)
        for rr in range(n_in // W):
            h = rr % H
            r = rr // H
            c = r % Cc
            n = r // Cc
            for w in range(W):
                acc = ti.cast(0.0, T)
                for ki in range(kh):
                    t = h + ph - ki
                    oh = t
                    ok = t >= 0
                    if sh != 1:
                        ok = ok and t % sh == 0
                        oh = t // sh
                    if ok and oh < Ho:
                        for kj in range(kw):
                            u = w + pw - kj
                            ow = u
                            okw = u >= 0
                            if sw != 1:
                                okw = okw and u % sw == 0
                                ow = u // sw
                            if okw and ow < Wo:
                                acc += cols[((((n * Ho + oh) * Wo + ow) * Cc + c) * kh + ki) * kw + kj]
                out[rr * W + w] = acc
    return k


# --- squared error, reduced (mean or sum): one kernel forward, one backward ---------------------------------
SQERR_BLOCK = 4096    # entries per partial sum of the parallel form


def _build_sqerr(dtype, serial):
    """Serial (small host inputs): one pass, block sums of 256. Parallel: one partial sum per block of
    SQERR_BLOCK entries (in ``part``), then one serial task adds the partials in order: deterministic (the same
    bits for any thread count), error growing with n / 256 as the serial form's."""
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)
    B = SQERR_BLOCK

    @ti.kernel
    def k(p: A, t: A, out: A, part: A, n: ti.i32, scale: T):
        if ti.static(serial):
            ti.loop_config(serialize=True)
            for _ in range(1):
                total = ti.cast(0, T)
                for blk in range((n + 255) // 256):   # block sums: error grows with n / 256, not n
                    s = ti.cast(0, T)
                    for i in range(blk * 256, ti.min(n, blk * 256 + 256)):
                        d = p[i] - t[i]
                        s += d * d
                    total += s
                out[0] = total * scale
        else:
            for blk in range((n + B - 1) // B):
                total = ti.cast(0, T)
                for sub in range(B // 256):
                    s = ti.cast(0, T)
                    for i in range(blk * B + sub * 256, ti.min(n, blk * B + sub * 256 + 256)):
                        d = p[i] - t[i]
                        s += d * d
                    total += s
                part[blk] = total
            ti.loop_config(serialize=True)
            for _ in range(1):
                total = ti.cast(0, T)
                for blk in range((n + B - 1) // B):
                    total += part[blk]
                out[0] = total * scale
    return k


def _build_sqerr_vjp(dtype, serial, with_t):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(g: A, p: A, t: A, gp: A, gt: A, n: ti.i32, scale: T):
        ti.loop_config(serialize=serial)
        for i in range(n):
            v = g[0] * (2 * scale) * (p[i] - t[i])
            gp[i] = v
            if ti.static(with_t):
                gt[i] = -v
    return k


def sqerr(p, t, out, n, scale, dtype):
    """out[0] = scale * sum_i (p_i - t_i)^2: one serial pass on the host below ~64K entries, else parallel
    partial sums over blocks then their ordered sum (one launch either way; deterministic)."""
    serial = C.launch_mode(n, C.CHEAP * 4)
    part = out if serial else C.backend.empty((n + SQERR_BLOCK - 1) // SQERR_BLOCK, dtype)
    C.cached(("sqerr", dtype, serial), lambda: _build_sqerr(dtype, serial))(p, t, out, part, n, scale)


def sqerr_vjp(g, p, t, gp, gt, n, scale, dtype):
    """gp = 2 scale g (p - t), gt = -gp (skipped when gt is None)."""
    serial = C.launch_mode(n, C.CHEAP)
    with_t = gt is not None
    C.cached(("sqerr_vjp", dtype, serial, with_t), lambda: _build_sqerr_vjp(dtype, serial, with_t))(
        g, p, t, gp, gt if with_t else gp, n, scale)
