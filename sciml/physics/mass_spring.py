"""2-D mass-spring robot (the DiffTaichi mass_spring pattern), one step per kernel launch.

State (n, 4): x, y, vx, vy per unit mass. Params (4,): dt, gravity, damping, ground height.
Control (n_springs,): actuation a_s in [-1, 1] of each spring. One step, for every mass i:

    dv_i = -sum_{springs s at i} dt k_s (l_s - L_s (1 + amp_s a_s)) d / l_s,  d = x_i - x_other, l_s = |d| + 1e-4
    v = exp(-dt damping) v_i + dt g e_y + dv_i;  x = x_i + dt v
    if the mass would go below the ground while moving down: stop it at the time of impact (toi), v = 0.

Springs reach each mass through a padded adjacency table (``max_degree`` columns, -1 = none)
unrolled with ti.static, so the kernel is in Taichi's safe autodiff subset (one top-level loop
over masses, each output written once, inputs never written).
"""
import math

import numpy as np
import taichi as ti

from .simulation import Simulation

_kernels = {}


def _step_kernel(degree):
    k = _kernels.get(degree)
    if k is not None:
        return k

    @ti.kernel
    def mass_spring_step(x: ti.types.ndarray(ndim=2), p: ti.types.ndarray(ndim=1), act: ti.types.ndarray(ndim=1),
                         out: ti.types.ndarray(ndim=2), adj: ti.types.ndarray(ndim=2),
                         ends: ti.types.ndarray(ndim=2), spring: ti.types.ndarray(ndim=2)):
        for i in range(x.shape[0]):
            dt = p[0]
            dvx = 0.0
            dvy = 0.0
            for d in ti.static(range(degree)):
                s = adj[i, d]
                if s >= 0:
                    other = ti.select(ends[s, 0] == i, ends[s, 1], ends[s, 0])
                    dx = x[i, 0] - x[other, 0]
                    dy = x[i, 1] - x[other, 1]
                    length = ti.sqrt(dx * dx + dy * dy) + 1e-4
                    target = spring[s, 0] * (1.0 + spring[s, 2] * act[s])
                    coef = dt * (length - target) * spring[s, 1] / length
                    dvx -= coef * dx
                    dvy -= coef * dy
            decay = ti.exp(-dt * p[2])
            vx = decay * x[i, 2] + dvx
            vy = decay * x[i, 3] + dt * p[1] + dvy
            nx = x[i, 0] + dt * vx
            ny = x[i, 1] + dt * vy
            if ny < p[3] and vy < -1e-4:  # contact: move to the ground at the time of impact, then stop
                toi = -(x[i, 1] - p[3]) / vy
                nx = x[i, 0] + toi * vx
                ny = x[i, 1] + toi * vy
                vx = 0.0
                vy = 0.0
            out[i, 0] = nx
            out[i, 1] = ny
            out[i, 2] = vx
            out[i, 3] = vy

    _kernels[degree] = mass_spring_step
    return mass_spring_step


def robot(cols=4, spacing=0.1, ground=0.1, stiffness=3e4, amplitude=0.15):
    """A 2-row ladder robot: ``cols`` masses per row, springs along rows, rungs and diagonals;
    rungs and diagonals are actuated (the legs). Returns (positions (n, 2), ends (s, 2) int,
    spring (s, 3) = rest length, stiffness, actuation amplitude)."""
    pos = [(0.1 + c * spacing, ground + r * spacing) for r in range(2) for c in range(cols)]
    ends, props = [], []

    def add(a, b, amp):
        L = math.dist(pos[a], pos[b])
        ends.append((a, b))
        props.append((L, stiffness, amp))

    for r in range(2):
        for c in range(cols - 1):
            add(r * cols + c, r * cols + c + 1, 0.0)
    for c in range(cols):
        add(c, cols + c, amplitude)
    for c in range(cols - 1):
        add(c, cols + c + 1, amplitude)
        add(c + 1, cols + c, amplitude)
    return np.array(pos), np.array(ends, np.int32), np.array(props)


def mass_spring(positions, ends, springs, steps, *, checkpoint_every="auto", memory_budget=2 << 30):
    """A mass-spring system as a :class:`Simulation` with control (n_springs,) per step.

    Args:
        positions: (n, 2) rest positions (for the sizes; the state is passed at call time).
        ends: (s, 2) int, the two masses of each spring.
        springs: (s, 3) float: rest length, stiffness, actuation amplitude.
        steps: time steps.

    Returns:
        A Simulation; ``sim(state0, params, controls)`` with state (n, 4), params (4,) = (dt,
        gravity, damping, ground height), controls (steps, s). For a controller that reads the
        state each step use ``sim.rollout(state0, params, controller)``.
    """
    positions = np.asarray(positions)
    ends = np.asarray(ends, np.int32)
    springs = np.asarray(springs, np.float64)
    n, s = positions.shape[0], ends.shape[0]
    if ends.ndim != 2 or ends.shape[1] != 2 or ends.min() < 0 or ends.max() >= n:
        raise ValueError(f"mass_spring: ends must be (s, 2) indices into {n} masses; got shape {ends.shape}, "
                         f"range [{ends.min()}, {ends.max()}].")
    if springs.shape != (s, 3):
        raise ValueError(f"mass_spring: springs has shape {springs.shape}; expected ({s}, 3) "
                         "(rest length, stiffness, actuation amplitude).")
    degree = np.bincount(ends.reshape(-1), minlength=n)
    adj = -np.ones((n, int(degree.max())), np.int32)
    fill = np.zeros(n, int)
    for k, (a, b) in enumerate(ends):
        for m in (a, b):
            adj[m, fill[m]] = k
            fill[m] += 1
    from .. import backend, runtime
    if backend.on_host():
        consts = (adj, ends, springs.astype(backend.NP_DTYPES[runtime.default_dtype()]))
    else:
        ti_ = runtime.ensure_init()
        consts = []
        for a, dt in ((adj, ti_.i32), (ends, ti_.i32), (springs, backend.ti_dtype(runtime.default_dtype()))):
            d = ti_.ndarray(dt, a.shape)
            d.from_numpy(a.astype(np.float32) if dt == ti_.f32 else a)
            consts.append(d)
        consts = tuple(consts)
    return Simulation(state_shape=(n, 4), steps=steps, params_shape=(4,), control_shape=(s,),
                      step=_step_kernel(adj.shape[1]), constants=consts, mode="per_step",
                      checkpoint_every=checkpoint_every, memory_budget=memory_budget, name="mass_spring")
