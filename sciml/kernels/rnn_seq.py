"""Whole-layer recurrent kernels (LSTM, GRU, Elman RNN; one direction of one layer; Taichi, flat buffers).

One call runs the whole sequence: the input projections of all T steps as one GEMM, then per step one GEMM
``h W_hh^T`` and one fused cell kernel (bias, gates, state, and the output written straight into its final
layout), and backward per step one fused cell-adjoint kernel and one GEMM ``dG W_hh``, then one GEMM each
for ``dW_ih``, ``dW_hh`` and ``dx`` over all steps and one column sum for the biases.

Layout (T steps, batch B, hidden H, ``NG`` gate rows per unit: 4 LSTM, 3 GRU, 1 RNN; row-major, flat):

* ``G`` (T, B, NG*H) by time: the input projections ``x_t W_ih^T``; the forward adds the recurrent term
  (LSTM, RNN) and overwrites the slot with the activated gates the backward reads (GRU: ``S`` holds the
  recurrent term ``h W_hh^T`` per step instead, because ``n`` uses ``r * (W_hn h + b_hn)``);
* ``Hs``, ``Cs`` (T+1, B, H): the states. A step at time t reads slot ``t + r`` and writes ``t + 1 - r``
  (``r`` = 1 for the reverse direction), so ``Hs[r:r+T]`` are the previous states of t = 0..T-1 in order,
  the left operand of the recurrent weight's gradient GEMM (``Hs`` and the backward's ``dG`` carry 3 rows of
  padding past the end, zeroed on CPU: ``lstm_host.py``'s register tiles read 4 rows at a time);
* ``P``: the packed output ``[y | h_T | c_T]``; ``y`` (T, B, H) or (B, T, H) (``batch_first``) at row
  strides ``ybs`` (batch) and ``yts`` (time).

On CPU outside sciml.jit's tracing, an all-zero h0 (the models' default state) skips the first step's recurrent
GEMM and h0's rows of the ``dW_hh`` GEMM (``saved["z0"]``); the gradient of h0 itself is computed as for any h0.

float32 on CPU runs vector forms of the cell kernels (the host's 8 or 16 lanes where H and the buffers allow,
else 4; ``_vec.py``). The LSTM in float32 on CPU runs instead the whole step loop of each direction in one kernel
(``lstm_host.py``: the recurrent GEMM as vector register tiles fused with the cell), on the same buffers; the
per-step path here stays for devices, float64, the GRU and the Elman RNN, and where the vectors do not fit.
"""
import sys
import threading

from . import _common as C
from . import lstm_host as LH
from . import recurrent as R
from .. import backend, runtime

NG = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _scalar_funcs(dtype):
    from .elementwise import _funcs
    f = _funcs(dtype)
    return f["tanh"], f["sigmoid"], C.backend.ti_dtype(dtype)


def _cell_fwd(kind, tanh, sig, T_):
    """The forward cell body for one (b, j) as a ti.func (shared by the scalar and vector kernels)."""
    ti = C.ti()
    tp = ti.template()  # the arrays are passed through

    if kind == "LSTM":
        @ti.func
        def cell(G: tp, bias: tp, S: tp, Hs: tp, Cs: tp, P: tp, g0, p0, n0, y0, j, hv, last, tl, bh):
            gi = sig(G[g0 + j] + bias[j])
            gf = sig(G[g0 + hv + j] + bias[hv + j])
            gg = tanh(G[g0 + 2 * hv + j] + bias[2 * hv + j])
            go = sig(G[g0 + 3 * hv + j] + bias[3 * hv + j])
            c = gf * Cs[p0 + j] + gi * gg
            G[g0 + j] = gi
            G[g0 + hv + j] = gf
            G[g0 + 2 * hv + j] = gg
            G[g0 + 3 * hv + j] = go
            Cs[n0 + j] = c
            h = go * tanh(c)
            Hs[n0 + j] = h
            P[y0 + j] = h
            if last != 0:
                P[tl + j] = h
                P[tl + bh + j] = c
    elif kind == "GRU":  # bias: [b_ih (3H) | b_hh (3H)]; S[g0..]: h W_hh^T (no bias) of this step
        @ti.func
        def cell(G: tp, bias: tp, S: tp, Hs: tp, Cs: tp, P: tp, g0, p0, n0, y0, j, hv, last, tl, bh):
            one = ti.cast(1, T_)
            r = sig(G[g0 + j] + bias[j] + S[g0 + j] + bias[3 * hv + j])
            z = sig(G[g0 + hv + j] + bias[hv + j] + S[g0 + hv + j] + bias[4 * hv + j])
            hn = S[g0 + 2 * hv + j] + bias[5 * hv + j]
            n = tanh(G[g0 + 2 * hv + j] + bias[2 * hv + j] + r * hn)
            h = (one - z) * n + z * Hs[p0 + j]
            G[g0 + j] = r
            G[g0 + hv + j] = z
            G[g0 + 2 * hv + j] = n
            S[g0 + 2 * hv + j] = hn
            Hs[n0 + j] = h
            P[y0 + j] = h
            if last != 0:
                P[tl + j] = h
    else:
        relu = kind == "RNN_RELU"

        @ti.func
        def cell(G: tp, bias: tp, S: tp, Hs: tp, Cs: tp, P: tp, g0, p0, n0, y0, j, hv, last, tl, bh):
            a = G[g0 + j] + bias[j]
            h = a
            if ti.static(relu):  # ordered compares: NaN stays NaN
                zero = ti.cast(0, T_)
                h = ti.select(a > zero, a, ti.select(a <= zero, zero, a))
            else:
                h = tanh(a)
            G[g0 + j] = h
            Hs[n0 + j] = h
            P[y0 + j] = h
            if last != 0:
                P[tl + j] = h
    return cell


def _cell_bwd(kind, tanh, T_):
    """The backward cell body for one (b, j): reads the cotangent ``dh`` of h_t (recurrent part + output),
    writes the gate cotangents and carries dc (LSTM)."""
    ti = C.ti()
    tp = ti.template()

    if kind == "LSTM":
        @ti.func
        def cell(G: tp, S: tp, Hs: tp, Cs: tp, dh_rec: tp, gP: tp, dc: tp, dG: tp, dS: tp, g0, p0, n0, y0, r0, j, hv):
            one = ti.cast(1, T_)
            gi = G[g0 + j]
            gf = G[g0 + hv + j]
            gg = G[g0 + 2 * hv + j]
            go = G[g0 + 3 * hv + j]
            tc = tanh(Cs[n0 + j])
            dh = dh_rec[r0 + j] + gP[y0 + j]
            d = dc[r0 + j] + dh * go * (one - tc * tc)
            dG[g0 + j] = d * gg * gi * (one - gi)
            dG[g0 + hv + j] = d * Cs[p0 + j] * gf * (one - gf)
            dG[g0 + 2 * hv + j] = d * gi * (one - gg * gg)
            dG[g0 + 3 * hv + j] = dh * tc * go * (one - go)
            dc[r0 + j] = d * gf
    elif kind == "GRU":  # dG: cotangent of the input pre-activations; dS: of h W_hh^T; dc: the direct dh_prev
        @ti.func
        def cell(G: tp, S: tp, Hs: tp, Cs: tp, dh_rec: tp, gP: tp, dc: tp, dG: tp, dS: tp, g0, p0, n0, y0, r0, j, hv):
            one = ti.cast(1, T_)
            r = G[g0 + j]
            z = G[g0 + hv + j]
            n = G[g0 + 2 * hv + j]
            hn = S[g0 + 2 * hv + j]
            dh = dh_rec[r0 + j] + gP[y0 + j]
            dn = dh * (one - z) * (one - n * n)
            dz = dh * (Hs[p0 + j] - n) * z * (one - z)
            dr = dn * hn * r * (one - r)
            dG[g0 + j] = dr
            dG[g0 + hv + j] = dz
            dG[g0 + 2 * hv + j] = dn
            dS[g0 + j] = dr
            dS[g0 + hv + j] = dz
            dS[g0 + 2 * hv + j] = dn * r
            dc[r0 + j] = dh * z
    else:
        relu = kind == "RNN_RELU"

        @ti.func
        def cell(G: tp, S: tp, Hs: tp, Cs: tp, dh_rec: tp, gP: tp, dc: tp, dG: tp, dS: tp, g0, p0, n0, y0, r0, j, hv):
            h = G[g0 + j]
            dh = dh_rec[r0 + j] + gP[y0 + j]
            if ti.static(relu):
                zero = ti.cast(0, T_)
                dG[g0 + j] = ti.select(h > zero, dh, ti.select(h <= zero, zero, h))  # NaN -> NaN
            else:
                dG[g0 + j] = dh * (ti.cast(1, T_) - h * h)
    return cell


def _build_fwd(kind, dtype, serial, vec):
    ti = C.ti()
    if vec:
        A = ti.types.ndarray(dtype=ti.types.vector(vec, ti.f32), ndim=1)
        tanh, sig = R._vec_funcs()
        T_ = ti.f32
    else:
        A = C.arr(dtype)
        tanh, sig, T_ = _scalar_funcs(dtype)
    cell = _cell_fwd(kind, tanh, sig, T_)
    ng = NG[kind]

    @ti.kernel
    def k(G: A, bias: A, S: A, Hs: A, Cs: A, P: A, t: ti.i32, B: ti.i32, hv: ti.i32, prev: ti.i32, new: ti.i32,
          ybs: ti.i32, yts: ti.i32, last: ti.i32, tail: ti.i32):
        ti.loop_config(serialize=serial)
        for b in range(B):
            g0 = (t * B + b) * ng * hv
            p0 = (prev * B + b) * hv
            n0 = (new * B + b) * hv
            y0 = b * ybs + t * yts
            for j in range(hv):
                cell(G, bias, S, Hs, Cs, P, g0, p0, n0, y0, j, hv, last, tail + b * hv, B * hv)
    return k


def _build_bwd(kind, dtype, serial, vec):
    ti = C.ti()
    if vec:
        A = ti.types.ndarray(dtype=ti.types.vector(vec, ti.f32), ndim=1)
        tanh, _ = R._vec_funcs()
        T_ = ti.f32
    else:
        A = C.arr(dtype)
        tanh, _, T_ = _scalar_funcs(dtype)
    cell = _cell_bwd(kind, tanh, T_)
    ng = NG[kind]

    @ti.kernel
    def k(G: A, S: A, Hs: A, Cs: A, dh_rec: A, gP: A, dc: A, dG: A, dS: A, t: ti.i32, B: ti.i32, hv: ti.i32,
          prev: ti.i32, new: ti.i32, ybs: ti.i32, yts: ti.i32):
        ti.loop_config(serialize=serial)
        for b in range(B):
            g0 = (t * B + b) * ng * hv
            p0 = (prev * B + b) * hv
            n0 = (new * B + b) * hv
            y0 = b * ybs + t * yts
            for j in range(hv):
                cell(G, S, Hs, Cs, dh_rec, gP, dc, dG, dS, g0, p0, n0, y0, b * hv, j, hv)
    return k


class _Cells:
    """The forward / backward cell kernel of ``kind`` for these buffers: a vector form when it applies (float32 on
    CPU, H a multiple of the lanes, every buffer aligned for them: the host's wide vectors, else 4 lanes), else
    the scalar one."""

    def __init__(self, kind, which, arrays, dtype, B, H):
        from . import _vec as V
        L = None
        if R.VECTOR and dtype == "float32" and backend.on_host():
            ptrs = [C.address(a) for a in arrays]
            L = V.lanes_for(ptrs, dtype)
            if L is not None and H % L:
                L = V.LANES[dtype] if H % V.LANES[dtype] == 0 and not any(p & 15 for p in ptrs) else None
        build = _build_fwd if which == "fwd" else _build_bwd
        if L is not None:
            self.vk = V.cached(("rnn_seq", kind, which, "vec", L), lambda: build(kind, dtype, True, L), L)
            self.arrays, self.ptrs, self.counts, self.unit = arrays, ptrs, [a.size // L for a in arrays], L
        else:
            serial = C.launch_mode(B * H, 8)
            self.vk = None
            self.k = C.cached(("rnn_seq", kind, which, dtype, serial), lambda: build(kind, dtype, serial, False))
            self.arrays, self.unit = arrays, 1

    ctx = None  # once the kernel is compiled: one launch context, reused with only the changed scalars set

    def __call__(self, *scalars):
        if self.ctx is not None and C.TRACE[0] is None:
            c, last, na = self.ctx, self.last, self.na
            for j, v in enumerate(scalars):
                if v != last[j]:
                    c.set_arg_int((na + j,), v)
                    last[j] = v
            self.launch(self.ckd, c)  # ~2 us against ~15-25 us for a fresh context with every argument
            return
        if self.vk is not None:
            self.vk(self.arrays, self.ptrs, self.counts, scalars)
            spec = self.vk.spec
            if spec is not None and C.TRACE[0] is None:
                self.ctx, self.launch, self.ckd = spec[0](self.ptrs, self.counts, scalars), spec[1], spec[2]
        else:
            self.k(*self.arrays, *scalars)
            spec = self.k.spec
            if spec is not None and C.TRACE[0] is None:
                self.ctx, self.launch, self.ckd = self.k.context(self.arrays + tuple(scalars)), spec[1], spec[2]
        if self.ctx is not None:
            self.last, self.na = list(scalars), len(self.arrays)


def _gemm(a, a0, W, out, o, m, n, k, trans_w, accumulate, dtype, host):
    """One step's GEMM at buffer offsets: trans_w=False: out (+)= a @ W^T, W (n, k); trans_w=True:
    out = a @ W, W (k, n). On devices the trans_w=False kernel always accumulates (its targets are either
    accumulated into or start zeroed: device buffers are allocated zeroed)."""
    if host:
        C.host_call(R._host_gemm, a, a0, W, out, o, m, n, k, trans_w, accumulate, dtype)
    else:
        C.cached(("lstm_gemm", dtype, trans_w), lambda: R._build_step_gemm(dtype, trans_w))(a, a0, W, out, o, m, n,
                                                                                             k)


_ZEROS: dict = {}  # small placeholder buffers for the arguments a kind does not use
runtime.on_shutdown(_ZEROS.clear)


def _zeros(n, dtype):
    z = _ZEROS.get((n, dtype))
    if z is None:
        z = _ZEROS[(n, dtype)] = _empty(n, dtype, backend.zeros)
    return z


_MIN_ALIGNED = backend.ALIGN_MIN_BYTES // 4  # elements: backend buffers this big start on a 64-byte boundary


def _empty(n, dtype, alloc=backend.empty):
    """A buffer of at least ``n`` elements (on CPU at least 64 KB, so that the wide vector kernels may use it)."""
    n = max(n, _MIN_ALIGNED) if backend.on_host() else n
    return buf(n, dtype) if alloc is backend.empty else alloc(n, dtype)


# Host buffers reused across calls. A training step allocates ~20 MB here (the saved gates and states, the gate
# cotangents, copies of the weights); fresh large numpy buffers come from mmap, and their first touch faults in
# every page again: ~2300 page faults and 1-12 ms of system time per step of the benchmark's LSTM (the more, the
# busier the machine), against none when a buffer of the same size is handed out again.
POOL_PER_SIZE = 3          # buffers kept per (size, dtype)
POOL_MAX_BYTES = 256 << 20  # all sizes together; past it the free buffers of the least recently asked sizes go
_POOL: dict = {}            # (n, dtype) -> [buffers]; the most recently asked size last
_POOL_BYTES = [0]
_POOL_LOCK = threading.Lock()


def _pool_clear():
    _POOL.clear()
    _POOL_BYTES[0] = 0


runtime.on_shutdown(_pool_clear)


def buf(n, dtype):
    """An uninitialised flat buffer of exactly ``n`` elements (``backend.empty``); on CPU outside sciml.jit's
    tracing, one this module handed out before and nobody else holds any more (no array, no view of it) when
    there is one."""
    if not backend.on_host() or C.TRACE[0] is not None or n * 8 < backend.ALIGN_MIN_BYTES:
        return backend.empty(n, dtype)
    key = (n, dtype)
    with _POOL_LOCK:  # threads: a buffer is taken (a reference held) before another thread looks at it
        lst = _POOL.pop(key, [])
        _POOL[key] = lst
        for b in lst:
            if sys.getrefcount(b) == 3:  # held by the list, ``b`` and the call's argument only
                return b
        b = backend.empty(n, dtype)
        if len(lst) >= POOL_PER_SIZE:
            return b
        nb = b.nbytes
        for k in list(_POOL):  # over the cap: let go of free buffers, least recently asked sizes first
            if _POOL_BYTES[0] + nb <= POOL_MAX_BYTES or k == key:
                break
            old = _POOL[k]
            for i in range(len(old) - 1, -1, -1):
                if sys.getrefcount(old[i]) == 2:
                    _POOL_BYTES[0] -= old[i].nbytes
                    del old[i]
            if not old:
                del _POOL[k]
        if _POOL_BYTES[0] + nb <= POOL_MAX_BYTES:
            lst.append(b)
            _POOL_BYTES[0] += nb
        return b


def forward(kind, X, W_ih, bias, W_hh, h0, c0, T, B, I, H, reverse, ybs, yts, dtype):
    """Run one direction of one layer. Returns (P, saved): P the packed output [y | h_T (| c_T)], saved the
    buffers the backward reads."""
    from . import linalg as LA
    ng = NG[kind]
    NGH = ng * H
    host = backend.on_host()
    nY, BH = T * B * H, B * H
    lstm = kind == "LSTM"
    P = buf(nY + (2 if lstm else 1) * BH, dtype)
    G = buf(T * B * NGH, dtype)
    Hs = buf((T + 1) * BH + 3 * H, dtype)  # 3 rows past the end: lstm_host's register tiles read 4 rows at a time
    if host:
        C.host_call(_zero_from, Hs, (T + 1) * BH)
    Cs = buf((T + 1) * BH, dtype) if lstm else _zeros(16, dtype)
    S = buf(T * B * NGH, dtype) if kind == "GRU" else _zeros(16, dtype)
    r = 1 if reverse else 0
    R.copy(h0, 0, Hs, r * T * BH, BH, dtype)
    # h0 all zeros (the default state): the first step's recurrent GEMM and the h0 rows of dW_hh's are skipped.
    # Decided on the data, so not while sciml.jit traces (a replay may bring another h0).
    z0 = host and C.TRACE[0] is None and T > 1 and not h0[:BH].any()
    if lstm:
        R.copy(c0, 0, Cs, r * T * BH, BH, dtype)
    if backend.on_host():  # the biases in a buffer aligned for the wide vector kernels
        b = _empty(bias.size, dtype)
        R.copy(bias, 0, b, 0, bias.size, dtype)
        bias = b
    L = LH.lanes([C.address(a) for a in (G, Hs, Cs, P, bias)], H) if lstm and dtype == "float32" and host else None
    if L is not None:  # the whole sequence in one kernel (lstm_host.py)
        if I != 1:
            LA.matmul(X, W_ih, G, 1, T * B, NGH, I, False, True, dtype)
        LH.forward(G, X, W_ih, bias, W_hh, Hs, Cs, P, T, B, I, H, reverse, ybs, yts, z0, L)
        return P, {"G": G, "S": S, "Hs": Hs, "Cs": Cs, "z0": z0}
    LA.matmul(X, W_ih, G, 1, T * B, NGH, I, False, True, dtype)     # all steps' input projections: one GEMM
    cells = _Cells(kind, "fwd", (G, bias, S, Hs, Cs, P), dtype, B, H)
    u = cells.unit
    with R._step_threads(B, NGH, H):
        for s in range(T):
            t = T - 1 - s if reverse else s
            prev, new = t + r, t + 1 - r
            if kind == "GRU":  # S[t] = h_prev W_hh^T
                _gemm(Hs, prev * BH, W_hh, S, t * B * NGH, B, NGH, H, False, False, dtype, host)
            elif not (s == 0 and z0):  # G[t] += h_prev W_hh^T
                _gemm(Hs, prev * BH, W_hh, G, t * B * NGH, B, NGH, H, False, True, dtype, host)
            cells(t, B, H // u, prev, new, ybs // u, yts // u, int(s == T - 1), nY // u)
    return P, {"G": G, "S": S, "Hs": Hs, "Cs": Cs, "z0": z0}


def backward(kind, gP, X, W_ih, W_hh, saved, T, B, I, H, reverse, ybs, yts, dtype, need):
    """Cotangents (dX, dW_ih, db, dW_hh, dh0, dc0) (None where ``need`` is False) given gP, the cotangent
    of the packed output. For the GRU db is [db_ih | db_hh] (6H)."""
    from . import linalg as LA
    ng = NG[kind]
    NGH = ng * H
    host = backend.on_host()
    nY, BH = T * B * H, B * H
    lstm, gru = kind == "LSTM", kind == "GRU"
    G, S, Hs, Cs = saved["G"], saved["S"], saved["Hs"], saved["Cs"]
    r = 1 if reverse else 0
    dG = buf(T * B * NGH + 3 * NGH, dtype)  # 3 rows past the end: lstm_host's backward tiles read 4 rows at a time
    if host:
        C.host_call(_zero_from, dG, T * B * NGH)
    dS = buf(T * B * NGH, dtype) if gru else _zeros(16, dtype)
    L = None
    if lstm and dtype == "float32" and backend.on_host():
        if C.address(gP) & 63:  # the cotangent aligned for the vectors
            g2 = _empty(gP.size, dtype)
            R.copy(gP, 0, g2, 0, gP.size, dtype)
            gP = g2
        L = LH.lanes([C.address(a) for a in (G, Cs, gP, dG)], H)
    if L is not None:  # the step loop in one kernel (lstm_host.py); the weight GEMMs below
        dh, dc, db_k, dwih_k = LH.backward(gP, X, W_hh, G, Cs, dG, T, B, I, H, reverse, ybs, yts, need[4], L)
        return _weight_grads(kind, dG, dS, X, W_ih, Hs, T, B, I, H, r, dtype, need, dh, dc, db_k, dwih_k,
                             saved.get("z0", False))
    dh = _empty(BH, dtype)
    R.copy(gP, nY, dh, 0, BH, dtype)
    dc = _empty(BH, dtype)        # LSTM: the cell state's cotangent; GRU: the direct part of dh_prev
    if lstm:
        R.copy(gP, nY + BH, dc, 0, BH, dtype)
    cells = _Cells(kind, "bwd", (G, S, Hs, Cs, dh, gP, dc, dG, dS), dtype, B, H)
    u = cells.unit
    with R._step_threads(B, H, NGH):
        for s in range(T - 1, -1, -1):
            t = T - 1 - s if reverse else s
            prev, new = t + r, t + 1 - r
            cells(t, B, H // u, prev, new, ybs // u, yts // u)
            # dh_prev = dG[t] W_hh (GRU: dS[t] W_hh + z dh)
            _gemm(dS if gru else dG, t * B * NGH, W_hh, dh, 0, B, H, NGH, True, False, dtype, host)
            if gru:
                R.copy(dc, 0, dh, 0, BH, dtype, add=True)
    return _weight_grads(kind, dG, dS, X, W_ih, Hs, T, B, I, H, r, dtype, need, dh[:BH] if host else dh,
                         (dc[:BH] if host else dc) if lstm else None, z0=saved.get("z0", False))


def _zero_from(a, i):
    a[i:] = 0


def _weight_grads(kind, dG, dS, X, W_ih, Hs, T, B, I, H, r, dtype, need, dh0, dc0, db=None, dW_ih=None, z0=False):
    """(dX, dW_ih, db, dW_hh, dh0, dc0) from the gate cotangents of all steps: one GEMM each (db, dW_ih: those
    the step loop summed where given; ``z0``: h0 is zero, dW_hh sums over the other T - 1 steps only)."""
    from . import linalg as LA
    NGH = NG[kind] * H
    host = backend.on_host()
    nY, BH = T * B * H, B * H
    gru = kind == "GRU"
    dGr = dS if gru else dG
    out = [None] * 6
    if need[0]:
        dX = buf(T * B * I, dtype)
        LA.matmul(dG, W_ih, dX, 1, T * B, I, NGH, False, False, dtype)
        out[0] = dX
    if need[1] and dW_ih is not None:
        out[1] = dW_ih
    elif need[1]:
        dW = buf(NGH * I, dtype)
        if I == 1:  # (1, NGH) = x^T dG is the same memory, and BLAS runs it as one pass over dG's rows
            LA.matmul(X, dG, dW, 1, 1, NGH, T * B, True, False, dtype)
        else:
            LA.matmul(dG, X, dW, 1, NGH, I, T * B, True, False, dtype)
        out[1] = dW
    if need[2] and db is not None:
        out[2] = db
    elif need[2]:  # column sums of dG (GRU: and of dS) as 1^T dG: one GEMM pass (5x faster than the reduction here)
        import numpy as np
        ones = backend.from_numpy(np.ones(T * B), dtype)
        db = buf(2 * NGH if gru else NGH, dtype)
        LA.matmul(ones, dG, db, 1, 1, NGH, T * B, False, False, dtype)
        if gru:
            dbh = buf(NGH, dtype)
            LA.matmul(ones, dS, dbh, 1, 1, NGH, T * B, False, False, dtype)
            R.copy(dbh, 0, db, NGH, NGH, dtype)
        out[2] = db
    if need[3]:
        dWh = buf(NGH * H, dtype)
        hp = Hs
        if r:
            if host:
                hp = Hs[BH:]
            else:
                hp = buf(nY, dtype)
                R.copy(Hs, BH, hp, 0, nY, dtype)
        if host:  # dG^T hp straight into (NGH, H): as fast in OpenBLAS (SkylakeX kernels, 512 x 128 x 3168) as
            # hp^T dG into (H, NGH), which then cost a transposition (~0.1 ms)
            nt, dg = T, dGr
            if z0:  # h0's rows contribute nothing: the prev states of t = 1..T-1 (reverse: t = 0..T-2) only
                nt, hp = T - 1, Hs[BH:]
                dg = dGr if r else dGr[B * NGH:]
            LA.matmul(dg, hp, dWh, 1, NGH, H, nt * B, True, False, dtype)
        else:
            LA.matmul(dGr, hp, dWh, 1, NGH, H, T * B, True, False, dtype)
        out[3] = dWh
    out[4], out[5] = dh0, dc0
    return out
