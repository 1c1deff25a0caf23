"""sciml.physics: rollout gradients vs finite differences, fused == per-step, checkpointing, errors."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import taichi as ti

import sciml as sm
from sciml.physics import Simulation, billiards, heat1d, mass_spring, robot
from sciml.testing import check_grads

RNG = np.random.default_rng(0)


def _heat_u0(n):
    u = RNG.standard_normal(n)
    u[0] = u[-1] = 0.0
    return sm.tensor(u)


# --- heat: the fused path (hand-written adjoint) and the per-step path (Taichi autodiff) ---
@pytest.mark.parametrize("mode", ["fused", "per_step"])
def test_heat_gradients_match_finite_differences(mode):
    sim = heat1d(8, 6, mode=mode)
    check_grads(lambda u, r: sm.sin(sim(u, r)), (_heat_u0(8), sm.tensor([0.23])), order=1, modes=("rev",))


def test_heat_matches_independent_numpy_adjoint():
    from benchmarks.peers import w5_reference
    u0, target = RNG.standard_normal(64), RNG.standard_normal(64)
    u0[0] = u0[-1] = target[0] = target[-1] = 0.0
    sim = heat1d(64, 150)
    loss, g = sm.value_and_grad(lambda u: ((sim(u, sm.tensor([0.2])) - sm.tensor(target)) ** 2).sum())(sm.tensor(u0))
    ref_loss, ref_g = w5_reference(u0, target, steps=150)
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-12)
    np.testing.assert_allclose(g.numpy(), ref_g, rtol=1e-10, atol=1e-12)


def _value_and_grads(sim, w, *args):
    return sm.value_and_grad(lambda *a: (sim(*a) * w).sum(), argnums=tuple(range(len(args))))(*args)


def test_heat_fused_equals_per_step():
    args = (_heat_u0(16), sm.tensor([0.3]))
    w = sm.tensor(RNG.standard_normal(16))
    (lf, gf), (lp, gp) = (_value_and_grads(heat1d(16, 40, mode=m), w, *args) for m in ("fused", "per_step"))
    np.testing.assert_allclose(float(lf), float(lp), rtol=1e-12)
    for a, b in zip(gf, gp):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_checkpointed_gradients_equal_stored(k):
    args = (_heat_u0(16), sm.tensor([0.3]))
    w = sm.tensor(RNG.standard_normal(16))
    full = heat1d(16, 20, checkpoint_every=None)
    ck = heat1d(16, 20, checkpoint_every=k)
    assert ck.checkpoint_every == k and full.checkpoint_every == 20
    ga = sm.grad(lambda u, r: (full(u, r) * w).sum(), argnums=(0, 1))(*args)
    gb = sm.grad(lambda u, r: (ck(u, r) * w).sum(), argnums=(0, 1))(*args)
    for a, b in zip(ga, gb):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13, atol=1e-300)  # sums regrouped by segment


def test_checkpoint_memory_for_1e5_steps():
    full = heat1d(1024, 100_000, checkpoint_every="auto", memory_budget=2 << 30)
    assert full.checkpoint_every == 100_000  # 0.8 GB fits in 2 GiB
    small = heat1d(1024, 100_000, checkpoint_every="auto", memory_budget=64 << 20)
    assert small.checkpoint_every == 316
    assert small.memory_bytes(316) < 6 << 20 < full.memory_bytes(None)


# --- billiards and mass-spring: the per-step path ---------------------------------------------
BILLIARD_STATE = [[0.0, 0.0, 3.0, 0.2], [0.5, 0.05, 0.0, 0.0]]
BILLIARD_PARAMS = [0.01, 0.3, 2000.0, 0.05]


def test_billiards_gradients_match_finite_differences_through_a_collision():
    sim = billiards(2, 60)
    st, p = sm.tensor(BILLIARD_STATE), sm.tensor(BILLIARD_PARAMS)
    assert abs(sim(st, p).numpy()[1, 2]) > 1.0  # the second ball was hit
    check_grads(lambda a, q: sim(a, q), (st, p), order=1, modes=("rev",), eps=1e-7)


def test_billiards_checkpointed_equals_stored():
    st, p = sm.tensor(BILLIARD_STATE), sm.tensor(BILLIARD_PARAMS)
    w = sm.tensor(RNG.standard_normal((2, 4)))
    ga = _value_and_grads(billiards(2, 40, checkpoint_every=None), w, st, p)[1]
    gb = _value_and_grads(billiards(2, 40, checkpoint_every=6), w, st, p)[1]
    for a, b in zip(ga, gb):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13, atol=1e-300)  # sums regrouped by segment


def _robot(steps, **kw):
    pos, ends, spr = robot(cols=3)
    sim = mass_spring(pos, ends, spr, steps, **kw)
    x0 = np.concatenate([pos + 0.01 * RNG.standard_normal(pos.shape), np.zeros_like(pos)], 1)
    x0[:, 1] += 0.02
    return sim, sm.tensor(x0), sm.tensor([0.004, -4.8, 15.0, 0.1])


def test_mass_spring_gradients_match_finite_differences():
    sim, x0, p = _robot(30)
    ctrl = sm.tensor(0.5 * np.sin(np.arange(30)[:, None] * 0.3 + np.arange(sim.C)[None]))
    check_grads(lambda a, c: sim(a, p, c), (x0, ctrl), order=1, modes=("rev",))


def test_mass_spring_checkpointed_equals_stored():
    sim_a, x0, p = _robot(24, checkpoint_every=None)
    sim_b = _robot(24, checkpoint_every=5)[0]
    ctrl = sm.tensor(0.3 * RNG.standard_normal((24, sim_a.C)))
    w = sm.tensor(RNG.standard_normal(sim_a.state_shape))
    ga = sm.grad(lambda a, c: (sim_a(a, p, c) * w).sum(), argnums=(0, 1))(x0, ctrl)
    gb = sm.grad(lambda a, c: (sim_b(a, p, c) * w).sum(), argnums=(0, 1))(x0, ctrl)
    for a, b in zip(ga, gb):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13, atol=1e-300)  # sums regrouped by segment


def test_neural_controller_closed_loop_gradients():
    sim, x0, p = _robot(12)
    feats = sm.tensor(np.sin(np.arange(12)[:, None] * 0.5 + np.arange(4)[None]))

    def final_x(w1, w2):
        def controller(x, t):
            rel = (x[:, :2] - x[:, :2].mean(axis=0)).reshape((1, -1))
            h = sm.tanh(sm.concat([feats[t:t + 1], rel], axis=1) @ w1)
            return sm.tanh(h @ w2).reshape((sim.C,))
        return sim.rollout(x0, p, controller)[:, 0].mean()

    w1 = sm.tensor(0.3 * RNG.standard_normal((4 + 2 * sim.S // 4, 5)))
    w2 = sm.tensor(0.3 * RNG.standard_normal((5, sim.C)))
    check_grads(final_x, (w1, w2), order=1, modes=("rev",))


# --- the first-order contract and bad input ---------------------------------------------------
def test_second_derivative_raises():
    sim = heat1d(8, 4)
    f = lambda u: (sim(u, sm.tensor([0.2])) ** 2).sum()  # noqa: E731
    for second in (lambda: sm.hessian(f)(_heat_u0(8)),
                   lambda: sm.jvp(lambda u: sim(u, sm.tensor([0.2])), (_heat_u0(8),), (_heat_u0(8),))):
        with pytest.raises(NotImplementedError, match="Simulation 'heat1d': .* first order.*What exists: grad / "
                                                      "value_and_grad / vjp / jacrev"):
            second()
    sm.jacrev(lambda u: sim(u, sm.tensor([0.2])))(_heat_u0(8))  # the option the message names works


@ti.kernel
def writes_its_input(x: ti.types.ndarray(ndim=1), p: ti.types.ndarray(ndim=1), c: ti.types.ndarray(ndim=1),
                     out: ti.types.ndarray(ndim=1)):
    for i in range(x.shape[0]):
        out[i] = x[i] * p[0]
        x[i] = 0.0


def test_bad_input_gives_clear_errors():
    sim = heat1d(8, 4)
    r = sm.tensor([0.2])
    with pytest.raises(ValueError, match=r"x0 has shape \(9,\); expected state_shape \(8,\)"):
        sim(sm.zeros((9,)), r)
    with pytest.raises(ValueError, match=r"params has shape \(2,\); expected \(1,\)"):
        sim(sm.zeros((8,)), sm.zeros((2,)))
    with pytest.raises(TypeError, match="params has dtype float32; expected float64"):
        sim(sm.zeros((8,)), sm.tensor([0.2], dtype="float32"))
    with pytest.raises(ValueError, match="declared without control_shape; got controls"):
        sim(sm.zeros((8,)), r, sm.zeros((4, 1)))
    msim, x0, p = _robot(5)
    with pytest.raises(ValueError, match=r"controls has shape \(4, 11\); expected \(5, 11\)"):
        msim(x0, p, sm.zeros((4, msim.C)))
    with pytest.raises(ValueError, match="controls are required"):
        msim(x0, p)
    with pytest.raises(MemoryError, match=r"storing all 100001 states of 1024 elements needs 781\.3 MiB, over "
                                          r"memory_budget=100\.0 MiB"):
        heat1d(1024, 100_000, checkpoint_every=None, memory_budget=100 << 20)
    with pytest.raises(MemoryError, match="checkpoint_every=316 store"):
        heat1d(1024, 100_000, checkpoint_every="auto", memory_budget=1 << 20)
    with pytest.raises(ValueError, match="needs both rollout= and adjoint= kernels; got only rollout"):
        Simulation(state_shape=(8,), steps=3, rollout=writes_its_input)
    with pytest.raises(ValueError, match="mode='per_step' needs a step= kernel"):
        Simulation(state_shape=(8,), steps=3, mode="per_step")
    bad = Simulation(state_shape=(8,), steps=3, step=writes_its_input)
    with pytest.raises(RuntimeError, match="the step kernel wrote its input 'x'"):
        bad(sm.ones((8,)), r)


VULKAN_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import sciml as sm
    try:
        sm.init(arch="vulkan", dtype="float32")
    except sm.ArchUnavailableError:
        print("SKIP"); sys.exit(0)
    from sciml.physics import heat1d
    u0 = np.sin(np.linspace(0, 3, 16)); u0[0] = u0[-1] = 0.0
    w = np.cos(np.arange(16.0))
    per_step = heat1d(16, 10, mode="per_step")
    loss = lambda sim: (lambda u: (sim(u, sm.tensor([0.2])) * sm.tensor(w)).sum())
    try:
        sm.grad(loss(per_step))(sm.tensor(u0))
    except RuntimeError as e:
        print("RAISED", e)
    g = sm.grad(loss(heat1d(16, 10, mode="fused")))(sm.tensor(u0)).numpy()
    lam = w.copy()
    for _ in range(10):
        nxt = np.zeros(16); li = lam[1:-1]
        nxt[1:-1] += 0.6 * li; nxt[:-2] += 0.2 * li; nxt[2:] += 0.2 * li
        lam = nxt
    print("FUSED_ERR", float(np.abs(g - lam).max()))
""")


def test_vulkan_per_step_raises_fused_works(tmp_path):
    script = tmp_path / "vk_physics.py"
    script.write_text(VULKAN_SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    if "SKIP" in r.stdout:
        if os.environ.get("SCIML_REQUIRE_VULKAN"):   # set by .ci/run: CI must really run this pass
            pytest.fail("no Vulkan device; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan device")
    assert "RAISED Simulation 'heat1d': the per-step path differentiates the step kernel" in r.stdout
    err = float(r.stdout.split("FUSED_ERR")[1])
    assert err < 1e-5


def test_forward_states_are_freed_without_waiting_for_gc():
    """The rollout history is released as soon as the output dies (pytree flatten made no cycle)."""
    import gc
    sim = heat1d(8, 5)
    u, r = _heat_u0(8), sm.tensor([0.2])
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            sm.value_and_grad(lambda a: (sim(a, r) ** 2).sum())(u)
        assert len(sim._saved) == 0
    finally:
        gc.enable()
