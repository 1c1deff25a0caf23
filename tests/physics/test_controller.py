"""Issue 15 item 3: a closed-loop rollout with a ``sciml.models.MLP`` controller evaluated inside the step
(``sm.physics.MLPController``): values and gradients (shaped like ``net.params()``) equal to the same
closed loop written op by op in sciml (the MLP's own ``apply``), and to finite differences; and the
DiffTaichi mass_spring port against finite differences through ground contacts."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import taichi as ti

import sciml as sm
from sciml.models import MLP
from sciml.physics import MLPController, Simulation
from sciml.testing import check_grads

T_ = ti.template()
N, STEPS, DT = 3, 6, 0.1


@ti.func
def features(x: T_, p: T_, c: T_, xn: T_, inp: T_, h1: T_, out: T_, t: T_):
    for i in range(N):
        inp[i] = x[i]
    for _ in range(1):
        inp[N] = ti.sin(0.3 * t)


@ti.func
def update(x: T_, p: T_, c: T_, xn: T_, inp: T_, h1: T_, out: T_, t: T_):
    for i in range(N):
        xn[i] = x[i] + DT * out[i] - DT * x[i] * x[i]


def _closed_loop(activation="tanh", **kw):
    net = MLP([N + 1, 5, N], activation=activation, seed=1)
    ctrl = MLPController(net, input="inp", output="out", output_activation="tanh")
    scratch = ctrl.scratch()
    assert list(scratch) == ["inp", "out_h1", "out"]
    sim = Simulation(state_shape=(N,), steps=STEPS, params_shape=(ctrl.n_params,), scratch=scratch,
                     step=[features, *ctrl.funcs(scratch, takes_t=True), update], name="closed_loop", **kw)
    return net, ctrl, sim


def _reference(net, params, x0):
    """The same closed loop op by op: the MLP's own apply, sciml ops, a Python loop."""
    x = x0
    for t in range(STEPS):
        inp = sm.concat([x, sm.tensor([np.sin(0.3 * t)])]).reshape((1, N + 1))
        u = sm.tanh(net.apply(params, inp)).reshape((N,))
        x = x + DT * u - DT * x * x
    return x


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_mlp_controller_equals_the_op_by_op_closed_loop(activation):
    net, ctrl, sim = _closed_loop(activation)
    x0 = sm.tensor(np.array([0.3, -0.2, 0.5]))
    w = sm.tensor(np.array([1.0, -2.0, 0.5]))
    params = net.params()
    la, ga = sm.value_and_grad(lambda p: (sim(x0, ctrl.flatten(p)) * w).sum())(params)
    lb, gb = sm.value_and_grad(lambda p: (_reference(net, p, x0) * w).sum())(params)
    np.testing.assert_allclose(float(la), float(lb), rtol=1e-13)
    for k in ("0", "1"):
        for n in ("weight", "bias"):
            np.testing.assert_allclose(ga["layers"][k][n].numpy(), gb["layers"][k][n].numpy(), rtol=1e-11,
                                       atol=1e-14)
    flat = ctrl.flatten(params)
    assert flat.shape == (ctrl.n_params,) == ((N + 1) * 5 + 5 + 5 * N + N,)
    check_grads(lambda a, q: sm.sin(sim(a, q)), (x0, flat), order=1, modes=("rev",))


def test_mlp_controller_bad_input():
    net = MLP([2, 3, 1], activation="gelu")
    with pytest.raises(ValueError, match="activation 'gelu' has no Taichi form here"):
        MLPController(net, input="a", output="b")
    with pytest.raises(TypeError, match="expected a sciml.models.MLP"):
        MLPController(object(), input="a", output="b")
    ctrl = MLPController(MLP([2, 3, 1]), input="a", output="b")
    with pytest.raises(ValueError, match="scratch has no 'b_h1'"):
        ctrl.funcs({"a": (2,), "b": (1,)})


def test_mass_spring_port_gradient_through_contacts():
    """The DiffTaichi mass_spring port (examples/physics/mass_spring.py) over 40 steps (the first ground
    contact is at step 28) against finite differences of its loss."""
    path = Path(__file__).resolve().parents[2] / "examples/physics/mass_spring.py"
    spec = importlib.util.spec_from_file_location("example_physics_mass_spring", path)
    ms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ms)
    sim, x0, net, ctrl, _ = ms.build(40)
    params = ms.start_params(net, net.sizes[0], sim.constants[1].shape[0])
    flat = ctrl.flatten(params)
    f = lambda q: -sim(sm.tensor(x0), q)[ms.HEAD, 0]  # noqa: E731
    g = sm.grad(f)(flat).numpy()
    d = np.random.default_rng(0).standard_normal(flat.shape[0])
    h = 1e-6
    fd = (float(f(flat + sm.tensor(h * d))) - float(f(flat - sm.tensor(h * d)))) / (2 * h)
    assert abs(g @ d - fd) <= 1e-6 * abs(fd)
