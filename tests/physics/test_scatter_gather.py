"""Issue 13: a step that reads x_next (scatter, then gather) is reversed against the forward's own
x_{t+1}; checked against finite differences and against the same step reversed by ti.ad.Tape.
Also ``check=True`` / ``check_step``: a step that breaks Taichi's autodiff rules is named."""
import numpy as np
import pytest
import taichi as ti

import sciml as sm
from sciml.physics import Simulation, SimulationCheckError
from sciml.testing import check_grads

from . import _mpm1d as M

PARAMS = np.array([9.8, 0.5])


def _packed(steps, **kw):
    return Simulation(state_shape=(2 * M.N + 3 * M.G,), steps=steps, params_shape=(2,), control_shape=(1,),
                      step=M.packed_step, mode="per_step", name="packed", **kw)


def _packed_x0():
    xp, vp = M.start_state()
    return np.concatenate([xp, vp, np.zeros(3 * M.G)])


def _weights(seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(M.N), rng.standard_normal(M.N)


def test_packed_step_reading_x_next_matches_tape():
    """64 steps: the stale x_next gave NaN here (and 1e26 against a true 1e-4 at 3 steps)."""
    xp, vp, params, ctrl, wx, wv, ref = M.reference_case()
    sim = _packed(len(ctrl))
    w = np.concatenate([wx, wv, np.zeros(3 * M.G)])
    f = lambda a, q, c: (sim(a, q, c) * sm.tensor(w)).sum()  # noqa: E731
    loss, (gx, gq, gc) = sm.value_and_grad(f, argnums=(0, 1, 2))(
        sm.tensor(np.concatenate([xp, vp, np.zeros(3 * M.G)])), sm.tensor(params), sm.tensor(ctrl))
    assert np.isfinite(gx.numpy()).all()
    np.testing.assert_allclose(float(loss), ref[0], rtol=1e-12)
    np.testing.assert_allclose(gx.numpy()[:M.N], ref[1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gx.numpy()[M.N:2 * M.N], ref[2], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gq.numpy(), ref[3], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gc.numpy()[:, 0], ref[4], rtol=1e-9, atol=1e-12)


def test_packed_step_matches_finite_differences_and_repeats():
    sim = _packed(5)
    ctrl = sm.tensor(0.1 * np.cos(np.arange(5))[:, None])
    check_grads(lambda a, q, c: sm.sin(sim(a, q, c)[:2 * M.N]), (sm.tensor(_packed_x0()), sm.tensor(PARAMS), ctrl),
                order=1, modes=("rev",))
    # a few gradient-descent updates through 64 steps: finite all along (was NaN, then a segfault)
    sim64 = _packed(64)
    x0 = sm.tensor(_packed_x0())
    c = sm.tensor(np.zeros((64, 1)))
    target = sm.tensor(np.full(M.N, 0.5))
    for _ in range(4):
        g = sm.grad(lambda cc: ((sim64(x0, sm.tensor(PARAMS), cc)[:M.N] - target) ** 2).sum())(c)
        assert np.isfinite(g.numpy()).all()
        c = c - 0.01 * g


@ti.kernel
def rewrites_x_next(x: ti.types.ndarray(ndim=1), p: ti.types.ndarray(ndim=1), c: ti.types.ndarray(ndim=1),
                    xn: ti.types.ndarray(ndim=1)):
    for i in range(x.shape[0]):
        xn[i] = x[i] * p[0]
    for i in range(x.shape[0]):  # overwrites a value this loop reads: Taichi reverses it wrongly
        xn[i] = xn[i] * xn[i]


def test_check_names_the_wrong_derivative():
    sim = Simulation(state_shape=(4,), steps=3, step=rewrites_x_next, check=True, name="bad")
    x0, p = sm.tensor([0.5, 1.0, -0.3, 2.0]), sm.tensor([1.5])
    sim(x0, p)  # the forward runs; the check happens on the first differentiated call
    with pytest.raises(SimulationCheckError, match=r"Simulation 'bad': the step's derivatives disagree with finite "
                                                   r"differences at step 0:\n  d\(x_next\)/d\(x\): VJP gives .*; "
                                                   r"worst entries: x_next\[\d\] \(VJP"):
        sm.grad(lambda a: sim(a, p).sum())(x0)
    report = _packed(3).check_step(_packed_x0(), PARAMS, [0.05])  # a correct step passes, every pair listed
    assert set(report) == {"d(x_next)/d(x)", "d(x_next)/d(params)", "d(x_next)/d(control)"}
    assert max(report.values()) < 1e-6


def test_check_true_passes_a_correct_step():
    sim = _packed(4, check=True)
    g = sm.grad(lambda a: sim(a, sm.tensor(PARAMS), sm.zeros((4, 1))).sum())(sm.tensor(_packed_x0()))
    assert sim._checked and np.isfinite(g.numpy()).all()


def test_device_staging_path_agrees_on_cpu():
    """The loop used on device archs (staging ti.ndarrays, Taichi's own calls) gives the same gradients."""
    a, b = _packed(6), _packed(6)
    b._force_staged = True
    w = sm.tensor(np.random.default_rng(3).standard_normal(2 * M.N + 3 * M.G))
    ctrl = sm.tensor(0.1 * np.ones((6, 1)))
    ga, gb = (sm.grad(lambda x, q, c, s=s: (s(x, q, c) * w).sum(), argnums=(0, 1, 2))(
        sm.tensor(_packed_x0()), sm.tensor(PARAMS), ctrl) for s in (a, b))
    for u, v in zip(ga, gb):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-14)


def test_check_simulation():
    from sciml.testing import check_simulation
    rep = check_simulation(_packed(4), _packed_x0(), PARAMS, 0.05 * np.ones((4, 1)))
    assert rep["d(x_next)/d(params)"] < 1e-6
    bad = Simulation(state_shape=(4,), steps=3, step=rewrites_x_next, name="bad")
    with pytest.raises(SimulationCheckError, match=r"d\(x_next\)/d\(x\)"):
        check_simulation(bad, [0.5, 1.0, -0.3, 2.0], [1.5])


def test_check_step_on_the_fused_path():
    from sciml.physics import heat1d
    u = np.sin(np.arange(8.0))
    u[0] = u[-1] = 0.0
    assert max(heat1d(8, 4, mode="fused").check_step(u, [0.2]).values()) < 1e-6  # the hand-written adjoint
