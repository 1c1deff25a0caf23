"""One spec per op: values vs numpy (float64 and float32), JVP/VJP vs finite differences up to
second (and for a few, third) order, broadcasting, reductions, softmax family, matmul paths."""
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

import sciml as sm
from sciml.autodiff.ops import elementwise as _EW
from sciml.autodiff.ops import linalg as _LA
from sciml.autodiff.ops import linalg as LA
from sciml.testing import check_grads


def positive(a):
    return np.abs(a) + 0.5


def away_from_zero(a):
    return np.where(a >= 0, a + 0.3, a - 0.3)


def unit(a):
    return np.tanh(a) * 0.9


@dataclass
class OpSpec:
    name: str
    op: object                       # sciml function of Tensors
    ref: object                      # numpy reference
    shapes: list
    order: int = 2                   # highest derivative order checked
    domain: object = None            # maps raw normal samples into the op's domain
    rtol32: float = 2e-6
    diff: bool = True
    seeds: dict = field(default_factory=dict)

    def __str__(self):
        return self.name

    def sample(self, dtype, seed=0):
        rng = np.random.default_rng(seed)
        out = []
        for s in self.shapes:
            a = rng.standard_normal(s)
            if self.domain is not None:
                a = self.domain(a)
            out.append(a)
        return out


def _sp(a):
    return np.logaddexp(a, 0.0)


def _np_softmax(a, axis=-1):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_lse(a, axis=-1):
    m = a.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))).squeeze(axis)


OPS = [
    # unary
    OpSpec("neg", sm.neg, np.negative, [(3, 4)], order=1),
    OpSpec("exp", sm.exp, np.exp, [(3, 4)], order=3),
    OpSpec("log", sm.log, np.log, [(5,)], domain=positive),
    OpSpec("sin", sm.sin, np.sin, [(3, 4)], order=3),
    OpSpec("cos", sm.cos, np.cos, [(3, 4)]),
    OpSpec("tanh", sm.tanh, np.tanh, [(3, 4)], order=3),
    OpSpec("sigmoid", sm.sigmoid, lambda a: 1 / (1 + np.exp(-a)), [(3, 4)]),
    OpSpec("relu", sm.relu, lambda a: np.maximum(a, 0), [(3, 4)], order=1, domain=away_from_zero),
    OpSpec("softplus", sm.softplus, _sp, [(3, 4)]),
    OpSpec("sqrt", sm.sqrt, np.sqrt, [(5,)], domain=positive),
    OpSpec("abs", sm.abs, np.abs, [(7,)], order=1, domain=away_from_zero),
    OpSpec("square", sm.square, np.square, [(3, 4)]),
    OpSpec("reciprocal", sm.reciprocal, np.reciprocal, [(6,)], domain=away_from_zero),
    OpSpec("gelu", sm.gelu, lambda a: 0.5 * a * np.vectorize(math.erfc)(-a / math.sqrt(2)), [(6,)]),
    OpSpec("silu", sm.silu, lambda a: a / (1 + np.exp(-a)), [(6,)]),
    # binary
    OpSpec("add", sm.add, np.add, [(3, 4), (3, 4)], order=1),
    OpSpec("sub", sm.sub, np.subtract, [(3, 4), (4,)], order=1),
    OpSpec("mul", sm.mul, np.multiply, [(3, 4), (3, 1)]),
    OpSpec("div", sm.div, np.divide, [(3, 4), (4,)], domain=away_from_zero),
    OpSpec("pow", sm.pow, np.power, [(5,), (5,)], domain=positive),
    OpSpec("pow_const", lambda x: x ** 3.0, lambda a: a ** 3.0, [(5,)], order=3),
    # derivative products (the VJP/JVP kernels of relu, tanh, sigmoid, square)
    OpSpec("relu_grad", _EW.relu_grad, lambda a, b: a * (b > 0), [(3, 4), (3, 4)], domain=away_from_zero),
    OpSpec("tanh_grad", _EW.tanh_grad, lambda a, b: a * (1 - b * b), [(3, 4), (4,)], order=3),
    OpSpec("sigmoid_grad", _EW.sigmoid_grad, lambda a, b: a * b * (1 - b), [(3, 4), (3, 4)], order=3),
    OpSpec("twice_mul", _EW.twice_mul, lambda a, b: 2 * a * b, [(3, 1), (3, 4)]),
    OpSpec("maximum", sm.maximum, np.maximum, [(3, 4), (3, 4)], order=1),
    OpSpec("minimum", sm.minimum, np.minimum, [(3, 4), (4,)], order=1),
    OpSpec("clip", lambda x: sm.clip(x, -0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5), [(9,)], order=1,
           domain=lambda a: np.array([-2.0, -1.0, -0.3, -0.1, 0.05, 0.2, 0.4, 1.0, 3.0])),
    OpSpec("where", lambda x, y: sm.where(x > 0, x, y), lambda a, b: np.where(a > 0, a, b), [(3, 4), (4,)],
           domain=away_from_zero),
    # reductions
    OpSpec("sum", sm.sum, np.sum, [(3, 4)], order=1),
    OpSpec("sum_axis0", lambda x: sm.sum(x, 0), lambda a: a.sum(0), [(3, 4)], order=1),
    OpSpec("mean_keep", lambda x: sm.mean(x, -1, keepdims=True), lambda a: a.mean(-1, keepdims=True),
           [(3, 4)], order=1),
    OpSpec("max", lambda x: sm.max(x, 1), lambda a: a.max(1), [(3, 4)], order=1),
    OpSpec("min", lambda x: sm.min(x, (0, 2)), lambda a: a.min((0, 2)), [(2, 3, 4)], order=1),
    OpSpec("var", lambda x: sm.var(x, 0), lambda a: a.var(0), [(5, 3)]),
    # nn
    OpSpec("softmax", sm.softmax, _np_softmax, [(3, 5)], order=3),
    OpSpec("softmax_axis0", lambda x: sm.softmax(x, 0), lambda a: _np_softmax(a, 0), [(3, 5)]),
    OpSpec("log_softmax", lambda x: sm.log_softmax(x, 1), lambda a: np.log(_np_softmax(a, 1)), [(2, 3, 4)]),
    OpSpec("logsumexp", sm.logsumexp, _np_lse, [(3, 5)]),
    OpSpec("logsumexp_axis0", lambda x: sm.logsumexp(x, 0), lambda a: _np_lse(a, 0), [(3, 5)]),
    # linalg
    OpSpec("matmul", sm.matmul, np.matmul, [(3, 4), (4, 2)]),
    OpSpec("matmul_chain", lambda a, b: sm.tanh(a @ b) @ b.T, lambda a, b: np.tanh(a @ b) @ b.T,
           [(3, 4), (4, 4)], order=3),
    OpSpec("matmul_vec", sm.matmul, np.matmul, [(4,), (4, 3)]),
    OpSpec("matmul_batched", sm.matmul, np.matmul, [(2, 3, 4), (2, 4, 5)]),
    OpSpec("matmul_bcast", sm.matmul, np.matmul, [(2, 1, 3, 4), (3, 4, 2)]),
    OpSpec("matmul2", lambda a, b, c, d: _LA._mm2(a, b, c, d, ta=False, tb=True, tc=True, td=False),
           lambda a, b, c, d: a @ b.T + c.T @ d, [(3, 4), (2, 4), (5, 3), (5, 2)], order=3),
    OpSpec("matmul2_batched", lambda a, b, c, d: _LA._mm2(a, b, c, d, ta=True, tb=False, tc=False, td=True),
           lambda a, b, c, d: np.swapaxes(a, -1, -2) @ b + c @ np.swapaxes(d, -1, -2),
           [(2, 4, 3), (2, 4, 2), (2, 3, 5), (2, 2, 5)]),
    OpSpec("dot", sm.dot, lambda a, b: (a * b).sum(-1), [(5,), (5,)]),
    # shape
    OpSpec("reshape", lambda x: sm.reshape(x, (4, -1)), lambda a: a.reshape(4, -1), [(2, 3, 2)], order=1),
    OpSpec("transpose", lambda x: sm.transpose(x, (2, 0, 1)), lambda a: a.transpose(2, 0, 1), [(2, 3, 4)],
           order=1),
    OpSpec("T", lambda x: x.T * x.T, lambda a: a.T * a.T, [(3, 4)]),
    OpSpec("broadcast_to", lambda x: sm.broadcast_to(x, (2, 3, 4)), lambda a: np.broadcast_to(a, (2, 3, 4)),
           [(3, 1)], order=1),
    OpSpec("concat", lambda x, y: sm.concat([x, y], 1), lambda a, b: np.concatenate([a, b], 1),
           [(2, 3), (2, 2)], order=1),
    OpSpec("stack", lambda x, y: sm.stack([x, y], -1), lambda a, b: np.stack([a, b], -1), [(2, 3), (2, 3)],
           order=1),
    OpSpec("split", lambda x: sm.split(x, [1, 3], 1)[1] * 2.0, lambda a: np.split(a, [1, 3], 1)[1] * 2.0,
           [(2, 5)], order=1),
    OpSpec("squeeze", lambda x: sm.squeeze(x, 1), lambda a: a.squeeze(1), [(3, 1, 2)], order=1),
    OpSpec("unsqueeze", lambda x: sm.unsqueeze(x, -1), lambda a: a[..., None], [(3, 2)], order=1),
    OpSpec("moveaxis", lambda x: sm.moveaxis(x, 0, -1), lambda a: np.moveaxis(a, 0, -1), [(2, 3, 4)], order=1),
    OpSpec("getitem", lambda x: x[1:, ::-2] * x[0, ::-2], lambda a: a[1:, ::-2] * a[0, ::-2], [(3, 4)]),
    OpSpec("take", lambda x: sm.take(x, [2, 0, 2]) ** 2, lambda a: a[[2, 0, 2]] ** 2, [(3, 2)]),
]


def _tensors(arrs, dtype):
    return tuple(sm.tensor(a, dtype) for a in arrs)


@pytest.mark.parametrize("spec", OPS, ids=str)
def test_value_float64(spec):
    arrs = spec.sample("float64")
    got = spec.op(*_tensors(arrs, "float64"))
    want = spec.ref(*arrs)
    assert got.dtype == "float64"
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("spec", OPS, ids=str)
def test_value_float32(spec):
    arrs = spec.sample("float32")
    got = spec.op(*_tensors(arrs, "float32"))
    want = spec.ref(*[a.astype(np.float32) for a in arrs])
    assert got.dtype == "float32"
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("spec", [s for s in OPS if s.diff], ids=str)
def test_derivatives_match_finite_differences(spec):
    args = _tensors(spec.sample("float64", seed=1), "float64")
    check_grads(spec.op, args, order=spec.order)


# --- closed forms -------------------------------------------------------------------------
def test_second_derivative_of_sin_is_minus_sin():
    x = np.linspace(-2.0, 2.0, 7)
    d2 = sm.grad(lambda z: sm.grad(lambda y: sm.sin(y).sum())(z).sum())(sm.tensor(x))
    np.testing.assert_allclose(d2.numpy(), -np.sin(x), rtol=1e-12, atol=1e-15)


def test_third_derivative_of_sin_is_minus_cos():
    x = np.linspace(-2.0, 2.0, 5)
    f = sm.grad(lambda z: sm.grad(lambda y: sm.grad(lambda w: sm.sin(w).sum())(y).sum())(z).sum())
    np.testing.assert_allclose(f(sm.tensor(x)).numpy(), -np.cos(x), rtol=1e-12, atol=1e-15)


def test_derivatives_of_exp_tanh_closed_form():
    x = np.linspace(-1.5, 1.5, 6)
    d1 = sm.grad(lambda y: sm.tanh(y).sum())
    d2 = sm.grad(lambda y: d1(y).sum())
    t = np.tanh(x)
    np.testing.assert_allclose(d1(sm.tensor(x)).numpy(), 1 - t**2, rtol=1e-12)
    np.testing.assert_allclose(d2(sm.tensor(x)).numpy(), -2 * t * (1 - t**2), rtol=1e-10, atol=1e-14)
    e2 = sm.grad(lambda z: sm.grad(lambda y: sm.exp(y).sum())(z).sum())(sm.tensor(x))
    np.testing.assert_allclose(e2.numpy(), np.exp(x), rtol=1e-12)


# --- broadcasting -------------------------------------------------------------------------
BCAST = [((3, 4), ()), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1, 3), (2, 1)), ((1, 4), (3, 4)),
         ((0, 4), (4,)), ((2, 0), (2, 1)), ((), ()), ((5,), (1,))]


@pytest.mark.parametrize("xs,ys", BCAST, ids=str)
@pytest.mark.parametrize("op,ref", [(sm.add, np.add), (sm.mul, np.multiply), (sm.sub, np.subtract),
                                    (sm.maximum, np.maximum)], ids=["add", "mul", "sub", "maximum"])
def test_broadcasting_equals_numpy(xs, ys, op, ref):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(xs), rng.standard_normal(ys)
    for x, y in ((a, b), (b, a)):
        got = op(sm.tensor(x), sm.tensor(y))
        want = ref(x, y)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("xs,ys", [s for s in BCAST if 0 not in s[0] + s[1]], ids=str)
def test_broadcasting_gradients(xs, ys):
    rng = np.random.default_rng(1)
    x, y = sm.tensor(rng.standard_normal(xs)), sm.tensor(rng.standard_normal(ys))
    check_grads(lambda a, b: a * b + b, (x, y), order=2)


def test_where_broadcasts_all_three():
    c = np.array([True, False, True])
    a, b = np.arange(6.0).reshape(2, 3), np.array(-1.0)
    got = sm.where(sm.tensor(c), sm.tensor(a), sm.tensor(b))
    np.testing.assert_array_equal(got.numpy(), np.where(c, a, b))


@pytest.mark.parametrize("xs,ys", [((3,), (4,)), ((2, 3), (3, 2)), ((2, 3, 4), (3, 3, 4))], ids=str)
def test_bad_broadcast_raises(xs, ys):
    with pytest.raises(ValueError, match=r"add: shapes .* cannot be broadcast together"):
        sm.add(sm.zeros(xs), sm.zeros(ys))


def test_comparisons_are_bool_and_constant():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0])
    x, y = sm.tensor(a), sm.tensor(b)
    for got, want in ((x < y, a < b), (x <= y, a <= b), (x > y, a > b), (x >= y, a >= b), (x == y, a == b),
                      (x != y, a != b)):
        assert got.dtype == "bool"
        np.testing.assert_array_equal(got.numpy(), want)
    g = sm.grad(lambda z: sm.where(z > 1.5, z * z, z).sum())(x)
    np.testing.assert_allclose(g.numpy(), [1.0, 4.0, 6.0])


# --- reductions ---------------------------------------------------------------------------
RED_AXES = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2)]


@pytest.mark.parametrize("axis", RED_AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_reductions_equal_numpy(name, axis, keepdims):
    a = np.random.default_rng(2).standard_normal((2, 3, 4))
    got = getattr(sm, name)(sm.tensor(a), axis=axis, keepdims=keepdims)
    want = getattr(np, name)(a, axis=axis, keepdims=keepdims)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-13)


@pytest.mark.parametrize("axis", [None, 1, (-1, 0)], ids=str)
def test_reduction_gradients(axis):
    x = sm.tensor(np.random.default_rng(3).standard_normal((2, 3, 4)))
    check_grads(lambda t: sm.sum(t * t, axis=axis, keepdims=True), (x,), order=2)
    check_grads(lambda t: sm.max(t, axis=axis), (x,), order=1)


def test_large_sum_uses_chunks_and_matches_numpy():
    a = np.random.default_rng(4).standard_normal(200_000)
    np.testing.assert_allclose(sm.tensor(a).sum().item(), a.sum(), rtol=1e-10)
    np.testing.assert_allclose(sm.tensor(a).max().item(), a.max())


def test_max_gradient_splits_ties():
    g = sm.grad(lambda x: sm.max(x))(sm.tensor([1.0, 3.0, 3.0, 2.0]))
    np.testing.assert_allclose(g.numpy(), [0.0, 0.5, 0.5, 0.0])


# --- matmul -------------------------------------------------------------------------------
MM_SHAPES = [((3, 4), (4, 2)), ((5,), (5,)), ((5,), (5, 3)), ((3, 5), (5,)), ((2, 3, 4), (2, 4, 5)),
             ((2, 1, 3, 4), (3, 4, 2)), ((4, 3, 5), (5, 2)), ((7, 9), (9, 5)), ((1, 13), (13, 1)),
             ((17, 6), (6, 11)), ((3, 0), (0, 2))]


@pytest.mark.parametrize("blas", [True, False], ids=["blas", "taichi"])
@pytest.mark.parametrize("sa,sb", MM_SHAPES, ids=str)
def test_matmul_equals_numpy(sa, sb, blas):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    prev = LA.use_blas(blas)
    try:
        got = sm.tensor(a) @ sm.tensor(b)
        got32 = sm.tensor(a, "float32") @ sm.tensor(b, "float32")
    finally:
        LA.use_blas(prev)
    want = a @ b
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got32.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transpose_flags_taichi_gemm(ta, tb):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((7, 6)), rng.standard_normal((6, 9) if not tb else (9, 6))
    if ta:
        a = a.T.copy()
    prev = LA.use_blas(False)
    try:
        got = sm.matmul(sm.tensor(a), sm.tensor(b), transpose_a=ta, transpose_b=tb)
        check_grads(lambda x, y: sm.matmul(x, y, transpose_a=ta, transpose_b=tb),
                    (sm.tensor(a), sm.tensor(b)), order=1)
    finally:
        LA.use_blas(prev)
    np.testing.assert_allclose(got.numpy(), (a.T if ta else a) @ (b.T if tb else b), rtol=1e-12)


def test_matmul_gradients_on_taichi_gemm():
    rng = np.random.default_rng(7)
    prev = LA.use_blas(False)
    try:
        check_grads(sm.matmul, (sm.tensor(rng.standard_normal((5, 3))), sm.tensor(rng.standard_normal((3, 6)))),
                    order=2)
    finally:
        LA.use_blas(prev)


# --- softmax family on every axis ---------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_softmax_family_any_axis(axis):
    a = np.random.default_rng(8).standard_normal((2, 3, 4)) * 3
    x = sm.tensor(a)
    np.testing.assert_allclose(sm.softmax(x, axis).numpy(), _np_softmax(a, axis), rtol=1e-12)
    np.testing.assert_allclose(sm.log_softmax(x, axis).numpy(), np.log(_np_softmax(a, axis)), rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_allclose(sm.logsumexp(x, axis).numpy(), _np_lse(a, axis), rtol=1e-12)
    np.testing.assert_allclose(sm.logsumexp(x, axis, keepdims=True).numpy(),
                               np.expand_dims(_np_lse(a, axis), axis), rtol=1e-12)
    check_grads(lambda t: sm.softmax(t, axis) * t, (x,), order=1)


def test_softmax_is_stable_for_large_inputs():
    a = np.array([[1000.0, 1001.0, 999.0]])
    np.testing.assert_allclose(sm.softmax(sm.tensor(a)).numpy(), _np_softmax(a), rtol=1e-12)
    np.testing.assert_allclose(sm.logsumexp(sm.tensor(a)).numpy(), _np_lse(a), rtol=1e-12)


def test_fast_launch_guards_fall_back_to_taichi():
    from sciml.kernels import _common as C
    from sciml.kernels import elementwise as E
    k = C.cached(("test_unary_neg_f64",), lambda: E._build_unary("neg", "float64", True))
    x, out = np.arange(6.0), np.empty(6)
    k(x, out, 6)
    k(x, out, 6)  # fast path
    np.testing.assert_array_equal(out, -x)
    with pytest.raises(ValueError, match="Non contiguous"):  # the guard hands it to Taichi, which rejects it
        k(np.arange(12.0)[::2], out, 6)
    with pytest.raises(ValueError, match="dtype"):
        k(np.arange(6, dtype=np.float32), out, 6)


@pytest.mark.parametrize("n", [16_387, 100_003])
def test_vectorised_float32_tanh_sigmoid_large(n):
    a = np.random.default_rng(9).standard_normal(n).astype(np.float32) * 4
    a[:3] = [0.0, 1e-5, -3e-4]
    x = sm.tensor(a, "float32")
    np.testing.assert_allclose(sm.tanh(x).numpy(), np.tanh(a.astype(np.float64)), rtol=1e-6, atol=5e-7)
    np.testing.assert_allclose(sm.sigmoid(x).numpy(), 1 / (1 + np.exp(-a.astype(np.float64))), rtol=1e-6,
                               atol=5e-7)


def test_pow_of_negative_base_with_integral_exponent_matches_numpy():
    x = np.array([-2.0, -1.5, 0.0, 1.5])
    for p in (3.0, 4.0, -2.0):
        with np.errstate(divide="ignore"):  # 0 ** -2 = inf in both
            np.testing.assert_allclose((sm.tensor(x) ** sm.tensor(np.full(4, p))).numpy(), x ** p)
    assert np.isnan((sm.tensor([-2.0]) ** sm.tensor([0.5])).numpy()[0])


# --- new elementwise ops (issue 17) and the numerical conventions of docs/CORE.md (issue 13) -----------------
import scipy.special as _sps  # noqa: E402


def _gt1(a):
    return np.abs(a) + 1.2


NEW_OPS = [  # (name, op, numpy/scipy reference, domain)
    ("log1p", sm.log1p, np.log1p, lambda a: np.abs(a) * 0.5 - 0.4),
    ("expm1", sm.expm1, np.expm1, None),
    ("erf", sm.erf, _sps.erf, None),
    ("erfc", sm.erfc, _sps.erfc, None),
    ("tan", sm.tan, np.tan, lambda a: np.tanh(a) * 1.2),
    ("sinh", sm.sinh, np.sinh, None),
    ("cosh", sm.cosh, np.cosh, None),
    ("arcsin", sm.arcsin, np.arcsin, unit),
    ("arccos", sm.arccos, np.arccos, unit),
    ("arctan", sm.arctan, np.arctan, None),
    ("arcsinh", sm.arcsinh, np.arcsinh, None),
    ("arccosh", sm.arccosh, np.arccosh, _gt1),
    ("arctanh", sm.arctanh, np.arctanh, unit),
    ("gelu", sm.gelu, lambda a: a * 0.5 * _sps.erfc(-a / np.sqrt(2)), None),
]


@pytest.mark.parametrize("name,op,ref,domain", NEW_OPS, ids=[n[0] for n in NEW_OPS])
def test_new_elementwise_ops_values_and_derivatives(name, op, ref, domain):
    a = np.random.default_rng(3).standard_normal((2, 3)) * 1.5
    a = domain(a) if domain else a
    np.testing.assert_allclose(op(sm.tensor(a)).numpy(), ref(a), rtol=1e-13, atol=1e-15)
    got32 = op(sm.tensor(a, "float32"))
    assert got32.dtype == "float32"
    np.testing.assert_allclose(got32.numpy(), ref(a.astype(np.float32).astype(np.float64)), rtol=3e-6, atol=1e-7)
    check_grads(op, (sm.tensor(a),), order=2)
    assert getattr(sm.tensor(a), name)().shape == a.shape if hasattr(sm.Tensor, name) else True


def test_atan2_values_quadrants_and_derivatives():
    y = np.array([1.0, -1.0, 1.0, -1.0, 0.0, -0.0, 0.0, -0.0, 2.0])
    x = np.array([1.0, 1.0, -1.0, -1.0, 0.0, 0.0, -0.0, -0.0, -3.0])
    np.testing.assert_array_equal(sm.atan2(sm.tensor(y), sm.tensor(x)).numpy(), np.arctan2(y, x))
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3,)), rng.standard_normal((3,)) + 2.0
    check_grads(sm.atan2, (sm.tensor(a), sm.tensor(b)), order=2)
    np.testing.assert_allclose(sm.atan2(sm.tensor([1, 2]), sm.tensor([3, 4])).numpy(), np.arctan2([1, 2], [3, 4]))


def test_gelu_exact_by_default_and_tanh_form_on_request():
    a = np.linspace(-4, 4, 9)
    exact = a * 0.5 * _sps.erfc(-a / np.sqrt(2))  # 1 + erf(.) would cancel below 0
    tanh_form = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))
    np.testing.assert_allclose(sm.gelu(sm.tensor(a)).numpy(), exact, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(sm.gelu(sm.tensor(a), approximate="tanh").numpy(), tanh_form, rtol=1e-13, atol=1e-15)
    check_grads(lambda t: sm.gelu(t, approximate="tanh"), (sm.tensor(a),), order=2)
    with pytest.raises(ValueError, match="approximate"):
        sm.gelu(sm.tensor(a), approximate="fast")


def test_integer_division_is_true_division():
    r = sm.tensor([1, 2, -7]) / sm.tensor([0, 3, 2])
    assert r.dtype == sm.default_dtype()
    np.testing.assert_array_equal(r.numpy(), np.array([1, 2, -7]) / np.array([0, 3, 2]))
    np.testing.assert_array_equal((1 / sm.tensor([4, 0])).numpy(), [0.25, np.inf])


def test_integer_power():
    r = sm.tensor([-3, 2]) ** 2
    assert r.dtype == "int32"
    np.testing.assert_array_equal(r.numpy(), [9, 4])
    np.testing.assert_array_equal((sm.tensor([-2, 3, 0]) ** sm.tensor([3, 0, 5])).numpy(), [-8, 1, 0])
    np.testing.assert_allclose((sm.tensor([4, 9]) ** 0.5).numpy(), [2.0, 3.0])
    with pytest.raises(ValueError, match="negative integer powers"):
        sm.tensor([2, 3]) ** -1


def test_convention_pow_derivatives_follow_pytorch():
    x = sm.tensor([0.0, 2.0, -1.5])
    np.testing.assert_array_equal(sm.grad(lambda z: (z ** 0).sum())(x).numpy(), [0.0, 0.0, 0.0])   # d/dx x**0 = 0
    y0 = sm.tensor([0.0, 0.0, 0.0])
    np.testing.assert_array_equal(sm.grad(lambda z: (z ** y0).sum())(x).numpy(), [0.0, 0.0, 0.0])  # tensor exponent
    # d/dy x**y at x = 0: 0 for y >= 0; x < 0: NaN (log of a negative), as PyTorch
    gy = sm.grad(lambda y: (x ** y).sum())(sm.tensor([2.0, 2.0, 2.0])).numpy()
    assert gy[0] == 0.0 and np.isclose(gy[1], 4 * np.log(2)) and np.isnan(gy[2])
    np.testing.assert_allclose(sm.grad(lambda z: (z ** 3).sum())(x).numpy(), 3 * x.numpy() ** 2)
    check_grads(lambda a, b: a ** b, (sm.tensor([0.5, 1.5, 2.0]), sm.tensor([0.3, -1.2, 2.5])), order=2)


def test_convention_clip_relu_abs_sign_at_kinks():
    x = sm.tensor([-1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
    g = sm.grad(lambda z: sm.clip(z, -0.5, 1.0).sum())(x).numpy()
    np.testing.assert_array_equal(g, [0, 1, 1, 1, 1, 0])   # 1 on [lo, hi], bounds included (PyTorch's clamp)
    np.testing.assert_array_equal(sm.clip(sm.tensor([np.nan, 3.0]), 0.0, 1.0).numpy(), [np.nan, 1.0])
    np.testing.assert_array_equal(sm.clip(sm.tensor([0.5]), 2.0, 1.0).numpy(), [1.0])   # lo > hi: hi (numpy)
    z = sm.tensor([0.0, -0.0])
    np.testing.assert_array_equal(sm.grad(lambda t: sm.relu(t).sum())(z).numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(sm.grad(lambda t: sm.abs(t).sum())(z).numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(sm.grad(lambda t: sm.sign(t).sum())(x).numpy(), np.zeros(6))
    np.testing.assert_array_equal(sm.grad(lambda t: sm.floor(t).sum())(x).numpy(), np.zeros(6))


def test_convention_max_ties_share_the_gradient():
    x = sm.tensor([1.0, 3.0, 3.0, 2.0])
    np.testing.assert_array_equal(sm.grad(lambda z: sm.max(z))(x).numpy(), [0, 0.5, 0.5, 0])
    np.testing.assert_array_equal(sm.grad(lambda z: sm.min(z))(sm.tensor([1.0, 1.0, 2.0])).numpy(), [0.5, 0.5, 0])
    a, b = sm.tensor([1.0, 2.0, np.nan]), sm.tensor([1.0, 1.0, 0.0])
    ga, gb = sm.grad(lambda u, v: sm.maximum(u, v).sum(), argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(ga.numpy(), [0.5, 1.0, np.nan])
    np.testing.assert_array_equal(gb.numpy(), [0.5, 0.0, np.nan])
    assert np.isnan(sm.grad(lambda z: sm.max(z))(sm.tensor([1.0, np.nan])).numpy()).all()


def test_convention_nan_in_nan_out_for_derivatives():
    x = sm.tensor([np.nan, 1.0])
    for f in (sm.relu, sm.tanh, sm.sigmoid, sm.exp, sm.abs, sm.sqrt, sm.erf, sm.softplus):
        g = sm.grad(lambda z: f(z).sum())(x).numpy()
        assert np.isnan(g[0]) and np.isfinite(g[1]), f.__name__


def test_logsumexp_softmax_conventions_and_axis_errors():
    assert sm.logsumexp(sm.tensor(np.zeros(0))).numpy() == -np.inf
    assert sm.logsumexp(sm.tensor([-np.inf, -np.inf])).numpy() == -np.inf
    assert sm.logsumexp(sm.tensor([np.inf, 0.0])).numpy() == np.inf
    assert np.isnan(sm.logsumexp(sm.tensor([np.nan, 0.0])).numpy())
    np.testing.assert_array_equal(sm.grad(lambda z: sm.logsumexp(z))(sm.tensor([-np.inf, 0.0])).numpy(), [0.0, 1.0])
    x = sm.tensor(np.ones((2, 3)))
    for f in (sm.softmax, sm.log_softmax, sm.logsumexp):
        with pytest.raises(Exception, match="axis"):
            f(x, axis=2)
        with pytest.raises(Exception, match="axis"):
            f(x, axis=-3)
    np.testing.assert_allclose(sm.logsumexp(x, axis=-2).numpy(), np.log(2) + np.ones(3))
    np.testing.assert_allclose(sm.logsumexp(x, axis=None).numpy(), np.log(6) + 1)
    assert sm.logsumexp(sm.tensor(2.0), axis=None).numpy() == 2.0
