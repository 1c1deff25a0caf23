"""Billiards: balls on a table with soft-sphere collisions and linear drag (per-step path).

State (nb, 4): x, y, vx, vy per ball. Params (4,): dt, drag, stiffness k, radius R.
One step, semi-implicit Euler, every ball i:

    f_i = -drag v_i + sum_{j != i} k max(0, 2R - |d_ij|) d_ij / |d_ij|,   d_ij = x_i - x_j
    v_i' = v_i + dt f_i,   x_i' = x_i + dt v_i'

The step kernel stays inside Taichi's safe autodiff subset (one top-level loop over balls, the
inner loop over balls unrolled with ti.static, each output written once), so the per-step path
differentiates it with Taichi's ``step.grad``.
"""
import taichi as ti

from .simulation import Simulation

_kernels = {}


def _step_kernel(nb):
    k = _kernels.get(nb)
    if k is not None:
        return k

    @ti.kernel
    def billiards_step(x: ti.types.ndarray(ndim=2), p: ti.types.ndarray(ndim=1), c: ti.types.ndarray(ndim=1),
                       out: ti.types.ndarray(ndim=2)):
        for i in range(x.shape[0]):
            dt = p[0]
            fx = -p[1] * x[i, 2]
            fy = -p[1] * x[i, 3]
            for j in ti.static(range(nb)):
                if j != i:
                    dx = x[i, 0] - x[j, 0]
                    dy = x[i, 1] - x[j, 1]
                    dist = ti.sqrt(dx * dx + dy * dy + 1e-12)
                    pen = 2.0 * p[3] - dist
                    if pen > 0.0:
                        fx += p[2] * pen * dx / dist
                        fy += p[2] * pen * dy / dist
            vx = x[i, 2] + dt * fx
            vy = x[i, 3] + dt * fy
            out[i, 0] = x[i, 0] + dt * vx
            out[i, 1] = x[i, 1] + dt * vy
            out[i, 2] = vx
            out[i, 3] = vy

    _kernels[nb] = billiards_step
    return billiards_step


def billiards(n_balls, steps, *, checkpoint_every="auto", memory_budget=2 << 30):
    """Billiards with ``n_balls`` balls: ``state_T = sim(state0, params)``; state (n_balls, 4) rows
    (x, y, vx, vy), params (4,) = (dt, drag, stiffness, radius).

    Example:
        >>> sim = sm.physics.billiards(2, steps=200)
        >>> final = sim(state0, sm.tensor([0.01, 0.5, 2000.0, 0.05]))
    """
    return Simulation(state_shape=(n_balls, 4), steps=steps, params_shape=(4,), step=_step_kernel(n_balls),
                      mode="per_step", checkpoint_every=checkpoint_every, memory_budget=memory_budget,
                      name="billiards")
