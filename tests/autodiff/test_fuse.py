"""sciml.fuse: fused == composed (values in float64/float32, derivatives to third order), errors."""
import os

import numpy as np
import pytest

import sciml as sm
from sciml.kernels import fused as KF
from sciml.testing import check_grads


def _chain(a, b, c):
    return sm.tanh(a * b + c)


def _mixed(x, s):
    return sm.exp(-x * x / s) * 2.0 + sm.sin(x) ** 2 - sm.sqrt(sm.abs(x) + 1.0) + sm.maximum(x, 0.1)


def _all_unary(x):
    y = sm.sigmoid(x) + sm.softplus(x) + sm.relu(x) + sm.cos(x) - sm.log(sm.square(x) + 1.0)
    return y * sm.reciprocal(2.0 + sm.abs(x)) - sm.minimum(x, -x) + (-x) ** 3.0


FUSED = {"chain": (_chain, 3), "mixed": (_mixed, 1), "all_unary": (_all_unary, 1)}


def _args(name, dtype, n=(4, 5), seed=0):
    rng = np.random.default_rng(seed)
    fn, k = FUSED[name]
    xs = [sm.tensor(rng.standard_normal(n), dtype) for _ in range(k)]
    if name == "mixed":
        xs.append(1.7)
    return fn, xs


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_equals_composed_float64(name):
    fn, xs = _args(name, "float64")
    f = sm.fuse(fn)
    np.testing.assert_allclose(f(*xs).numpy(), fn(*xs).numpy(), rtol=1e-14, atol=1e-15)
    # second call hits the cache; another shape reuses the kernel
    fn2, xs2 = _args(name, "float64", n=(7,), seed=1)
    np.testing.assert_allclose(f(*xs2).numpy(), fn(*xs2).numpy(), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_equals_composed_float32(name):
    fn, xs = _args(name, "float32")
    got = sm.fuse(fn)(*xs)
    assert got.dtype == "float32"
    np.testing.assert_allclose(got.numpy(), fn(*xs).numpy(), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_derivatives_match_finite_differences(name):
    fn, xs = _args(name, "float64", n=(5,), seed=2)
    f = sm.fuse(fn)
    tensors = [x for x in xs if isinstance(x, sm.Tensor)]
    rest = xs[len(tensors):]
    check_grads(lambda *t: f(*t, *rest), tuple(tensors), order=2)


def test_fused_third_order_equals_composed():
    x = sm.tensor(np.linspace(-1.0, 1.0, 4))
    b, c = sm.tensor([0.5, -1.0, 2.0, 0.3]), sm.tensor([0.1, 0.2, -0.3, 0.0])
    f = sm.fuse(_chain)

    def d3(g):
        return sm.grad(lambda z: sm.grad(lambda y: sm.grad(lambda w: g(w, b, c).sum())(y).sum())(z).sum())(x)
    np.testing.assert_allclose(d3(f).numpy(), d3(_chain).numpy(), rtol=1e-12, atol=1e-13)
    H = sm.hessian(lambda w: f(w, b, c).sum())(x)
    np.testing.assert_allclose(H.numpy(), sm.hessian(lambda w: _chain(w, b, c).sum())(x).numpy(), rtol=1e-12,
                               atol=1e-14)
    _, t = sm.jvp(lambda w: f(w, b, c), (x,), (sm.ones(4),))
    _, t2 = sm.jvp(lambda w: _chain(w, b, c), (x,), (sm.ones(4),))
    np.testing.assert_allclose(t.numpy(), t2.numpy(), rtol=1e-14)


def test_fused_scalar_tensor_argument_gets_gradient():
    f = sm.fuse(lambda x, s: x * s + s * s)
    x, s = sm.tensor([1.0, 2.0, 3.0]), sm.tensor(0.5)
    gx, gs = sm.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(x, s)
    np.testing.assert_allclose(gx.numpy(), [0.5] * 3)
    assert gs.shape == ()
    np.testing.assert_allclose(gs.item(), 6.0 + 3.0)


def test_fused_kernel_source_is_cached_on_disk():
    sm.fuse(_chain)(*_args("chain", "float64")[1])
    files = os.listdir(KF.cache_dir())
    assert any(f.startswith("sciml_fused_") and f.endswith(".py") for f in files)
    src = KF.source((("mul", ("x0", "x1")), ("add", ("v0", "x2")), ("tanh", ("v1",))), 3, 0)
    assert "F_tanh(v1)" in src and "@ti.kernel" in src


def test_fuse_errors():
    x = sm.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"fuse\(<lambda>\): op '(sum|reshape)' is not an elementwise op"):
        sm.fuse(lambda a: sm.exp(a.sum()) * a)(x)
    with pytest.raises(ValueError, match=r"argument 1 has shape \(3,\); fused functions take Tensors of one shape"):
        sm.fuse(lambda a, b: a + b)(x, sm.zeros(3))
    with pytest.raises(TypeError, match=r"argument 1 has dtype float32; expected float64"):
        sm.fuse(lambda a, b: a + b)(x, sm.zeros(2, "float32"))
    with pytest.raises(TypeError, match="argument 0 has type str"):
        sm.fuse(lambda a: a)("x")
    y = sm.zeros(2)
    with pytest.raises(ValueError, match=r"captured Tensor of shape \(2,\); pass it as an argument"):
        sm.fuse(lambda a: a * y)(x)
    with pytest.raises(ValueError, match="returned an input or a constant"):
        sm.fuse(lambda a: a)(x)


@pytest.mark.parametrize("expr", ["tanh(x*y+z)", "(x*y+z)*x-y*z", "sigmoid(x*s)*y - relu(z) + maximum(x, 0.1)",
                                  "square(x)/(1.0 + reciprocal(y*y + 2.0)) - minimum(z, s)",
                                  "-x + exp(y) * s"])  # the last is not vectorisable: scalar kernel
def test_fused_float32_large_vectorised_path_equals_composed(expr):
    env = {k: getattr(sm, k) for k in ("tanh", "sigmoid", "relu", "maximum", "minimum", "square", "reciprocal",
                                       "exp")}
    fn = eval("lambda x, y, z, s: " + expr, env)  # noqa: S307 - test expressions
    rng = np.random.default_rng(5)
    n = 20_003  # above the vectorised-kernel threshold, with a ragged tail
    x, y, z = (sm.tensor(rng.standard_normal(n), "float32") for _ in range(3))
    got = sm.fuse(fn)(x, y, z, 1.5)
    np.testing.assert_allclose(got.numpy(), fn(x, y, z, 1.5).numpy(), rtol=2e-6, atol=2e-6)


def test_fused_backward_is_fused_and_exact():
    """The VJP of a fused chain runs as fused kernels (one per input), equal to the unfused rules."""
    from sciml.autodiff import fuse as F
    sm.init(arch="cpu", dtype="float64")
    body = lambda a, b: 100.0 * (b - a * a) ** 2 + sm.tanh(a) * sm.relu(b) + sm.sigmoid(a - b)  # noqa: E731
    f = sm.fuse(body)
    rng = np.random.default_rng(0)
    a, b = (sm.tensor(rng.standard_normal(50)) for _ in range(2))
    ga, gb = sm.grad(lambda u, v: f(u, v).sum(), argnums=(0, 1))(a, b)
    ra, rb = sm.grad(lambda u, v: body(u, v).sum(), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga.numpy(), ra.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb.numpy(), rb.numpy(), rtol=1e-12, atol=1e-12)
    assert F._grad_fns.get((body, 0)) is not None and F._grad_fns.get((body, 1)) is not None
    # second order through the fused backward (its own rules are the composite's)
    H = sm.hessian(lambda u: f(u, b).sum())(a).numpy()
    Hr = sm.hessian(lambda u: body(u, b).sum())(a).numpy()
    np.testing.assert_allclose(H, Hr, rtol=1e-10, atol=1e-10)
    g2 = sm.grad(lambda u: sm.grad(lambda w: f(w, b).sum())(u).sum())(a).numpy()
    np.testing.assert_allclose(g2, Hr.sum(0), rtol=1e-10, atol=1e-10)


def test_fused_backward_falls_back_when_not_fusable():
    """Scalar arguments (their cotangent is a sum) and comparisons keep the unfused rules."""
    sm.init(arch="cpu", dtype="float64")
    rng = np.random.default_rng(1)
    a = sm.tensor(rng.standard_normal(20))
    s = sm.tensor(0.7)
    f = sm.fuse(lambda x, c: x * c + sm.maximum(x, c))
    g = sm.grad(lambda x, c: f(x, c).sum(), argnums=(0, 1))(a, s)
    r = sm.grad(lambda x, c: (x * c + sm.maximum(x, c)).sum(), argnums=(0, 1))(a, s)
    for u, v in zip(g, r):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-12)
