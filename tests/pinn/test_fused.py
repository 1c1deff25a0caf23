"""Fused Taylor-stream MLP derivatives (sciml.pinn.fused) vs the nested-autodiff path (generic),
closed forms, finite differences (first and second order), clear errors, and a Vulkan run."""
import json

import numpy as np
import pytest

import sciml as sm
from sciml.pinn import fused, fused_gemm, generic
from sciml.testing import check_grads
from tests._vulkan import run_script

ACTS = [sm.tanh, sm.sin, sm.softplus, sm.gelu]


def _net(sizes, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return [(sm.tensor(rng.standard_normal((i, o)) * scale / np.sqrt(i)), sm.tensor(rng.standard_normal(o) * 0.3))
            for i, o in zip(sizes[:-1], sizes[1:])]


def _all_derivs(d):
    return [()] + [(i,) for i in range(d)] + [(i, j) for i in range(d) for j in range(i, d)]


def _flat(layers):
    return [t for W, b in layers for t in (W, b)]


def _pairs(ps):
    return [(ps[2 * k], ps[2 * k + 1]) for k in range(len(ps) // 2)]


@pytest.mark.parametrize("act", ACTS, ids=lambda a: a.__name__)
def test_fused_equals_generic_values_and_gradients(act):
    rng = np.random.default_rng(1)
    cases = [([2, 5, 4, 2], _all_derivs(2))]
    if act in (sm.tanh, sm.gelu):   # the other shapes once per activation family (compile time)
        cases += [([1, 6, 5, 1], [(), (0,), (0, 0)]),
                  ([3, 4, 5, 3, 2], [(), (1,), (0, 2), (2, 2), (2,)]),     # mixed only, unsorted requests
                  ([2, 4, 3], [(0, 1)])]                                   # a mixed derivative alone
    for sizes, derivs in cases:
        layers = _net(sizes, seed=sizes[0])
        x = sm.tensor(rng.uniform(-1.5, 1.5, (9, sizes[0])))
        a = fused.mlp_derivatives(layers, act, x, derivs)
        b = generic.mlp_derivatives(layers, act, x, derivs)
        assert set(a) == set(b) == set(derivs)
        for k in derivs:
            assert a[k].shape == (9, sizes[-1])
            np.testing.assert_allclose(a[k].numpy(), b[k].numpy(), rtol=1e-10, atol=1e-10, err_msg=str((sizes, k)))
        cot = {k: sm.tensor(rng.standard_normal((9, sizes[-1]))) for k in derivs}

        def loss(path, x, *ps):
            r = path.mlp_derivatives(_pairs(ps), act, x, derivs)
            return sum(((r[k] * cot[k]).sum() for k in derivs), sm.tensor(0.0))

        args = (x, *_flat(layers))
        nums = tuple(range(len(args)))
        before = fused.stats["adjoint_calls"]
        ga = sm.grad(lambda *a_: loss(fused, *a_), argnums=nums)(*args)
        assert fused.stats["adjoint_calls"] == before + 1          # the hand-written adjoint ran
        gb = sm.grad(lambda *a_: loss(generic, *a_), argnums=nums)(*args)
        for i, (u, v) in enumerate(zip(ga, gb)):
            np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-10, atol=1e-10, err_msg=str((sizes, i)))


def test_split_gemms_match_generic(monkeypatch):
    # >= SPLIT_MIN stacked rows: the CPU GEMMs run split over two threads (lowered here)
    monkeypatch.setattr(fused_gemm, "SPLIT_MIN", 64)
    calls = []
    submit = fused._THREADS.submit
    monkeypatch.setattr(fused._THREADS, "submit", lambda *a: calls.append(1) or submit(*a))
    rng = np.random.default_rng(12)
    layers = _net([2, 8, 8, 1], seed=13)
    x = sm.tensor(rng.uniform(-1, 1, (41, 2)))
    derivs = [(), (0,), (1,), (0, 0)]
    cot = {k: sm.tensor(rng.standard_normal((41, 1))) for k in derivs}

    def loss(path, *ps):
        r = path.mlp_derivatives(_pairs(ps), sm.tanh, x, derivs)
        return sum(((r[k] * cot[k]).sum() for k in derivs), sm.tensor(0.0))
    ps = _flat(layers)
    nums = tuple(range(len(ps)))
    ga = sm.grad(lambda *p: loss(fused, *p), argnums=nums)(*ps)
    gb = sm.grad(lambda *p: loss(generic, *p), argnums=nums)(*ps)
    for u, v in zip(ga, gb):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-10, atol=1e-9)
    assert calls or fused._THREADS.lib is None   # the split ran (when threadpoolctl is available)


def test_closed_form_one_hidden_layer():
    # u(x) = sum_k a_k s(w_k . x + c_k) + e: u_i = sum a_k s' w_ki, u_ij = sum a_k s'' w_ki w_kj
    rng = np.random.default_rng(3)
    W1, c, a = rng.standard_normal((2, 7)), rng.standard_normal(7), rng.standard_normal((7, 1))
    layers = [(sm.tensor(W1), sm.tensor(c)), (sm.tensor(a), sm.tensor([0.25]))]
    X = rng.uniform(-1, 1, (11, 2))
    z = X @ W1 + c
    forms = {sm.tanh: (np.tanh(z), 1 - np.tanh(z) ** 2, -2 * np.tanh(z) * (1 - np.tanh(z) ** 2)),
             sm.sin: (np.sin(z), np.cos(z), -np.sin(z))}
    for act, (s0, s1, s2) in forms.items():
        r = fused.mlp_derivatives(layers, act, sm.tensor(X), _all_derivs(2))
        np.testing.assert_allclose(r[()].numpy(), s0 @ a + 0.25, atol=1e-12)
        for i in range(2):
            np.testing.assert_allclose(r[(i,)].numpy(), (s1 * W1[i]) @ a, atol=1e-12)
            for j in range(i, 2):
                np.testing.assert_allclose(r[(i, j)].numpy(), (s2 * W1[i] * W1[j]) @ a, atol=1e-12)


def test_finite_differences_first_and_second_order():
    rng = np.random.default_rng(4)
    layers = _net([2, 3, 3, 1], seed=5)
    x = sm.tensor(rng.uniform(-1, 1, (4, 2)))
    derivs = [(), (0,), (1,), (0, 0), (0, 1)]

    def f(x, *ps):
        r = fused.mlp_derivatives(_pairs(ps), sm.tanh, x, derivs)
        return sm.stack([r[k] for k in derivs], 0)
    check_grads(f, (x, *_flat(layers)), order=2)


@pytest.mark.parametrize("act", [sm.tanh, sm.gelu], ids=lambda a: a.__name__)
def test_pinn_loss_hvp_matches_generic(act):
    # NewtonCG-style second order w.r.t. the parameters through the fused path's rules (gelu: the exact
    # form in both paths; the generic Taylor coefficients once used the tanh form and differed by 1e-2)
    rng = np.random.default_rng(6)
    layers = _net([2, 4, 4, 1], seed=7)
    x = sm.tensor(rng.uniform(-1, 1, (6, 2)))
    ps = _flat(layers)
    derivs = [(), (0,), (1,), (0, 0)]

    def loss(path):
        def f(*p):
            r = path.mlp_derivatives(_pairs(p), act, x, derivs)
            res = r[(1,)] + r[()] * r[(0,)] - 0.05 * r[(0, 0)]
            return (res * res).mean()
        return f
    v = tuple(sm.tensor(rng.standard_normal(p.shape)) for p in ps)
    nums = tuple(range(len(ps)))
    ha = sm.jvp(lambda *p: sm.grad(loss(fused), argnums=nums)(*p), tuple(ps), v)[1]
    hb = sm.jvp(lambda *p: sm.grad(loss(generic), argnums=nums)(*p), tuple(ps), v)[1]
    for u, w in zip(ha, hb):
        np.testing.assert_allclose(u.numpy(), w.numpy(), rtol=1e-9, atol=1e-10)
    check_grads(loss(fused), tuple(ps), order=2, modes=("rev",))


def test_float32_close_to_float64():
    layers64 = _net([2, 8, 8, 1], seed=8)
    layers32 = [(sm.tensor(W.numpy(), "float32"), sm.tensor(b.numpy(), "float32")) for W, b in layers64]
    X = np.random.default_rng(9).uniform(-1, 1, (50, 2))
    a = fused.mlp_derivatives(layers32, sm.tanh, sm.tensor(X, "float32"), _all_derivs(2))
    b = generic.mlp_derivatives(layers64, sm.tanh, sm.tensor(X), _all_derivs(2))
    for k in a:
        assert a[k].dtype == "float32"
        np.testing.assert_allclose(a[k].numpy(), b[k].numpy(), rtol=1e-4, atol=1e-5)


def test_supports_and_layer_objects():
    assert fused.supports(sm.tanh, [(), (0,), (0, 1)])
    assert fused.supports("gelu", [(1, 1)])
    assert not fused.supports(sm.relu, [()])
    assert fused.supports(sm.tanh, [(0, 0, 0), (0, 1, 1, 1)])   # orders 3-4: the general stream kernels
    assert not fused.supports(sm.tanh, [(0, 0, 0, 0, 0)])
    assert not fused.supports(lambda z: sm.tanh(z), [()])
    from sciml.models.activations import ReLU, Tanh
    assert fused.supports(Tanh(), [(0, 0)]) and not fused.supports(ReLU(), [()])

    class Lin:
        def __init__(self, W, b):
            self.weight, self.bias = W, b
    layers = _net([2, 3, 1])
    x = sm.tensor(np.ones((2, 2)))
    r = fused.mlp_derivatives([Lin(W, b) for W, b in layers], sm.tanh, x, [(1,)])
    np.testing.assert_allclose(r[(1,)].numpy(), generic.mlp_derivatives(layers, sm.tanh, x, [(1,)])[(1,)].numpy())
    # generic handles any activation and order
    g = generic.mlp_derivatives(layers, sm.relu, x, [(0, 0, 1)])
    assert g[(0, 0, 1)].shape == (2, 1)


def test_clear_errors():
    layers = _net([2, 3, 1])
    x = sm.tensor(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="activation .* not supported by the fused path"):
        fused.mlp_derivatives(layers, sm.relu, x, [()])
    with pytest.raises(ValueError, match=r"derivative \(0, 0, 1, 1, 1\) has order 5"):
        fused.mlp_derivatives(layers, sm.tanh, x, [(0, 0, 1, 1, 1)])
    with pytest.raises(ValueError, match="refers to input 2, but x has 2 columns"):
        fused.mlp_derivatives(layers, sm.tanh, x, [(2,)])
    with pytest.raises(TypeError, match="must be a tuple of ints"):
        fused.mlp_derivatives(layers, sm.tanh, x, [("x",)])
    with pytest.raises(TypeError, match="derivs must be an iterable"):
        generic.mlp_derivatives(layers, sm.tanh, x, "xx")
    with pytest.raises(ValueError, match=r"x must be a 2-D \(n, d\) Tensor of points, got shape \(4,\)"):
        fused.mlp_derivatives(layers, sm.tanh, sm.tensor(np.zeros(4)), [()])
    with pytest.raises(ValueError, match="x has 3 columns but the first layer's W has 2 rows"):
        fused.mlp_derivatives(layers, sm.tanh, sm.tensor(np.zeros((4, 3))), [()])
    with pytest.raises(TypeError, match="has dtype float64 but x has float32"):
        fused.mlp_derivatives(layers, sm.tanh, sm.tensor(np.zeros((4, 2)), "float32"), [()])
    with pytest.raises(ValueError, match="layers is empty"):
        fused.mlp_derivatives([], sm.tanh, x, [()])
    with pytest.raises(ValueError, match=r"layers\[1\] takes 4 inputs but layers\[0\] gives 3 outputs"):
        fused.mlp_derivatives([layers[0], (sm.tensor(np.zeros((4, 1))), sm.tensor(np.zeros(1)))], sm.tanh, x, [()])
    with pytest.raises(ValueError, match=r"layers\[0\] has W of shape \(2, 3\) and b of shape \(2,\)"):
        fused.mlp_derivatives([(layers[0][0], sm.tensor(np.zeros(2)))], sm.tanh, x, [()])
    with pytest.raises(TypeError, match=r"layers\[0\] must be a \(W, b\) pair"):
        fused.mlp_derivatives([layers[0][0]], sm.tanh, x, [()])


VULKAN_SCRIPT = r"""
from sciml.pinn import fused
d = json.loads(sys.stdin.read())
layers = [(sm.tensor(np.array(W), "float32"), sm.tensor(np.array(b), "float32")) for W, b in d["layers"]]
x = sm.tensor(np.array(d["x"]), "float32")
derivs = [tuple(k) for k in d["derivs"]]
cot = [sm.tensor(np.array(c), "float32") for c in d["cot"]]
def loss(x, *ps):
    r = fused.mlp_derivatives([(ps[2*k], ps[2*k+1]) for k in range(len(ps)//2)], sm.tanh, x, derivs)
    return sum(((r[k] * c).sum() for k, c in zip(derivs, cot)), sm.tensor(0.0, "float32"))
ps = [t for W, b in layers for t in (W, b)]
r = fused.mlp_derivatives(layers, sm.tanh, x, derivs)
g = sm.grad(loss, argnums=tuple(range(len(ps) + 1)))(x, *ps)
print("RESULT" + json.dumps({"vals": [r[k].numpy().tolist() for k in derivs],
                             "grads": [t.numpy().tolist() for t in g], "arch": sm.arch()}))
"""


def test_fused_on_vulkan_matches_cpu(tmp_path):
    rng = np.random.default_rng(10)
    layers = _net([2, 32, 32, 1], seed=11)
    X = rng.uniform(-1, 1, (40, 2))
    derivs = [(), (0,), (1,), (0, 0), (0, 1)]
    cot = [rng.standard_normal((40, 1)) for _ in derivs]
    payload = json.dumps({"layers": [(W.numpy().tolist(), b.numpy().tolist()) for W, b in layers],
                          "x": X.tolist(), "derivs": derivs, "cot": [c.tolist() for c in cot]})
    got = run_script(tmp_path, VULKAN_SCRIPT, payload, name="vk_fused.py")
    x = sm.tensor(X)
    ref = generic.mlp_derivatives(layers, sm.tanh, x, derivs)
    for k, v in zip(derivs, got["vals"]):
        np.testing.assert_allclose(np.array(v), ref[k].numpy(), rtol=2e-4, atol=2e-4, err_msg=str(k))

    def loss(x, *ps):
        r = generic.mlp_derivatives(_pairs(ps), sm.tanh, x, derivs)
        return sum(((r[k] * sm.tensor(c)).sum() for k, c in zip(derivs, cot)), sm.tensor(0.0))
    ps = _flat(layers)
    want = sm.grad(loss, argnums=tuple(range(len(ps) + 1)))(x, *ps)
    for i, (a, b) in enumerate(zip(got["grads"], want)):
        b = b.numpy()
        np.testing.assert_allclose(np.array(a), b, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(b).max()),
                                   err_msg=str(i))
