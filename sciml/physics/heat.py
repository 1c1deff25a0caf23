"""1-D explicit heat diffusion with zero ends, with a hand-written adjoint (the W5 workload).

    u_{t+1}[i] = u_t[i] + r (u_t[i-1] - 2 u_t[i] + u_t[i+1])   for 1 <= i <= n-2
    u_{t+1}[0] = u_{t+1}[n-1] = 0                               (double-buffered update)

The adjoint of one step (A^T): with lam the cotangent of u_{t+1}, its boundary entries dropped
(those outputs do not depend on u_t), dL/du_t[i] = (1-2r) lam[i] + r (lam[i-1] + lam[i+1]);
dL/dr += sum_i lam[i] (u_t[i-1] - 2 u_t[i] + u_t[i+1]).
"""
import taichi as ti

from .simulation import Simulation

# No `from __future__ import annotations` here: Taichi needs real annotations.
arr = ti.types.ndarray(ndim=1)


@ti.kernel
def heat_step(u: arr, p: arr, c: arr, out: arr):
    """One step (per-step path; differentiated by Taichi's autodiff)."""
    for i in range(u.shape[0]):
        n = u.shape[0]
        v = 0.0
        if i >= 1 and i <= n - 2:
            v = u[i] + p[0] * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        out[i] = v


U = 8  # cells per unrolled block: LLVM packs the block into SIMD ops (1.7 -> 1.2 ms for W5's forward)


@ti.func
def _stencil(src: ti.template(), s0, dst: ti.template(), d0, n, w, r):
    """dst[d0 + i] = w src[s0 + i] + r (src[s0 + i - 1] + src[s0 + i + 1]) for 1 <= i <= n-2."""
    nb = (n - 2) // U
    for b in range(nb):
        i0 = 1 + U * b
        a = ti.Vector([src[s0 + i0 - 1 + k] for k in ti.static(range(U + 2))])
        for k in ti.static(range(U)):
            dst[d0 + i0 + k] = w * a[k + 1] + r * (a[k] + a[k + 2])
    for i in range(1 + U * nb, n - 1):
        dst[d0 + i] = w * src[s0 + i] + r * (src[s0 + i - 1] + src[s0 + i + 1])


@ti.kernel
def heat_rollout(hist: arr, p: arr, c: arr, m: ti.i32):
    """m steps inside one kernel; hist is (m+1) x n, flat."""
    r = p[0]
    w = 1.0 - 2.0 * r
    n = hist.shape[0] // (m + 1)
    ti.loop_config(serialize=True)
    for t in range(m):
        dst = (t + 1) * n
        hist[dst] = 0.0
        hist[dst + n - 1] = 0.0
        _stencil(hist, t * n, hist, dst, n, w, r)


@ti.kernel
def heat_adjoint(hist: arr, p: arr, c: arr, m: ti.i32, lam: arr, work: arr, gp: arr, gc: arr, need_params: ti.i32):
    """Hand-written adjoint, stepped backward in time; lam/work ping-pong, result in lam."""
    r = p[0]
    w = 1.0 - 2.0 * r
    n = lam.shape[0]
    ti.loop_config(serialize=True)
    for k in range(m + 1):
        if k == m:  # final copy when the result landed in work
            if m % 2 == 1:
                for i in range(n):
                    lam[i] = work[i]
        else:
            t = m - 1 - k
            acc = 0.0
            if k % 2 == 0:
                lam[0] = 0.0
                lam[n - 1] = 0.0
                work[0] = r * lam[1]
                work[n - 1] = r * lam[n - 2]
                _stencil(lam, 0, work, 0, n, w, r)
                if need_params:
                    for i in range(1, n - 1):
                        acc += lam[i] * (hist[t * n + i - 1] - 2.0 * hist[t * n + i] + hist[t * n + i + 1])
            else:
                work[0] = 0.0
                work[n - 1] = 0.0
                lam[0] = r * work[1]
                lam[n - 1] = r * work[n - 2]
                _stencil(work, 0, lam, 0, n, w, r)
                if need_params:
                    for i in range(1, n - 1):
                        acc += work[i] * (hist[t * n + i - 1] - 2.0 * hist[t * n + i] + hist[t * n + i + 1])
            gp[0] += acc


def heat1d(n, steps, *, mode="auto", checkpoint_every="auto", memory_budget=2 << 30):
    """1-D explicit heat equation on n cells with zero ends, ``u_T = sim(u0, r)`` (r shape (1,)).

    Stable for 0 <= r <= 0.5. Fused path: one rollout kernel + a hand-written adjoint; per-step
    path: ``heat_step`` and Taichi's autodiff.

    Example:
        >>> sim = sm.physics.heat1d(n=1024, steps=2000)
        >>> loss = lambda u0: ((sim(u0, sm.tensor([0.2])) - target) ** 2).sum()
        >>> g = sm.grad(loss)(u0)
    """
    return Simulation(state_shape=(n,), steps=steps, params_shape=(1,), step=heat_step, rollout=heat_rollout,
                      adjoint=heat_adjoint, mode=mode, checkpoint_every=checkpoint_every,
                      memory_budget=memory_budget, name="heat1d")
