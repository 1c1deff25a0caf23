"""Reductions over one axis of a contiguous buffer viewed as (outer, r, inner)."""
import math

from . import _common as C
from . import _warm as W

CHUNKS = 256


def _combine(op):
    ti = C.ti()

    @ti.func
    def add(a, b):
        return a + b

    # NaN propagates (numpy's max/min): ti.max/ti.min would return the other operand; when neither ordered
    # compare holds, one of a, b is NaN and so is a + b
    @ti.func
    def mx(a, b):
        return ti.select(a < b, b, ti.select(a >= b, a, a + b))

    @ti.func
    def mn(a, b):
        return ti.select(a > b, b, ti.select(a <= b, a, a + b))

    return {"sum": add, "max": mx, "min": mn}[op]


def _init(op, dtype):
    big = 3.4e38 if dtype == "float32" else 1.7e308
    return {"sum": 0.0, "max": -big * 10, "min": big * 10}[op]  # *10 -> +-inf


MAX_SEQ = 8192  # longest sequential inner loop: longer reductions go through partials first


def reduce(op: str, x, out, outer: int, r: int, inner: int, dtype: str):
    """out[a, b] = op_j x[a, j, b] for the contiguous view (outer, r, inner).

    Long reductions run in two passes (partials over chunks of the reduced axis, then the
    partials): this gives the CPU parallel work when there are few outputs, and keeps every
    sequential loop short on Vulkan, where loops past 65535 iterations were measured to stop
    early (lavapipe; wrong sums, no error).
    """
    nout = outer * inner
    host = C.backend.on_host()
    if op == "sum" and host and inner == 1 and outer == 1 and r >= SUM_WIDE_MIN and _sum_flat(x, out, r, dtype):
        return
    if (r > MAX_SEQ and not host) or (r >= C.SERIAL_BELOW and nout < 64 and host):
        from .. import backend
        nch = min(CHUNKS, -(-r // 1024)) if C.backend.on_host() else -(-r // 2048)
        chunk = -(-r // nch)
        nch = -(-r // chunk)
        part = backend.empty(outer * nch * inner, dtype)
        k = C.cached(("reduce_chunks", op, dtype), lambda: _build_chunks(op, dtype))
        k(x, part, outer, r, inner, chunk, nch)
        return reduce(op, part, out, outer, nch, inner, dtype)
    serial = C.launch_mode(nout * max(r, 1), C.CHEAP) or (nout < 4 and host)  # never on devices
    if op == "sum" and host and r > 1 and _sum_lanes(x, out, outer, r, inner, dtype, serial):
        return
    contig = inner == 1  # rows: a unit-stride inner loop the compiler can unroll
    k = C.cached(("reduce", op, dtype, serial, contig), lambda: _build(op, dtype, serial, contig))
    k(x, out, outer, r, inner)


def _build(op, dtype, serial, contig=False):
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
            if ti.static(contig):
                for j in range(r):
                    acc = f(acc, x[base + j])
            else:
                for j in range(r):
                    acc = f(acc, x[base + j * inner])
            out[o] = acc
    return k


def _sum_lanes(x, out, outer, r, inner, dtype, serial):
    """Sums over a strided axis (e.g. a bias gradient's column sums) on 16-byte vectors of ``inner``
    (CPU, ``kernels/_vec.py``): when ``inner`` is a multiple of the lanes and both buffers are aligned,
    each iteration sums ``lanes`` adjacent outputs, in the same order (0 + x[0] + x[1] + ...) as the
    scalar kernel: the same bits. False: not applicable (switch: ``elementwise.VECTOR``)."""
    from . import _vec as V
    from . import elementwise as E
    L = V.LANES.get(dtype)
    if not (E.VECTOR and L and inner % L == 0 and outer * inner * r >= E.VEC_MIN_N
            and x.flags.c_contiguous and out.flags.c_contiguous):
        return False
    ptrs = V.pointers((x, out))
    if ptrs is None:
        return False
    iv = inner // L
    k = V.cached(("reduce_sum_lanes", dtype, serial), lambda: _build_sum_lanes(dtype, serial), L)
    counts = (outer * r * iv, outer * iv)
    if k.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        k.fast(ptrs, counts, (outer, r, iv))
    else:
        k((x, out), ptrs, counts, (outer, r, iv))
    return True


def _build_sum_lanes(dtype, serial):
    from . import _vec as V
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    VT = ti.types.vector(V.LANES[dtype], T)
    VA = ti.types.ndarray(dtype=VT, ndim=1)

    @ti.kernel
    def k(x: VA, out: VA, outer: ti.i32, r: ti.i32, iv: ti.i32):
        ti.loop_config(serialize=serial)
        for o in range(outer * iv):
            a = o // iv
            b = o % iv
            base = a * r * iv + b
            acc = VT(ti.cast(0, T))
            for j in range(r):
                acc = acc + x[base + j * iv]
            out[o] = acc
    return k


SUM_WIDE_MIN = 1 << 12  # elements from which a whole-buffer sum runs on vector lanes
SUM_CHUNK = 1 << 14  # elements per partial sum of a parallel whole-buffer sum (fixed: same bits at any load)


def _sum_flat(x, out, r, dtype):
    """The sum of a whole contiguous buffer on the widest vector lanes its alignment allows (CPU,
    ``kernels/_vec.py``): four vector accumulators per chunk (independent adds), the lanes summed at
    the chunk's end, the r % lanes tail added by the last chunk; chunks of SUM_CHUNK elements (in parallel
    unless small or the host is busy), then the partials summed in order by a second task of the same
    launch.
    False: not applicable (misaligned, or switched off: ``elementwise.VECTOR``)."""
    from . import _vec as V
    from . import elementwise as E
    if not (E.VECTOR and dtype in V.LANES and x.flags.c_contiguous):
        return False
    px = C.address(x)
    L = V.lanes_for((px,), dtype)
    # The lane count sets the order of the additions, so it must not depend on where malloc put the buffer:
    # only the host's full width, on buffers large enough that sciml allocated them 64-byte aligned
    # (backend.ALIGN_MIN_BYTES); anything else takes the chunked path. (Alignment luck made two identical
    # float32 PINN runs in one process differ in the 7th digit.)
    if L is None or L != V.wide(dtype) or r * x.itemsize < C.backend.ALIGN_MIN_BYTES:
        return False
    m = r // L
    if not m:
        return False
    big = not C.launch_mode(r, C.CHEAP)
    serial = not big or C.busy() or W.cold()  # a lone large sum: serialized unless the pool is warm (kernels/_warm.py)
    nch = -(-r // SUM_CHUNK)  # by size only: the same bits serial or parallel
    chunk = -(-m // nch)
    nch = -(-m // chunk)
    part = C.backend.empty(nch, dtype)
    k = V.cached(("reduce_sum_flat", dtype, serial, L), lambda: _build_sum_flat(dtype, serial, L), (L, 1, 1, 1))
    ptrs, counts, scal = (px, px, C.address(part), C.address(out)), (m, r, nch, 1), (m, r, chunk, nch)
    if k.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        k.fast(ptrs, counts, scal)
    else:
        k((x, x, part, out), ptrs, counts, scal)
    if big:
        W.done(not serial)
    return True


def _build_sum_flat(dtype, serial, L):
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    VT = ti.types.vector(L, T)
    VA, S = ti.types.ndarray(dtype=VT, ndim=1), C.arr(dtype)

    @ti.kernel
    def k(xv: VA, xs: S, part: S, out: S, m: ti.i32, r: ti.i32, chunk: ti.i32, nch: ti.i32):
        ti.loop_config(serialize=serial)
        for c in range(nch):
            lo = c * chunk
            hi = ti.min(lo + chunk, m)
            z = ti.cast(0, T)
            a0, a1, a2, a3 = VT(z), VT(z), VT(z), VT(z)
            j = lo
            while j + 4 <= hi:
                a0 = a0 + xv[j]
                a1 = a1 + xv[j + 1]
                a2 = a2 + xv[j + 2]
                a3 = a3 + xv[j + 3]
                j += 4
            while j < hi:
                a0 = a0 + xv[j]
                j += 1
            a = (a0 + a1) + (a2 + a3)
            t = z
            for u in ti.static(range(L)):
                t += a[u]
            if c == nch - 1:
                for i in range(m * L, r):
                    t += xs[i]
            part[c] = t
        ti.loop_config(serialize=True)  # on the launching thread
        for _ in range(1):  # a second task of the same launch: the partials in order
            acc = ti.cast(0, T)
            for c in range(nch):
                acc += part[c]
            out[0] = acc
    return k


def _build_chunks(op, dtype):
    ti = C.ti()
    f, A, init = _combine(op), C.arr(dtype), _init(op, dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, part: A, outer: ti.i32, r: ti.i32, inner: ti.i32, chunk: ti.i32, nch: ti.i32):
        for t in range(outer * nch * inner):
            a = t // (nch * inner)
            rem = t % (nch * inner)
            c = rem // inner
            b = rem % inner
            lo = c * chunk
            hi = ti.min(lo + chunk, r)
            base = a * r * inner + b
            acc = ti.cast(init, T)
            for j in range(lo, hi):
                acc = f(acc, x[base + j * inner])
            part[t] = acc
    return k


def reduce_shape(shape, axis):
    """(outer, r, inner) for reducing ``shape`` over the single ``axis``."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
