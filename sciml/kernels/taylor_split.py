"""The order-2 Taylor forward kernel with one output buffer per stream (``taylor.layer_forward`` with
``top = (W_out, b_out, [OUT_0, .., OUT_{S-1}], o)``).

The fused PINN path on devices (``pinn/fused.py``) hands each stream of the network's output to the
loss as its own Tensor; with the stacked output it took one copy kernel per stream. This kernel is
``taylor._build_fwd`` with the fused output layer writing stream ``st`` into ``O<st>``: the same
arithmetic in the same order (the same bits). Up to ``SPLIT_MAX`` streams (unused outputs are bound
to ``O0`` and never written).
"""
from . import _common as C
from .. import backend

SPLIT_MAX = 6   # streams of a per-stream-output forward kernel at most (value, 2 first, 3 second derivatives)


def build_fwd_split(act, dtype, first, o, serial, coords, pairs):
    """``_build_fwd`` with the fused output layer writing stream st into its own buffer ``O<st>`` (the
    same arithmetic in the same order: the same bits)."""
    from .taylor import _hidden_row
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    n1, n2 = len(coords), len(pairs)
    S = 1 + n1 + n2
    hidden_row = _hidden_row(act, dtype, first, coords, pairs)

    @ti.func
    def put(O0: ti.template(), O1: ti.template(), O2: ti.template(), O3: ti.template(), O4: ti.template(),
            O5: ti.template(), st: ti.template(), i, v):
        if ti.static(st == 0):
            O0[i] = v
        if ti.static(st == 1):
            O1[i] = v
        if ti.static(st == 2):
            O2[i] = v
        if ti.static(st == 3):
            O3[i] = v
        if ti.static(st == 4):
            O4[i] = v
        if ti.static(st == 5):
            O5[i] = v

    @ti.kernel
    def k(Z: A, b: A, W: A, H: A, WL: A, bL: A, O0: A, O1: A, O2: A, O3: A, O4: A, O5: A, n: ti.i32, w: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(n):
            nw = n * w
            hidden_row(Z, b, W, H, r, nw, w)
            for kk in ti.static(range(o)):   # the output layer (``_out_layer``), one buffer per stream
                acc = ti.Vector.zero(T, S)
                for j in range(w):
                    wl = WL[j * o + kk]
                    for st in ti.static(range(S)):
                        acc[st] += H[st * nw + r * w + j] * wl
                for st in ti.static(range(S)):
                    v = acc[st]
                    if ti.static(st == 0):
                        v += bL[kk]
                    put(O0, O1, O2, O3, O4, O5, st, r * o + kk, v)
    return k


__all__ = ["SPLIT_MAX", "build_fwd_split"]
