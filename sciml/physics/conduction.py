"""1-D heat conduction with a conductivity field k (one value per cell), with a tangent kernel.

    u_{t+1}[i] = u_t[i] + k[i] (u_t[i-1] - 2 u_t[i] + u_t[i+1])   for 1 <= i <= n-2, zero ends.

``params`` is the field k (shape (n,)): recovering it from observed temperatures is a nonlinear
least-squares problem (``examples/physics/conductivity_lm.py`` solves it with Levenberg-Marquardt
from J v and J^T u products). Reverse mode: Taichi's ``step.grad``; forward mode: ``conduction_tangent``.
"""
import taichi as ti

from .simulation import Simulation

# No `from __future__ import annotations` here: Taichi needs real annotations.
arr = ti.types.ndarray(ndim=1)


@ti.kernel
def conduction_step(u: arr, k: arr, c: arr, out: arr):
    for i in range(u.shape[0]):
        n = u.shape[0]
        v = 0.0
        if i >= 1 and i <= n - 2:
            v = u[i] + k[i] * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        out[i] = v


@ti.kernel
def conduction_tangent(u: arr, k: arr, c: arr, out: arr, du: arr, dk: arr, dc: arr, dout: arr):
    for i in range(u.shape[0]):
        n = u.shape[0]
        v = 0.0
        if i >= 1 and i <= n - 2:
            v = du[i] + dk[i] * (u[i - 1] - 2.0 * u[i] + u[i + 1]) + k[i] * (du[i - 1] - 2.0 * du[i] + du[i + 1])
        dout[i] = v


def conduction1d(n, steps, *, checkpoint_every="auto", memory_budget=2 << 30):
    """``u_T = sim(u0, k)`` with a conductivity field ``k`` of shape (n,) (stable for 0 <= k <= 0.5);
    ``jvp`` / ``jacfwd`` work through it (a tangent kernel), as do ``grad`` / ``vjp``.

    Example:
        >>> sim = sm.physics.conduction1d(64, 200)
        >>> u_T, Jv = sm.jvp(lambda k: sim(u0, k), (k,), (v,))
    """
    return Simulation(state_shape=(n,), steps=steps, params_shape=(n,), step=conduction_step,
                      tangent=conduction_tangent, checkpoint_every=checkpoint_every, memory_budget=memory_budget,
                      name="conduction1d")
