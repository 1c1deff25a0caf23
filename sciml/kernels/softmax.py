"""Row-wise softmax, log-softmax and log-sum-exp over the last axis, one pass set per row.

Non-finite values follow scipy.special: the row maximum propagates NaN; logsumexp and log_softmax
shift by the maximum only where it is finite (so logsumexp([-inf, -inf]) = -inf and
logsumexp([inf, 0]) = inf), softmax always shifts by it (softmax([inf, 0]) = [nan, nan])."""
from . import _common as C


DEVICE_MAX_COLS = 2048  # on devices one invocation per row must stay short (see reduce.py)


def rowwise(op: str, x, out, rows: int, cols: int, dtype: str):
    """op in "softmax" | "log_softmax" (out has rows*cols) | "logsumexp" (out has rows)."""
    if cols > DEVICE_MAX_COLS and not C.backend.on_host():
        return _rowwise_long(op, x, out, rows, cols, dtype)
    serial = C.launch_mode(rows * cols)
    k = C.cached(("rowwise", op, dtype, serial), lambda: _build(op, dtype, serial))
    k(x, out, rows, cols)


def _build(op, dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)

    from .elementwise import _binary_funcs, _funcs
    mx = _binary_funcs(dtype)["maximum"]  # NaN-propagating
    shift = _funcs(dtype)["finite_or_zero"]

    @ti.kernel
    def k(x: A, out: A, rows: ti.i32, cols: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(rows):
            base = r * cols
            m = x[base]
            for j in range(1, cols):
                m = mx(m, x[base + j])
            if ti.static(op != "softmax"):  # scipy: a non-finite max shifts by 0, so lse([-inf, -inf]) = -inf,
                m = shift(m)                # lse([inf, 0]) = inf; softmax keeps scipy's plain shift
            s = ti.cast(0.0, T)
            for j in range(cols):
                s += ti.exp(x[base + j] - m)
            if ti.static(op == "softmax"):
                inv = 1.0 / s
                for j in range(cols):
                    out[base + j] = ti.exp(x[base + j] - m) * inv
            elif ti.static(op == "log_softmax"):
                lse = m + ti.log(s)
                for j in range(cols):
                    out[base + j] = x[base + j] - lse
            else:
                out[r] = m + ti.log(s)
    return k


def _rowwise_long(op, x, out, rows, cols, dtype):
    """Long rows on devices: max and sums through the chunked reduction, pointwise in between."""
    from .. import backend
    from . import elementwise as E
    from . import reduce as R
    n = rows * cols
    m = backend.empty(rows, dtype)
    R.reduce("max", x, m, rows, cols, 1, dtype)
    if op != "softmax":  # the shift of the row kernel
        E.unary("finite_or_zero", m, m, rows, dtype)
    sh = backend.empty(n, dtype)
    E.binary("sub", x, m, sh, (rows, cols), (rows, 1), (rows, cols), dtype, dtype)
    e = backend.empty(n, dtype)
    E.unary("exp", sh, e, n, dtype)
    s = backend.empty(rows, dtype)
    R.reduce("sum", e, s, rows, cols, 1, dtype)
    if op == "softmax":
        E.binary("div", e, s, out, (rows, cols), (rows, 1), (rows, cols), dtype, dtype)
        return
    ls = backend.empty(rows, dtype)
    E.unary("log", s, ls, rows, dtype)
    if op == "log_softmax":
        E.binary("sub", sh, ls, out, (rows, cols), (rows, 1), (rows, cols), dtype, dtype)
    else:
        E.binary("add", m, ls, out, (rows,), (rows,), (rows,), dtype, dtype)
