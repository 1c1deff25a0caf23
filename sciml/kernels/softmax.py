"""Row-wise softmax, log-softmax and log-sum-exp over the last axis, one pass set per row."""
from . import _common as C


def rowwise(op: str, x, out, rows: int, cols: int, dtype: str):
    """op in "softmax" | "log_softmax" (out has rows*cols) | "logsumexp" (out has rows)."""
    serial = C.launch_mode(rows * cols)
    k = C.cached(("rowwise", op, dtype, serial), lambda: _build(op, dtype, serial))
    k(x, out, rows, cols)


def _build(op, dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)

    @ti.kernel
    def k(x: A, out: A, rows: ti.i32, cols: ti.i32):
        ti.loop_config(serialize=serial)
        for r in range(rows):
            base = r * cols
            m = x[base]
            for j in range(1, cols):
                m = ti.max(m, x[base + j])
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
