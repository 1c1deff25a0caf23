"""DiffTaichi's MPM robot (``diffmpm``), written the way docs/physics.md teaches.

A soft robot of ~3000 material-point particles on a 128x128 grid learns to walk right: four
actuators are driven by sine waves whose weights and biases are the parameters, and the loss is
minus the mean x of the solid particles at the last step. The original (kept runnable in
``benchmarks/difftaichi/diffmpm.py``) stores the particles of every step in global fields and
reverses the three kernels by hand; here the same three kernels are one ``Simulation`` step:

* the state is one (n_particles, 12) array per step: x (2), v (2), C (2x2), F (2x2);
* the grid is ``scratch``: zeroed each step, differentiated, recomputed in the backward (never stored);
* the actuation is computed inside ``p2g`` from the parameters and the step index ``t``;
* the loss is ordinary sciml code on the final state, so any optimizer can drive it.

    python examples/physics/diffmpm.py                 # 30 iterations of gradient descent, as DiffTaichi
    python examples/physics/diffmpm.py --quick         # smoke test (64 steps, 2 iterations)
    python examples/physics/diffmpm.py --bench-out g.npz --iters 3   # gradients + timings (benchmarks)
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import taichi as ti

try:
    import sciml as sm
except ImportError:  # running from a source checkout without `pip install -e .`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    import sciml as sm

DIM, N_GRID = 2, 128
DX = 1 / N_GRID
INV_DX = 1 / DX
DT = 1e-3
P_VOL, E = 1, 10
MU = LA = E
GRAVITY = 3.8
N_SIN, N_ACT = 4, 4
OMEGA, ACT_STRENGTH = 20, 4
BOUND, COEFF = 3, 0.5

a2 = ti.types.ndarray(ndim=2)
a3 = ti.types.ndarray(ndim=3)
a1 = ti.types.ndarray(ndim=1)
i1 = ti.types.ndarray(dtype=ti.i32, ndim=1)


@ti.func
def _mat(s: ti.template(), p, k):
    return ti.Matrix([[s[p, k], s[p, k + 1]], [s[p, k + 2], s[p, k + 3]]])


@ti.kernel
def p2g(s: a2, w: a1, c: a1, sn: a2, gv: a3, gm: a2, gvo: a3, aid: i1, ptype: i1, t: ti.i32):
    for p in range(s.shape[0]):
        x = ti.Vector([s[p, 0], s[p, 1]])
        v = ti.Vector([s[p, 2], s[p, 3]])
        C, F = _mat(s, p, 4), _mat(s, p, 8)
        base = ti.cast(x * INV_DX - 0.5, ti.i32)
        fx = x * INV_DX - ti.cast(base, ti.i32)
        wt = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2]
        new_F = (ti.Matrix.diag(dim=2, val=1) + DT * C) @ F
        J = new_F.determinant()
        if ptype[p] == 0:  # fluid
            sqrtJ = ti.sqrt(J)
            new_F = ti.Matrix([[sqrtJ, 0], [0, sqrtJ]])
        for a in ti.static(range(2)):
            for b in ti.static(range(2)):
                sn[p, 8 + 2 * a + b] = new_F[a, b]
        r, _ = ti.polar_decompose(new_F)
        act_id = aid[p]
        act = 0.0
        if act_id != -1:  # the actuation of step t, from the parameters (weights, then biases)
            z = 0.0
            for j in ti.static(range(N_SIN)):
                z += w[act_id * N_SIN + j] * ti.sin(OMEGA * t * DT + 2 * math.pi / N_SIN * j)
            act = ti.tanh(z + w[N_ACT * N_SIN + act_id]) * ACT_STRENGTH
        A = ti.Matrix([[0.0, 0.0], [0.0, 1.0]]) * act
        cauchy = ti.Matrix([[0.0, 0.0], [0.0, 0.0]])
        mass = 0.0
        if ptype[p] == 0:
            mass = 4
            cauchy = ti.Matrix([[1.0, 0.0], [0.0, 0.1]]) * (J - 1) * E
        else:
            mass = 1
            cauchy = 2 * MU * (new_F - r) @ new_F.transpose() + ti.Matrix.diag(2, LA * (J - 1) * J)
        cauchy += new_F @ A @ new_F.transpose()
        stress = -(DT * P_VOL * 4 * INV_DX * INV_DX) * cauchy
        affine = stress + mass * C
        for i in ti.static(range(3)):
            for j in ti.static(range(3)):
                offset = ti.Vector([i, j])
                dpos = (ti.cast(ti.Vector([i, j]), float) - fx) * DX
                weight = wt[i][0] * wt[j][1]
                mom = weight * (mass * v + affine @ dpos)
                for d in ti.static(range(2)):
                    gv[base[0] + i, base[1] + j, d] += mom[d]
                gm[base + offset] += weight * mass


@ti.kernel
def grid_op(s: a2, w: a1, c: a1, sn: a2, gv: a3, gm: a2, gvo: a3, aid: i1, ptype: i1):
    for i, j in gm:
        inv_m = 1 / (gm[i, j] + 1e-10)
        v_out = inv_m * ti.Vector([gv[i, j, 0], gv[i, j, 1]])
        v_out[1] -= DT * GRAVITY
        if i < BOUND and v_out[0] < 0:
            v_out[0] = 0
            v_out[1] = 0
        if i > N_GRID - BOUND and v_out[0] > 0:
            v_out[0] = 0
            v_out[1] = 0
        if j < BOUND and v_out[1] < 0:
            v_out[0] = 0
            v_out[1] = 0
            normal = ti.Vector([0.0, 1.0])
            lsq = (normal ** 2).sum()
            if lsq > 0.5:
                lin = v_out.dot(normal)
                if lin < 0:
                    vit = v_out - lin * normal
                    lit = vit.norm() + 1e-10
                    if lit + COEFF * lin <= 0:
                        v_out[0] = 0
                        v_out[1] = 0
                    else:
                        v_out = (1 + COEFF * lin / lit) * vit
        if j > N_GRID - BOUND and v_out[1] > 0:
            v_out[0] = 0
            v_out[1] = 0
        gvo[i, j, 0] = v_out[0]
        gvo[i, j, 1] = v_out[1]


@ti.kernel
def g2p(s: a2, w: a1, c: a1, sn: a2, gv: a3, gm: a2, gvo: a3, aid: i1, ptype: i1):
    for p in range(s.shape[0]):
        x = ti.Vector([s[p, 0], s[p, 1]])
        base = ti.cast(x * INV_DX - 0.5, ti.i32)
        fx = x * INV_DX - ti.cast(base, float)
        wt = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]
        new_v = ti.Vector([0.0, 0.0])
        new_C = ti.Matrix([[0.0, 0.0], [0.0, 0.0]])
        for i in ti.static(range(3)):
            for j in ti.static(range(3)):
                dpos = ti.cast(ti.Vector([i, j]), float) - fx
                g_v = ti.Vector([gvo[base[0] + i, base[1] + j, 0], gvo[base[0] + i, base[1] + j, 1]])
                weight = wt[i][0] * wt[j][1]
                new_v += weight * g_v
                new_C += 4 * weight * g_v.outer_product(dpos) * INV_DX
        for d in ti.static(range(2)):
            sn[p, 2 + d] = new_v[d]
            sn[p, d] = x[d] + DT * new_v[d]
        for a in ti.static(range(2)):
            for b in ti.static(range(2)):
                sn[p, 4 + 2 * a + b] = new_C[a, b]


def robot_scene():
    """The original's ``robot`` scene: particle positions, actuator ids, particle types."""
    xs, aids, types = [], [], []
    ox, oy = 0.1, 0.03

    def rect(x, y, w, h, act, ptype=1):
        wc, hc = int(w / DX) * 2, int(h / DX) * 2
        for i in range(wc):
            for j in range(hc):
                xs.append([x + (i + 0.5) * w / wc + ox, y + (j + 0.5) * h / hc + oy])
                aids.append(act)
                types.append(ptype)
    rect(0.0, 0.1, 0.3, 0.1, -1)
    rect(0.0, 0.0, 0.05, 0.1, 0)
    rect(0.05, 0.0, 0.05, 0.1, 1)
    rect(0.2, 0.0, 0.05, 0.1, 2)
    rect(0.25, 0.0, 0.05, 0.1, 3)
    return np.array(xs), np.array(aids, np.int32), np.array(types, np.int32)


def build(steps, checkpoint_every="auto"):
    """``(sim, x0, loss_fn)`` for a rollout of ``steps`` steps (the original runs ``steps - 1`` advances)."""
    pos, aid, ptype = robot_scene()
    n = len(pos)
    s0 = np.zeros((n, 12))
    s0[:, :2] = pos
    s0[:, 8] = s0[:, 11] = 1.0  # F = identity
    sim = sm.physics.Simulation(
        state_shape=(n, 12), steps=steps - 1, params_shape=(N_ACT * N_SIN + N_ACT,),
        step=[p2g, grid_op, g2p],
        scratch={"grid_v_in": (N_GRID, N_GRID, 2), "grid_m_in": (N_GRID, N_GRID), "grid_v_out": (N_GRID, N_GRID, 2)},
        constants=(aid, ptype), checkpoint_every=checkpoint_every, name="diffmpm")
    solid = sm.tensor((ptype == 1) / float((ptype == 1).sum()))

    def loss(params):
        return -(sim(sm.tensor(s0), params)[:, 0] * solid).sum()
    return sim, s0, loss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--quick", action="store_true", help="64 steps, 2 iterations (smoke test)")
    ap.add_argument("--bench-out", default=None, help="write gradients and timings at the benchmark's start weights")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.iters = 64, 2
    sm.init(arch="cpu", dtype="float64")
    sim, s0, loss = build(args.steps)
    rng = np.random.default_rng(0)  # the benchmark's start weights (the original draws np.random.randn * 0.01)
    params = sm.tensor(np.concatenate([(rng.standard_normal((N_ACT, N_SIN)) * 0.01).ravel(), np.zeros(N_ACT)]))
    vg = sm.value_and_grad(loss)
    if args.bench_out:
        import resource
        times = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            value, g = vg(params)
            times.append(time.perf_counter() - t0)
        gn = g.numpy()
        np.savez(args.bench_out, loss=float(value), g_weights=gn[:N_ACT * N_SIN].reshape(N_ACT, N_SIN),
                 g_bias=gn[N_ACT * N_SIN:], times=np.array(times),
                 peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, n_particles=len(s0))
        return None
    history = []
    for it in range(args.iters):
        t0 = time.perf_counter()
        value, g = vg(params)
        history.append(float(value))
        print(f"iter {it:3d}  loss {float(value):+.5f}  ({time.perf_counter() - t0:.2f} s)")
        params = params - args.lr * g  # plain gradient descent, as the original
    return history


if __name__ == "__main__":
    main()
