"""Feature and output transforms (and derivatives above order 2) on Taylor jets (sciml.pinn.jets):
values against nested forward mode (the per-op path), parameter gradients against finite
differences (first and second order), the combinatorics against closed forms, training equal
to the per-op path, the Result's path reason, the fallback for ops without a jet rule, Vulkan."""
import json

import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Interval, Problem, TimeInterval, Transformed, d, jets, solve
from sciml.pinn.operators import network_derivatives
from sciml.testing import check_grads
from tests._vulkan import run_script

F64 = "float64"


def _x(n=6, dim=2, seed=0):
    return sm.tensor(np.random.default_rng(seed).uniform(-0.9, 0.9, (n, dim)), F64)


def _out(x, y):          # DeepXDE's diffusion_1d_exactBC hard constraint, plus a quotient and a power
    return x[:, 1:2] * (1 - x[:, 0:1] ** 2) * y + sm.sin(np.pi * x[:, 0:1]) + y * y / (2.0 + x[:, 1:2] ** 3)


def _feat(x):            # periodic and Fourier-type features, exp, tanh, sqrt, log
    B = sm.tensor(np.array([[1.0, -0.5], [0.3, 2.0]]), F64)
    z = x @ B
    return sm.concat([sm.sin(z), sm.cos(x[:, 0:1]), sm.exp(x[:, 1:2]) * sm.tanh(x[:, 0:1]),
                      sm.sqrt(2.0 + x[:, 0:1]), sm.log(3.0 + x[:, 1:2] * x[:, 0:1])], axis=1)


NETS = {"output": lambda: Transformed(MLP([2, 7, 6, 1], activation=sm.tanh, seed=1, dtype=F64), output=_out),
        "features": lambda: Transformed(MLP([6, 7, 6, 2], activation=sm.sin, seed=2, dtype=F64), features=_feat),
        "both": lambda: Transformed(MLP([6, 5, 1], activation=sm.tanh, seed=3, dtype=F64), features=_feat,
                                    output=_out)}
DERIVS = [(), (0,), (1,), (0, 0), (0, 1), (1, 1), (0, 0, 1), (1, 1, 1, 1)]


@pytest.mark.parametrize("kind", sorted(NETS))
def test_transform_jets_equal_nested_forward_mode(kind):
    net = NETS[kind]()
    x = _x()
    a, used = network_derivatives(net, net.params(), x, DERIVS)
    b, ref = network_derivatives(net, net.params(), x, DERIVS, path="autodiff")
    assert ref == "autodiff" and used in ("fused", "jet")
    for k in DERIVS:
        np.testing.assert_allclose(a[k].numpy(), b[k].numpy(), rtol=1e-10, atol=1e-10, err_msg=str((kind, k)))


def test_output_transform_keeps_the_fused_network_jet():
    net = NETS["output"]()
    _, used = network_derivatives(net, net.params(), _x(), [(), (1,), (0, 0)])
    assert used == "fused"


def test_mlp_above_order_two_without_fused_kernels_runs_jets():
    # sigmoid has no fused kernels: derivatives above order 2 go through jets, not nested jvp
    net = MLP([2, 5, 4, 1], activation=sm.sigmoid, seed=0, dtype=F64)
    x = _x(5)
    D = [(), (0, 0, 1), (1, 1, 1, 1)]
    r, used = network_derivatives(net, net.params(), x, D)
    ref, _ = network_derivatives(net, net.params(), x, D, path="autodiff")
    assert used == "jet"
    for k in D:
        np.testing.assert_allclose(r[k].numpy(), ref[k].numpy(), rtol=1e-10, atol=1e-10, err_msg=str(k))


def test_faa_di_bruno_multiplicities():
    # D^4 f(z) along one axis: f' z4 + f''(4 z1 z3 + 3 z2^2) + 6 f''' z1^2 z2 + f'''' z1^4
    got = {(j, blocks): c for j, blocks, c in jets.faa_di_bruno((0, 0, 0, 0))}
    assert got == {(1, ((0, 0, 0, 0),)): 1, (2, ((0,), (0, 0, 0))): 4, (2, ((0, 0), (0, 0))): 3,
                   (3, ((0,), (0,), (0, 0))): 6, (4, ((0,), (0,), (0,), (0,))): 1}
    assert sum(c for _, _, c in jets.faa_di_bruno((0, 1, 2, 3))) == 15   # Bell number B4
    assert jets.closure([(1, 0, 0)]) == ((), (0,), (1,), (0, 0), (0, 1), (0, 0, 1))


@pytest.mark.parametrize("kind", ["output", "features"])
def test_jet_path_parameter_gradients_first_and_second_order(kind):
    net = NETS[kind]()
    x = _x(4)
    derivs = [(), (1,), (0, 0), (0, 1, 1)]
    flat, tdef = _flatten(net.params())

    def loss(*ps):
        r, _ = network_derivatives(net, _unflatten(tdef, ps), x, derivs)
        return sum(((r[k] * r[k]).sum() * (0.3 + i) for i, k in enumerate(derivs)), sm.tensor(0.0, F64))
    # the first layer's bias and the last bias (the weights go through the same rules)
    sel = [1, len(flat) - 1]

    def part(*ws):
        ps = list(flat)
        for i, w in zip(sel, ws):
            ps[i] = w
        return loss(*ps)
    check_grads(part, [flat[i] for i in sel], order=2, modes=("rev",), rtol=1e-5, atol=1e-7)


def _flatten(tree):
    from sciml.autodiff.pytree import flatten
    return flatten(tree)


def _unflatten(tdef, leaves):
    from sciml.autodiff.pytree import unflatten
    return unflatten(tdef, list(leaves))


def test_op_without_a_jet_rule_falls_back_to_nested_forward_mode():
    net = Transformed(MLP([2, 5, 1], seed=0, dtype=F64), output=lambda x, y: sm.maximum(y, 0.0 * y) + x[:, 0:1])
    x = _x()
    a, used = network_derivatives(net, net.params(), x, [(), (0, 0)])
    b, _ = network_derivatives(net, net.params(), x, [(), (0, 0)], path="autodiff")
    assert used == "autodiff"
    assert "maximum" in net._path_note
    np.testing.assert_allclose(a[(0, 0)].numpy(), b[(0, 0)].numpy(), rtol=1e-12, atol=1e-12)


def _diffusion(out):
    def pde(u, x, t):
        return d(u, t) - d(u, x, x) + sm.exp(-t) * (sm.sin(np.pi * x) - np.pi ** 2 * sm.sin(np.pi * x))
    pb = Problem(Interval(-1, 1) * TimeInterval(0, 1), pde,
                 reference=lambda p: np.sin(np.pi * p[:, 0]) * np.exp(-p[:, 1]))
    return pb, Transformed(MLP([2, 8, 8, 1], activation=sm.tanh, seed=0), output=out)


def test_training_on_jets_matches_the_per_op_path_and_result_says_why():
    out = lambda x, y: x[:, 1:2] * (1 - x[:, 0:1] ** 2) * y + sm.sin(np.pi * x[:, 0:1])  # noqa: E731
    hist = {}
    for path in ("auto", "autodiff"):
        pb, net = _diffusion(out)
        r = solve(pb, net, points=24, stages=[(Adam(lr=1e-3), 6)], dtype="float64", path=path, verbose=False,
                  seed=0)
        hist[path] = np.array(r.history["loss"])
        if path == "auto":
            assert r.path == "fused"
            assert "output transform" in r.path_reason and "jets" in r.path_reason, r.path_reason
    np.testing.assert_allclose(hist["auto"], hist["autodiff"], rtol=1e-9)


VULKAN_SCRIPT = r"""
from sciml.models import MLP
from sciml.pinn import Transformed
from sciml.pinn.operators import network_derivatives
from sciml.autodiff.pytree import flatten
def _loss(net, p, x):
    r = network_derivatives(net, p, x, [(0, 0), (1,)])[0]
    return (r[(0, 0)] * r[(0, 0)]).sum() + (r[(1,)] * r[(1,)]).sum()
d = json.loads(sys.stdin.read())
x = sm.tensor(np.array(d["x"]), "float32")
out = lambda x, y: x[:, 1:2] * (1 - x[:, 0:1] ** 2) * y + sm.sin(np.pi * x[:, 0:1])
feat = lambda x: sm.concat([sm.sin(x[:, 0:1]), sm.cos(x[:, 0:1]), x[:, 1:2]], axis=1)
res = {}
for kind, net in (("output", Transformed(MLP([2, 16, 16, 1], seed=0), output=out)),
                  ("features", Transformed(MLP([3, 16, 1], seed=1), features=feat))):
    ps = net.params()
    r, used = network_derivatives(net, ps, x, [tuple(k) for k in d["derivs"]])
    res[kind] = {"used": used, "vals": [r[tuple(k)].numpy().tolist() for k in d["derivs"]],
                 "grads": [t.numpy().tolist() for t in flatten(sm.grad(lambda p: _loss(net, p, x))(ps))[0]]}
print("RESULT" + json.dumps({"arch": sm.arch(), "res": res}))
"""


def test_transforms_on_vulkan_match_cpu(tmp_path):
    X = np.random.default_rng(3).uniform(-1, 1, (20, 2))
    derivs = [(), (1,), (0, 0), (0, 1)]
    got = run_script(tmp_path, VULKAN_SCRIPT, json.dumps({"x": X.tolist(), "derivs": derivs}), name="vk_jets.py")
    out = lambda x, y: x[:, 1:2] * (1 - x[:, 0:1] ** 2) * y + sm.sin(np.pi * x[:, 0:1])  # noqa: E731
    feat = lambda x: sm.concat([sm.sin(x[:, 0:1]), sm.cos(x[:, 0:1]), x[:, 1:2]], axis=1)  # noqa: E731
    for kind, net in (("output", Transformed(MLP([2, 16, 16, 1], seed=0, dtype=F64), output=out)),
                      ("features", Transformed(MLP([3, 16, 1], seed=1, dtype=F64), features=feat))):
        ref, _ = network_derivatives(net, net.params(), sm.tensor(X, F64), derivs, path="autodiff")
        assert got["res"][kind]["used"] in ("fused", "jet")
        for k, v in zip(derivs, got["res"][kind]["vals"]):
            np.testing.assert_allclose(np.array(v), ref[k].numpy(), rtol=2e-4, atol=2e-4, err_msg=str((kind, k)))
        x = sm.tensor(X, F64)

        def loss(p):
            r = network_derivatives(net, p, x, [(0, 0), (1,)], path="autodiff")[0]
            return (r[(0, 0)] * r[(0, 0)]).sum() + (r[(1,)] * r[(1,)]).sum()
        want = _flatten(sm.grad(loss)(net.params()))[0]
        for a, b in zip(got["res"][kind]["grads"], want):
            b = b.numpy()
            np.testing.assert_allclose(np.array(a), b, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(b).max()))


def test_column_slices_of_the_points_have_constant_coefficients():
    # x[:, a]'s d/dx_a is the float 1.0 (no Tensor, no launches), the other first derivatives vanish
    xs = jets.variables(_x(), jets.closure([(0, 1)]))
    with jets.recording():
        c = xs[:, 0:1]
        u = 3.0 * c * c
    assert c.coeff((0,)) == 1.0 and c.coeff((1,)) is None and c.coeff((0, 1)) is None
    np.testing.assert_allclose(u.coeff_tensor((0,)).numpy(), 6.0 * xs.numpy()[:, 0:1], rtol=1e-14)
    assert u.coeff((0, 1)) is None and u.coeff((1,)) is None
