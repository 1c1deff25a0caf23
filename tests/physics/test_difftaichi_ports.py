"""Issue 15 item 6: DiffTaichi's smoke_taichi and rigid_body ported to ``Simulation``s
(examples/physics/), each at a small size: the gradient equals the original program's
(benchmarks/difftaichi/, its own fields and ti.ad.Tape, run in a subprocess in float64) to 1e-10,
and matches finite differences."""
import importlib.util
import subprocess
from pathlib import Path

import numpy as np

import sciml as sm
from benchmarks.difftaichi import bench
from sciml.testing import check_grads

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "physics"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_physics_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _original(program, steps, tmp_path, **sizes):
    """Start the original at this size in a subprocess (it compiles for ~10 s of CPU, so it runs while
    the port is checked); returns a function giving its results."""
    out = str(tmp_path / "original.npz")
    env, cmd, _ = bench.commands(program, steps, 1, out, str(tmp_path / "unused.npz"), **sizes)
    env["TI_ADVANCED_OPTIMIZATION"] = "0"  # Taichi compiles the original 3x faster (rigid_body's collide.grad: 6 s)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def result():
        _, err = proc.communicate()
        assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}"
        return dict(np.load(out))
    return result


def test_smoke_port_equals_original_and_finite_differences(tmp_path):
    n, steps, jacobi = 32, 5, 3  # 32: the checkerboard has 16-cell squares (a 16-grid carries no smoke edge)
    original = _original("smoke_taichi", steps, tmp_path, n_grid=n, jacobi=jacobi)
    smoke = _load("smoke_taichi")
    sim, loss, _ = smoke.build(n, steps, jacobi)
    assert sim.mode == "per_step" and sim.steps == steps - 1
    v0 = sm.tensor(np.random.default_rng(0).standard_normal((n, n, 2)) * 0.5)  # the original's --bench-out start
    check_grads(loss, (v0,), order=1, modes=("rev",))
    value, g = sm.value_and_grad(loss)(v0)
    ref = original()
    np.testing.assert_allclose(float(value), float(ref["loss"]), rtol=1e-12)
    assert bench.grad_difference(ref, {"g_v0": g.numpy()}) <= 1e-10
    assert np.abs(g.numpy()).max() > 1e-4  # the velocity really moves the smoke


def test_rigid_body_port_equals_original_and_finite_differences(tmp_path):
    robot, steps = 1, 100  # robot 1 (3 boxes, 4 springs); its corners reach the ground from step 65
    original = _original("rigid_body", steps, tmp_path, robot=robot)
    rb = _load("rigid_body")
    sim, x0, loss, n_params = rb.build(robot, steps)
    n, ns = sim.state_shape[0], len(sim.constants[2])
    params = sm.tensor(rb.start_params(n, ns, np.random.default_rng(0)))  # the original's --bench-out start
    check_grads(loss, (params,), order=1, modes=("rev",))
    traj = sim.trajectory(sm.tensor(x0), params)
    assert rb.corners(traj, sim.constants[0])[..., 1].min() < rb.GROUND  # the ground pushed back
    value, g = sm.value_and_grad(loss)(params)
    ref = original()
    np.testing.assert_allclose(float(value), float(ref["loss"]), rtol=1e-12)
    w1, b1, w2, b2 = rb.split(g.numpy(), n, ns)
    assert bench.grad_difference(ref, {"g_weights1": w1, "g_bias1": b1, "g_weights2": w2, "g_bias2": b2}) <= 1e-10
