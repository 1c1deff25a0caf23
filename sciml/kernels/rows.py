"""Row-wise strided gather / scatter: the fast path of ``index.strided_gather`` for large views whose
innermost axis is a run of elements at a fixed stride (transposes, broadcasts, slices of big
batched tangents), and row-wise broadcast binaries (suffix, general, the product-rule pair sum).

The view (``[offset, rank, shape..., strides...]`` as in ``index``) is first simplified (size-1
axes dropped, mergeable neighbours merged); the last axis becomes an inner loop of ``inner``
elements, and the rows are walked in groups along the last outer axis (``_groups``), so the index
division chain runs once per group of rows, not once per row or element (it dominated rows of 16
elements: a (321, 64, 16) broadcast add 0.77 -> 0.24 ms, float32, one core). On CPU the vector
forms store whole vectors of the widest lanes that the addresses and row lengths allow (64-byte on
sciml's own buffers): broadcasts and slices copy vectors, transposes go by L x L register tiles
(0.74 -> 0.31 ms for that shape; numpy 0.26 ms), broadcast binaries read the stretched operand as one
element per vector. Same ti.funcs as the scalar kernels: the same bits (tests/test_rows_kernels.py,
tests/test_vec_elementwise.py).
"""
import math

from . import _common as C
from .. import backend

MIN_INNER = 8  # shorter inner runs: the per-element kernel is as good


def _serial(n):
    """Serialized when small (``_common.launch_mode``) or when the host's cores are all taken
    (``_common.busy()``: a parallel launch then waits for a descheduled thread). These kernels neither
    reduce nor reorder arithmetic, so both give the same bits (tests/test_determinism.py)."""
    return C.launch_mode(n) or C.busy()


def simplify(shape, strides):
    """Drop size-1 axes and merge axes d, d+1 when stride[d] == stride[d+1] * shape[d+1]."""
    sh, st = [], []
    for s, t in zip(shape, strides):
        if s == 1:
            continue
        if sh and st[-1] == t * s:
            sh[-1] *= s
            st[-1] = t
        else:
            sh.append(s)
            st.append(t)
    return sh, st


def gather(x, out, n: int, meta: tuple, dtype: str) -> bool:
    """out[i] = x[addr(i)] like ``index.strided_gather``; returns False (nothing done) when the
    view's inner run is too short for the row-wise kernel to pay off."""
    return _run(x, out, n, meta, dtype, False)


def scatter(g, out, n: int, meta: tuple, dtype: str) -> bool:
    """out[addr(i)] = g[i] like ``index.strided_scatter`` (distinct addresses); False = not done."""
    return _run(g, out, n, meta, dtype, True)


def _groups(outer, rows, serial):
    """(rows per group G, groups per block) for the blocked row loops: the parallel loop runs over
    groups of up to G consecutive rows of the last outer axis (``mid``), so the index division over
    the other outer axes happens once per group instead of once per row (a (321, 64, 16) transpose:
    one division chain per 64 rows). Serialized: one group per block; parallel: >= ~256 groups."""
    mid = outer[-1] if outer else 1
    G = mid if serial else max(1, min(mid, -(-rows // 256)))
    return G, -(-mid // G)


def _run(x, out, n, meta, dtype, scat):
    off, r = meta[0], meta[1]
    sh, st = simplify(meta[2:2 + r], meta[2 + r:2 + 2 * r])
    if not sh or sh[-1] < MIN_INNER:
        return False
    inner, s_in = sh[-1], st[-1]
    outer, ost = sh[:-1], st[:-1]
    rows = n // inner
    serial = _serial(n)
    G, nch = _groups(outer, rows, serial)
    groups = (rows // outer[-1] if outer else 1) * nch
    m = backend.meta((off, max(len(outer), 1), s_in, G, nch, *(outer or [1]), *(ost or [0])))
    if not scat and _gather_lanes(x, out, n, inner, s_in, off, outer, ost, m, groups, dtype, serial):
        return True
    k = C.cached(("rows_scatter" if scat else "rows_gather", dtype, serial), lambda: _build(dtype, serial, scat))
    k(x, out, groups, inner, m)
    return True


def _gather_lanes(x, out, n, inner, s_in, off, outer, ost, m, groups, dtype, serial):
    """The vector form of the gather (CPU, ``kernels/_vec.py``): output rows of inner/L vectors of the
    widest lanes that the output's address and the row length allow (64-byte vectors on sciml's own
    buffers); a source run with stride 1 and vector-aligned rows is read as vectors too (broadcasts,
    slices), else each vector is filled lane by lane (transposes). One store per vector: Taichi reloads
    the ndarray pointers after every store, so this also cuts the scalar path's per-element cost."""
    from . import _vec as V
    from . import elementwise as E
    if not (E.VECTOR and backend.on_host() and dtype in V.LANES and n >= E.VEC_MIN_N):
        return False
    if not _contiguous((x, out)):
        return False
    L = V.mem_lanes_for([C.address(out)], dtype)
    while L and inner % L:
        L //= 2
    if not L or L < V.LANES[dtype]:
        return False
    xv = s_in == 1 and not (off % L or any(t % L for t in ost))
    if not xv and ost and ost[-1] == 1 and not (s_in % L or outer[-1] % L or off % L or any(t % L for t in ost[:-1])) \
            and not C.address(x) % (L * x.itemsize):
        xv = "tile"  # a transpose: L x L tiles, L vector loads and L vector stores each
    if xv and C.address(x) % (L * x.itemsize):  # source vectors need the same alignment
        xv = False
    ptrs = [C.address(x), C.address(out), C.address(m)]
    if ptrs[0] & (x.itemsize - 1):
        return False
    k = V.cached(("rows_gather_lanes", dtype, serial, L, xv), lambda: _build_gather_lanes(dtype, serial, L, xv),
                 (L if xv else 1, L, 1))
    counts = (x.size // L if xv else x.size, n // L, m.size)
    iv = inner // L
    if xv == "tile":  # groups of L rows (the kernel walks each group's rows in tiles of L)
        groups = n // inner // L
    if k.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        k.fast(ptrs, counts, (groups, iv))
    else:
        k((x, out, m), ptrs, counts, (groups, iv))
    return True


def _build_gather_lanes(dtype, serial, L, xv):
    ti = C.ti()
    T = backend.ti_dtype(dtype)
    VT = ti.types.vector(L, T)
    VA, S, I = ti.types.ndarray(dtype=VT, ndim=1), C.arr(dtype), C.arr("int32")
    X = VA if xv else S

    if xv == "tile":
        return _build_tile(ti, VT, VA, I, serial, L)

    @ti.kernel
    def k(x: X, out: VA, meta: I, groups: ti.i32, iv: ti.i32):
        ti.loop_config(serialize=serial)
        for g in range(groups):
            r, s_in, G, nch = meta[1], meta[2], meta[3], meta[4]
            mid, ms = meta[5 + r - 1], meta[5 + 2 * r - 1]
            blk = g // nch
            i0 = (g - blk * nch) * G
            i1 = ti.min(i0 + G, mid)
            addr, rem = meta[0], blk
            for j in range(r - 1):
                d = r - 2 - j
                s = meta[5 + d]
                addr += (rem % s) * meta[5 + r + d]
                rem = rem // s
            for i in range(i0, i1):
                a = addr + i * ms
                ob = (blk * mid + i) * iv
                for q in range(iv):
                    if ti.static(xv):
                        out[ob + q] = x[a // L + q]
                    else:
                        b = a + q * L * s_in
                        v = VT(x[b])
                        for u in ti.static(range(1, L)):
                            v[u] = x[b + u * s_in]
                        out[ob + q] = v
    return k


def _build_tile(ti, VT, VA, I, serial, L):
    """Gather of a transpose-like view (consecutive output rows read consecutive source elements, the
    source stride along a row a multiple of L): each parallel iteration takes L output rows, and each
    L x L tile is L vector loads, a register transpose and L vector stores."""

    @ti.kernel
    def k(x: VA, out: VA, meta: I, groups: ti.i32, iv: ti.i32):
        ti.loop_config(serialize=serial)
        for g in range(groups):
            r, s_in = meta[1], meta[2]
            mid = meta[5 + r - 1]
            row = g * L
            blk = row // mid
            i0 = row - blk * mid
            addr, rem = meta[0], blk
            for j in range(r - 1):
                d = r - 2 - j
                s = meta[5 + d]
                addr += (rem % s) * meta[5 + r + d]
                rem = rem // s
            a = (addr + i0) // L
            sv = s_in // L
            for q in range(iv):
                src = [x[a + (q * L + u) * sv] for u in ti.static(range(L))]
                for w in ti.static(range(L)):
                    v = VT(src[0][w])
                    for u in ti.static(range(1, L)):
                        v[u] = src[u][w]
                    out[(row + w) * iv + q] = v
    return k


def _build(dtype, serial, scat):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")

    @ti.kernel
    def k(x: A, out: A, groups: ti.i32, inner: ti.i32, meta: I):
        ti.loop_config(serialize=serial)
        for g in range(groups):
            r, s_in, G, nch = meta[1], meta[2], meta[3], meta[4]
            mid, ms = meta[5 + r - 1], meta[5 + 2 * r - 1]
            blk = g // nch
            i0 = (g - blk * nch) * G
            i1 = ti.min(i0 + G, mid)
            addr, rem = meta[0], blk
            for j in range(r - 1):
                d = r - 2 - j
                s = meta[5 + d]
                addr += (rem % s) * meta[5 + r + d]
                rem = rem // s
            for i in range(i0, i1):
                a = addr + i * ms
                base = (blk * mid + i) * inner
                for q in range(inner):
                    if ti.static(scat):
                        out[a + q * s_in] = x[base + q]
                    else:
                        out[base + q] = x[a + q * s_in]
    return k


def suffix_binary(op: str, x, y, out, rows: int, inner: int, x_full: bool, dtype: str) -> bool:
    """out (rows, inner) = op(x, y) where one operand is (rows, inner) and the other (inner,) repeated
    per row (the 'ysuf'/'xsuf' broadcasts: a batched tangent times an unbatched primal, a bias add).
    One row per parallel iteration, no index modulo per element (0.68 -> 0.23 ms for 321 x 1024
    float32 here). ``op`` is any non-comparison op of ``elementwise.binary`` (the same ti.func, so
    the same numbers). Returns False when not applicable."""
    from .elementwise import COMPARE
    if op in COMPARE or inner < MIN_INNER:
        return False
    serial = _serial(rows * inner)
    if _suffix_lanes(op, x, y, out, rows, inner, x_full, dtype, serial):
        return True
    k = C.cached(("rows_binary", op, dtype, x_full, serial), lambda: _build_binary(op, dtype, x_full, serial))
    k(x, y, out, rows, inner)
    return True


def _contiguous(arrays):
    return all(a.flags.c_contiguous for a in arrays)  # sciml's buffers are; a strided view is not


def _suffix_lanes(op, x, y, out, rows, inner, x_full, dtype, serial):
    """The vector form of ``suffix_binary`` (CPU; ``kernels/_vec.py``): when ``inner`` is a multiple of
    the lanes and every buffer is aligned for them (then so is every row), rows of inner/lanes vectors,
    64-byte vectors where the addresses and ``inner`` allow (``_widest``), else 16-byte. Same ti.func,
    same numbers. False: not applicable."""
    from . import _vec as V
    from . import elementwise as E
    L = V.LANES.get(dtype)
    if not (E.VECTOR and L and op in E.VEC_BINARY and inner % L == 0 and rows * inner >= E.VEC_MIN_N
            and backend.on_host()):
        return False
    ptrs = V.pointers((x, y, out)) if _contiguous((x, y, out)) else None
    if ptrs is None:
        return False
    L = _widest(ptrs, inner, dtype)
    iv = inner // L
    small = rows * iv
    k = V.cached(("rows_binary_lanes", op, dtype, x_full, serial, L),
                 lambda: _build_binary_lanes(op, dtype, x_full, serial, L), L)
    counts = (small, iv, small) if x_full else (iv, small, small)
    if k.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        k.fast(ptrs, counts, (rows, iv))
    else:
        k((x, y, out), ptrs, counts, (rows, iv))
    return True


def _widest(ptrs, inner, dtype):
    """The widest lanes (64-byte vectors down to the 16-byte LANES) that every address in ``ptrs`` is
    aligned for and that divide the row length ``inner`` (then every row starts on a vector)."""
    from . import _vec as V
    L = V.mem_lanes_for(ptrs, dtype) or V.LANES[dtype]
    while L > V.LANES[dtype] and inner % L:
        L //= 2
    return L


def _build_binary_lanes(op, dtype, x_full, serial, L):
    from .elementwise import _binary_funcs
    ti = C.ti()
    VA = ti.types.ndarray(dtype=ti.types.vector(L, backend.ti_dtype(dtype)), ndim=1)
    f = _binary_funcs(dtype)[op]

    @ti.kernel
    def k(x: VA, y: VA, out: VA, rows: ti.i32, iv: ti.i32):
        ti.loop_config(serialize=serial)
        for row in range(rows):
            base = row * iv
            for q in range(iv):
                if ti.static(x_full):
                    out[base + q] = f(x[base + q], y[q])
                else:
                    out[base + q] = f(x[q], y[base + q])
    return k


def _build_binary(op, dtype, x_full, serial):
    from .elementwise import _binary_funcs
    ti = C.ti()
    A = C.arr(dtype)
    f = _binary_funcs(dtype)[op]

    @ti.kernel
    def k(x: A, y: A, out: A, rows: ti.i32, inner: ti.i32):
        ti.loop_config(serialize=serial)
        for row in range(rows):
            base = row * inner
            for q in range(inner):
                if ti.static(x_full):
                    out[base + q] = f(x[base + q], y[q])
                else:
                    out[base + q] = f(x[q], y[base + q])
    return k


def _bstrides(shape, out_shape):
    """Strides of a (right-aligned) broadcast operand over ``out_shape`` (0 on stretched axes)."""
    r = len(out_shape)
    s = (1,) * (r - len(shape)) + tuple(shape)
    st, acc = [0] * r, 1
    for d in range(r - 1, -1, -1):
        st[d] = 0 if s[d] == 1 else acc
        acc *= s[d]
    return st


def general_binary(op: str, x, y, out, xs, ys, outs, dtype: str) -> bool:
    """out = op(x, y) for a general broadcast (e.g. (B, m, n) + (B, 1, n)): the axes are merged where
    both operands allow, the last one becomes an inner loop (stride 0 or 1 per operand), and the
    index division happens once per group of rows (``_groups``). False when the inner run is too short."""
    from .elementwise import COMPARE
    if op in COMPARE:
        return False
    sx, sy = _bstrides(xs, outs), _bstrides(ys, outs)
    sh, ax, ay = [], [], []
    for s, a, b in zip(outs, sx, sy):
        if s == 1:
            continue
        if sh and ax[-1] == a * s and ay[-1] == b * s:
            sh[-1] *= s
            ax[-1], ay[-1] = a, b
        else:
            sh.append(s)
            ax.append(a)
            ay.append(b)
    if not sh or sh[-1] < MIN_INNER:
        return False
    inner = sh[-1]
    n = math.prod(outs)
    serial = _serial(n)
    outer = sh[:-1] or [1]
    ox, oy = ax[:-1] or [0], ay[:-1] or [0]
    rows = n // inner
    G, nch = _groups(outer, rows, serial)
    groups = rows // outer[-1] * nch
    meta = backend.meta((len(outer), ax[-1], ay[-1], G, nch, *outer, *ox, *oy))
    if _general_lanes(op, x, y, out, n, inner, ax[-1], ay[-1], ox, oy, meta, groups, dtype, serial):
        return True
    k = C.cached(("rows_gbinary", op, dtype, serial), lambda: _build_general(op, dtype, serial))
    k(x, y, out, groups, inner, meta)
    return True


def _general_lanes(op, x, y, out, n, inner, sx, sy, ox, oy, meta, groups, dtype, serial):
    """Vector form of ``general_binary`` (CPU, ``kernels/_vec.py``): rows of inner/L vectors of the widest
    lanes that the buffers' addresses, the row length and the vector operands' row offsets allow (64-byte
    vectors on sciml's own buffers, else 16-byte); an operand that runs along the inner axis (stride 1) is
    read as vectors, one constant along it (stride 0) as one element broadcast to a vector. Same ti.func,
    same numbers."""
    from . import _vec as V
    from . import elementwise as E
    vx, vy = sx == 1, sy == 1
    if not (E.VECTOR and dtype in V.LANES and op in E.VEC_BINARY and (vx or vy) and n >= E.VEC_MIN_N
            and backend.on_host() and _contiguous((x, y, out))):
        return False
    vec = [a for a, v in ((x, vx), (y, vy), (out, True)) if v]
    L = V.mem_lanes_for([C.address(a) for a in vec], dtype)
    strides = [*(ox if vx else ()), *(oy if vy else ())]
    while L and (inner % L or any(t % L for t in strides)):
        L //= 2
    if not L or L < V.LANES[dtype]:
        return False
    ptrs = [C.address(a) for a in (x, y, out, meta)]
    if any(p & (x.itemsize - 1) for p in ptrs[:3]):
        return False
    k = V.cached(("rows_gbinary_lanes", op, dtype, serial, vx, vy, L),
                 lambda: _build_general_lanes(op, dtype, serial, vx, vy, L), (L if vx else 1, L if vy else 1, L, 1))
    counts = (x.size // L if vx else x.size, y.size // L if vy else y.size, n // L, meta.size)
    if k.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        k.fast(ptrs, counts, (groups, inner // L))
    else:
        k((x, y, out, meta), ptrs, counts, (groups, inner // L))
    return True


def _build_general_lanes(op, dtype, serial, vx, vy, L):
    from .elementwise import _binary_funcs
    ti = C.ti()
    T = backend.ti_dtype(dtype)
    VT = ti.types.vector(L, T)
    VA, S, I = ti.types.ndarray(dtype=VT, ndim=1), C.arr(dtype), C.arr("int32")
    AX, AY = (VA if vx else S), (VA if vy else S)
    f = _binary_funcs(dtype)[op]

    @ti.kernel
    def k(x: AX, y: AY, out: VA, meta: I, groups: ti.i32, iv: ti.i32):
        ti.loop_config(serialize=serial)
        for g in range(groups):
            r, G, nch = meta[0], meta[3], meta[4]
            mid, mx, my = meta[5 + r - 1], meta[5 + 2 * r - 1], meta[5 + 3 * r - 1]
            blk = g // nch
            i0 = (g - blk * nch) * G
            i1 = ti.min(i0 + G, mid)
            rem, bx, by = blk, 0, 0
            for j in range(r - 1):
                d = r - 2 - j
                s = meta[5 + d]
                idx = rem % s
                rem = rem // s
                bx += idx * meta[5 + r + d]
                by += idx * meta[5 + 2 * r + d]
            for i in range(i0, i1):
                ox, oy = bx + i * mx, by + i * my
                base = (blk * mid + i) * iv
                if ti.static(vx and vy):
                    for q in range(iv):
                        out[base + q] = f(x[ox // L + q], y[oy // L + q])
                elif ti.static(vx):  # (the element is loaded per vector, as elementwise's broadcast kernels
                    for q in range(iv):  # do: a hoisted one lets fast math reassociate a * b * (1 - b))
                        out[base + q] = f(x[ox // L + q], VT(y[oy]))
                else:
                    for q in range(iv):
                        out[base + q] = f(VT(x[ox]), y[oy // L + q])
    return k


def _build_general(op, dtype, serial):
    from .elementwise import _binary_funcs
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")
    f = _binary_funcs(dtype)[op]

    @ti.kernel
    def k(x: A, y: A, out: A, groups: ti.i32, inner: ti.i32, meta: I):
        ti.loop_config(serialize=serial)
        for g in range(groups):
            r, six, siy, G, nch = meta[0], meta[1], meta[2], meta[3], meta[4]
            mid, mx, my = meta[5 + r - 1], meta[5 + 2 * r - 1], meta[5 + 3 * r - 1]
            blk = g // nch
            i0 = (g - blk * nch) * G
            i1 = ti.min(i0 + G, mid)
            rem, bx, by = blk, 0, 0
            for j in range(r - 1):
                d = r - 2 - j
                s = meta[5 + d]
                idx = rem % s
                rem = rem // s
                bx += idx * meta[5 + r + d]
                by += idx * meta[5 + 2 * r + d]
            for i in range(i0, i1):
                ox, oy = bx + i * mx, by + i * my
                base = (blk * mid + i) * inner
                for q in range(inner):
                    out[base + q] = f(x[ox + q * six], y[oy + q * siy])
    return k


def pair_sum(op1: str, op2: str, a, p, q, c, out, rows: int, inner: int, dtype: str):
    """out (rows, inner) = op1(a, p) + op2(q, c) with a, c of shape (rows, inner) and p, q of shape
    (inner,): a product rule ``t_x * y + x * t_y`` of batched tangents in one pass instead of three."""
    serial = _serial(rows * inner)
    from . import _vec as V
    from . import elementwise as E
    L = V.LANES.get(dtype)
    if (E.VECTOR and L and op1 in E.VEC_BINARY and op2 in E.VEC_BINARY and inner % L == 0
            and rows * inner >= E.VEC_MIN_N and backend.on_host()):
        ptrs = V.pointers((a, p, q, c, out)) if _contiguous((a, p, q, c, out)) else None
        if ptrs is not None:  # vector form (kernels/_vec.py): every row aligned, same ti.funcs
            L = _widest(ptrs, inner, dtype)
            iv = inner // L
            full = rows * iv
            k = V.cached(("rows_pair_lanes", op1, op2, dtype, serial, L),
                         lambda: _build_pair(op1, op2, dtype, serial, L), L)
            if k.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
                k.fast(ptrs, (full, iv, iv, full, full), (rows, iv))
            else:
                k((a, p, q, c, out), ptrs, (full, iv, iv, full, full), (rows, iv))
            return
    k = C.cached(("rows_pair", op1, op2, dtype, serial), lambda: _build_pair(op1, op2, dtype, serial))
    k(a, p, q, c, out, rows, inner)


def _build_pair(op1, op2, dtype, serial, lanes=1):
    from .elementwise import _binary_funcs
    ti = C.ti()
    A = C.arr(dtype) if lanes == 1 else ti.types.ndarray(dtype=ti.types.vector(lanes, backend.ti_dtype(dtype)), ndim=1)
    f1, f2 = _binary_funcs(dtype)[op1], _binary_funcs(dtype)[op2]

    @ti.kernel
    def k(a: A, p: A, q: A, c: A, out: A, rows: ti.i32, inner: ti.i32):
        ti.loop_config(serialize=serial)
        for row in range(rows):
            base = row * inner
            for j in range(inner):
                out[base + j] = f1(a[base + j], p[j]) + f2(q[j], c[base + j])
    return k
