"""d / grad / div / laplacian on networks with known closed-form derivatives, on every
derivative path (fused Taylor kernels, generic nested autodiff, autodiff through apply)."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.pinn import Interval, Problem, Rectangle, TimeInterval, d, div, grad, laplacian
from sciml.pinn.problem import Batch, Loss

PATHS = ["fused", "generic", "autodiff"]


def _sin_net(W, b, v, c):
    """An MLP with one sin layer: u(z) = sum_k v_k sin(z . W[:, k] + b_k) + c."""
    net = MLP([W.shape[0], W.shape[1], 1], activation=sm.sin, seed=0)
    p = net.params()
    p["layers"]["0"]["weight"]._assign(W)
    p["layers"]["0"]["bias"]._assign(b)
    p["layers"]["1"]["weight"]._assign(v[:, None])
    p["layers"]["1"]["bias"]._assign(np.array([c]))
    return net


def _capture(domain, residual_fn, net, pts, path, outputs=1):
    """Run the residual once through the solver's machinery; return what it captured."""
    seen = {}

    def residual(u, x, t):
        seen.update(residual_fn(u, x, t))
        return u * 0.0
    pb = Problem(domain, residual, outputs=outputs)
    loss = Loss(pb, net, Batch(pb, pts, [], "float64"), path)
    loss.terms({"net": net.params()})
    return {k: v.numpy()[:, 0] if v.ndim == 2 else v.numpy() for k, v in seen.items()}, loss


@pytest.mark.parametrize("path", PATHS)
def test_first_second_and_mixed_derivatives_of_a_sin_network(path):
    rng = np.random.default_rng(0)
    W, b, v = rng.normal(size=(2, 3)), rng.normal(size=3), rng.normal(size=3)
    net = _sin_net(W, b, v, 0.25)
    pts = rng.uniform([-1, 0], [1, 1], size=(7, 2))
    got, loss = _capture(Interval(-1, 1) * TimeInterval(0, 1),
                         lambda u, x, t: {"u": u, "ux": d(u, x), "ut": d(u, t), "uxx": d(u, x, x),
                                          "uxt": d(u, x, t), "utx": d(u, t, x),
                                          "uxx2": d(d(u, x), x), "utt": d(u, "t", "t")},
                         net, pts, path)
    assert loss.path_used == path
    z = pts @ W + b
    s, c = np.sin(z), np.cos(z)
    exact = {"u": s @ v + 0.25, "ux": c @ (v * W[0]), "ut": c @ (v * W[1]),
             "uxx": -s @ (v * W[0] ** 2), "uxt": -s @ (v * W[0] * W[1]),
             "utt": -s @ (v * W[1] ** 2)}
    exact["utx"] = exact["uxt"]
    exact["uxx2"] = exact["uxx"]
    for k, e in exact.items():
        np.testing.assert_allclose(got[k], e, rtol=1e-12, atol=1e-12, err_msg=k)


class _Poly:
    """A 'network' that is a known function of its inputs, built from sciml ops."""

    def __init__(self, fn, n_out=1):
        self.fn, self.n_out = fn, n_out
        self.a = sm.models.Parameter(np.array([1.0]))

    def params(self):
        return {"a": self.a}

    def apply(self, params, z):
        return self.fn(params["a"], z[:, 0:1], z[:, 1:2])


def test_polynomial_and_exp_products_through_apply():
    # u = a x^3 y^2 + exp(x) sin(y): all partials to second order in closed form
    net = _Poly(lambda a, x, y: a * x ** 3 * y ** 2 + sm.exp(x) * sm.sin(y))
    pts = np.random.default_rng(1).uniform(0, 1, size=(6, 2))
    seen = {}

    def residual(u, x, y):
        seen.update(ux=d(u, x), uy=d(u, y), uxx=d(u, x, x), uxy=d(u, x, y), uyy=d(u, y, y),
                    lap=laplacian(u), g=grad(u))
        return u * 0.0
    pb = Problem(Rectangle((0, 0), (1, 1)), residual)
    Loss(pb, net, Batch(pb, pts, [], "float64")).terms({"net": net.params()})
    x, y = pts[:, 0], pts[:, 1]
    ex, sy, cy = np.exp(x), np.sin(y), np.cos(y)
    exact = {"ux": 3 * x ** 2 * y ** 2 + ex * sy, "uy": 2 * x ** 3 * y + ex * cy,
             "uxx": 6 * x * y ** 2 + ex * sy, "uxy": 6 * x ** 2 * y + ex * cy,
             "uyy": 2 * x ** 3 - ex * sy}
    exact["lap"] = exact["uxx"] + exact["uyy"]
    for k, e in exact.items():
        np.testing.assert_allclose(seen[k].numpy()[:, 0], e, rtol=1e-12, err_msg=k)
    np.testing.assert_allclose(seen["g"].numpy(), np.stack([exact["ux"], exact["uy"]], 1),
                               rtol=1e-12)


def test_vector_output_components_and_div():
    # u = (x^2 y, sin(x) + y^3): div u = 2 x y + 3 y^2
    net = _Poly(lambda a, x, y: sm.concat([a * x ** 2 * y, sm.sin(x) + y ** 3], axis=1), 2)
    pts = np.random.default_rng(2).uniform(0, 1, size=(5, 2))
    seen = {}

    def residual(u, x, y):
        seen.update(div=div(u), u0x=d(u[0], x), u1yy=d(u[1], y, y), lap1=laplacian(u[1]))
        return [d(u[0], x) - d(u[0], x), u[1] * 0.0]
    pb = Problem(Rectangle((0, 0), (1, 1)), residual, outputs=2)
    terms = Loss(pb, net, Batch(pb, pts, [], "float64")).terms({"net": net.params()})
    x, y = pts[:, 0], pts[:, 1]
    np.testing.assert_allclose(seen["div"].numpy()[:, 0], 2 * x * y + 3 * y ** 2, rtol=1e-12)
    np.testing.assert_allclose(seen["u0x"].numpy()[:, 0], 2 * x * y, rtol=1e-12)
    np.testing.assert_allclose(seen["u1yy"].numpy()[:, 0], 6 * y, rtol=1e-12)
    np.testing.assert_allclose(seen["lap1"].numpy()[:, 0], -np.sin(x) + 6 * y, rtol=1e-12)
    assert float(terms[0]) == 0.0


def test_named_outputs_of_a_system():
    net = _Poly(lambda a, x, y: sm.concat([a * x * y, x + y], axis=1), 2)
    seen = {}

    def residual(p, q, x, y):
        seen.update(px=d(p, x), qy=d(q, y))
        return [p * 0.0, q * 0.0]
    pb = Problem(Rectangle((0, 0), (1, 1)), residual, outputs=("p", "q"))
    pts = np.array([[0.5, 0.25]])
    Loss(pb, net, Batch(pb, pts, [], "float64")).terms({"net": net.params()})
    assert seen["px"].numpy()[0, 0] == pytest.approx(0.25)
    assert seen["qy"].numpy()[0, 0] == pytest.approx(1.0)


def test_each_derivative_is_computed_once_per_step():
    calls = []
    net = MLP([2, 8, 1], activation=sm.tanh, seed=0)

    def residual(u, x, t):
        return d(u, t) + u * d(u, x) - 0.1 * d(u, x, x) + d(u, x) * d(u, x)
    import sciml.pinn.operators as O
    orig = O.network_derivatives

    def spy(*a, **k):
        calls.append(sorted(a[3]))
        return orig(*a, **k)
    O.network_derivatives, saved = spy, O.network_derivatives
    import sciml.pinn.problem as P
    P.network_derivatives = spy
    try:
        pb = Problem(Interval(-1, 1) * TimeInterval(0, 1), residual)
        Loss(pb, net, Batch(pb, np.full((4, 2), 0.5), [], "float64")).terms({"net": net.params()})
    finally:
        O.network_derivatives = saved
        P.network_derivatives = orig
    assert calls == [[(), (0,), (0, 0), (1,)]]


def test_gradient_of_the_loss_matches_between_paths():
    net = MLP([2, 6, 6, 1], activation=sm.tanh, seed=3)
    pts = np.random.default_rng(3).uniform([-1, 0], [1, 1], size=(9, 2))

    def residual(u, x, t):
        return d(u, t) + u * d(u, x) - 0.05 * d(u, x, x)
    pb = Problem(Interval(-1, 1) * TimeInterval(0, 1), residual)
    grads = {}
    for path in PATHS:
        loss = Loss(pb, net, Batch(pb, pts, [], "float64"), path)
        g = sm.grad(lambda p: loss.terms({"net": p})[0])(net.params())
        grads[path] = np.concatenate([l.numpy().ravel() for l in sm.tree_leaves(g)])
    np.testing.assert_allclose(grads["fused"], grads["autodiff"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["generic"], grads["autodiff"], rtol=1e-10, atol=1e-12)


# ---- clear errors --------------------------------------------------------------------------
def _run(residual, domain=None):
    domain = domain or Interval(-1, 1) * TimeInterval(0, 1)
    pb = Problem(domain, residual)
    net = MLP([domain.dim, 4, 1], seed=0)
    return Loss(pb, net, Batch(pb, np.full((3, domain.dim), 0.5), [], "float64"))


def test_derivative_wrt_unknown_coordinate_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown coordinate 'y'.*\('x', 't'\)"):
        _run(lambda u, x, t: d(u, "y"))


def test_derivative_of_a_computed_tensor_is_a_clear_error():
    with pytest.raises(TypeError, match=r"network output.*d\(u, x\) \* v"):
        _run(lambda u, x, t: d(u * u, x))


def test_derivative_wrt_a_non_coordinate_is_a_clear_error():
    with pytest.raises(TypeError, match="coordinates must be the coordinate arguments"):
        _run(lambda u, x, t: d(u, x * 2.0))


def test_residual_of_the_wrong_shape_is_a_clear_error():
    with pytest.raises(ValueError, match=r"residual returned shape \(\).*expected \(3,\)"):
        _run(lambda u, x, t: (d(u, t) - d(u, x, x)).mean())
