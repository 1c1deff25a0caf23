"""Sorting and arg-reductions over the rows of a (rows, n) buffer: stable argsort (bottom-up merge
sort, one invocation per row), argmax / argmin (first occurrence; NaN counts as the extreme, as numpy),
and inclusive scans (cumsum / cumprod, forward or reversed).

NaN sorts last (numpy's order). Rows are independent: parallel over rows, serial within a row
(O(n log n) per row), which suits many rows or moderate n; one huge row runs on one thread.
"""
from . import _common as C
from .. import backend


def argsort(x, idx, rows: int, n: int, dtype: str):
    """idx[r, :] = a stable ordering of x[r, :] (ascending, NaN last); int32."""
    scratch = backend.empty(2 * rows * n, "int32")
    k = C.cached(("argsort", dtype), lambda: _build_argsort(dtype))
    k(x, idx, scratch, rows, n)


def argext(x, idx, rows: int, n: int, is_max: bool, dtype: str):
    """idx[r] = index of the first max (min) of x[r, :]; the first NaN if any."""
    k = C.cached(("argext", dtype, is_max), lambda: _build_argext(dtype, is_max))
    k(x, idx, rows, n)


def scan(op: str, x, out, rows: int, n: int, reverse: bool, dtype: str):
    """out[r, j] = op-accumulation of x[r, :j+1] (or x[r, j:] when reverse); op in 'sum', 'prod'."""
    serial = C.launch_mode(rows * n, 2)
    k = C.cached(("scan", op, dtype, serial), lambda: _build_scan(op, dtype, serial))
    k(x, out, rows, n, int(reverse))


def _isnan(ti, dtype):
    """NaN test on the bits (Taichi's fast math folds ``v != v`` to False)."""
    @ti.func
    def isnan(v):
        r = False
        if ti.static(dtype == "float32"):
            r = (ti.bit_cast(v, ti.i32) & 0x7FFFFFFF) > 0x7F800000
        elif ti.static(dtype == "float64"):
            r = (ti.bit_cast(v, ti.i64) & ti.i64(0x7FFFFFFFFFFFFFFF)) > ti.i64(0x7FF0000000000000)
        return r
    return isnan


def _build_argsort(dtype):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")
    isnan = _isnan(ti, dtype)

    @ti.func
    def before(a, b, ia, ib):
        """a (at index ia) sorts strictly before b (at ib): ascending, NaN last, ties by index."""
        na, nb = isnan(a), isnan(b)
        r = False
        if na and nb:
            r = ia < ib
        elif na:
            r = False
        elif nb:
            r = True
        else:
            r = a < b or (a == b and ia < ib)
        return r

    @ti.kernel
    def k(x: A, idx: I, w: I, rows: ti.i32, n: ti.i32):
        for r in range(rows):
            base = r * n
            off = rows * n  # the second half of w
            for i in range(n):
                w[base + i] = i
            src = 0
            dst = off
            width = 1
            while width < n:
                lo = 0
                while lo < n:
                    mid = ti.min(lo + width, n)
                    hi = ti.min(lo + 2 * width, n)
                    i = lo
                    j = mid
                    for o in range(lo, hi):
                        take_left = False
                        if i < mid and j < hi:
                            a = w[src + base + i]
                            b = w[src + base + j]
                            take_left = not before(x[base + b], x[base + a], b, a)
                        elif i < mid:
                            take_left = True
                        if take_left:
                            w[dst + base + o] = w[src + base + i]
                            i += 1
                        else:
                            w[dst + base + o] = w[src + base + j]
                            j += 1
                    lo += 2 * width
                tmp = src
                src = dst
                dst = tmp
                width *= 2
            for i in range(n):
                idx[base + i] = w[src + base + i]
    return k


def _build_argext(dtype, is_max):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")
    isnan = _isnan(ti, dtype)

    @ti.kernel
    def k(x: A, idx: I, rows: ti.i32, n: ti.i32):
        for r in range(rows):
            base = r * n
            best = x[base]
            bi = 0
            found_nan = isnan(best)
            for j in range(1, n):
                v = x[base + j]
                if not found_nan:
                    if isnan(v):
                        found_nan = True
                        bi = j
                    elif (v > best) if ti.static(is_max) else (v < best):
                        best = v
                        bi = j
            idx[r] = bi
    return k


def _build_scan(op, dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, out: A, rows: ti.i32, n: ti.i32, reverse: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(rows):
            base = r * n
            acc = ti.cast(0 if ti.static(op == "sum") else 1, T)
            for jj in range(n):
                j = jj if reverse == 0 else n - 1 - jj
                if ti.static(op == "sum"):
                    acc += x[base + j]
                else:
                    acc *= x[base + j]
                out[base + j] = acc
    return k
