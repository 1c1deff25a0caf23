"""The rules for step kernels in docs/physics.md, each with the example the docs show: the broken
form is caught (an error, or check_step naming the wrong derivative) and the fixed form passes."""
import numpy as np
import pytest
import taichi as ti

import sciml as sm
from sciml.physics import Simulation, SimulationCheckError
from sciml.testing import check_grads

a1 = ti.types.ndarray(ndim=1)
X0, P = np.array([0.5, 1.0, -0.3, 2.0]), np.array([1.5])


# Rule 1: a step never writes x, params or control.
@ti.kernel
def writes_x(x: a1, p: a1, c: a1, xn: a1):
    for i in range(x.shape[0]):
        xn[i] = x[i] * p[0]
        x[i] = 0.0  # breaks rule 1


def test_rule1_inputs_are_read_only():
    with pytest.raises(RuntimeError, match="the step kernel wrote its input 'x'"):
        Simulation(state_shape=(4,), steps=2, step=writes_x)(sm.tensor(X0), sm.tensor(P))


# Rule 2: every global value is written once (or accumulated with +=), never overwritten after it was read.
@ti.kernel
def square_in_place(x: a1, p: a1, c: a1, xn: a1):
    for i in range(x.shape[0]):
        xn[i] = x[i] * p[0]
    for i in range(x.shape[0]):
        xn[i] = xn[i] * xn[i]  # breaks rule 2: overwrites a value this loop read


@ti.kernel
def scale(x: a1, p: a1, c: a1, xn: a1, tmp: a1):
    for i in range(x.shape[0]):
        tmp[i] = x[i] * p[0]


@ti.kernel
def square(x: a1, p: a1, c: a1, xn: a1, tmp: a1):
    for i in range(x.shape[0]):
        xn[i] = tmp[i] * tmp[i]  # the fix: the intermediate lives in a scratch array


def test_rule2_no_overwrite_use_scratch():
    with pytest.raises(SimulationCheckError, match=r"d\(x_next\)/d\(x\)"):
        Simulation(state_shape=(4,), steps=2, step=square_in_place).check_step(X0, P)
    fixed = Simulation(state_shape=(4,), steps=2, step=[scale, square], scratch={"tmp": (4,)})
    assert max(fixed.check_step(X0, P).values()) < 1e-6
    np.testing.assert_allclose(fixed(sm.tensor(X0), sm.tensor(P)).numpy(), ((X0 * 1.5) ** 2 * 1.5) ** 2)


# Rule 3: shared outputs (a grid, a loss) are accumulated with += (atomic in parallel loops).
@ti.kernel
def spread(x: a1, p: a1, c: a1, xn: a1):
    for i in range(x.shape[0]):
        xn[(i + 1) % x.shape[0]] += 0.5 * p[0] * x[i]
        xn[i] += 0.5 * x[i]


@ti.kernel
def running_loss(x: a1, p: a1, c: a1, out: a1):
    for i in range(x.shape[0]):
        out[0] += x[i] ** 2


def test_rule3_accumulate_with_plus_equals():
    sim = Simulation(state_shape=(4,), steps=3, step=spread, loss=running_loss)
    assert max(sim.check_step(X0, P).values()) < 1e-6
    check_grads(lambda x, p: sim(x, p)[1], (sm.tensor(X0), sm.tensor(P)), order=1, modes=("rev",))


# Scatter then gather in ONE kernel: reading x_next in a later loop is allowed (sciml reverses each
# step with the forward's own x_{t+1}); the grid lives in the state here, in scratch in test_per_step.
@ti.kernel
def scatter_gather(x: a1, p: a1, c: a1, xn: a1):
    for i in range(2):
        xn[2 + i % 2] += p[0] * x[i]  # scatter into the "grid" part of x_next
    for i in range(2):
        xn[i] = x[i] + 0.1 * ti.tanh(xn[2 + (i + 1) % 2])  # gather from it


def test_scatter_gather_in_one_kernel():
    sim = Simulation(state_shape=(4,), steps=5, step=scatter_gather)
    assert max(sim.check_step(X0, P).values()) < 1e-6
    check_grads(lambda x, p: sim(x, p), (sm.tensor(X0), sm.tensor(P)), order=1, modes=("rev",))


# Rule 7 (measured): in a SERIALIZED loop, a local assigned inside an `if` and then combined with ti.Vector
# locals gets a wrong adjoint (the same loop parallel is right); write the branch with ti.select.
a2 = ti.types.ndarray(ndim=2)
X_TOI = np.array([[0.2, 0.1005, 0.1, -0.3], [0.3, 0.2, 0.1, -0.2], [0.4, 0.1003, -0.2, -0.25]])


def _toi_step(serial, branch_free):
    @ti.kernel
    def toi_step(x: a2, p: a1, c: a1, xn: a2):
        ti.loop_config(serialize=serial)
        for i in range(x.shape[0]):
            old_v = ti.Vector([x[i, 2], x[i, 3]]) * p[0]
            old_x = ti.Vector([x[i, 0], x[i, 1]])
            hit = old_x[1] + 0.004 * old_v[1] < 0.1
            toi = 0.0
            if ti.static(branch_free):
                toi = ti.select(hit, -(old_x[1] - 0.1) / ti.select(hit, old_v[1], -1.0), 0.0)
            else:
                if hit:
                    toi = -(old_x[1] - 0.1) / old_v[1]
            new_x = old_x + toi * old_v
            xn[i, 0], xn[i, 1], xn[i, 2], xn[i, 3] = new_x[0], new_x[1], old_v[0], old_v[1]
    return toi_step


def test_rule7_serialized_loop_branches_with_vectors():
    def sim(serial, branch_free):
        return Simulation(state_shape=(3, 4), steps=2, step=_toi_step(serial, branch_free), name="toi")
    with pytest.raises(SimulationCheckError, match=r"d\(x_next\)/d\(x\)"):
        sim(True, False).check_step(X_TOI, np.array([1.0]))
    for serial, branch_free in ((False, False), (True, True)):
        sim(serial, branch_free).check_step(X_TOI, np.array([1.0]))
