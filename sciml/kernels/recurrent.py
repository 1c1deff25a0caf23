"""Fused LSTM time loop (Taichi; flat buffers in/out).

Layout (one direction of one layer, T steps, batch B, hidden H; all row-major, flat):

* ``G`` (T, B, 4H): on entry the input projections ``x_t W_ih^T + b`` (gate order i, f, g, o); the
  forward adds ``h_{t-1} W_hh^T`` to slot t (one GEMM per step) and the cell kernel overwrites the slot
  with the activated gates (sigmoid i, f, o; tanh g), which the backward reads;
* ``Hs``, ``Cs`` (T+1, B, H): slot 0 holds h_0 / c_0, slot t+1 the state after step t, so the first T
  slots of ``Hs`` are the (T*B, H) left operand of the recurrent weight's gradient GEMM.

Per step: one GEMM (BLAS on CPU, a Taichi kernel on devices) and one pointwise kernel, forward and
backward. The pointwise kernels use the float32 rational tanh/sigmoid of ``elementwise`` (exact ones in
float64), as sciml's tanh/sigmoid ops do.
"""
from . import _common as C
from . import blas as _blas
from .linalg import _host_matmul
from .. import backend


def _build_fwd(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    from .elementwise import _funcs
    f = _funcs(dtype)
    tanh, sig = f["tanh"], f["sigmoid"]

    @ti.kernel
    def k(G: A, Hs: A, Cs: A, t: ti.i32, B: ti.i32, H: ti.i32):
        ti.loop_config(serialize=serial)
        for b in range(B):
            g0 = (t * B + b) * 4 * H
            s0 = (t * B + b) * H
            s1 = s0 + B * H
            for j in range(H):
                gi = sig(G[g0 + j])
                gf = sig(G[g0 + H + j])
                gg = tanh(G[g0 + 2 * H + j])
                go = sig(G[g0 + 3 * H + j])
                c = gf * Cs[s0 + j] + gi * gg
                G[g0 + j] = gi
                G[g0 + H + j] = gf
                G[g0 + 2 * H + j] = gg
                G[g0 + 3 * H + j] = go
                Cs[s1 + j] = c
                Hs[s1 + j] = go * tanh(c)
    return k


def _build_bwd(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    from .elementwise import _funcs
    tanh = _funcs(dtype)["tanh"]

    @ti.kernel
    def k(G: A, Cs: A, dh_rec: A, gH: A, dc: A, dG: A, t: ti.i32, B: ti.i32, H: ti.i32):
        ti.loop_config(serialize=serial)
        for b in range(B):
            g0 = (t * B + b) * 4 * H
            s0 = (t * B + b) * H
            s1 = s0 + B * H
            r = b * H
            for j in range(H):
                gi = G[g0 + j]
                gf = G[g0 + H + j]
                gg = G[g0 + 2 * H + j]
                go = G[g0 + 3 * H + j]
                tc = tanh(Cs[s1 + j])
                dh = dh_rec[r + j] + gH[s1 + j]
                d = dc[r + j] + dh * go * (1 - tc * tc)
                dG[g0 + j] = d * gg * gi * (1 - gi)
                dG[g0 + H + j] = d * Cs[s0 + j] * gf * (1 - gf)
                dG[g0 + 2 * H + j] = d * gi * (1 - gg * gg)
                dG[g0 + 3 * H + j] = dh * tc * go * (1 - go)
                dc[r + j] = d * gf
    return k


def _build_copy(dtype, serial, add):
    """dst[d0 + i] = src[s0 + i] (``add``: +=), i < n."""
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def k(src: A, s0: ti.i32, dst: A, d0: ti.i32, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            if ti.static(add):
                dst[d0 + i] += src[s0 + i]
            else:
                dst[d0 + i] = src[s0 + i]
    return k


def _host_copy(src, s0, dst, d0, n):
    dst[d0:d0 + n] = src[s0:s0 + n]


def copy(src, s0: int, dst, d0: int, n: int, dtype: str, add: bool = False):
    """dst[d0:d0+n] = src[s0:s0+n] (``add``: +=) on flat buffers (on CPU a plain copy is a memcpy)."""
    if n and not add and backend.on_host():
        C.host_call(_host_copy, src, s0, dst, d0, n)
    elif n:
        serial = C.launch_mode(n, C.CHEAP)
        C.cached(("rec_copy", dtype, serial, add), lambda: _build_copy(dtype, serial, add))(src, s0, dst, d0, n)


def _build_step_gemm(dtype, trans):
    """Device GEMM of one step at buffer offsets. trans=False: out[o + b*N + n] += sum_k a[a0 + b*K + k] *
    W[n*K + k] (h W^T, W (N, K)); trans=True: out[o + b*N + n] = sum_k a[a0 + b*K + k] * W[k*N + n]
    (dG W, W (K, N))."""
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def k(a: A, a0: ti.i32, W: A, out: A, o: ti.i32, B: ti.i32, N: ti.i32, K: ti.i32):
        for b, n in ti.ndrange(B, N):
            s = a[a0] * 0
            for kk in range(K):
                if ti.static(trans):
                    s += a[a0 + b * K + kk] * W[kk * N + n]
                else:
                    s += a[a0 + b * K + kk] * W[n * K + kk]
            if ti.static(trans):
                out[o + b * N + n] = s
            else:
                out[o + b * N + n] += s
    return k


STEP_THREADS_BELOW = 1 << 22  # m*n*k below which the steps' GEMMs run on one BLAS thread


def _host_gemm(a, a0, W, out, o, m, n, k, trans_w, accumulate, dtype):
    """One step's GEMM on host buffers at offsets (the ctypes BLAS directly, else numpy's matmul)."""
    av, ov = a[a0:a0 + m * k], out[o:o + m * n]
    if not _blas.gemm(av, W, ov, m, n, k, False, not trans_w, dtype, accumulate):
        _host_matmul(av, W, ov, 1, m, n, k, False, not trans_w, dtype, accumulate)


def _step_threads(m, n, k):
    """A step's GEMM is small (32 x 512 x 128 in the benchmark) and the steps are sequential: on one BLAS thread
    it does not wait for a second one (measured on the loaded 2-core machine: 0.5-1.4 ms on one OpenBLAS thread
    against 3-36 ms on two). The eager loop runs inside this context; a jit replay keeps the process's count."""
    import contextlib
    if backend.on_host() and m * n * k < STEP_THREADS_BELOW:
        return _blas.threads(1)
    return contextlib.nullcontext()


def _serial(n):
    return C.launch_mode(n, 8)


def lstm_forward(G, W_hh, Hs, Cs, T: int, B: int, H: int, dtype: str):
    """Run the T steps in place (see the module doc): G gets the activated gates, Hs/Cs slots 1..T the states."""
    serial = _serial(B * H)
    cell = C.cached(("lstm_fwd", dtype, serial), lambda: _build_fwd(dtype, serial))
    host = backend.on_host()
    gemm = None if host else C.cached(("lstm_gemm", dtype, False), lambda: _build_step_gemm(dtype, False))
    ptrs = _vec_cells((G, Hs, Cs), dtype, H)
    vk = counts = None
    if ptrs is not None:
        from . import _vec as V
        vk = V.cached(("lstm_fwd_vec",), _build_fwd_vec, V.LANES[dtype])
        counts = [a.size // V.LANES[dtype] for a in (G, Hs, Cs)]
    with _step_threads(B, 4 * H, H):
        _forward_steps(T, B, H, G, W_hh, Hs, Cs, host, gemm, ptrs, vk, counts, cell, dtype)


def _forward_steps(T, B, H, G, W_hh, Hs, Cs, host, gemm, ptrs, vk, counts, cell, dtype):
    for t in range(T):
        if host:  # G[t] += h_{t-1} @ W_hh^T
            C.host_call(_host_gemm, Hs, t * B * H, W_hh, G, t * B * 4 * H, B, 4 * H, H, False, True, dtype)
        else:
            gemm(Hs, t * B * H, W_hh, G, t * B * 4 * H, B, 4 * H, H)
        if ptrs is not None:
            vk((G, Hs, Cs), ptrs, counts, (t, B, H // 4))
        else:
            cell(G, Hs, Cs, t, B, H)


def lstm_backward(G, Cs, W_hh, gH, dG, dh, dc, T: int, B: int, H: int, dtype: str):
    """Backpropagate through the T steps: gH (T+1, B, H) the cotangent of Hs; dc (B, H) holds the cotangent
    of c_T on entry and dh (B, H) zeros. Writes dG (T, B, 4H) (the cotangent of the pre-activation gates,
    i.e. of the input projections), and leaves in dh and dc the cotangents of h_0 and c_0."""
    serial = _serial(B * H)
    cell = C.cached(("lstm_bwd", dtype, serial), lambda: _build_bwd(dtype, serial))
    host = backend.on_host()
    gemm = None if host else C.cached(("lstm_gemm", dtype, True), lambda: _build_step_gemm(dtype, True))
    arrays = (G, Cs, dh, gH, dc, dG)
    ptrs = _vec_cells(arrays, dtype, H)
    vk = counts = None
    if ptrs is not None:
        from . import _vec as V
        vk = V.cached(("lstm_bwd_vec",), _build_bwd_vec, V.LANES[dtype])
        counts = [a.size // V.LANES[dtype] for a in arrays]
    with _step_threads(B, H, 4 * H):
        _backward_steps(T, B, H, arrays, W_hh, host, gemm, ptrs, vk, counts, cell, dtype)
    copy(gH, 0, dh, 0, B * H, dtype, add=True)


def _backward_steps(T, B, H, arrays, W_hh, host, gemm, ptrs, vk, counts, cell, dtype):
    G, Cs, dh, gH, dc, dG = arrays
    for t in range(T - 1, -1, -1):
        if ptrs is not None:
            vk(arrays, ptrs, counts, (t, B, H // 4))
        else:
            cell(G, Cs, dh, gH, dc, dG, t, B, H)
        if host:  # dh_{t-1} (recurrent part) = dG[t] @ W_hh
            C.host_call(_host_gemm, dG, t * B * 4 * H, W_hh, dh, 0, B, H, 4 * H, True, False, dtype)
        else:
            gemm(dG, t * B * 4 * H, W_hh, dh, 0, B, H, 4 * H)


# --- 16-byte vector forms of the cell kernels (CPU, float32, H % 4 == 0, aligned buffers; see _vec.py) ----
VECTOR = True  # False: the scalar kernels only (what devices run)


def _vec_funcs():
    ti = C.ti()
    from .elementwise import _F32_TANH
    T = ti.f32
    a1, a3, a5, a7, a9, a11, a13, b0, b2, b4, b6 = _F32_TANH

    @ti.func
    def ratio(x):  # elementwise._tanh_ratio with every constant typed f32 (an untyped literal is f64 in a
        c = ti.cast(7.90531110763549805, T)  # float64-default process, and a f64 constant next to an f32 vector
        xc = ti.select(x > c, c, ti.select(x < -c, -c, x))  # crashes; see _vec.py)
        x2 = xc * xc
        p = x2 * ti.cast(a13, T) + ti.cast(a11, T)
        p = x2 * p + ti.cast(a9, T)
        p = x2 * p + ti.cast(a7, T)
        p = x2 * p + ti.cast(a5, T)
        p = x2 * p + ti.cast(a3, T)
        p = x2 * p + ti.cast(a1, T)
        p = xc * p
        q = x2 * ti.cast(b6, T) + ti.cast(b4, T)
        q = x2 * q + ti.cast(b2, T)
        q = x2 * q + ti.cast(b0, T)
        one = ti.cast(1, T)
        sat = ti.cast(9.0, T)
        return ti.select(x > sat, one, ti.select(x < -sat, -one, p / q))

    @ti.func
    def tanh(x):  # the scalar kernels' tanh32: x itself where |x| < 4e-4
        return ti.select(x * x < ti.cast(1.6e-7, T), x, ratio(x))

    @ti.func
    def sig(x):
        h = ti.cast(0.5, T)
        return h * tanh(h * x) + h
    return tanh, sig


def _build_fwd_vec():
    from . import _vec as V
    ti = C.ti()
    A = ti.types.ndarray(dtype=ti.types.vector(V.LANES["float32"], ti.f32), ndim=1)
    tanh, sig = _vec_funcs()

    @ti.kernel
    def k(G: A, Hs: A, Cs: A, t: ti.i32, B: ti.i32, hv: ti.i32):
        ti.loop_config(serialize=True)
        for b in range(B):
            g0 = (t * B + b) * 4 * hv
            s0 = (t * B + b) * hv
            s1 = s0 + B * hv
            for j in range(hv):
                gi = sig(G[g0 + j])
                gf = sig(G[g0 + hv + j])
                gg = tanh(G[g0 + 2 * hv + j])
                go = sig(G[g0 + 3 * hv + j])
                c = gf * Cs[s0 + j] + gi * gg
                G[g0 + j] = gi
                G[g0 + hv + j] = gf
                G[g0 + 2 * hv + j] = gg
                G[g0 + 3 * hv + j] = go
                Cs[s1 + j] = c
                Hs[s1 + j] = go * tanh(c)
    return k


def _build_bwd_vec():
    from . import _vec as V
    ti = C.ti()
    A = ti.types.ndarray(dtype=ti.types.vector(V.LANES["float32"], ti.f32), ndim=1)
    tanh, _ = _vec_funcs()

    @ti.kernel
    def k(G: A, Cs: A, dh_rec: A, gH: A, dc: A, dG: A, t: ti.i32, B: ti.i32, hv: ti.i32):
        ti.loop_config(serialize=True)
        for b in range(B):
            one = ti.cast(1, ti.f32)
            g0 = (t * B + b) * 4 * hv
            s0 = (t * B + b) * hv
            s1 = s0 + B * hv
            r = b * hv
            for j in range(hv):
                gi = G[g0 + j]
                gf = G[g0 + hv + j]
                gg = G[g0 + 2 * hv + j]
                go = G[g0 + 3 * hv + j]
                tc = tanh(Cs[s1 + j])
                dh = dh_rec[r + j] + gH[s1 + j]
                d = dc[r + j] + dh * go * (one - tc * tc)
                dG[g0 + j] = d * gg * gi * (one - gi)
                dG[g0 + hv + j] = d * Cs[s0 + j] * gf * (one - gf)
                dG[g0 + 2 * hv + j] = d * gi * (one - gg * gg)
                dG[g0 + 3 * hv + j] = dh * tc * go * (one - go)
                dc[r + j] = d * gf
    return k


def _vec_cells(arrays, dtype, H):
    """(forward kernel, backward kernel, pointers) for the vector forms, or None when they do not apply."""
    from . import _vec as V
    if not (VECTOR and dtype == "float32" and H % V.LANES[dtype] == 0 and backend.on_host()):
        return None
    return V.pointers(arrays)
