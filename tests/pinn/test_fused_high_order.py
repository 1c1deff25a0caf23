"""Fused Taylor-stream kernels for derivatives of order 3 and 4 (sciml.kernels.taylor's general
stream structures): values and gradients against the nested-autodiff path (generic), a closed
form, finite differences (first and second order), training equal to the per-op path, Vulkan."""
import json

import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Dirichlet, Interval, Neumann, Operator, Problem, d, fused, generic, solve
from sciml.testing import check_grads
from tests._vulkan import run_script

F64 = "float64"


def _net(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [(sm.tensor(rng.standard_normal((i, o)) / np.sqrt(i), F64), sm.tensor(rng.standard_normal(o) * 0.3, F64))
            for i, o in zip(sizes[:-1], sizes[1:])]


def _flat(layers):
    return [t for W, b in layers for t in (W, b)]


def _pairs(ps):
    return [(ps[2 * k], ps[2 * k + 1]) for k in range(len(ps) // 2)]


BEAM = [(), (0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)]
CASES = [(sm.tanh, [1, 6, 5, 1], BEAM),
         (sm.tanh, [2, 4, 3, 2], [(), (1,), (0, 0, 1), (1, 1, 1, 1), (0, 1)]),   # mixed, two outputs
         (sm.tanh, [2, 5, 1], [(0, 0, 0)]),                                       # one layer of activations
         (sm.sin, [1, 5, 4, 1], BEAM), (sm.softplus, [1, 5, 4, 1], BEAM), (sm.gelu, [2, 4, 3, 1], [(1, 1, 1, 1)])]


@pytest.mark.parametrize("act,sizes,derivs", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_high_order_fused_equals_generic_values_and_gradients(act, sizes, derivs):
    rng = np.random.default_rng(len(derivs))
    layers = _net(sizes, seed=sizes[0])
    x = sm.tensor(rng.uniform(-1.2, 1.2, (7, sizes[0])), F64)
    a = fused.mlp_derivatives(layers, act, x, derivs)
    b = generic.mlp_derivatives(layers, act, x, derivs)
    tol = 1e-7 if act is sm.gelu else 1e-11   # the fused gelu's erfc/exp: ~1e-9 in float64 at any order
    for k in derivs:
        assert a[k].shape == (7, sizes[-1])
        np.testing.assert_allclose(a[k].numpy(), b[k].numpy(), rtol=tol, atol=tol, err_msg=str(k))
    cot = {k: sm.tensor(rng.standard_normal((7, sizes[-1])), F64) for k in derivs}

    def loss(path, x, *ps):
        r = path.mlp_derivatives(_pairs(ps), act, x, derivs)
        return sum(((r[k] * cot[k]).sum() for k in derivs), sm.tensor(0.0, F64))
    args = (x, *_flat(layers))
    argn = tuple(range(len(args)))
    ga = sm.grad(lambda *a_: loss(fused, *a_), argnums=argn)(*args)
    gb = sm.grad(lambda *a_: loss(generic, *a_), argnums=argn)(*args)
    for i, (p, q) in enumerate(zip(ga, gb)):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=10 * tol, atol=10 * tol, err_msg=str(i))


def test_fourth_derivative_closed_form():
    # one hidden layer: u = sin(x W0 + b0) W1 + b1, u'''' = (sin(z) W0^4) W1, u''' = (-cos(z) W0^3) W1
    layers = _net([1, 4, 1], seed=5)
    x = sm.tensor(np.linspace(-1, 1, 6)[:, None], F64)
    r = fused.mlp_derivatives(layers, sm.sin, x, BEAM)
    W0, b0, W1 = layers[0][0].numpy(), layers[0][1].numpy(), layers[1][0].numpy()
    z = x.numpy() @ W0 + b0
    np.testing.assert_allclose(r[(0, 0, 0, 0)].numpy(), (np.sin(z) * W0 ** 4) @ W1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r[(0, 0, 0)].numpy(), (-np.cos(z) * W0 ** 3) @ W1, rtol=1e-12, atol=1e-12)


def test_high_order_finite_differences_first_and_second_order():
    layers = _net([1, 3, 3, 1], seed=2)
    x = sm.tensor(np.array([[-0.4], [0.3], [0.8]]), F64)
    w = sm.tensor(np.array([0.7, -1.1, 0.4, 0.9, 1.3]), F64)

    def f(*ps):
        r = fused.mlp_derivatives(_pairs(ps), sm.tanh, x, BEAM)
        return sum(((r[k] * r[k]).sum() * w[i] for i, k in enumerate(BEAM)), sm.tensor(0.0, F64))
    check_grads(f, tuple(_flat(layers)), order=2, modes=("rev",), rtol=1e-5, atol=1e-7)
    g = lambda x_: fused.mlp_derivatives(layers, sm.tanh, x_, [(0, 0, 0, 0)])[(0, 0, 0, 0)]  # noqa: E731
    check_grads(g, (x,), order=1, rtol=1e-5, atol=1e-7)


def _beam():
    return Problem(Interval(0, 1), lambda u, x: d(u, x, x, x, x) + 1,
                   reference=lambda p: -p[:, 0] ** 4 / 24 + p[:, 0] ** 3 / 6 - p[:, 0] ** 2 / 4,
                   conditions=[Dirichlet(0.0, on="left", points=1), Neumann(0.0, on="left", points=1),
                               Operator(lambda u, x: d(u, x, x), on="right", points=1),
                               Operator(lambda u, x: d(u, x, x, x), on="right", points=1)])


def test_beam_training_on_the_fused_path_matches_the_per_op_path():
    hist = {}
    for path in ("auto", "generic"):
        r = solve(_beam(), MLP([1, 10, 10, 1], activation=sm.tanh, seed=0), points=10,
                  stages=[(Adam(lr=1e-3), 6)], pde_on_boundary=True, dtype=F64, path=path, verbose=False, seed=0)
        hist[path] = np.array(r.history["loss"])
        if path == "auto":
            assert r.path == "fused"
    np.testing.assert_allclose(hist["auto"], hist["generic"], rtol=1e-9)


VULKAN_SCRIPT = r"""
from sciml.pinn import fused
d = json.loads(sys.stdin.read())
layers = [(sm.tensor(np.array(W), "float32"), sm.tensor(np.array(b), "float32")) for W, b in d["layers"]]
x = sm.tensor(np.array(d["x"]), "float32")
derivs = [tuple(k) for k in d["derivs"]]
cot = [sm.tensor(np.array(c), "float32") for c in d["cot"]]
def loss(*ps):
    r = fused.mlp_derivatives([(ps[2*k], ps[2*k+1]) for k in range(len(ps)//2)], sm.tanh, x, derivs)
    return sum(((r[k] * c).sum() for k, c in zip(derivs, cot)), sm.tensor(0.0, "float32"))
ps = [t for W, b in layers for t in (W, b)]
r = fused.mlp_derivatives(layers, sm.tanh, x, derivs)
g = sm.grad(loss, argnums=tuple(range(len(ps))))(*ps)
print("RESULT" + json.dumps({"vals": [r[k].numpy().tolist() for k in derivs],
                             "grads": [t.numpy().tolist() for t in g], "arch": sm.arch()}))
"""


def test_high_order_fused_on_vulkan_matches_cpu(tmp_path):
    rng = np.random.default_rng(4)
    layers = _net([1, 16, 16, 1], seed=6)
    X = rng.uniform(0, 1, (12, 1))
    cot = [rng.standard_normal((12, 1)) for _ in BEAM]
    payload = json.dumps({"layers": [(W.numpy().tolist(), b.numpy().tolist()) for W, b in layers],
                          "x": X.tolist(), "derivs": BEAM, "cot": [c.tolist() for c in cot]})
    got = run_script(tmp_path, VULKAN_SCRIPT, payload, name="vk_high.py")
    x = sm.tensor(X, F64)
    ref = generic.mlp_derivatives(layers, sm.tanh, x, BEAM)
    for k, v in zip(BEAM, got["vals"]):
        scale = max(1.0, np.abs(ref[k].numpy()).max())
        np.testing.assert_allclose(np.array(v), ref[k].numpy(), rtol=1e-3, atol=1e-3 * scale, err_msg=str(k))

    def loss(*ps):
        r = generic.mlp_derivatives(_pairs(ps), sm.tanh, x, BEAM)
        return sum(((r[k] * sm.tensor(c, F64)).sum() for k, c in zip(BEAM, cot)), sm.tensor(0.0, F64))
    ps = _flat(layers)
    want = sm.grad(loss, argnums=tuple(range(len(ps))))(*ps)
    for i, (a, b) in enumerate(zip(got["grads"], want)):
        b = b.numpy()
        np.testing.assert_allclose(np.array(a), b, rtol=2e-3, atol=2e-3 * max(1.0, np.abs(b).max()), err_msg=str(i))
