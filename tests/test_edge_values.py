"""Edge values through every public elementwise, activation, row and reduction op, in float64 and float32:
NaN, +-inf, +-0, subnormals, huge values, 0-d and empty tensors, and Fortran-order / negative-stride /
non-contiguous numpy inputs. Values are compared with numpy / scipy.special, first and second derivatives
with closed forms; where numpy has no convention, with sciml's documented one (docs/CORE.md, "Numerical
conventions"). The tables are shared with tests/vulkan_edge_check.py, which runs them on Vulkan (float32).

Subnormals: Taichi's CPU runtime flushes subnormals to zero (and ``ti.init`` switches the calling thread's
numpy to flush too), so results below the smallest normal compare with an absolute tolerance of it.
"""
import math

import numpy as np
import pytest
import scipy.special as sp

import sciml as sm

nan, inf = math.nan, math.inf


DEVICE = [False]  # set by tests/vulkan_edge_check.py: no subnormals, no huge trig arguments


def edges(dtype, trig=True):
    """The edge values of one dtype (``trig=False`` leaves out the huge ones, whose sin/cos/tan only
    the CPU's libm reduces exactly). On devices subnormals are left out: what a GPU does with them
    (flush, or not) is the device's choice."""
    fi = np.finfo(dtype)
    v = [nan, inf, -inf, 0.0, -0.0, fi.tiny, 1.0, -1.0, 0.5, -0.5, 2.5, -3.0, 1e-8, -1e-8, 0.999, -0.999, 1.5,
         20.0, -20.0, 100.0, -100.0]
    if not DEVICE[0]:
        v += [fi.smallest_subnormal, -fi.smallest_subnormal]
    if trig or not DEVICE[0]:
        v += [float(fi.max) / 4, -float(fi.max) / 4] if trig else []
    return np.array(v, dtype)


def _sig(x):
    return sp.expit(x)


def _step(x):  # relu' (PyTorch: 0 at 0), NaN at NaN
    return np.where(x > 0, 1.0, np.where(x <= 0, 0.0, np.nan))


def _sign(x):
    return np.where(x > 0, 1.0, np.where(x < 0, -1.0, np.where(x == 0, 0.0, np.nan)))


def _zero(x):  # piecewise-constant ops: a zero derivative everywhere, NaN included (PyTorch)
    return np.zeros_like(x)


_C = math.sqrt(2 / math.pi)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(_C * (x + 0.044715 * x ** 3)))


# name -> (sciml fn, numpy value, first derivative, second derivative); derivatives as closed forms
UNARY = {
    "neg": (sm.neg, np.negative, lambda x: -np.ones_like(x), _zero),
    "exp": (sm.exp, np.exp, np.exp, np.exp),
    "log": (sm.log, np.log, lambda x: 1 / x, lambda x: -1 / x ** 2),
    "sin": (sm.sin, np.sin, np.cos, lambda x: -np.sin(x)),
    "cos": (sm.cos, np.cos, lambda x: -np.sin(x), lambda x: -np.cos(x)),
    "tanh": (sm.tanh, np.tanh, lambda x: 1 - np.tanh(x) ** 2, lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
    "sigmoid": (sm.sigmoid, _sig, lambda x: _sig(x) * (1 - _sig(x)),
                lambda x: _sig(x) * (1 - _sig(x)) * (1 - 2 * _sig(x))),
    "relu": (sm.relu, lambda x: np.where(x > 0, x, np.where(x <= 0, 0.0, x)), _step, _zero),
    "softplus": (sm.softplus, lambda x: np.logaddexp(0, x), _sig, lambda x: _sig(x) * (1 - _sig(x))),
    "sqrt": (sm.sqrt, np.sqrt, lambda x: 0.5 / np.sqrt(x), lambda x: -0.25 / (x * np.sqrt(x))),
    "abs": (sm.abs, np.abs, _sign, _zero),
    "square": (sm.square, np.square, lambda x: 2 * x, lambda x: np.full_like(x, 2.0)),
    "reciprocal": (sm.reciprocal, lambda x: 1 / x, lambda x: -1 / x ** 2, lambda x: 2 / x ** 3),
    "sign": (sm.sign, np.sign, _zero, _zero),
    "floor": (sm.floor, np.floor, _zero, _zero),
    "silu": (sm.silu, lambda x: x * _sig(x), lambda x: _sig(x) * (1 + x * (1 - _sig(x))),
             lambda x: _sig(x) * (1 - _sig(x)) * (2 + x * (1 - 2 * _sig(x)))),
    "gelu_tanh": (lambda t: sm.gelu(t, approximate="tanh"), _gelu_tanh, None, None),
    "log1p": (sm.log1p, np.log1p, lambda x: 1 / (1 + x), lambda x: -1 / (1 + x) ** 2),
    "expm1": (sm.expm1, np.expm1, np.exp, np.exp),
    "erf": (sm.erf, sp.erf, lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x),
            lambda x: -4 * x / np.sqrt(np.pi) * np.exp(-x * x)),
    "erfc": (sm.erfc, sp.erfc, lambda x: -2 / np.sqrt(np.pi) * np.exp(-x * x),
             lambda x: 4 * x / np.sqrt(np.pi) * np.exp(-x * x)),
    "tan": (sm.tan, np.tan, lambda x: 1 + np.tan(x) ** 2, lambda x: 2 * np.tan(x) * (1 + np.tan(x) ** 2)),
    "sinh": (sm.sinh, np.sinh, np.cosh, np.sinh),
    "cosh": (sm.cosh, np.cosh, np.sinh, np.cosh),
    "arcsin": (sm.arcsin, np.arcsin, lambda x: 1 / np.sqrt(1 - x * x), lambda x: x / (1 - x * x) ** 1.5),
    "arccos": (sm.arccos, np.arccos, lambda x: -1 / np.sqrt(1 - x * x), lambda x: -x / (1 - x * x) ** 1.5),
    "arctan": (sm.arctan, np.arctan, lambda x: 1 / (1 + x * x), lambda x: -2 * x / (1 + x * x) ** 2),
    "arcsinh": (sm.arcsinh, np.arcsinh, lambda x: 1 / np.sqrt(x * x + 1), lambda x: -x / (x * x + 1) ** 1.5),
    "arccosh": (sm.arccosh, np.arccosh, lambda x: 1 / np.sqrt(x * x - 1), lambda x: -x / (x * x - 1) ** 1.5),
    "arctanh": (sm.arctanh, np.arctanh, lambda x: 1 / (1 - x * x), lambda x: 2 * x / (1 - x * x) ** 2),
}
TRIG = ("sin", "cos", "tan")
RTOL = {"float64": 1e-13, "float32": 3e-6}
# Vulkan (lavapipe): atan2, and asin / acos / atan built on it, have a relative error up to ~3e-5 (GLSL allows
# more); documented in docs/CORE.md
DEVICE_RTOL = {"arcsin": 5e-5, "arccos": 5e-5, "arctan": 5e-5, "atan2": 5e-5}
# float32 tanh / sigmoid (and what is built on them) are the rational Eigen/XLA form: abs. error 3e-7
ATOL32 = {"tanh": 1e-6, "sigmoid": 1e-6, "silu": 2e-6, "gelu_tanh": 2e-6, "softplus": 1e-6}  # softplus' = sigmoid


def close(got, want, dtype, name="", what="value", rtol=None, nan_mask=None):
    """numpy-equal NaN pattern (where ``nan_mask`` says NaN is required; default: wherever ``want`` is NaN),
    equal infinities, finite values within rtol (an absolute floor of the smallest normal: flush to zero)."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (name, what, got.shape, want.shape)
    must_nan = np.isnan(want) if nan_mask is None else nan_mask
    bad = must_nan & ~np.isnan(got)
    assert not bad.any(), f"{name} {what} {dtype}: expected NaN, got {got[bad]} (at {np.flatnonzero(bad)})"
    inf_ = np.isinf(want)
    assert np.array_equal(got[inf_], want[inf_]), f"{name} {what} {dtype}: inf {got[inf_]} vs {want[inf_]}"
    fin = np.isfinite(want)
    tiny = float(np.finfo(dtype).tiny)
    atol = max(tiny, ATOL32.get(name, 0.0) if dtype == "float32" else 0.0) * (1 if what == "value" else 10)
    if rtol is None:
        rtol = DEVICE_RTOL.get(name, RTOL[dtype]) if DEVICE[0] else RTOL[dtype]
    np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=atol,
                               err_msg=f"{name} {what} {dtype} at x={np.flatnonzero(fin)}")


def unary_values(name, dtype):
    fn, ref, _, _ = UNARY[name]
    x = edges(dtype, trig=name not in TRIG)
    got = fn(sm.tensor(x, dtype))
    assert got.dtype == dtype and got.shape == x.shape
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64)).astype(dtype)  # in float64, rounded once: numpy's float32 loops vary
    close(got.numpy(), want, dtype, name)


def unary_derivatives(name, dtype, order=2):
    """First (and second) derivative, elementwise, vs the closed form: NaN at a NaN input (unless the
    documented derivative is 0 there), equal infinities, finite values close; other points where the
    closed form is NaN (0 * inf limits) are not compared."""
    fn, _, d1, d2 = UNARY[name]
    x = edges(dtype, trig=name not in TRIG)
    x = x[np.abs(np.nan_to_num(x, nan=0.0)) < (1e4 if dtype == "float32" else 1e30)]
    x = x[~((x == 0) & np.signbit(x))]  # -0: the sign of an infinite derivative there is arbitrary
    t = sm.tensor(x, dtype)
    g1 = sm.grad(lambda z: fn(z).sum())
    with np.errstate(all="ignore"):
        for d, (g, f) in enumerate([(g1, d1), (sm.grad(lambda z: g1(z).sum()), d2)][:order]):
            want = f(x.astype(np.float64)).astype(dtype)
            got = g(t).numpy()
            assert got.dtype == np.dtype(dtype)
            mask = np.isnan(x) & np.isnan(want)
            keep = ~np.isnan(want) | mask
            close(got[keep], want[keep], dtype, name, f"derivative {d + 1}", rtol=None if dtype == "float64" else 2e-5,
                  nan_mask=mask[keep])


# binary ops over every pair of these values
PAIR_VALUES = [nan, inf, -inf, 0.0, -0.0, 1.0, -2.5, 3.0]
BINARY = {
    "add": (sm.add, np.add), "sub": (sm.sub, np.subtract), "mul": (sm.mul, np.multiply),
    "div": (sm.div, np.divide), "maximum": (sm.maximum, np.maximum), "minimum": (sm.minimum, np.minimum),
    "pow": (sm.pow, np.power), "atan2": (sm.atan2, np.arctan2),
}
COMPARE = {"less": (sm.less, np.less), "less_equal": (sm.less_equal, np.less_equal),
           "greater": (sm.greater, np.greater), "greater_equal": (sm.greater_equal, np.greater_equal),
           "equal": (sm.equal, np.equal), "not_equal": (sm.not_equal, np.not_equal)}


def pairs(dtype):
    a, b = np.meshgrid(np.array(PAIR_VALUES, dtype), np.array(PAIR_VALUES, dtype), indexing="ij")
    return a.ravel(), b.ravel()


def binary_values(name, dtype):
    fn, ref = BINARY[name]
    a, b = pairs(dtype)
    got = fn(sm.tensor(a, dtype), sm.tensor(b, dtype)).numpy()
    with np.errstate(all="ignore"):
        want = ref(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    close(got, want, dtype, name)


def compare_values(name, dtype):
    fn, ref = COMPARE[name]
    a, b = pairs(dtype)
    got = fn(sm.tensor(a, dtype), sm.tensor(b, dtype))
    assert got.dtype == "bool"
    np.testing.assert_array_equal(got.numpy(), ref(a, b), err_msg=name)


def max_weight(a, b):  # d maximum(a, b) / da: 1 / 0.5 on ties / 0, NaN if either is NaN
    return np.where(a > b, 1.0, np.where(a == b, 0.5, np.where(a < b, 0.0, np.nan)))


def extremum_derivatives(dtype):
    a, b = pairs(dtype)
    ta, tb = sm.tensor(a, dtype), sm.tensor(b, dtype)
    for fn, wa, wb in [(sm.maximum, max_weight(a, b), max_weight(b, a)),
                       (sm.minimum, max_weight(b, a), max_weight(a, b))]:
        ga, gb = sm.grad(lambda x, y: fn(x, y).sum(), argnums=(0, 1))(ta, tb)
        close(ga.numpy(), wa, dtype, fn.__name__, "d/dx")
        close(gb.numpy(), wb, dtype, fn.__name__, "d/dy")


ROWS = np.array([[nan, 0.0, 1.0], [inf, 0.0, 1.0], [-inf, -inf, -inf], [-inf, 0.0, 1.0], [inf, inf, 0.0],
                 [1.0, 2.0, 3.0], [-inf, inf, 0.0], [1e30, -1e30, 0.0]])


def rows_values(dtype):
    x = ROWS.astype(dtype)
    t = sm.tensor(x, dtype)
    with np.errstate(all="ignore"):
        close(sm.logsumexp(t, axis=1).numpy(), sp.logsumexp(x.astype(np.float64), axis=1), dtype, "logsumexp")
        close(sm.softmax(t, axis=1).numpy(), sp.softmax(x.astype(np.float64), axis=1), dtype, "softmax")
        close(sm.log_softmax(t, axis=1).numpy(), sp.log_softmax(x.astype(np.float64), axis=1), dtype, "log_softmax")
        close(sm.logsumexp(t, axis=None).numpy(), sp.logsumexp(x.astype(np.float64)), dtype, "logsumexp all")
    e = sm.tensor(np.zeros((0,), dtype), dtype)
    assert sm.logsumexp(e).numpy() == -inf  # log of an empty sum (scipy.special.logsumexp)
    np.testing.assert_array_equal(sm.logsumexp(sm.tensor(np.zeros((2, 0), dtype), dtype), axis=1).numpy(), [-inf, -inf])
    assert sm.softmax(sm.tensor(np.zeros((0, 3), dtype), dtype), axis=1).shape == (0, 3)


def reduction_values(dtype):
    x = ROWS.astype(dtype)
    t = sm.tensor(x, dtype)
    with np.errstate(all="ignore"):
        for fn, ref in [(sm.sum, np.sum), (sm.max, np.max), (sm.min, np.min), (sm.mean, np.mean)]:
            for axis in (None, 0, 1):
                close(fn(t, axis=axis).numpy(), ref(x.astype(np.float64), axis=axis).astype(dtype), dtype,
                      f"{fn.__name__}(axis={axis})", rtol=1e-6 if dtype == "float32" else 1e-12)


# --- the tests (CPU; float32 through explicitly typed tensors: the test process runs float64) -----------
DTYPES = ("float64", "float32")


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values_at_edges(name):
    for dtype in DTYPES:
        unary_values(name, dtype)


@pytest.mark.parametrize("name", sorted(n for n in UNARY if UNARY[n][2] is not None))
def test_unary_derivatives_at_edges(name):
    unary_derivatives(name, "float64", order=2)
    unary_derivatives(name, "float32", order=1)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_values_at_edges(name):
    for dtype in DTYPES:
        binary_values(name, dtype)


def test_comparisons_follow_ieee():
    for dtype in DTYPES:
        for name in COMPARE:
            compare_values(name, dtype)


def test_maximum_minimum_derivatives_ties_and_nan():
    for dtype in DTYPES:
        extremum_derivatives(dtype)


def test_rows_follow_scipy():
    for dtype in DTYPES:
        rows_values(dtype)


def test_reductions_propagate_nan_and_inf():
    for dtype in DTYPES:
        reduction_values(dtype)


def test_classification_ops():
    for dtype in DTYPES:
        x = edges(dtype)
        for fn, ref in [(sm.isnan, np.isnan), (sm.isinf, np.isinf), (sm.isfinite, np.isfinite)]:
            got = fn(sm.tensor(x, dtype))
            assert got.dtype == "bool"
            np.testing.assert_array_equal(got.numpy(), ref(x))
            np.testing.assert_array_equal(getattr(sm.tensor(x, dtype), fn.__name__)().numpy(), ref(x))
    np.testing.assert_array_equal(sm.isfinite(sm.tensor([1, 2])).numpy(), [True, True])  # integers


def test_nan_through_large_and_vectorised_kernels():
    """The 4-lane vector kernels (n >= 4096), the 8-lane rational tanh/sigmoid (float32, n >= 16384), the
    chunked long reductions and sm.fuse's generated kernels (scalar and vectorised) keep NaN and inf."""
    rng = np.random.default_rng(0)
    for dtype in DTYPES:
        n = 20000
        x = rng.standard_normal(n).astype(dtype)
        x[[3, 4097, 9000, n - 1]] = [nan, inf, -inf, nan]
        y = rng.standard_normal(n).astype(dtype)
        y[[5, 4098]] = [nan, nan]
        tx, ty = sm.tensor(x, dtype), sm.tensor(y, dtype)
        with np.errstate(all="ignore"):
            for name in ("relu", "abs", "neg", "square", "reciprocal", "tanh", "sigmoid"):
                close(UNARY[name][0](tx).numpy(), UNARY[name][1](x.astype(np.float64)).astype(dtype), dtype, name)
            close(sm.maximum(tx, ty).numpy(), np.maximum(x, y), dtype, "maximum")
            close(sm.minimum(tx, 0.5).numpy(), np.minimum(x, 0.5), dtype, "minimum")
            f = sm.fuse(lambda a, b: sm.maximum(sm.tanh(a), b) + sm.relu(b) * sm.sigmoid(a))
            want = np.maximum(np.tanh(x), y) + np.where(y > 0, y, np.where(y <= 0, 0, y)) * sp.expit(x)
            close(f(tx, ty).numpy(), want.astype(dtype), dtype, "fuse", rtol=1e-5 if dtype == "float32" else 1e-12)
            g = sm.grad(lambda a: sm.relu(a).sum())(tx).numpy()
            assert np.isnan(g[[3, n - 1]]).all() and g[4097] == 1 and g[9000] == 0
        big = np.zeros(70000, dtype)  # long reductions: partial sums over chunks first
        big[65000] = nan
        assert np.isnan(sm.max(sm.tensor(big, dtype)).numpy()) and np.isnan(sm.min(sm.tensor(big, dtype)).numpy())


def test_mlp_with_a_nan_row_gives_nan_in_that_row_only():
    for act, dtype in (("tanh", "float32"), ("relu", "float64"), ("relu", "float32"), ("sigmoid", "float32")):
        if True:
            net = sm.models.MLP([3, 8, 16, 2], activation=act, seed=0, dtype=dtype)  # 16: bias_act's 4-lane path
            x = np.array([[nan, nan, nan], [0.1, 0.2, 0.3], [1.0, inf, 0.0]], dtype)
            y = net(sm.tensor(x, dtype)).numpy()
            assert np.isnan(y[0]).all() and np.isfinite(y[1]).all(), (act, dtype, y)


def test_layouts_of_numpy_inputs():
    """Fortran-order, negative-stride, non-contiguous and 0-d numpy arrays are read by value."""
    base = np.arange(24, dtype=np.float64).reshape(4, 6) / 7 - 1.5
    base[1, 2] = nan
    views = {"fortran": np.asfortranarray(base), "negative": base[::-1, ::-2], "strided": base[:, 1::2],
             "transposed": base.T, "0-d": np.array(0.3), "empty": np.zeros((0, 3)), "empty2": np.zeros((2, 0))}
    for dtype in DTYPES:
        for key, v in views.items():
            v = v.astype(dtype, order="K", copy=False) if dtype == "float64" else v.astype(dtype, order="K")
            t = sm.tensor(v, dtype)
            assert t.shape == v.shape, key
            np.testing.assert_array_equal(t.numpy(), v, err_msg=key)
            close(sm.exp(t).numpy(), np.exp(v), dtype, f"exp[{key}]")
            close(sm.maximum(t, 0.25).numpy(), np.maximum(v, 0.25), dtype, f"maximum[{key}]")
            close(sm.tanh(t).numpy(), np.tanh(v.astype(np.float64)).astype(dtype), dtype, f"tanh[{key}]")
            if v.ndim == 2 and v.size:
                close(sm.sum(t, axis=0).numpy(), v.sum(axis=0), dtype, f"sum[{key}]", rtol=1e-6)
                close(sm.softmax(t, axis=0).numpy(), sp.softmax(v.astype(np.float64), axis=0).astype(dtype), dtype,
                      f"softmax[{key}]", rtol=1e-6 if dtype == "float32" else 1e-12)


def test_zero_d_and_empty_tensors_keep_shape_and_dtype():
    for dtype in DTYPES:
        for name, (fn, ref, _, _) in UNARY.items():
            for shape in ((), (0,), (2, 0)):
                x = np.full(shape, 0.25, dtype)
                got = fn(sm.tensor(x, dtype))
                assert got.shape == shape and got.dtype == dtype, (name, shape)
                if not shape:
                    close(got.numpy(), ref(x.astype(np.float64)).astype(dtype), dtype, name)
        g = sm.grad(lambda z: sm.tanh(z).sum())(sm.tensor(np.zeros((0, 2), dtype), dtype))
        assert g.shape == (0, 2) and g.dtype == dtype


def test_edge_values_on_vulkan():
    """The same tables on Vulkan, float32, in a subprocess (tests/vulkan_edge_check.py)."""
    import os
    import subprocess
    import sys
    from tests.test_vulkan import _vulkan_available
    if not _vulkan_available():
        msg = "no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)"
        if os.environ.get("SCIML_REQUIRE_VULKAN"):
            pytest.fail(msg + "; SCIML_REQUIRE_VULKAN is set")
        pytest.skip(msg)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(here), os.environ.get("PYTHONPATH", "")]))
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(here, "vulkan_edge_check.py")], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan-edge" in r.stdout, (r.stdout + r.stderr)[-4000:]


def test_property_binary_ops_broadcast_like_numpy_with_special_values():
    """hypothesis: random broadcastable shapes (0-d, size-1 and empty axes included) and values drawn with
    NaN, +-inf, +-0 and subnormals, through the binary ops and comparisons, against numpy."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    ops = [("add", sm.add, np.add), ("mul", sm.mul, np.multiply), ("maximum", sm.maximum, np.maximum),
           ("minimum", sm.minimum, np.minimum), ("div", sm.div, np.divide), ("not_equal", sm.not_equal, np.not_equal),
           ("less_equal", sm.less_equal, np.less_equal)]
    floats = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True, width=64)

    @settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=3),
           data=st.data(), k=st.integers(0, len(ops) - 1))
    def check(shapes, data, k):
        name, fn, ref = ops[k]
        a = data.draw(hnp.arrays(np.float64, shapes.input_shapes[0], elements=floats))
        b = data.draw(hnp.arrays(np.float64, shapes.input_shapes[1], elements=floats))
        got = fn(sm.tensor(a), sm.tensor(b))
        with np.errstate(all="ignore"):
            want = ref(a, b)
        assert got.shape == want.shape, (name, got.shape, want.shape)
        if want.dtype == bool:
            np.testing.assert_array_equal(got.numpy(), want, err_msg=name)
        else:
            close(got.numpy(), want, "float64", name, rtol=1e-15)

    check()
