"""The exact GELU, x Phi(x) = 0.5 x erfc(-x / sqrt 2), and its derivative applied to a cotangent, each one pass.

The composed form (``sm.gelu``: a scale, erfc, two products forward; exp, squares and five more products in its
derivative) makes a dozen passes over the activations per layer; these two kernels make one each. erfc is
sciml's own (``kernels/special.py``: a few ulp in float32 and float64).

- ``gelu``: out = 0.5 x erfc(-x / sqrt 2)
- ``gelu_grad``: out = g (Phi(x) + x phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
"""
import math

from . import _common as C
from . import special
from .. import backend, runtime

_R2 = 1.0 / math.sqrt(2.0)
_RS2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _serial(n, cost):
    """Serialized below the parallel break-even, and always when Taichi has one CPU thread (a parallel launch
    would only hand the loop to a pool thread)."""
    if C.launch_mode(n, cost):
        return True
    if not _one:
        _one.append(backend.on_host() and runtime.num_threads() == 1)  # fixed once Taichi has started
    return _one[0]


_one: list = []


def gelu(x, out, n: int, dtype: str):
    serial = _serial(n, 16)
    C.cached(("gelu", dtype, serial), lambda: _build(dtype, serial, False))(x, x, out, n)


def gelu_grad(x, g, out, n: int, dtype: str):
    serial = _serial(n, 24)
    C.cached(("gelu_grad", dtype, serial), lambda: _build(dtype, serial, True))(x, g, out, n)


def _build(dtype, serial, grad):
    ti = C.ti()
    A = C.arr(dtype)
    T = backend.ti_dtype(dtype)
    erfc = special.funcs(dtype)["erfc"]

    @ti.kernel
    def k(x: A, g: A, out: A, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            v = x[i]
            cdf = 0.5 * erfc(-v * T(_R2))  # constants typed T(c): a bare literal (or ti.cast of one) is default_fp, float32 in a float32 process
            if ti.static(grad):
                out[i] = g[i] * (cdf + v * ti.exp(-0.5 * v * v) * T(_RS2PI))
            else:
                out[i] = v * cdf
    return k
