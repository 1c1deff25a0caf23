"""Index kernels: strided gather/scatter (slices, transposes, broadcasts) and row gather/scatter-add.

A strided view is described by metadata ``[offset, rank, shape..., strides...]``: output
element i (row-major over ``shape``) reads input element ``offset + sum_d idx_d * strides_d``.
Stride 0 broadcasts; negative strides reverse.
"""
import math

from . import _common as C
from .. import backend


def strided_gather(x, out, n: int, meta: tuple, dtype: str):
    """out[i] = x[addr(i)] for the strided view ``meta``."""
    serial = C.launch_mode(n, 2)  # an index division per axis
    k = C.cached(("sgather", dtype, serial), lambda: _build_strided(dtype, serial, scatter=False))
    k(x, out, n, backend.meta(meta))


def strided_scatter(g, out, n: int, meta: tuple, dtype: str):
    """out[addr(i)] = g[i]; addresses must be distinct (basic slices). ``out`` is pre-filled."""
    serial = C.launch_mode(n, 2)
    k = C.cached(("sscatter", dtype, serial), lambda: _build_strided(dtype, serial, scatter=True))
    k(g, out, n, backend.meta(meta))


def _build_strided(dtype, serial, scatter):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")

    @ti.kernel
    def k(x: A, out: A, n: ti.i32, meta: I):
        ti.loop_config(serialize=serial)
        for i in range(n):
            r = meta[1]
            rem, addr = i, meta[0]
            for j in range(r):
                d = r - 1 - j
                s = meta[2 + d]
                idx = rem % s
                rem = rem // s
                addr += idx * meta[2 + r + d]
            if ti.static(scatter):
                out[addr] = x[i]
            else:
                out[i] = x[addr]
    return k


def take_rows(x, idx, out, nidx: int, row: int, nrows: int, dtype: str):
    """out[i, :] = x[idx[i], :] (negative indices count from the end; range checked by the caller on the host
    where it can read the indices, else clamped into range)."""
    n = nidx * row
    serial = C.launch_mode(n, C.CHEAP)
    k = C.cached(("take", dtype, serial), lambda: _build_take(dtype, serial, add=False))
    k(x, idx, out, n, row, nrows)


def scatter_add_rows(g, idx, out, nidx: int, row: int, nrows: int, dtype: str):
    """out[idx[i], :] += g[i, :] (``out`` pre-zeroed; out-of-range rows are dropped).

    On the CPU always one thread, in index order, so that a repeated row's sum has the same bits on
    every run (a parallel loop's atomic adds arrive in the threads' order). The serial loop is also the
    faster here: 1M float32 elements into 1,000 / 50,000 rows of 16, 7.2 / 12.5 ms against 12.1 / 18.2 ms
    for the parallel atomic one (2 vCPUs, load 2; the float32 atomic add is a compare-exchange loop).
    On devices the adds are atomic: a repeated row's sum may differ in its last bits between runs,
    as PyTorch's ``index_add_`` on CUDA (tests/repeat_check.py has the row; equal on an H200 so far)."""
    n = nidx * row
    serial = backend.on_host()
    k = C.cached(("scatter_add", dtype, serial), lambda: _build_take(dtype, serial, add=True))
    k(g, idx, out, n, row, nrows)


def _build_take(dtype, serial, add):
    ti = C.ti()
    A, I = C.arr(dtype), C.arr("int32")

    @ti.kernel
    def k(x: A, idx: I, out: A, n: ti.i32, row: ti.i32, nrows: ti.i32):
        ti.loop_config(serialize=serial)
        for t in range(n):
            i = t // row
            j = t % row
            r = idx[i]
            if r < 0:
                r += nrows
            if ti.static(add):
                if 0 <= r < nrows:  # out of range: dropped (callers check on the host when they can)
                    ti.atomic_add(out[r * row + j], x[t])
            else:
                r = ti.min(ti.max(r, 0), nrows - 1)  # out of range: clamped, as JAX (never a wild read)
                out[t] = x[r * row + j]
    return k


def view_meta(offset: int, shape, strides) -> tuple:
    return (int(offset), len(shape), *map(int, shape), *map(int, strides))


def contiguous_strides(shape):
    strides, acc = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        acc *= shape[d]
    return strides


def numel(shape) -> int:
    return math.prod(shape)
