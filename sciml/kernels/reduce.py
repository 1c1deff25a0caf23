"""Reductions over one axis of a contiguous buffer viewed as (outer, r, inner)."""
import math

from . import _common as C

CHUNKS = 256


def _combine(op):
    ti = C.ti()

    @ti.func
    def add(a, b):
        return a + b

    @ti.func
    def mx(a, b):
        return ti.max(a, b)

    @ti.func
    def mn(a, b):
        return ti.min(a, b)

    return {"sum": add, "max": mx, "min": mn}[op]


def _init(op, dtype):
    big = 3.4e38 if dtype == "float32" else 1.7e308
    return {"sum": 0.0, "max": -big * 10, "min": big * 10}[op]  # *10 -> +-inf


def reduce(op: str, x, out, outer: int, r: int, inner: int, dtype: str):
    """out[a, b] = op_j x[a, j, b] for the contiguous view (outer, r, inner)."""
    nout = outer * inner
    if nout == 1 and r >= C.SERIAL_BELOW and C.backend.on_host():
        from .. import backend
        part = backend.empty(CHUNKS, dtype)
        chunk = -(-r // CHUNKS)
        k = C.cached(("reduce_chunks", op, dtype), lambda: _build_chunks(op, dtype))
        k(x, part, r, chunk)
        x, r = part, CHUNKS
    serial = C.launch_mode(nout * max(r, 1)) or nout < 4
    k = C.cached(("reduce", op, dtype, serial), lambda: _build(op, dtype, serial))
    k(x, out, outer, r, inner)


def _build(op, dtype, serial):
    ti = C.ti()
    f, A, init = _combine(op), C.arr(dtype), _init(op, dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, out: A, outer: ti.i32, r: ti.i32, inner: ti.i32):
        ti.loop_config(serialize=serial)
        for o in range(outer * inner):
            a = o // inner
            b = o % inner
            base = a * r * inner + b
            acc = ti.cast(init, T)
            for j in range(r):
                acc = f(acc, x[base + j * inner])
            out[o] = acc
    return k


def _build_chunks(op, dtype):
    ti = C.ti()
    f, A, init = _combine(op), C.arr(dtype), _init(op, dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, part: A, n: ti.i32, chunk: ti.i32):
        for c in range(part.shape[0]):
            acc = ti.cast(init, T)
            lo = c * chunk
            hi = ti.min(lo + chunk, n)
            for j in range(lo, hi):
                acc = f(acc, x[j])
            part[c] = acc
    return k


def reduce_shape(shape, axis):
    """(outer, r, inner) for reducing ``shape`` over the single ``axis``."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
