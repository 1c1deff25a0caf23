"""Convolution epilogue (Taichi; flat buffers in/out): the im2col GEMM's output rows (N*P, O) (P = Ho*Wo)
become the (N, O, P) image layout with the bias added, in one pass (instead of a bias kernel and a strided
transpose); the adjoint transposes the cotangent back and sums it per channel for the bias, in one pass.
With ``relu`` the forward also applies ReLU (conv -> ReLU in one epilogue) and the adjoint multiplies by its
step, read from the output (0 at 0 as PyTorch; NaN stays NaN).
"""
from . import _common as C


def _build_fwd(dtype, serial, relu=False):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(y: A, b: A, out: A, N: ti.i32, P: ti.i32, O: ti.i32):
        ti.loop_config(serialize=serial)
        for n in range(N):
            for o in range(O):
                bo = b[o]
                for p in range(P):
                    z = y[(n * P + p) * O + o] + bo
                    if ti.static(relu):   # max(z, 0) that keeps NaN
                        z = ti.select(z > 0, z, ti.select(z <= 0, ti.cast(0, T), z))
                    out[(n * O + o) * P + p] = z
    return k


def _build_bwd(dtype, serial, with_y, relu=False):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(g: A, out: A, gy: A, gb: A, N: ti.i32, P: ti.i32, O: ti.i32):
        ti.loop_config(serialize=serial)
        for o in range(O):
            s = g[0] * 0
            for n in range(N):
                for p in range(P):
                    v = g[(n * O + o) * P + p]
                    if ti.static(relu):   # g * step(out): 0 where out <= 0, NaN where out is NaN
                        yv = out[(n * O + o) * P + p]
                        v = ti.select(yv > 0, v, ti.select(yv <= 0, v * ti.cast(0, T), yv))
                    if ti.static(with_y):
                        gy[(n * P + p) * O + o] = v
                    s += v
            gb[o] = s
    return k


def conv_epilogue(y, b, out, N: int, P: int, O: int, dtype: str, relu: bool = False):
    """out (N, O, P) = y (N*P, O) transposed per sample, + b (O,) (then ReLU with ``relu``)."""
    serial = C.launch_mode(N * P * O, C.CHEAP) or N < 4
    C.cached(("conv_epi", dtype, serial, relu), lambda: _build_fwd(dtype, serial, relu))(y, b, out, N, P, O)


def conv_epilogue_vjp(g, gy, gb, N: int, P: int, O: int, dtype: str, out=None):
    """gy (N*P, O) = g (N, O, P) transposed back (skipped when gy is None); gb (O,) = sums of g per channel.
    ``out``: the forward's output when it applied ReLU (g is multiplied by its step first)."""
    serial = C.launch_mode(N * P * O, C.CHEAP) or O < 4
    with_y, relu = gy is not None, out is not None
    C.cached(("conv_epi_vjp", dtype, serial, with_y, relu), lambda: _build_bwd(dtype, serial, with_y, relu))(
        g, out if relu else g, gy if with_y else gb, gb, N, P, O)
