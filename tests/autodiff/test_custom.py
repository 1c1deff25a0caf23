"""custom_vjp / custom_jvp / checkpoint (sciml/autodiff/custom.py) and pytree registration
(sciml/autodiff/pytree.py, sciml.tree_util): values, derivatives to second order against finite
differences, closed forms, composition with jit, errors."""
import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import sciml as sm
from sciml.testing import check_grads

rng = np.random.default_rng(0)
X = sm.tensor(rng.standard_normal(4), "float64")
Y = sm.tensor(rng.standard_normal(4), "float64")


def make_sin_mul():
    @sm.custom_vjp
    def f(x, y):
        return sm.sin(x) * y

    def fwd(x, y):
        return f(x, y), (x, y)

    def bwd(res, g):
        x, y = res
        return g * sm.cos(x) * y, g * sm.sin(x)
    f.defvjp(fwd, bwd)
    return f


def test_custom_vjp_matches_the_function_to_second_order():
    f = make_sin_mul()
    np.testing.assert_allclose(f(X, Y).numpy(), np.sin(X.numpy()) * Y.numpy())
    check_grads(f, (X, Y), order=2)
    h = sm.hessian(lambda x: f(x, Y).sum())(X).numpy()
    np.testing.assert_allclose(h, np.diag(-np.sin(X.numpy()) * Y.numpy()), atol=1e-12)


def test_custom_vjp_rule_is_used():
    @sm.custom_vjp
    def clip_gradient(x):
        return x
    clip_gradient.defvjp(lambda x: (x, None), lambda res, g: (sm.clip(g, -1.0, 1.0),))
    g = sm.grad(lambda x: (clip_gradient(x) * 5.0).sum())(X)
    np.testing.assert_allclose(g.numpy(), np.ones(4))


def test_custom_vjp_pytree_output_and_nondiff_arg():
    @sm.custom_vjp
    def f(x, y):
        return {"a": x * y, "b": (sm.exp(x),)}

    def fwd(x, y):
        return f(x, y), (x, y)

    def bwd(res, g):
        x, y = res
        return g["a"] * y + g["b"][0] * sm.exp(x), g["a"] * x
    f.defvjp(fwd, bwd)
    check_grads(lambda x, y: f(x, y)["a"] + f(x, y)["b"][0], (X, Y), order=2)

    def scale_fn(k, x):
        return x * k
    s = sm.custom_vjp(scale_fn, nondiff_argnums=(0,))
    s.defvjp(lambda k, x: (scale_fn(k, x), None), lambda k, res, g: (g * k * 10.0,))
    np.testing.assert_allclose(sm.grad(lambda x: s(2.0, x).sum())(X).numpy(), np.full(4, 20.0))


def test_custom_jvp_forward_and_transposed_reverse():
    @sm.custom_jvp
    def log1pexp(x):
        return sm.log(1.0 + sm.exp(x))

    @log1pexp.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return log1pexp(x), t * sm.sigmoid(x)
    check_grads(log1pexp, (X,), order=2)
    big = sm.tensor([800.0], "float64")  # the rule avoids exp overflow in the derivative
    assert np.isfinite(sm.grad(lambda x: log1pexp(x).sum())(big).numpy()).all()

    @sm.custom_jvp
    def f(x, y):
        return x * y

    @f.defjvp
    def _(p, t):
        return f(*p), t[0] * p[1] + p[0] * t[1] + 0.0 * t[0]
    check_grads(f, (X, Y), order=2)


def test_checkpoint_equals_the_function_and_stores_no_intermediates():
    a = sm.tensor(rng.standard_normal((3, 3)), "float64")
    b = sm.tensor(rng.standard_normal((3, 2)), "float64")
    body = lambda p, q: sm.tanh(p @ q) * sm.sin(q)
    h = sm.checkpoint(body)
    np.testing.assert_allclose(h(a, b).numpy(), body(a, b).numpy())
    check_grads(h, (a, b), order=2)
    for g1, g2 in zip(sm.grad(lambda p, q: h(p, q).sum(), (0, 1))(a, b),
                      sm.grad(lambda p, q: body(p, q).sum(), (0, 1))(a, b)):
        np.testing.assert_allclose(g1.numpy(), g2.numpy(), atol=1e-14)
    seen = []
    sm.grad(lambda p: _record(seen, h(p, b)).sum())(a)
    assert seen[0].startswith("checkpoint") and seen[1] == 2  # one node, fed by the arguments only
    two = sm.checkpoint(lambda p, n: (p * n, sm.sin(p)), static_argnums=(1,))
    check_grads(lambda p: two(p, 3)[0] + two(p, 3)[1], (a,), order=2)


def _record(seen, out):
    seen += [out._node.prim.name, len(out._node.inputs)]
    return out


def test_jit_of_grad_through_custom_rules():
    f = make_sin_mul()
    g = sm.jit(sm.grad(lambda x, y: f(x, y).sum()))
    np.testing.assert_allclose(g(X, Y).numpy(), np.cos(X.numpy()) * Y.numpy())
    np.testing.assert_allclose(g(Y, X).numpy(), np.cos(Y.numpy()) * X.numpy())


def test_custom_errors():
    @sm.custom_vjp
    def f(x):
        return x
    with pytest.raises(TypeError, match="defvjp"):
        sm.grad(lambda x: f(x).sum())(X)
    f.defvjp(lambda x: (x, None), lambda r, g: g)  # not a tuple
    with pytest.raises(ValueError, match="one cotangent per"):
        sm.grad(lambda x: f(x).sum())(X)


@sm.tree_util.register_dataclass(meta_fields=["name"])
@dataclasses.dataclass
class Params:
    w: sm.Tensor
    b: sm.Tensor
    name: str = "layer"


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


sm.tree_util.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda aux, ch: Pair(*ch))


class NT(NamedTuple):
    u: sm.Tensor
    v: sm.Tensor


def test_pytree_registration_with_transforms():
    p = Params(X, Y)
    g = sm.grad(lambda q: (q.w * sm.sin(q.b)).sum())(p)
    assert isinstance(g, Params)
    np.testing.assert_allclose(g.w.numpy(), np.sin(Y.numpy()))
    np.testing.assert_allclose(g.b.numpy(), X.numpy() * np.cos(Y.numpy()))
    leaves, tdef = sm.tree_util.tree_flatten(p)
    assert len(leaves) == 2  # name is static (a meta field)
    pair = sm.grad(lambda q: (q.a * q.b).sum())(Pair(X, Y))
    assert isinstance(pair, Pair)
    np.testing.assert_allclose(pair.a.numpy(), Y.numpy())
    nt = sm.tree_util.tree_map(lambda t: t * 2.0, NT(X, Y))
    assert isinstance(nt, NT)
    f = sm.jit(lambda q: q.w * q.b)
    np.testing.assert_allclose(f(p).numpy(), (X * Y).numpy())
    assert sm.tree_util.tree_unflatten(tdef, leaves).name == "layer"
    with pytest.raises(TypeError, match="not a dataclass"):
        sm.tree_util.register_dataclass(Pair)
