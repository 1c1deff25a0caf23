"""The LSTM layer on CPU in float32: one kernel runs the whole step loop of one direction, one each way.

The per-step path (``rnn_seq.py``: per step one BLAS GEMM and one cell kernel, ~200 calls each way for 100 steps)
pays a launch and ~10-20 us of Python and ctypes per call, and OpenBLAS packs the 256 KB recurrent weight again
for every step's small GEMM (32 x 512 x 128 here: ~100 us on one thread, MKL in PyTorch ~55 us). Here the time
loop runs inside one serial Taichi kernel and the recurrent GEMM is a register tile of float32 vectors (the
host's lanes, ``_vec.py``) fused with the cell:

* forward: per step and per tile of RB batch rows (4 with 16-lane vectors, else 2) x one vector ``jv`` of hidden
  units, the four gate sums ``h_prev W_hh^T`` of those units, then the input term (input size 1: the rank-1
  ``x_t W_ih^T`` right here; else the slot ``G[t]`` that one BLAS GEMM over all steps filled), the biases, the
  gates, c and h, and the output written into its final layout. The tile's operands come as views at one index:
  ``W_hh`` copied once per call into four gate blocks (``_gate_blocks``: gate g's weights of units jv for input
  unit k are the vector ``W<g>[jv H + k]``) and four views of ``Hs`` one row apart (``H<r>[row b0 + k]``; ``Hs``
  carries 3 rows of padding for the last tile). Each load then costs one address, where separate indices into
  one array cost an add, a sign extension and a shift each (Taichi's indices are i32): 4 + 4 of those per k
  against 32 vector multiplies and adds. The 16 sums, with the input term and the biases (their vectors loaded
  once per tile), go to G first and the cells read them back (with the sums live through the cells, LLVM
  spilled and reloaded); the four gates take one division (``_gates``);
* backward: the cell adjoints of step t (the cotangent of h_t: the recurrent part plus the output's; the bias
  and, for input size 1, the input-weight gradients summed over the batch into db / dW_ih) run in the epilogue
  of the register tiles of ``dh_t = dG_{t+1} W_hh`` (RB rows x 4 vectors, operands again as views at one index:
  four rows of dG, which carries 3 rows of padding, and four vectors of ``W_hh``, copied with 3 vectors of
  padding; the bias and input-weight sums of a tile's rows added once), so the recurrent cotangent never
  leaves the registers and the loads of step t's saved gates overlap the GEMM's arithmetic (``FUSED_BWD``; else
  one pass over the batch rows in memory order per step, then the GEMM into a buffer: 14.0 vs 12.3 ms here). The
  weight GEMM ``dW_hh = sum_t dG_t^T h_{t-1}`` (and ``dx``, ``dW_ih`` for wider inputs) stays one BLAS GEMM over
  all steps (``rnn_seq._weight_grads``): summing it step by step here was slower (41 vs 35 ms, the Taichi tiles
  run without FMA), and so was one accumulating GEMM per chunk of 16 steps with dG kept in cache (39-41 vs
  37-39 ms).

Where the time goes (perf on the benchmark's step, 2-vCPU Xeon with AVX-512, one thread, T=100, B=32, H=128,
I=1): the recurrent GEMMs are arithmetic-bound, 32 vector multiplies and adds per k and tile (then ~8.5 ms each
way; the ceiling without FMA: see the 2026-11-28 numbers below); the forward cell (five rational tanh) ~2-3.5
ms; the backward cell adjoints ~7 ms while they walked the batch rows with a 2 KB stride for each vector of units
(memory-latency bound: the samples sat on the loads of the saved gates); in memory order and then fused they cost
5.9 ms less.

Buffers, layouts and the slots a step reads and writes are those of ``rnn_seq.py`` (G, Hs, Cs, P), so either
backward reads what either forward saved. On devices, in float64, for the GRU and the Elman RNN, and where H or
the buffers do not fit the vectors, ``rnn_seq.py``'s per-step path runs. Derivatives of higher order go through
the composed recurrence as before (``models/_rnn_fused.py``).

Measured (2-vCPU Xeon with AVX-512, one thread, T=100, B=32, H=128, I=1, process CPU time at load average 18-22):
forward 18.5-20 -> 11-12 ms, backward (with the dW_hh GEMM) 27-35 -> 22-23 ms; then (load 7-10) the backward
kernel 18.2 -> 14.2 (cell adjoints in memory order) -> 12.3 ms (fused into the dh tiles). 2026-11-28 (a 2-vCPU
Xeon, Cascade Lake class, load 1-3, thread CPU time): forward kernel 11.0 -> 9.1-9.3 ms, backward kernel 10.0 ->
8.6 ms (the views, the sums stored first, one division, the tile sums of db). The tiles now run at ~3.75 vector
multiplies or adds per ns, ~80 % of what a loop of independent multiplies and adds reaches here (4.5-4.7 per ns:
two 512-bit pipes); without FMA (Taichi's JIT forms none, docs/perf.md) that is half of what OpenBLAS's FMA
kernels reach on large GEMMs (109 GFLOP/s on 1024^3), so each recurrent GEMM costs ~7 ms of the step; OpenBLAS
itself takes 51-64 us per 32 x 512 x 128 step GEMM (60-70 GFLOP/s: the packing), which a per-step BLAS loop
would spend plus a launch and the cell pass per step.

Tried without gain (2026-11-28, same machine, in-process A/B at load 4-10, thread CPU time): the forward cells of a
full tile's rows written stage by stage across the rows (4 rows: 2.95 vs 2.53 ms for the cells alone; 2 rows: level),
the tile rows' guards dropped for a batch that fills the tiles (level), the k loop unrolled 2 or 4 times (9.06 / 9.42
vs 8.73 ms forward). The step's time against PyTorch's (thread CPU time, load ~5): backward level (15.2 vs 15.2 ms),
Adam faster (0.45 vs 1.1), the forward 1.8 ms slower (9.8 vs 7.9): the recurrent GEMM without FMA (~6 ms of the
forward kernel's ~8.5) against oneDNN's FMA kernels.

Round 6 (2026-11-28, same VM): a profile of the forward kernel by parts (variants built without the GEMM, without
the cells: thread CPU time, load 2-4) gave ~6.5 ms for the register tiles, ~1.5-2 ms for the cells, the rest the
pre-activations' round trip through G; dropping the cells' stores or their divisions changed nothing (the cells
are latency-bound: Horner chains of 14 dependent operations, ~1.5 cells fit the reorder window). OpenBLAS per
step is no way out (72-102 us per 32 x 128 x 512 step GEMM on one thread against the tiles' ~66). Now: the tiles'
inner loops are ``fma_tile.py``'s LLVM bitcode (``llvm.fma`` on the same vectors, same operand layout; linked into
these kernels by Taichi, compiled by its JIT for the host: 4.2-4.3 vector FMAs per ns, against ~1.9 multiply-add
pairs per ns before; ``FMA = False``: the Taichi tiles), and the rational tanh's polynomials are Estrin trees
(``ESTRIN``: 7 dependent operations instead of 14; same float32 accuracy, tests/models/test_lstm_fma.py). Forward
kernel 8.7 -> 5.9 ms (Estrin 0.3 of it), backward kernel 8.0 -> 5.7 ms (in-process A/B, load ~4).
"""
from . import _common as C
from . import _vec as V
from . import fma_tile as FT
from . import recurrent as R
from .. import backend

ENABLED = True  # False: rnn_seq.py's per-step path everywhere (the tests compare the two)
FMA = True  # the register tiles with fused multiply-adds (fma_tile.py's bitcode) where _fma_ok allows
ESTRIN = True  # the rational tanh's polynomials as Estrin trees (False: Horner; read when a kernel is built)


def _fma_ok(L, R):
    """The register tiles run as fma_tile.py's bitcode (FMA): switched on, on Taichi's x64 CPU arch, for a
    shape the bitcode has."""
    return bool(FMA and (L, R, 4) in FT.SHAPES and backend.on_host() and FT.available())


def lanes(ptrs, H):
    """The vector lanes of the whole-sequence kernels for these buffer addresses, or None (per-step path)."""
    if not (ENABLED and R.VECTOR and backend.on_host()):
        return None
    L = V.lanes_for(ptrs, "float32")
    if L is not None and H % L:
        L = V.LANES["float32"] if H % V.LANES["float32"] == 0 and not any(p & 15 for p in ptrs) else None
    return L


def _rational():
    """(P, Q, tanh) on float32 vectors: tanh(x) ~ P(x) / Q(x), the rational of ``elementwise`` (Eigen/XLA) on x
    clamped to +-7.905 with ordered compares (NaN stays NaN, +-inf gives +-1), every constant typed. Unlike
    ``recurrent._vec_funcs`` no select for |x| > 9 (P/Q at the clamp is 1 - 6e-8) nor for tiny |x| (P/Q = x (1 -
    1.3e-7) there): two compares and blends fewer per call, in float32 rounding of the tanh itself. The cells take
    one division for their four gates (``_gates``)."""
    ti = C.ti()
    from .elementwise import _F32_TANH
    T = ti.f32
    a1, a3, a5, a7, a9, a11, a13, b0, b2, b4, b6 = _F32_TANH

    @ti.func
    def clamp(x):
        c = ti.cast(7.90531110763549805, T)
        return ti.select(x > c, c, ti.select(x < -c, -c, x))

    @ti.func
    def P_horner(x):
        xc = clamp(x)
        x2 = xc * xc
        p = x2 * ti.cast(a13, T) + ti.cast(a11, T)
        p = x2 * p + ti.cast(a9, T)
        p = x2 * p + ti.cast(a7, T)
        p = x2 * p + ti.cast(a5, T)
        p = x2 * p + ti.cast(a3, T)
        p = x2 * p + ti.cast(a1, T)
        return xc * p

    @ti.func
    def Q_horner(x):
        xc = clamp(x)
        x2 = xc * xc
        q = x2 * ti.cast(b6, T) + ti.cast(b4, T)
        q = x2 * q + ti.cast(b2, T)
        return x2 * q + ti.cast(b0, T)

    @ti.func
    def P_estrin(x):  # the same sums as a shallower tree: 7 dependent operations after the clamp instead of 14
        xc = clamp(x)
        x2 = xc * xc
        x4 = x2 * x2
        p01 = x2 * ti.cast(a3, T) + ti.cast(a1, T)
        p23 = x2 * ti.cast(a7, T) + ti.cast(a5, T)
        p46 = (x2 * ti.cast(a11, T) + ti.cast(a9, T)) + x4 * ti.cast(a13, T)
        return xc * ((p01 + x4 * p23) + (x4 * x4) * p46)

    @ti.func
    def Q_estrin(x):
        xc = clamp(x)
        x2 = xc * xc
        return (x2 * ti.cast(b2, T) + ti.cast(b0, T)) + (x2 * x2) * (x2 * ti.cast(b6, T) + ti.cast(b4, T))

    P, Q = (P_estrin, Q_estrin) if ESTRIN else (P_horner, Q_horner)

    @ti.func
    def tanh(x):
        return P(x) / Q(x)
    return P, Q, tanh


def _gates(P, Q, T_):
    """(i, f, g, o) = (sigmoid, sigmoid, tanh, sigmoid) of the four pre-activations with one division: 1 / Q_k =
    (prod of the other three Q) / (prod of all four); Q >= 4.9e-3 and <= 1 on the clamped range, so the product
    neither underflows nor overflows in float32. sigmoid(x) = tanh(x / 2) / 2 + 1 / 2."""
    ti = C.ti()

    @ti.func
    def gates(ai, af, ag, ao):
        h = ti.cast(0.5, T_)
        one = ti.cast(1, T_)
        xi, xf, xo = h * ai, h * af, h * ao
        qi, qf, qg, qo = Q(xi), Q(xf), Q(ag), Q(xo)
        a = qi * qf
        b = qg * qo
        r = one / (a * b)
        rb, ra = r * b, r * a
        gi = h * (P(xi) * (rb * qf)) + h
        gf = h * (P(xf) * (rb * qi)) + h
        gg = P(ag) * (ra * qo)
        go = h * (P(xo) * (ra * qg)) + h
        return gi, gf, gg, go
    return gates


def _arrays(L, lanes_of):
    ti = C.ti()
    return [ti.types.ndarray(dtype=ti.types.vector(L, ti.f32) if v else ti.f32, ndim=1) for v in lanes_of]


# G, xs, wih, bias, W0..W3 (the gates' weights), Hv, H0..H3 (scalar views of Hs, one row apart), Cv, P
_FWD_VEC = (1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1)
_BWD_VEC = (1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1)  # G, Cv, xs, gP, DH, dc, dG, dG (scalar view), W, db, dwih
# the fused backward: G, Cv, xs, gP, DH, dc, dG, D0..D3 (scalar views of dG, one row apart), W0..W3 (views of W_hh,
# one vector apart), db, dwih
_BWDF_VEC = (1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1)


def _tile(L):
    """Batch rows per register tile: 4 where the vectors are 64 bytes (AVX-512: 32 registers hold 16
    accumulators), else 2 (AVX2's 16 registers: 8 accumulators, 4 weight vectors, a broadcast)."""
    return 4 if L >= 16 else 2


def _build_fwd(L, rank1):
    ti = C.ti()
    RB = _tile(L)
    T_ = ti.f32
    P_, Q_, tanh = _rational()
    gates = _gates(P_, Q_, T_)
    tp = ti.template()
    AG, AX, AW, AB, AW4, AH, AHs, AC, AP = _arrays(L, (1, 0, 1, 1, 1, 1, 0, 1, 1))

    @ti.func
    def cell(G: tp, xs: tp, wih: tp, bias: tp, Cv: tp, Hv: tp, P: tp, t, b, jv, B, hv, prev, new, ybs, yts, tail,
             last):
        g0 = (t * B + b) * 4 * hv + jv
        # the pre-activations: h_prev W_hh^T + x_t W_ih^T + biases, stored by the tile
        gi, gf, gg, go = gates(G[g0], G[g0 + hv], G[g0 + 2 * hv], G[g0 + 3 * hv])
        p0 = (prev * B + b) * hv + jv
        n0 = (new * B + b) * hv + jv
        c = gf * Cv[p0] + gi * gg
        G[g0] = gi
        G[g0 + hv] = gf
        G[g0 + 2 * hv] = gg
        G[g0 + 3 * hv] = go
        Cv[n0] = c
        h = go * tanh(c)
        Hv[n0] = h
        P[b * ybs + t * yts + jv] = h
        if last:
            P[tail + b * hv + jv] = h
            P[tail + B * hv + b * hv + jv] = c

    fma = _fma_ok(L, RB)

    @ti.kernel
    def k(G: AG, xs: AX, wih: AW, bias: AB, W0: AW4, W1: AW4, W2: AW4, W3: AW4, Hv: AH, H0: AHs, H1: AHs,
          H2: AHs, H3: AHs, Cv: AC, P: AP, T: ti.i32, B: ti.i32, hv: ti.i32, rev: ti.i32, ybs: ti.i32, yts: ti.i32,
          tail: ti.i32, z0: ti.i32, aw: ti.i64, ah: ti.i64):
        ti.loop_config(serialize=True)
        for _ in range(1):  # one serial task: the steps run in order
            H = hv * L
            for s in range(T):
                t = s
                if rev != 0:
                    t = T - 1 - s
                prev = t + rev
                new = t + 1 - rev
                last = s == T - 1
                nk = H  # the first step from a zero h0 (z0): no recurrent term
                if s == 0 and z0 != 0:
                    nk = 0
                for bt in range((B + RB - 1) // RB):
                    b0 = bt * RB
                    hr = (prev * B + b0) * H  # row b0 + r of h_prev: H<r>[hr + k] (past B: the rows after, unused)
                    for jv in range(hv):
                        acc = [[ti.Vector([0.0] * L, dt=T_) for _g in ti.static(range(4))]
                               for _r in ti.static(range(RB))]
                        wb = jv * H
                        if ti.static(fma):  # the same sums with FMA (fma_tile.py): addresses in bytes
                            wa = [aw + ti.cast((g * hv * H + wb) * L * 4, ti.i64) for g in ti.static(range(4))]
                            ha = [ah + ti.cast((hr + r * H) * 4, ti.i64) for r in ti.static(range(RB))]
                            one = 1
                            FT.call(L, RB, 4, wa, ha, nk, one, [acc[r][g] for r in ti.static(range(RB))
                                                                for g in ti.static(range(4))])
                        else:
                            for kk in range(nk):  # the four gates' sums h_prev W_hh^T of units jv, rows b0..
                                w = wb + kk  # one index for the four weight and the RB row operands
                                ws = [W0[w], W1[w], W2[w], W3[w]]
                                hk = hr + kk
                                xs4 = [H0[hk], H1[hk], H2[hk], H3[hk]]
                                for r in ti.static(range(RB)):
                                    for g in ti.static(range(4)):
                                        acc[r][g] += xs4[r] * ws[g]
                        # the pre-activations into G first (the gates' slots), then the cells from there: with
                        # the 16 accumulators live through the cells, LLVM spilled them and reloaded every
                        # constant; the input term (input size 1: the rank-1 x_t W_ih^T, else the slot G[t] that
                        # one BLAS GEMM over all steps filled) and the biases here, their weights loaded once
                        bv = [bias[g * hv + jv] for g in ti.static(range(4))]
                        wv = [wih[g * hv + jv] for g in ti.static(range(4))] if ti.static(rank1) else bv
                        for r in ti.static(range(RB)):
                            if b0 + r < B:
                                g0 = (t * B + b0 + r) * 4 * hv + jv
                                if ti.static(rank1):
                                    xv = xs[t * B + b0 + r]
                                    for g in ti.static(range(4)):
                                        G[g0 + g * hv] = acc[r][g] + xv * wv[g] + bv[g]
                                else:
                                    for g in ti.static(range(4)):
                                        G[g0 + g * hv] += acc[r][g] + bv[g]
                        for r in ti.static(range(RB)):
                            if b0 + r < B:
                                cell(G, xs, wih, bias, Cv, Hv, P, t, b0 + r, jv, B, hv, prev, new, ybs, yts, tail,
                                     last)
    return k


def _build_bwd(L, rank1):
    ti = C.ti()
    RB, NJ = _tile(L), 4
    T_ = ti.f32
    tanh = _rational()[2]
    AG, AC, AX, AP, ADH, Adc, AdG, AdGs, AW, Adb, Adw = _arrays(L, _BWD_VEC)

    @ti.kernel
    def k(G: AG, Cv: AC, xs: AX, gP: AP, DH: ADH, dc: Adc, dG: AdG, dGs: AdGs, W: AW, db: Adb, dwih: Adw,
          T: ti.i32, B: ti.i32, hv: ti.i32, rev: ti.i32, ybs: ti.i32, yts: ti.i32, tail: ti.i32, need0: ti.i32):
        ti.loop_config(serialize=True)
        for _ in range(1):  # one serial task: the steps run in order
            one = ti.cast(1, T_)
            z = ti.Vector([0.0] * L, dt=T_)
            g4 = 4 * hv
            BH = B * hv
            for i in range(BH):  # the cotangents of h_T, c_T
                DH[i] = gP[tail + i]
                dc[i] = gP[tail + BH + i]
            for i in range(g4):
                db[i] = z
                dwih[i] = z
            for q in range(T):
                t = T - 1 - q
                if rev != 0:
                    t = q
                prev = t + rev
                new = t + 1 - rev
                for b in range(B):  # the cell adjoints of step t, in memory order (bias / W_ih sums in db, dwih)
                    g1 = (t * B + b) * g4
                    p1 = (prev * B + b) * hv
                    n1 = (new * B + b) * hv
                    y1 = b * ybs + t * yts
                    xv = xs[t * B + b] if ti.static(rank1) else one
                    for jv in range(hv):
                        g0 = g1 + jv
                        p0 = p1 + jv
                        n0 = n1 + jv
                        r0 = b * hv + jv
                        gi = G[g0]
                        gf = G[g0 + hv]
                        gg = G[g0 + 2 * hv]
                        go = G[g0 + 3 * hv]
                        tc = tanh(Cv[n0])
                        dh = DH[r0] + gP[y1 + jv]
                        d = dc[r0] + dh * go * (one - tc * tc)
                        dgs = [d * gg * gi * (one - gi), d * Cv[p0] * gf * (one - gf), d * gi * (one - gg * gg),
                               dh * tc * go * (one - go)]
                        dc[r0] = d * gf
                        for g in ti.static(range(4)):
                            dG[g0 + g * hv] = dgs[g]
                            db[g * hv + jv] += dgs[g]
                            if ti.static(rank1):
                                dwih[g * hv + jv] += xv * dgs[g]
                # dh_prev = dG_t W_hh: tiles of RB rows x NJ vectors (past the edges repeated, written once); after
                # the last step only if dh0 is wanted
                H4 = g4 * L
                nbt = (B + RB - 1) // RB
                if q == T - 1 and need0 == 0:
                    nbt = 0
                for bt in range(nbt):
                    b0 = bt * RB
                    dr = [(t * B + ti.min(b0 + r, B - 1)) * H4 for r in ti.static(range(RB))]
                    for jt in range((hv + NJ - 1) // NJ):
                        j0 = jt * NJ
                        js = [ti.min(j0 + j, hv - 1) for j in ti.static(range(NJ))]
                        acc = [[ti.Vector([0.0] * L, dt=T_) for _j in ti.static(range(NJ))]
                               for _r in ti.static(range(RB))]
                        for kk in range(H4):
                            w = kk * hv
                            ws = [W[w + js[j]] for j in ti.static(range(NJ))]
                            for r in ti.static(range(RB)):
                                x = dGs[dr[r] + kk]
                                for j in ti.static(range(NJ)):
                                    acc[r][j] += x * ws[j]
                        for r in ti.static(range(RB)):
                            for j in ti.static(range(NJ)):
                                if b0 + r < B and j0 + j < hv:
                                    DH[(b0 + r) * hv + j0 + j] = acc[r][j]
    return k


def _build_bwd_fused(L, rank1):
    """The backward with the cell adjoints of step t in the epilogue of the tiles of ``dh = dG_{t+1} W_hh``: the
    recurrent cotangent of h_t never leaves the registers, and the loads of step t's saved gates overlap the
    GEMM's arithmetic."""
    ti = C.ti()
    RB, NJ = _tile(L), 4
    T_ = ti.f32
    tanh = _rational()[2]
    tp = ti.template()
    AG, AC, AX, AP, ADH, Adc, AdG, AdGs, AW, Adb, Adw = _arrays(L, _BWD_VEC)

    @ti.func
    def adj(G: tp, Cv: tp, xs: tp, gP: tp, dc: tp, dG: tp, db: tp, dwih: tp, dhr, t, b, jv, B, hv, prev, new, ybs,
            yts, sums: ti.template()):
        """The cell adjoint of (t, b, units jv) given the recurrent cotangent ``dhr`` of h_t."""
        one = ti.cast(1, T_)
        g0 = (t * B + b) * 4 * hv + jv
        p0 = (prev * B + b) * hv + jv
        n0 = (new * B + b) * hv + jv
        r0 = b * hv + jv
        gi = G[g0]
        gf = G[g0 + hv]
        gg = G[g0 + 2 * hv]
        go = G[g0 + 3 * hv]
        tc = tanh(Cv[n0])
        dh = dhr + gP[b * ybs + t * yts + jv]
        d = dc[r0] + dh * go * (one - tc * tc)
        dgs = [d * gg * gi * (one - gi), d * Cv[p0] * gf * (one - gf), d * gi * (one - gg * gg),
               dh * tc * go * (one - go)]
        dc[r0] = d * gf
        for g in ti.static(range(4)):
            dG[g0 + g * hv] = dgs[g]
            if ti.static(sums):
                db[g * hv + jv] += dgs[g]
        if ti.static(rank1 and sums):
            xv = xs[t * B + b]
            for g in ti.static(range(4)):
                dwih[g * hv + jv] += xv * dgs[g]

    @ti.func
    def adj_tile(G: tp, Cv: tp, xs: tp, gP: tp, dc: tp, dG: tp, db: tp, dwih: tp, dh0, dh1, dh2, dh3, t, b0, jv, B,
                 hv, prev, new, ybs, yts):
        """The cell adjoints of rows b0.. (up to RB) of units jv, the bias and input-weight sums over those rows
        added to db / dwih once (from dG, just stored: loads instead of a read-modify-write of db per row)."""
        dhs = [dh0, dh1, dh2, dh3]
        z = ti.Vector([0.0] * L, dt=T_)
        sb = [z, z, z, z]
        sw = [z, z, z, z]
        for r in ti.static(range(RB)):
            if b0 + r < B:
                adj(G, Cv, xs, gP, dc, dG, db, dwih, dhs[r], t, b0 + r, jv, B, hv, prev, new, ybs, yts, False)
                g0 = (t * B + b0 + r) * 4 * hv + jv
                xv = xs[t * B + b0 + r]
                for g in ti.static(range(4)):
                    d = dG[g0 + g * hv]
                    sb[g] += d
                    if ti.static(rank1):
                        sw[g] += xv * d
        for g in ti.static(range(4)):
            db[g * hv + jv] += sb[g]
            if ti.static(rank1):
                dwih[g * hv + jv] += sw[g]

    fma = _fma_ok(L, RB)

    @ti.kernel
    def k(G: AG, Cv: AC, xs: AX, gP: AP, DH: ADH, dc: Adc, dG: AdG, D0: AdGs, D1: AdGs, D2: AdGs, D3: AdGs,
          W0: AW, W1: AW, W2: AW, W3: AW, db: Adb, dwih: Adw, T: ti.i32, B: ti.i32, hv: ti.i32, rev: ti.i32,
          ybs: ti.i32, yts: ti.i32, tail: ti.i32, need0: ti.i32, aw: ti.i64, ad: ti.i64):
        ti.loop_config(serialize=True)
        for _ in range(1):  # one serial task: the steps run in order
            z = ti.Vector([0.0] * L, dt=T_)
            g4 = 4 * hv
            H4 = g4 * L
            BH = B * hv
            for i in range(BH):  # the cotangent of c_T
                dc[i] = gP[tail + BH + i]
            for i in range(g4):
                db[i] = z
                dwih[i] = z
            t = T - 1  # the last step: its recurrent cotangent is that of h_T
            if rev != 0:
                t = 0
            for b in range(B):
                for jv in range(hv):
                    adj(G, Cv, xs, gP, dc, dG, db, dwih, gP[tail + b * hv + jv], t, b, jv, B, hv, t + rev,
                        t + 1 - rev, ybs, yts, True)
            # step q: dh_t = dG_{tn} W_hh (tn the step after t in the direction), tiles of RB rows x NJ vectors
            # (past the edges repeated, used once), then the cell adjoints of t on the tile; q == T: dh0 only
            nq = T
            if need0 != 0:
                nq = T + 1
            for q in range(1, nq):
                tn = T - q
                t = T - 1 - q
                if rev != 0:
                    tn = q - 1
                    t = q
                for bt in range((B + RB - 1) // RB):
                    b0 = bt * RB
                    dr = (tn * B + b0) * H4  # row b0 + r of dG_tn: D<r>[dr + k] (past B: the rows after, unused)
                    for jt in range((hv + NJ - 1) // NJ):
                        j0 = jt * NJ
                        acc = [[ti.Vector([0.0] * L, dt=T_) for _j in ti.static(range(NJ))]
                               for _r in ti.static(range(RB))]
                        if ti.static(fma):  # the same sums with FMA (fma_tile.py): addresses in bytes
                            wa = [aw + ti.cast((j0 + j) * L * 4, ti.i64) for j in ti.static(range(NJ))]
                            da = [ad + ti.cast((dr + r * H4) * 4, ti.i64) for r in ti.static(range(RB))]
                            n4, sv = H4, hv  # locals: bitcode arguments are passed by reference
                            FT.call(L, RB, NJ, wa, da, n4, sv, [acc[r][j] for r in ti.static(range(RB))
                                                                for j in ti.static(range(NJ))])
                        else:
                            for kk in range(H4):
                                w = kk * hv + j0  # vectors j0 + j of row kk of W_hh: W<j>[w] (past hv: unused)
                                ws = [W0[w], W1[w], W2[w], W3[w]]
                                dk = dr + kk
                                xs4 = [D0[dk], D1[dk], D2[dk], D3[dk]]
                                for r in ti.static(range(RB)):
                                    for j in ti.static(range(NJ)):
                                        acc[r][j] += xs4[r] * ws[j]
                        if q == T:
                            for r in ti.static(range(RB)):
                                for j in ti.static(range(NJ)):
                                    if b0 + r < B and j0 + j < hv:
                                        DH[(b0 + r) * hv + j0 + j] = acc[r][j]
                        else:
                            for j in ti.static(range(NJ)):
                                if j0 + j < hv:
                                    adj_tile(G, Cv, xs, gP, dc, dG, db, dwih, acc[0][j], acc[1 % RB][j],
                                             acc[2 % RB][j], acc[3 % RB][j], t, b0, j0 + j, B, hv, t + rev,
                                             t + 1 - rev, ybs, yts)
    return k


FUSED_BWD = True  # False: the cell adjoints of a step as their own pass before its dh GEMM (_build_bwd)


def _gate_blocks(W, W4, H, L):
    """W4 (4, H/L, H, L) = W_hh (4H, H) by gate, then by vector of L units, then by input unit: the weights of one
    gate and one vector of units for input unit k are the vector W4[g][jv*H + k]."""
    W4[:4 * H * H].reshape(4, H // L, H, L)[:] = W[:4 * H * H].reshape(4, H // L, L, H).transpose(0, 1, 3, 2)


def _copy(src, dst, n):
    dst[:n] = src[:n]


def _copy_pad(src, dst, n, pad):
    dst[:n] = src[:n]
    dst[n:n + pad] = 0


def _launch(key, build, L, lanes_of, arrays, scalars):
    vk = V.cached(key, build, [L if v else 1 for v in lanes_of])
    ptrs = [C.address(a) for a in arrays]
    counts = [a.size // L if v else a.size for a, v in zip(arrays, lanes_of)]
    vk(arrays, ptrs, counts, scalars)


def forward(G, X, W_ih, bias, W_hh, Hs, Cs, P, T, B, I, H, reverse, ybs, yts, h0_zero, L):
    """The whole forward of one direction: ``Hs``/``Cs`` hold h0/c0 in their first slot (the last when
    ``reverse``); ``G`` the input projections unless I == 1 (then X and W_ih are read here). ``h0_zero``: h0 is
    all zeros (the first step skips its recurrent GEMM)."""
    from .rnn_seq import _empty
    NGH = 4 * H
    hv = H // L
    W4 = _empty(NGH * H, "float32")
    C.host_call(_gate_blocks, W_hh, W4, H, L)
    rank1 = I == 1
    if rank1:
        w = _empty(NGH, "float32")  # W_ih (4H, 1) aligned for the vectors
        C.host_call(_copy, W_ih, w, NGH)
        W_ih = w
    gates = [W4[g * H * H:(g + 1) * H * H] for g in range(4)]
    rows = [Hs[r * H:] for r in range(4)]  # h_prev's rows b0 + r at one index (Hs has 3 rows of padding)
    _launch(("lstm_host", "fwd", L, rank1, ESTRIN, _fma_ok(L, _tile(L))), lambda: _build_fwd(L, rank1), L,
            _FWD_VEC, [G, X, W_ih, bias, *gates, Hs, *rows, Cs, P], [T, B, hv, int(reverse), ybs // L, yts // L,
                                                                   T * B * hv, int(bool(h0_zero)), C.address(W4),
                                                                   C.address(Hs)])


def backward(gP, X, W_hh, G, Cs, dG, T, B, I, H, reverse, ybs, yts, need_h0, L):
    """The step loop of the backward: fills dG (T, B, 4H) and returns (dh0 or None, dc0, db, dW_ih or None)
    (host buffers; dh0 where ``need_h0``, dW_ih for I == 1 only)."""
    from .rnn_seq import _empty
    NGH, BH = 4 * H, B * H
    rank1 = I == 1
    W = _empty(NGH * H + 3 * L, "float32")  # 3 vectors of padding: the last row's partial tile reads past the end
    C.host_call(_copy_pad, W_hh, W, NGH * H, 3 * L)
    DH, dc = _empty(BH, "float32"), _empty(BH, "float32")
    db, dw = _empty(NGH, "float32"), _empty(NGH, "float32")
    hv = H // L
    scalars = [T, B, hv, int(reverse), ybs // L, yts // L, T * B * hv, int(bool(need_h0))]
    if FUSED_BWD:  # dG has 3 rows of padding (rnn_seq.backward)
        _launch(("lstm_host", "bwdf", L, rank1, ESTRIN, _fma_ok(L, _tile(L))), lambda: _build_bwd_fused(L, rank1),
                L, _BWDF_VEC, [G, Cs, X, gP, DH, dc, dG, *[dG[r * NGH:] for r in range(4)],
                               *[W[j * L:] for j in range(4)], db, dw], scalars + [C.address(W), C.address(dG)])
    else:
        _launch(("lstm_host", "bwd", L, rank1, ESTRIN), lambda: _build_bwd(L, rank1), L, _BWD_VEC,
                [G, Cs, X, gP, DH, dc, dG, dG, W, db, dw], scalars)
    return (DH[:BH] if need_h0 else None), dc[:BH], db[:NGH], (dw[:NGH] if rank1 else None)
