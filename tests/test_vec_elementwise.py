"""The 16-byte vector forms of the cheap elementwise kernels (CPU, ``kernels/_vec.py``) give the same
bits as the scalar kernels: binary ops (same shape, one-element operand), cheap unary ops, the row-wise
suffix broadcast; lengths not a multiple of the lanes, misaligned views (scalar fallback), +-0, +-inf, NaN."""
import numpy as np
import pytest

from sciml.kernels import elementwise as E
from sciml.kernels import rows as R

DTYPES = ("float32", "float64")


def _data(rng, n, dt):
    a = rng.standard_normal(n).astype(dt)
    a[::97] = np.nan
    a[5::101] = np.inf
    a[7::103] = -np.inf
    a[9::89] = 0.0
    a[11::83] = -0.0
    return a


def _both(run, n, dt):
    """run(out) with the vector kernels off, then on; both outputs."""
    outs = []
    old = E.VECTOR
    try:
        for vec in (False, True):
            E.VECTOR = vec
            o = np.full(n, 7, dt)
            run(o)
            outs.append(o)
    finally:
        E.VECTOR = old
    return outs


def _used(name, dt):
    """A vector kernel ``name`` of dtype ``dt`` was built (the vector path actually ran)."""
    from sciml.kernels import _common as C
    assert any(isinstance(k, tuple) and k[0] == name and dt in k for k in C._cache), name


def _same_bits(a, b):
    u = "u4" if a.dtype == np.float32 else "u8"
    d = np.nonzero(a.view(u) != b.view(u))[0]
    assert not len(d), (d[:5], a[d[:5]], b[d[:5]])


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [4099, 40000, 300003])
def test_binary_same_bits(dt, n):
    rng = np.random.default_rng(n)
    ops = sorted(E.VEC_BINARY) if n < 100000 else ("add", "relu_grad", "sigmoid_grad")  # parallel launches
    for op in ops:
        for mode in ("same", "xs", "ys"):
            x = _data(rng, 1 if mode == "xs" else n, dt)
            y = _data(rng, 1 if mode == "ys" else n, dt)
            for s in ((x,) if mode == "xs" else (y,) if mode == "ys" else ()):
                s[0] = rng.standard_normal()

            def run(o):
                E.binary(op, x, y, o, x.shape, y.shape, (n,), dt, dt)
            a, b = _both(run, n, dt)
            _same_bits(a, b)
    _used("binary_lanes", dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_binary_scalar_operand_special(dt):
    n = 4102
    rng = np.random.default_rng(1)
    x = _data(rng, n, dt)
    for op in ("mul", "div", "maximum", "relu_grad", "tanh_grad"):
        for v in (np.nan, np.inf, -0.0, 0.0):
            s = np.array([v], dt)
            for xs, ys, a_, b_ in (((1,), (n,), s, x), ((n,), (1,), x, s)):
                def run(o):
                    E.binary(op, a_, b_, o, xs, ys, (n,), dt, dt)
                r0, r1 = _both(run, n, dt)
                _same_bits(r0, r1)


@pytest.mark.parametrize("dt", DTYPES)
def test_binary_misaligned_views(dt):
    n = 5000
    rng = np.random.default_rng(2)
    xb, yb = _data(rng, n + 3, dt), _data(rng, n + 3, dt)
    for off in (1, 2, 3):
        x, y = xb[off:off + n], yb[:n]
        for op in ("add", "relu_grad"):
            def run(o):
                E.binary(op, x, y, o, (n,), (n,), (n,), dt, dt)
            a, b = _both(run, n, dt)
            _same_bits(a, b)
            if op == "add":
                with np.errstate(invalid="ignore"):  # inf + -inf
                    np.testing.assert_array_equal(a, x + y)
            ob = np.empty(n + 1, dt)

            def run_out(o):
                E.binary(op, y, y, ob[1:], (n,), (n,), (n,), dt, dt)  # misaligned output
                o[:] = ob[1:]
            a, b = _both(run_out, n, dt)
            _same_bits(a, b)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [4099, 40001])
def test_unary_same_bits(dt, n):
    rng = np.random.default_rng(3)
    x = _data(rng, n, dt)
    for op in sorted(E.VEC_UNARY):
        def run(o):
            E.unary(op, x, o, n, dt)
        a, b = _both(run, n, dt)
        _same_bits(a, b)
        a, b = _both(lambda o: E.unary(op, x[1:], o[1:], n - 1, dt), n, dt)  # misaligned: scalar
        _same_bits(a, b)
    _used("unary_lanes", dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_suffix_binary_same_bits(dt):
    rng = np.random.default_rng(4)
    for rows, inner in ((33, 256), (205, 20), (342, 12), (3, 9)):
        for op in sorted(E.VEC_BINARY):
            for x_full in (True, False):
                big, small = _data(rng, rows * inner, dt), _data(rng, inner, dt)
                x, y = (big, small) if x_full else (small, big)

                def run(o):
                    assert R.suffix_binary(op, x, y, o, rows, inner, x_full, dt)
                a, b = _both(run, rows * inner, dt)
                _same_bits(a, b)
    _used("rows_binary_lanes", dt)


def test_ops_through_tensors():
    import sciml as sm
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 130)).astype(np.float32)
    b = rng.standard_normal((64, 130)).astype(np.float32)
    x, y = sm.tensor(a, dtype="float32"), sm.tensor(b, dtype="float32")
    np.testing.assert_array_equal((x + y).numpy(), a + b)
    np.testing.assert_array_equal((x * 2.0).numpy(), a * np.float32(2))
    np.testing.assert_array_equal(sm.relu(x).numpy(), np.maximum(a, 0))
    np.testing.assert_array_equal((-x).numpy(), -a)
    np.testing.assert_array_equal(sm.abs(x).numpy(), np.abs(a))
    np.testing.assert_array_equal(sm.maximum(x, y).numpy(), np.maximum(a, b))


@pytest.mark.parametrize("dt", DTYPES)
def test_general_binary_same_bits(dt):
    rng = np.random.default_rng(6)
    shapes = [((16, 20, 16), (16, 1, 16)), ((16, 1, 16), (16, 20, 16)), ((16, 20, 16), (16, 20, 1)),
              ((16, 20, 1), (16, 20, 16)), ((16, 64, 8), (1, 64, 8)), ((12, 40, 10), (12, 1, 10)),
              ((8, 5, 9, 12), (8, 1, 9, 12))]
    for xs, ys in shapes:
        outs = np.broadcast_shapes(xs, ys)
        n = int(np.prod(outs))
        for op in sorted(E.VEC_BINARY):
            x, y = _data(rng, int(np.prod(xs)), dt), _data(rng, int(np.prod(ys)), dt)

            def run(o):
                assert R.general_binary(op, x, y, o, xs, ys, outs, dt)
            a, b = _both(run, n, dt)
            _same_bits(a, b)
            if op == "add":
                with np.errstate(invalid="ignore"):
                    np.testing.assert_array_equal(a, (x.reshape(xs) + y.reshape(ys)).ravel())
    _used("rows_gbinary_lanes", dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_pair_sum_same_bits(dt):
    rng = np.random.default_rng(7)
    for rows, inner in ((90, 64), (410, 10)):
        for op1, op2 in (("tanh_grad", "twice_mul"), ("mul", "mul"), ("sigmoid_grad", "div")):
            a, c = _data(rng, rows * inner, dt), _data(rng, rows * inner, dt)
            p, q = _data(rng, inner, dt), _data(rng, inner, dt)
            x = _both(lambda o: R.pair_sum(op1, op2, a, p, q, c, o, rows, inner, dt), rows * inner, dt)
            _same_bits(*x)
    _used("rows_pair_lanes", dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_reduce_sum_strided_same_bits(dt):
    from sciml.kernels import reduce as RD
    rng = np.random.default_rng(8)
    for outer, r, inner in ((1, 256, 512), (3, 100, 64), (2, 700, 12), (1, 5000, 4), (4, 33, 10)):
        x = _data(rng, outer * r * inner, dt)
        x[np.isnan(x) | np.isinf(x)] = 1.5  # finite sums: compare values, not NaN patterns only
        x[::7] *= 1e7  # cancellation: the order of the additions shows in the bits

        def run(o):
            RD.reduce("sum", x, o, outer, r, inner, dt)
        a, b = _both(run, outer * inner, dt)
        _same_bits(a, b)
        np.testing.assert_allclose(a, x.reshape(outer, r, inner).astype(np.float64).sum(1).ravel(),
                                   rtol=1e-3 if dt == "float32" else 1e-9, atol=1e3)
    _used("reduce_sum_lanes", dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [4100, 9900, 4099])
def test_sizes_the_lanes_do_not_divide_on_aligned_buffers(dt, n):
    # 64-byte-aligned operands (sciml's own buffers, every buffer inside sciml.jit): below TAIL_FIT_MAX a size
    # the wide lanes do not divide takes the widest narrower vectors that do (one launch, no scalar tail);
    # an odd size keeps the wide kernel plus the tail. The same bits as the scalar kernels either way.
    from sciml import backend
    rng = np.random.default_rng(n)

    def aligned(v):
        b = backend.aligned_empty(v.size, dt)
        b[:] = v
        return b
    x, y = aligned(_data(rng, n, dt)), aligned(_data(rng, n, dt))
    one = aligned(np.array([rng.standard_normal()], dt))
    for op in ("add", "mul", "twice_mul", "maximum"):
        for mode, xa, ya in (("same", x, y), ("xs", one, y), ("ys", x, one)):
            def run(o):
                oa = aligned(o)
                E.binary(op, xa, ya, oa, xa.shape, ya.shape, (n,), dt, dt)
                o[:] = oa
            a, b = _both(run, n, dt)
            _same_bits(a, b)
    for op in sorted(E.VEC_UNARY):
        def run(o):
            oa = aligned(o)
            E.unary(op, x, oa, n, dt)
            o[:] = oa
        a, b = _both(run, n, dt)
        _same_bits(a, b)


def test_fit_lanes_rule():
    assert E._fit_lanes(8, 9900, "float64") == 4      # 9900 = 4 * 2475: one launch of 32-byte vectors
    assert E._fit_lanes(16, 9900, "float32") == 4     # 16-byte vectors
    assert E._fit_lanes(16, 4104, "float32") == 8
    assert E._fit_lanes(8, 4099, "float64") == 8      # nothing divides an odd size: wide kernel + tail
    assert E._fit_lanes(16, 9900 * 8, "float32") == 16  # at TAIL_FIT_MAX and above: the widest vectors
    assert E._fit_lanes(16, 1 << 20, "float32") == 16


def test_a_batched_size_is_one_launch_under_jit():
    import sciml as sm
    f = sm.jit(lambda a, b: -(a + b))
    a = sm.tensor(np.arange(9900.0).reshape(100, 99))
    b = sm.tensor(np.ones((100, 99)))
    np.testing.assert_array_equal(f(a, b).numpy(), -(a.numpy() + 1.0))
    plan = next(iter(f.plans.values()))
    assert plan.n_kernels + plan.n_calls == 2  # add and neg, no tail launches
