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


def copy(src, s0: int, dst, d0: int, n: int, dtype: str, add: bool = False):
    """dst[d0:d0+n] = src[s0:s0+n] (``add``: +=) on flat buffers."""
    if n:
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


STEP_THREADS_BELOW = 1 << 22  # m*n*k below which a step's GEMM runs on one BLAS thread


def _host_gemm(a, a0, W, out, o, m, n, k, trans_w, accumulate, dtype):
    """One step's GEMM on host buffers at offsets. A step's GEMM is small (32 x 512 x 128 in the benchmark) and
    the steps are sequential: on one BLAS thread it does not wait for a second one (measured on the loaded
    2-core machine: 0.5-1.4 ms on one OpenBLAS thread against 3-36 ms on two)."""
    from . import blas
    from .linalg import _host_matmul
    if m * n * k < STEP_THREADS_BELOW:
        with blas.threads(1):
            _host_matmul(a[a0:a0 + m * k], W, out[o:o + m * n], 1, m, n, k, False, not trans_w, dtype, accumulate)
    else:
        _host_matmul(a[a0:a0 + m * k], W, out[o:o + m * n], 1, m, n, k, False, not trans_w, dtype, accumulate)


def _serial(n):
    return C.launch_mode(n, 8)


def lstm_forward(G, W_hh, Hs, Cs, T: int, B: int, H: int, dtype: str):
    """Run the T steps in place (see the module doc): G gets the activated gates, Hs/Cs slots 1..T the states."""
    serial = _serial(B * H)
    cell = C.cached(("lstm_fwd", dtype, serial), lambda: _build_fwd(dtype, serial))
    host = backend.on_host()
    gemm = None if host else C.cached(("lstm_gemm", dtype, False), lambda: _build_step_gemm(dtype, False))
    for t in range(T):
        if host:  # G[t] += h_{t-1} @ W_hh^T
            C.host_call(_host_gemm, Hs, t * B * H, W_hh, G, t * B * 4 * H, B, 4 * H, H, False, True, dtype)
        else:
            gemm(Hs, t * B * H, W_hh, G, t * B * 4 * H, B, 4 * H, H)
        cell(G, Hs, Cs, t, B, H)


def lstm_backward(G, Cs, W_hh, gH, dG, dh, dc, T: int, B: int, H: int, dtype: str):
    """Backpropagate through the T steps: gH (T+1, B, H) the cotangent of Hs; dc (B, H) holds the cotangent
    of c_T on entry and dh (B, H) zeros. Writes dG (T, B, 4H) (the cotangent of the pre-activation gates,
    i.e. of the input projections), and leaves in dh and dc the cotangents of h_0 and c_0."""
    serial = _serial(B * H)
    cell = C.cached(("lstm_bwd", dtype, serial), lambda: _build_bwd(dtype, serial))
    host = backend.on_host()
    gemm = None if host else C.cached(("lstm_gemm", dtype, True), lambda: _build_step_gemm(dtype, True))
    for t in range(T - 1, -1, -1):
        cell(G, Cs, dh, gH, dc, dG, t, B, H)
        if host:  # dh_{t-1} (recurrent part) = dG[t] @ W_hh
            C.host_call(_host_gemm, dG, t * B * 4 * H, W_hh, dh, 0, B, H, 4 * H, True, False, dtype)
        else:
            gemm(dG, t * B * 4 * H, W_hh, dh, 0, B, H, 4 * H)
    copy(gH, 0, dh, 0, B * H, dtype, add=True)
