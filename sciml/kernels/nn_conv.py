"""Convolution epilogue (Taichi; flat buffers in/out): the im2col GEMM's output rows (N*P, O) (P = Ho*Wo)
become the (N, O, P) image layout with the bias added, in one pass (instead of a bias kernel and a strided
transpose); the adjoint transposes the cotangent back and sums it per channel for the bias, in one pass.
"""
from . import _common as C


def _build_fwd(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def k(y: A, b: A, out: A, N: ti.i32, P: ti.i32, O: ti.i32):
        ti.loop_config(serialize=serial)
        for n in range(N):
            for o in range(O):
                bo = b[o]
                for p in range(P):
                    out[(n * O + o) * P + p] = y[(n * P + p) * O + o] + bo
    return k


def _build_bwd(dtype, serial, with_y):
    ti = C.ti()
    A = C.arr(dtype)

    @ti.kernel
    def k(g: A, gy: A, gb: A, N: ti.i32, P: ti.i32, O: ti.i32):
        ti.loop_config(serialize=serial)
        for o in range(O):
            s = g[0] * 0
            for n in range(N):
                for p in range(P):
                    v = g[(n * O + o) * P + p]
                    if ti.static(with_y):
                        gy[(n * P + p) * O + o] = v
                    s += v
            gb[o] = s
    return k


def conv_epilogue(y, b, out, N: int, P: int, O: int, dtype: str):
    """out (N, O, P) = y (N*P, O) transposed per sample, + b (O,)."""
    serial = C.launch_mode(N * P * O, C.CHEAP) or N < 4
    C.cached(("conv_epi", dtype, serial), lambda: _build_fwd(dtype, serial))(y, b, out, N, P, O)


def conv_epilogue_vjp(g, gy, gb, N: int, P: int, O: int, dtype: str):
    """gy (N*P, O) = g (N, O, P) transposed back (skipped when gy is None); gb (O,) = sums of g per channel."""
    serial = C.launch_mode(N * P * O, C.CHEAP) or O < 4
    with_y = gy is not None
    C.cached(("conv_epi_vjp", dtype, serial, with_y), lambda: _build_bwd(dtype, serial, with_y))(
        g, gy if with_y else gb, gb, N, P, O)
