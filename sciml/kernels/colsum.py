"""Column sums as a reduction kernel (the device path of bias gradients and 1-row / 1-column GEMMs).

out[b, j] (+)= sum_r w[b, r] * x[b, r, j] over the ``rows`` of a strided (batch, rows, cols) view of
a flat buffer, with optional weights ``w`` (contiguous per batch, batch stride ``w_batch``). A
bias gradient is the plain column sum of a (points, width) block; a GEMM with one output row,
``ones @ G`` or ``v @ B``, is the weighted one, and one with one output column, ``A @ v``, is the
weighted column sum of ``A^T`` (read through strides, no transpose copy).

One thread per (batch, row chunk, column): on a GPU adjacent threads read adjacent columns of a
row (coalesced when ``col_stride`` is 1), and ``rows`` is split into chunks so that there are at
least ``TARGET_THREADS`` threads (sums of at most ``SPLIT_MIN`` rows are not split) and no thread loops over more than ``MAX_CHUNK`` rows (lavapipe
misbehaves on long per-invocation loops). With one chunk the sums go straight to ``out`` (one
launch); otherwise every chunk writes its partial sum into a device workspace and the partials
are summed by the same kernel (one more launch; deterministic: no atomics, a fixed order).
"""
from . import _common as C
from .. import backend, runtime

TARGET_THREADS = 4096  # enough threads to fill a GPU's SMs at the PINN's 32 columns
MIN_CHUNK = 64         # rows per thread at least (partials cost a write and a read each)
MAX_CHUNK = 2048       # rows per thread at most (lavapipe: long loops in one invocation misbehave)
SPLIT_MIN = 2048       # rows above which the sum is split (below, a split's second launch costs more
                       # than one thread's loop of one multiply-add per row)
_WORKSPACE: dict = {}  # (dtype, level) -> device buffer of partial sums, grown on demand
runtime.on_shutdown(_WORKSPACE.clear)


def plan(batch: int, rows: int, cols: int):
    """(rows per chunk, chunks): the split of ``rows`` over threads (pure Python, tested on CPU)."""
    if rows <= SPLIT_MIN:
        return max(rows, 1), 1
    groups = max(batch * cols, 1)
    nch = -(-TARGET_THREADS // groups)                          # chunks to reach the thread target
    nch = min(nch, max(1, rows // MIN_CHUNK))                   # ... but chunks of at least MIN_CHUNK rows
    nch = max(nch, -(-rows // MAX_CHUNK))                       # ... and at most MAX_CHUNK rows
    chunk = -(-rows // nch)
    return chunk, -(-rows // chunk)


def workspace(n: int, dtype: str, level: int = 0):
    """A device buffer of at least ``n`` elements for partial sums (one per recursion ``level``),
    kept between calls (launches on one device run in order, so reusing it is safe)."""
    key = (dtype, level)
    buf = _WORKSPACE.get(key)
    if buf is None or buf.shape[0] < n:
        ti = C.ti()
        size = max(n, 2 * buf.shape[0] if buf is not None else 0, 1024)
        with runtime.LAUNCH_LOCK:  # not backend.empty: a persistent buffer, not one a jit trace owns
            buf = _WORKSPACE[key] = ti.ndarray(backend.ti_dtype(dtype), size)
    return buf


def colsum(x, out, batch: int, rows: int, cols: int, dtype: str, *, weights=None, accumulate: bool = False,
           x_batch=None, row_stride=None, col_stride: int = 1, w_batch=None, out_off: int = 0, level: int = 0,
           x_off: int = 0, defer=None, plan_batch=None):
    """out[out_off + b*cols + j] (+)= sum_r (w[b*w_batch + r] *) x[x_off + b*x_batch + r*row_stride + j*col_stride]
    for b < batch, j < cols; defaults: x contiguous (batch, rows, cols), w contiguous (batch, rows).
    Launches: 1 when ``rows`` fits one chunk, else 2 (partials, then their sum). ``defer``: a list to
    append the sum to instead (launched by :func:`run`, paired with others: see there). ``plan_batch``:
    split ``rows`` as a sum of that many batches would be (the same partial sums as that sum's)."""
    row_stride = cols if row_stride is None else row_stride
    x_batch = rows * cols if x_batch is None else x_batch
    w_batch = rows if w_batch is None else w_batch
    if batch * cols == 0:
        return
    job = dict(x=x, out=out, batch=batch, rows=rows, cols=cols, weights=weights, accumulate=accumulate,
               x_batch=x_batch, row_stride=row_stride, col_stride=col_stride, w_batch=w_batch, out_off=out_off,
               level=level, x_off=x_off, plan_batch=batch if plan_batch is None else plan_batch)
    if defer is not None:
        defer.append(job)
        return
    run([job], dtype)


def _stages(job, dtype):
    """The launches of one column sum: [first] or [partials, their sum], each a tuple of kernel arguments
    (weighted, x, w, out, batch, rows, cols, xb, xr, xc, wb, chunk, nch, mode, oo, xo)."""
    j = job
    batch, rows, cols = j["batch"], j["rows"], j["cols"]
    chunk, nch = plan(j.get("plan_batch", batch), rows, cols)
    w = j["x"] if j["weights"] is None else j["weights"]
    head = (j["weights"] is not None, j["x"], w)
    geo = (batch, rows, cols, j["x_batch"], j["row_stride"], j["col_stride"], j["w_batch"], chunk, nch)
    if nch == 1:
        return [head + (j["out"],) + geo + (int(j["accumulate"]), j["out_off"], j["x_off"])]
    total = batch * cols
    ws = workspace(nch * total, dtype, j["level"])
    first = head + (ws,) + geo + (2, 0, j["x_off"])
    # the partials are an (nch, total) matrix: their column sums are the result
    rest = _stages(dict(x=ws, out=j["out"], batch=1, rows=nch, cols=total, weights=None,
                        accumulate=j["accumulate"], x_batch=0, row_stride=total, col_stride=1, w_batch=nch,
                        out_off=j["out_off"], level=j["level"] + 1, x_off=0), dtype)
    return [first] + rest


def run(jobs, dtype: str):
    """Launch the column sums ``jobs`` (``colsum``'s arguments, gathered with ``defer``): stage by stage,
    two independent sums per launch (``colsum2_k``: threads [0, T1) do the first, the rest the second;
    each output is summed in the same order as alone, so the bits are the same). Jobs must not write
    what another reads, and split jobs need distinct workspace ``level``s (two apart)."""
    stages = [_stages(j, dtype) for j in jobs]
    for s in range(max((len(st) for st in stages), default=0)):
        todo = [st[s] for st in stages if len(st) > s]
        while todo:
            if len(todo) >= 2:
                a, b = todo[0], todo[1]
                todo = todo[2:]
                kern = C.cached(("colsum2", dtype, a[0], b[0]), lambda: _build2(dtype, a[0], b[0]))
                kern(*a[1:], *b[1:])
            else:
                a = todo.pop()
                kern = C.cached(("colsum", dtype, a[0]), lambda: _build(dtype, a[0]))
                kern(*a[1:])


def _body(dtype, weighted):
    """ti.func: thread t of one column sum (``colsum_k``'s loop body)."""
    ti = C.ti()
    T = backend.ti_dtype(dtype)

    @ti.func
    def one(x: ti.template(), w: ti.template(), out: ti.template(), t, batch, rows, cols, xb, xr, xc, wb, chunk,
            nch, mode, oo, xo):
        j = t % cols
        ch = (t // cols) % nch
        bt = t // (cols * nch)
        r0 = ch * chunk
        r1 = ti.min(r0 + chunk, rows)
        base = xo + bt * xb + j * xc
        s = ti.cast(0, T)
        for r in range(r0, r1):
            if ti.static(weighted):
                s += w[bt * wb + r] * x[base + r * xr]
            else:
                s += x[base + r * xr]
        o = oo + bt * cols + j
        if mode == 2:  # partial sum of chunk ch: row ch of the (nch, batch*cols) workspace
            out[ch * batch * cols + o] = s   # (oo = 0 here)
        elif mode == 1:
            out[o] += s
        else:
            out[o] = s
    return one


def _build(dtype, weighted):
    ti = C.ti()
    A = C.arr(dtype)
    one = _body(dtype, weighted)

    @ti.kernel
    def colsum_k(x: A, w: A, out: A, batch: ti.i32, rows: ti.i32, cols: ti.i32, xb: ti.i32, xr: ti.i32,
                 xc: ti.i32, wb: ti.i32, chunk: ti.i32, nch: ti.i32, mode: ti.i32, oo: ti.i32, xo: ti.i32):
        for t in range(batch * nch * cols):
            one(x, w, out, t, batch, rows, cols, xb, xr, xc, wb, chunk, nch, mode, oo, xo)
    return colsum_k


def _build2(dtype, weighted_a, weighted_b):
    """Two independent column sums in one launch (``run``)."""
    ti = C.ti()
    A = C.arr(dtype)
    one_a, one_b = _body(dtype, weighted_a), _body(dtype, weighted_b)

    @ti.kernel
    def colsum2_k(x: A, w: A, out: A, batch: ti.i32, rows: ti.i32, cols: ti.i32, xb: ti.i32, xr: ti.i32,
                  xc: ti.i32, wb: ti.i32, chunk: ti.i32, nch: ti.i32, mode: ti.i32, oo: ti.i32, xo: ti.i32,
                  x2: A, w2: A, out2: A, batch2: ti.i32, rows2: ti.i32, cols2: ti.i32, xb2: ti.i32, xr2: ti.i32,
                  xc2: ti.i32, wb2: ti.i32, chunk2: ti.i32, nch2: ti.i32, mode2: ti.i32, oo2: ti.i32, xo2: ti.i32):
        n1 = batch * nch * cols
        for t in range(n1 + batch2 * nch2 * cols2):
            if t < n1:
                one_a(x, w, out, t, batch, rows, cols, xb, xr, xc, wb, chunk, nch, mode, oo, xo)
            else:
                one_b(x2, w2, out2, t - n1, batch2, rows2, cols2, xb2, xr2, xc2, wb2, chunk2, nch2, mode2, oo2, xo2)
    return colsum2_k


__all__ = ["colsum", "plan", "run", "workspace"]
