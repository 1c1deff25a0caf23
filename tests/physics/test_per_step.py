"""Issue 15 items 1-2: steps made of several kernels sharing differentiated scratch arrays, the step
index, per-step loss kernels, time-indexed tables and chosen states as outputs; each checked
against finite differences and against an independent reference."""
import numpy as np
import pytest
import taichi as ti

import sciml as sm
from sciml.physics import Simulation, heat1d
from sciml.testing import check_grads

from . import _mpm1d as M

PARAMS = np.array([9.8, 0.5])
SCRATCH = {"gm": (M.G,), "gmv": (M.G,), "gv": (M.G,)}


def _mpm(steps, **kw):
    return Simulation(state_shape=(2 * M.N,), steps=steps, params_shape=(2,), control_shape=(1,),
                      step=[M.p2g, M.grid_op, M.g2p], scratch=SCRATCH, name="mpm1d", **kw)


def _x0():
    return np.concatenate(M.start_state())


def test_scratch_step_matches_tape_reference():
    xp, vp, params, ctrl, wx, wv, ref = M.reference_case()
    sim = _mpm(len(ctrl))
    assert sim.mode == "per_step"
    f = lambda a, q, c: (sim(a, q, c) * sm.tensor(np.r_[wx, wv])).sum()  # noqa: E731
    loss, (gx, gq, gc) = sm.value_and_grad(f, argnums=(0, 1, 2))(sm.tensor(np.r_[xp, vp]), sm.tensor(params),
                                                                  sm.tensor(ctrl))
    np.testing.assert_allclose(float(loss), ref[0], rtol=1e-12)
    np.testing.assert_allclose(gx.numpy(), np.r_[ref[1], ref[2]], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gq.numpy(), ref[3], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gc.numpy()[:, 0], ref[4], rtol=1e-9, atol=1e-12)


def test_scratch_step_finite_differences_and_checkpointing():
    sim = _mpm(6)
    args = (sm.tensor(_x0()), sm.tensor(PARAMS), sm.tensor(0.05 * np.ones((6, 1))))
    check_grads(lambda a, q, c: sm.sin(sim(a, q, c)), args, order=1, modes=("rev",))
    w = sm.tensor(np.random.default_rng(2).standard_normal(2 * M.N))
    full, ck = _mpm(12, checkpoint_every=None), _mpm(12, checkpoint_every=5)
    args = (sm.tensor(_x0()), sm.tensor(PARAMS), sm.tensor(0.05 * np.ones((12, 1))))
    ga = sm.grad(lambda a, q, c: (full(a, q, c) * w).sum(), argnums=(0, 1, 2))(*args)
    gb = sm.grad(lambda a, q, c: (ck(a, q, c) * w).sum(), argnums=(0, 1, 2))(*args)
    for a, b in zip(ga, gb):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)
    # scratch is never stored: the model counts it once, not per step
    assert ck.memory_bytes(5) - (np.ceil(12 / 5) + 1 + 5 + 1) * 2 * M.N * 8 == 3 * M.G * 8 * 2


# --- the step index, time-indexed tables, per-step losses ------------------------------------
T, NX = 7, 5
FORCING = np.sin(np.arange(T)[:, None] * 0.7 + np.arange(NX)[None])      # read by the step at t
TARGET = np.cos(np.arange(T)[:, None] * 0.4 + np.arange(NX)[None] * 0.3)  # read by the loss at t
a1, a2 = ti.types.ndarray(ndim=1), ti.types.ndarray(ndim=2)


@ti.kernel
def forced_step(x: a1, p: a1, c: a1, xn: a1, forcing: a2, target: a2, t: ti.i32):
    for i in range(x.shape[0]):
        xn[i] = x[i] + 0.1 * (forcing[t, i] * c[0] - p[0] * x[i] * x[i])


@ti.kernel
def tracking_loss(x: a1, p: a1, c: a1, out: a1, forcing: a2, target: a2, t: ti.i32):
    for i in range(x.shape[0]):
        out[0] += (x[i] - target[t, i]) ** 2 + 0.01 * c[0] ** 2


def _forced(**kw):
    return Simulation(state_shape=(NX,), steps=T, control_shape=(1,), step=forced_step, loss=tracking_loss,
                      constants=(FORCING, TARGET), name="forced", **kw)


def _numpy_forced(x0, p, c):
    x, loss, xs = x0.copy(), 0.0, [x0.copy()]
    for t in range(T):
        x = x + 0.1 * (FORCING[t] * c[t, 0] - p[0] * x * x)
        loss += ((x - TARGET[t]) ** 2).sum() + NX * 0.01 * c[t, 0] ** 2
        xs.append(x.copy())
    return np.array(xs), loss


def test_step_index_tables_and_running_loss():
    sim = _forced()
    x0, p, c = np.linspace(-0.5, 0.5, NX), np.array([0.3]), 0.5 + 0.1 * np.arange(T)[:, None]
    xs, loss = sim(sm.tensor(x0), sm.tensor(p), sm.tensor(c), states=[0, 3, T])
    ref_xs, ref_loss = _numpy_forced(x0, p, c)
    np.testing.assert_allclose(xs.numpy(), ref_xs[[0, 3, T]], rtol=1e-13)
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-13)

    def f(a, q, cc):
        s, l = sim(a, q, cc, states=2)  # x_0, x_2, x_4, x_6
        return sm.concat([sm.sin(s).reshape((-1,)), l.reshape((1,))])
    check_grads(f, (sm.tensor(x0), sm.tensor(p), sm.tensor(c)), order=1, modes=("rev",))
    # the loss alone, checkpointed, equals the stored one
    ga = sm.grad(lambda a, q, cc: sim(a, q, cc)[1], argnums=(0, 1, 2))(sm.tensor(x0), sm.tensor(p), sm.tensor(c))
    gb = sm.grad(lambda a, q, cc: _forced(checkpoint_every=3)(a, q, cc)[1], argnums=(0, 1, 2))(
        sm.tensor(x0), sm.tensor(p), sm.tensor(c))
    for u, v in zip(ga, gb):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", ["fused", "per_step"])
def test_chosen_states(mode):
    sim = heat1d(8, 9, mode=mode)
    u0 = np.sin(np.arange(8.0)) * np.r_[0, np.ones(6), 0]
    traj = sim.trajectory(sm.tensor(u0), sm.tensor([0.2]))
    every3 = sim(sm.tensor(u0), sm.tensor([0.2]), states=3)
    assert every3.shape == (4, 8)
    np.testing.assert_allclose(every3.numpy(), traj[::3], rtol=1e-14)
    picked = sim(sm.tensor(u0), sm.tensor([0.2]), states=[9, 1, 1])
    np.testing.assert_allclose(picked.numpy(), traj[[9, 1, 1]], rtol=1e-14)
    check_grads(lambda u, r: sm.tanh(sim(u, r, states=[0, 2, 5, 5, 9])), (sm.tensor(u0), sm.tensor([0.2])),
                order=1, modes=("rev",))


def test_bad_per_step_declarations():
    with pytest.raises(ValueError, match=r"step kernel 'p2g' takes 7 arguments \(x, p, c, xn, gm, gmv, gv\); "
                                         r"expected \(x, params, control, x_next, gm, gmv\)"):
        Simulation(state_shape=(2 * M.N,), steps=2, params_shape=(2,), step=[M.p2g, M.g2p],
                   scratch={"gm": (M.G,), "gmv": (M.G,)})
    with pytest.raises(ValueError, match="scratch=, a list of step kernels need mode='per_step'"):
        Simulation(state_shape=(8,), steps=2, step=[M.p2g, M.grid_op, M.g2p], scratch=SCRATCH,
                   rollout=M.p2g, adjoint=M.p2g, mode="fused")
    with pytest.raises(ValueError, match=r"states contains 8; expected step indices \(ints\) in \[0, 7\]"):
        _forced()(sm.zeros((NX,)), None, sm.zeros((T, 1)), states=[0, 8])
    with pytest.raises(TypeError, match=r"scratch=\.\.\.\): got list"):
        Simulation(state_shape=(8,), steps=2, step=M.p2g, scratch=[(3,)])
