"""vmap equals a Python loop for every public elementwise, comparison, reduction and array op (values, and the
per-example gradient of a scalar function of each), float64. Complements test_vmap.py's structural cases."""
import numpy as np
import pytest

import sciml as sm

R = np.random.default_rng(7)
B = 3
X = R.uniform(0.2, 0.9, (B, 4, 5))      # inside every unary op's domain (arcsin, arccosh via 1 + x, log)
Y = R.uniform(0.2, 0.9, (B, 4, 5))

UNARY = ["abs", "arccos", "arcsin", "arcsinh", "arctan", "arctanh", "cos", "cosh", "erf", "erfc", "exp", "expm1",
         "floor", "gelu", "log", "log1p", "neg", "reciprocal", "relu", "sigmoid", "sign", "silu", "sin", "sinh",
         "softplus", "sqrt", "square", "tan", "tanh"]
BINARY = ["add", "sub", "mul", "div", "minimum", "maximum", "atan2", "pow"]
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
SMOOTH_SKIP = {"abs", "floor", "relu", "sign"}   # piecewise: gradients at the sampled points are fine too, kept


def _loop(f, *args):
    return np.stack([np.asarray(f(*(sm.tensor(a[i]) for a in args)).numpy()) for i in range(B)])


def _check(f, *args, grad=True):
    got = sm.vmap(f)(*(sm.tensor(a) for a in args)).numpy()
    np.testing.assert_allclose(got, _loop(f, *args), rtol=1e-12, atol=1e-14)
    if grad:
        g = lambda *t: sm.sum(f(*t) * 1.0)
        gv = sm.vmap(sm.grad(g))(*(sm.tensor(a) for a in args)).numpy()
        np.testing.assert_allclose(gv, _loop(sm.grad(g), *args), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", UNARY)
def test_unary(name):
    f = getattr(sm, name)
    _check((lambda x: f(1.0 + x)) if name == "arccosh" else f, X)


@pytest.mark.parametrize("name", BINARY)
def test_binary(name):
    _check(getattr(sm, name), X, Y)


@pytest.mark.parametrize("name", COMPARE)
def test_compare(name):
    f = getattr(sm, name)
    _check(lambda x, y: sm.where(f(x, y), x, y), X, np.round(Y, 1))


@pytest.mark.parametrize("name,kw", [("sum", {"axis": 1}), ("mean", {"axis": 0}), ("max", {"axis": 1}),
                                     ("min", {"axis": 0}), ("prod", {"axis": 1}), ("std", {"axis": 1}),
                                     ("var", {"axis": 0}), ("logsumexp", {"axis": 1}), ("softmax", {"axis": 0}),
                                     ("log_softmax", {"axis": 1}), ("cumsum", {"axis": 1}),
                                     ("cumprod", {"axis": 0})])
def test_reductions_and_scans(name, kw):
    f = getattr(sm, name)
    _check(lambda x: f(x, **kw), X)


@pytest.mark.parametrize("name,f,grad", [
    ("clip", lambda x: sm.clip(x, 0.3, 0.7), True),
    ("transpose", lambda x: sm.transpose(x), True),
    ("moveaxis", lambda x: sm.moveaxis(x, 0, 1), True),
    ("reshape", lambda x: sm.reshape(x, (5, 4)), True),
    ("flip", lambda x: sm.flip(x, axis=1), True),
    ("roll", lambda x: sm.roll(x, 2, axis=1), True),
    ("tile", lambda x: sm.tile(x, (1, 2)), True),
    ("repeat", lambda x: sm.repeat(x, 2, axis=0), True),
    ("pad", lambda x: sm.pad(x, ((1, 0), (0, 2))), True),
    ("unsqueeze_squeeze", lambda x: sm.squeeze(sm.unsqueeze(x, 0), 0), True),
    ("broadcast_to", lambda x: sm.broadcast_to(x[0], (3, 5)), True),
    ("outer", lambda x: sm.outer(x[0], x[1]), True),
    ("dot", lambda x: sm.dot(x[0], x[1]), True),
    ("diag_trace", lambda x: sm.trace(x[:, :4]) + sm.sum(sm.diag(x[:, :4])), True),
    ("kron", lambda x: sm.kron(x[:2, :2], x[2:, 3:]), True),
    ("cross", lambda x: sm.cross(x[0, :3], x[1, :3]), True),
    ("take_along_axis", lambda x: sm.take_along_axis(x, sm.argsort(x, axis=1), axis=1), True),
    ("sort", lambda x: sm.sort(x, axis=1), True),
    ("argmax_argmin", lambda x: sm.argmax(x, axis=1) + sm.argmin(x, axis=1), False),
    ("any_all", lambda x: sm.where(sm.any(x > 0.5, axis=1), 1.0, 0.0) + sm.where(sm.all(x > 0.3, axis=1), 1.0, 0.0),
     False),
    ("isfinite", lambda x: sm.where(sm.isfinite(x), x, 0.0) + sm.where(sm.isnan(x), 1.0, 0.0)
     + sm.where(sm.isinf(x), 1.0, 0.0), True),
    ("fancy_batched_index", lambda x: x[np.arange(4)[:, None], sm.astype(sm.argsort(-x, axis=1), "int32")], True),
    ("concat_stack", lambda x: sm.stack([sm.concat([x, x], axis=0), sm.concat([x, -x], axis=0)]), True),
    ("einsum", lambda x: sm.einsum("ij,kj->ik", x, x), True),
    ("matmul", lambda x: x @ sm.transpose(x), True),
])
def test_array_ops(name, f, grad):
    _check(f, X, grad=grad)


def test_a_batched_boolean_mask_is_a_clear_error():
    with pytest.raises(IndexError, match="vmap"):
        sm.vmap(lambda x: x[x > 0.5])(sm.tensor(X))
