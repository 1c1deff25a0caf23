"""Issue 15 item 3: a step written as ``ti.func`` runs its forward as a generated time loop inside one
kernel per segment; the backward recomputes each segment and runs the generated step kernel's
``.grad`` step by step. Checked against the same functions run one launch per step
(``time_loop=False``), against the equivalent step kernels, against numpy and finite differences."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import taichi as ti

import sciml as sm
from sciml.physics import Simulation
from sciml.testing import check_grads

from . import _mpm1d as M
from .test_per_step import FORCING, NX, SCRATCH, T, TARGET, _numpy_forced


@ti.func
def heat(x: ti.template(), p: ti.template(), c: ti.template(), xn: ti.template()):
    ti.loop_config(serialize=True)
    for i in range(1, x.shape[0] - 1):
        xn[i] = x[i] + p[0] * (x[i - 1] - 2.0 * x[i] + x[i + 1]) + c[0]


def _heat(n=10, steps=9, **kw):
    return Simulation(state_shape=(n,), steps=steps, control_shape=(1,), step=heat, name="heat_func", **kw)


def _heat_numpy(u, r, c):
    for t in range(len(c)):
        v = np.zeros_like(u)
        v[1:-1] = u[1:-1] + r * (u[:-2] - 2 * u[1:-1] + u[2:]) + c[t, 0]
        u = v
    return u


def _heat_args(n=10, steps=9):
    rng = np.random.default_rng(0)
    return sm.tensor(rng.random(n)), sm.tensor([0.2]), sm.tensor(0.01 * rng.standard_normal((steps, 1)))


def test_func_step_loop_equals_per_step_numpy_and_finite_differences():
    u, r, c = _heat_args()
    loop, per = _heat(), _heat(time_loop=False)
    assert loop.time_loop and not per.time_loop and loop.mode == "per_step"
    np.testing.assert_allclose(loop(u, r, c).numpy(), _heat_numpy(u.numpy(), 0.2, c.numpy()), rtol=1e-14)
    w = sm.tensor(np.cos(np.arange(10.0)))
    f = lambda s: (lambda a, q, cc: (sm.sin(s(a, q, cc)) * w).sum())  # noqa: E731
    ga = sm.grad(f(loop), argnums=(0, 1, 2))(u, r, c)
    gb = sm.grad(f(per), argnums=(0, 1, 2))(u, r, c)
    for a, b in zip(ga, gb):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-15)
    check_grads(lambda a, q, cc: sm.sin(loop(a, q, cc)), (u, r, c), order=1, modes=("rev",))
    # checkpointed segments are recomputed by the loop kernel: same gradient
    ck = _heat(checkpoint_every=4)
    gc = sm.grad(f(ck), argnums=(0, 1, 2))(u, r, c)
    for a, b in zip(gc, gb):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-15)
    assert loop._stepper(np.dtype("float64")).loop is not None  # the time-loop kernel ran
    # the same on staging ti.ndarrays (the device path, here on the CPU)
    staged = _heat(checkpoint_every=4)
    staged._force_staged = True
    gs = sm.grad(f(staged), argnums=(0, 1, 2))(u, r, c)
    for a, b in zip(gs, gb):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-15)
    # chosen states come out of the loop's history
    np.testing.assert_allclose(loop(u, r, c, states=[0, 4, 9]).numpy(),
                               per(u, r, c, states=[0, 4, 9]).numpy(), rtol=1e-15)


# --- the 1-D particle-in-cell step of _mpm1d as three ti.funcs sharing scratch -------------------
@ti.func
def p2g(x: ti.template(), p: ti.template(), c: ti.template(), xn: ti.template(), gm: ti.template(),
        gmv: ti.template(), gv: ti.template()):
    for i in range(M.N):
        base, w0, w1 = M._stencil(x[i])
        gm[base] += w0 * M.MASS
        gm[base + 1] += w1 * M.MASS
        gmv[base] += w0 * M.MASS * x[M.N + i]
        gmv[base + 1] += w1 * M.MASS * x[M.N + i]


@ti.func
def grid_op(x: ti.template(), p: ti.template(), c: ti.template(), xn: ti.template(), gm: ti.template(),
            gmv: ti.template(), gv: ti.template()):
    for j in range(M.G):
        gv[j] = gmv[j] / (gm[j] + M.EPS) * (1.0 - p[1] * M.DT) - M.DT * p[0]


@ti.func
def g2p(x: ti.template(), p: ti.template(), c: ti.template(), xn: ti.template(), gm: ti.template(),
        gmv: ti.template(), gv: ti.template()):
    for i in range(M.N):
        base, w0, w1 = M._stencil(x[i])
        v = w0 * gv[base] + w1 * gv[base + 1] + c[0]
        xn[M.N + i] = v
        xn[i] = x[i] + M.DT * v


def test_func_steps_with_scratch_equal_the_kernel_steps():
    steps = 12
    kw = dict(state_shape=(2 * M.N,), steps=steps, params_shape=(2,), control_shape=(1,), scratch=SCRATCH)
    kern = Simulation(step=[M.p2g, M.grid_op, M.g2p], **kw)
    loop = Simulation(step=[p2g, grid_op, g2p], checkpoint_every=5, **kw)
    xp, vp = M.start_state()
    args = (sm.tensor(np.r_[xp, vp]), sm.tensor(np.array([9.8, 0.5])), sm.tensor(0.05 * np.ones((steps, 1))))
    w = sm.tensor(np.random.default_rng(2).standard_normal(2 * M.N))
    ya, yb = kern(*args), loop(*args)
    np.testing.assert_allclose(yb.numpy(), ya.numpy(), rtol=1e-14)
    ga = sm.grad(lambda a, q, c: (kern(a, q, c) * w).sum(), argnums=(0, 1, 2))(*args)
    gb = sm.grad(lambda a, q, c: (loop(a, q, c) * w).sum(), argnums=(0, 1, 2))(*args)
    for a, b in zip(ga, gb):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-12, atol=1e-14)


# --- the step index, time-indexed tables and a running loss, all as ti.funcs ----------------------
@ti.func
def forced(x: ti.template(), p: ti.template(), c: ti.template(), xn: ti.template(), forcing: ti.template(),
           target: ti.template(), t: ti.template()):
    for i in range(x.shape[0]):
        xn[i] = x[i] + 0.1 * (forcing[t, i] * c[0] - p[0] * x[i] * x[i])


@ti.func
def tracking(x: ti.template(), p: ti.template(), c: ti.template(), out: ti.template(), forcing: ti.template(),
             target: ti.template(), t: ti.template()):
    for i in range(x.shape[0]):
        out[0] += (x[i] - target[t, i]) ** 2 + 0.01 * c[0] ** 2


def test_func_step_index_tables_and_running_loss():
    def make(**kw):
        return Simulation(state_shape=(NX,), steps=T, control_shape=(1,), step=forced, loss=tracking,
                          constants=(FORCING, TARGET), name="forced_func", **kw)
    sim, per = make(), make(time_loop=False, checkpoint_every=3)
    x0, p, c = np.linspace(-0.5, 0.5, NX), np.array([0.3]), 0.5 + 0.1 * np.arange(T)[:, None]
    args = (sm.tensor(x0), sm.tensor(p), sm.tensor(c))
    xs, loss = sim(*args, states=[0, 3, T])
    ref_xs, ref_loss = _numpy_forced(x0, p, c)
    np.testing.assert_allclose(xs.numpy(), ref_xs[[0, 3, T]], rtol=1e-13)
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-13)

    def f(s):
        def g(a, q, cc):
            st, l = s(a, q, cc, states=2)
            return sm.concat([sm.sin(st).reshape((-1,)), l.reshape((1,))])
        return g
    check_grads(f(sim), args, order=1, modes=("rev",))
    ga = sm.grad(lambda a, q, cc: sim(a, q, cc)[1], argnums=(0, 1, 2))(*args)
    gb = sm.grad(lambda a, q, cc: per(a, q, cc)[1], argnums=(0, 1, 2))(*args)
    for u, v in zip(ga, gb):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-14)


@ti.func
def by_value(x, p: ti.template(), c: ti.template(), xn: ti.template()):
    for i in range(xn.shape[0]):
        xn[i] = p[0]


def test_bad_func_declarations():
    with pytest.raises(ValueError, match=r"step function 'by_value': argument 'x' must be annotated ti.template\(\)"):
        Simulation(state_shape=(4,), steps=2, step=by_value)
    with pytest.raises(ValueError, match=r"step function 'heat' takes 4 arguments \(x, p, c, xn\); expected "
                                         r"\(x, params, control, x_next, gm, gmv, gv\)"):
        Simulation(state_shape=(4,), steps=2, step=heat, scratch=SCRATCH)
    with pytest.raises(TypeError, match="step= mixes @ti.func and @ti.kernel"):
        Simulation(state_shape=(2 * M.N,), steps=2, params_shape=(2,), step=[p2g, M.grid_op, g2p], scratch=SCRATCH)
    with pytest.raises(TypeError, match="loss= is a ti.func .'tracking'. but the step is a kernel"):
        Simulation(state_shape=(NX,), steps=T, step=M.p2g, loss=tracking)


VULKAN_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import taichi as ti
    import sciml as sm
    try:
        sm.init(arch="vulkan", dtype="float32")
    except sm.ArchUnavailableError:
        print("SKIP"); sys.exit(0)
    from sciml.physics import Simulation

    @ti.func
    def heat(x: ti.template(), p: ti.template(), c: ti.template(), xn: ti.template(), t: ti.template()):
        for i in range(1, x.shape[0] - 1):
            xn[i] = x[i] + p[0] * (x[i - 1] - 2.0 * x[i] + x[i + 1]) + c[0] * t

    @ti.func
    def loss(x: ti.template(), p: ti.template(), c: ti.template(), out: ti.template(), t: ti.template()):
        for i in range(x.shape[0]):
            out[0] += x[i] * x[i]

    n, T = 16, 10
    sim = Simulation(state_shape=(n,), steps=T, control_shape=(1,), step=heat, loss=loss, checkpoint_every=4)
    u0 = np.sin(np.linspace(0, 3, n)).astype(np.float32)
    c = (0.001 * np.arange(T)[:, None]).astype(np.float32)
    xs, l = sim(sm.tensor(u0), sm.tensor(np.array([0.2], np.float32)), sm.tensor(c), states=1)
    u, ref, ls = u0.astype(np.float64), [u0.astype(np.float64)], 0.0
    for t in range(T):
        v = np.zeros(n)
        v[1:-1] = u[1:-1] + 0.2 * (u[:-2] - 2 * u[1:-1] + u[2:]) + c[t, 0] * t
        u = v
        ref.append(u)
        ls += (u * u).sum()
    print("LOOP_ERR", float(np.abs(xs.numpy() - np.array(ref)).max()), abs(float(l) - ls) / ls)

    # a sciml.models MLP inside the step (MLPController), against the MLP's own forward on the host
    from sciml.models import MLP
    from sciml.physics import MLPController

    @ti.func
    def feat(x: ti.template(), p: ti.template(), c: ti.template(), xn: ti.template(), inp: ti.template(),
             h1: ti.template(), out: ti.template()):
        for i in range(3):
            inp[i] = x[i]

    @ti.func
    def upd(x: ti.template(), p: ti.template(), c: ti.template(), xn: ti.template(), inp: ti.template(),
            h1: ti.template(), out: ti.template()):
        for i in range(3):
            xn[i] = x[i] + 0.1 * out[i]

    net = MLP([3, 4, 3], activation="tanh", seed=0)
    ctrl = MLPController(net, input="inp", output="out", output_activation="tanh")
    scr = ctrl.scratch()
    csim = Simulation(state_shape=(3,), steps=5, params_shape=(ctrl.n_params,), scratch=scr,
                      step=[feat, *ctrl.funcs(scr), upd])
    x = np.array([0.3, -0.2, 0.5], np.float32)
    got = csim(sm.tensor(x), ctrl.flatten(net.params())).numpy()
    L = [(l.weight.numpy().astype(np.float64), l.bias.numpy().astype(np.float64)) for l in net.layers]
    ref = x.astype(np.float64)
    for _ in range(5):
        u = np.tanh(np.tanh(ref @ L[0][0] + L[0][1]) @ L[1][0] + L[1][1])
        ref = ref + 0.1 * u
    print("MLP_ERR", float(np.abs(got - ref).max()))
""")


def test_vulkan_func_step_time_loop_forward(tmp_path):
    script = tmp_path / "vk_loop.py"
    script.write_text(VULKAN_SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    if "SKIP" in r.stdout:
        if os.environ.get("SCIML_REQUIRE_VULKAN"):   # set by .ci/run: CI must really run this pass
            pytest.fail("no Vulkan device; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan device")
    err, lerr = (float(v) for v in r.stdout.split("LOOP_ERR")[1].split()[:2])
    assert err < 1e-5 and lerr < 1e-5
    assert float(r.stdout.split("MLP_ERR")[1].split()[0]) < 1e-5
