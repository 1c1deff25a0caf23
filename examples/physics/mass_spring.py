"""DiffTaichi's mass-spring robot (``mass_spring``) with a ``sciml.models.MLP`` controller inside the step.

Six masses linked by eleven springs walk right: every step a neural controller (10 sine waves of
time, each mass's offset from the centre and velocity, the goal's offset -> 32 tanh units -> one
actuation per spring, tanh) changes the springs' rest lengths; the ground stops the masses (time of
impact). The loss is -(x of the head mass) after 681 steps. The original (kept runnable in
``benchmarks/difftaichi/mass_spring.py``) launches five kernels per step on fields of every step.

Here the controller is an ordinary ``sciml.models.MLP``; ``sm.physics.MLPController`` evaluates it
inside the step (one ``ti.func`` per layer, weights read from the Simulation's ``params``) and
``ctrl.flatten(net.params())`` makes the parameter vector in sciml ops, so ``sm.grad`` returns
gradients shaped like ``net.params()`` and any sciml optimizer trains the MLP. The step is a list of
``ti.func``s (features, the MLP's layers, springs, advance), so the forward runs as ONE generated
kernel looping over time, and the backward runs the generated step kernel's ``.grad`` step by step.

    python examples/physics/mass_spring.py                # 20 iterations of clipped gradient descent, as DiffTaichi
    python examples/physics/mass_spring.py --quick        # smoke test (100 steps, 3 iterations)
    python examples/physics/mass_spring.py --bench-out g.npz --iters 3   # gradients + timings (benchmarks)
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
from sciml.models import MLP

DT, GROUND, GRAVITY, DAMPING, SPRING_OMEGA = 0.004, 0.1, -4.8, 15, 10
N_SIN, N_HIDDEN, GOAL, HEAD = 10, 32, (0.9, 0.2), 0


def robot_a():
    """The original's robot 0 (mass_spring_robot_config.robotA): (positions, springs [a, b, length, stiffness,
    actuation])."""
    objects = [[0.2, 0.1], [0.3, 0.13], [0.4, 0.1], [0.2, 0.2], [0.3, 0.2], [0.4, 0.2]]
    springs = []
    for a, b in ((0, 1), (1, 2), (3, 4), (4, 5), (0, 3), (2, 5), (0, 4), (1, 4), (2, 4), (3, 1), (5, 1)):
        length = ((objects[a][0] - objects[b][0]) ** 2 + (objects[a][1] - objects[b][1]) ** 2) ** 0.5
        springs.append([a, b, length, 14000, 0.1])
    return objects, springs


def make_funcs(n):
    """The step's physics as ti.funcs taking the Simulation's arguments ``(x, p, c, xn, center, feat, act_h1, act,
    v_inc, spring, anchor, goal, t)``: state (n, 4) = position, velocity; scratch: the centre, the MLP's input,
    hidden layer and output, the springs' velocity increments; constants: per spring (length, stiffness,
    actuation), the springs' ends, the goal."""
    decay = math.exp(-DT * DAMPING)
    T = ti.template()

    @ti.func
    def features(x: T, p: T, c: T, xn: T, center: T, feat: T, h1: T, act: T, vinc: T, spring: T, anchor: T,
                 goal: T, t: T):
        ti.loop_config(serialize=True)
        for _ in range(1):  # the original's compute_center
            s = ti.Vector([0.0, 0.0])
            for i in ti.static(range(n)):
                s += ti.Vector([x[i, 0], x[i, 1]])
            s = (1.0 / n) * s
            center[0], center[1] = s[0], s[1]
        ti.loop_config(serialize=True)
        for _ in range(1):  # the original's nn1 inputs (its weights are the MLP's first layer)
            for j in ti.static(range(N_SIN)):
                feat[j] = ti.sin(SPRING_OMEGA * t * DT + 2 * math.pi / N_SIN * j)
            for j in ti.static(range(n)):
                feat[N_SIN + 4 * j] = (x[j, 0] - center[0]) * 0.05
                feat[N_SIN + 4 * j + 1] = (x[j, 1] - center[1]) * 0.05
                feat[N_SIN + 4 * j + 2] = x[j, 2] * 0.05
                feat[N_SIN + 4 * j + 3] = x[j, 3] * 0.05
            feat[N_SIN + 4 * n] = goal[0] - center[0]
            feat[N_SIN + 4 * n + 1] = goal[1] - center[1]

    @ti.func
    def springs(x: T, p: T, c: T, xn: T, center: T, feat: T, h1: T, act: T, vinc: T, spring: T, anchor: T,
                goal: T, t: T):
        ti.loop_config(serialize=True)
        for i in range(anchor.shape[0]):  # the original's apply_spring_force
            a, b = anchor[i, 0], anchor[i, 1]
            dist = ti.Vector([x[a, 0] - x[b, 0], x[a, 1] - x[b, 1]])
            length = dist.norm() + 1e-4
            target_length = spring[i, 0] * (1.0 + spring[i, 2] * act[i])
            impulse = DT * (length - target_length) * spring[i, 1] / length * dist
            vinc[a, 0] += -impulse[0]
            vinc[a, 1] += -impulse[1]
            vinc[b, 0] += impulse[0]
            vinc[b, 1] += impulse[1]

    @ti.func
    def advance(x: T, p: T, c: T, xn: T, center: T, feat: T, h1: T, act: T, vinc: T, spring: T, anchor: T,
                goal: T, t: T):
        ti.loop_config(serialize=True)
        for i in range(n):  # the original's advance_toi
            old_v = decay * ti.Vector([x[i, 2], x[i, 3]]) + DT * GRAVITY * ti.Vector([0.0, 1.0]) + \
                ti.Vector([vinc[i, 0], vinc[i, 1]])
            old_x = ti.Vector([x[i, 0], x[i, 1]])
            hit = (old_x[1] + DT * old_v[1] < GROUND) and old_v[1] < -1e-4
            # the original's `if hit: toi = ...; new_v = 0` without assigning a local twice (see docs/physics.md)
            toi = ti.select(hit, -(old_x[1] - GROUND) / ti.select(hit, old_v[1], -1.0), 0.0)  # no 0/0 when not hit
            new_v = ti.select(hit, 0.0, 1.0) * old_v
            new_x = old_x + toi * old_v + (DT - toi) * new_v
            xn[i, 0], xn[i, 1], xn[i, 2], xn[i, 3] = new_x[0], new_x[1], new_v[0], new_v[1]

    return features, springs, advance


def build(steps=2048 // 3, checkpoint_every="auto", dtype=np.float64, time_loop=True):
    """``(sim, x0, net, ctrl, loss)``: ``loss(params)`` (params shaped like ``net.params()``) is the original's
    loss -x[head] after ``steps - 1`` advances (the original's ``steps`` counts the start state)."""
    objects, springs = robot_a()
    n, ns = len(objects), len(springs)
    n_in = N_SIN + 4 * n + 2
    net = MLP([n_in, N_HIDDEN, ns], activation="tanh", seed=0)
    ctrl = sm.physics.MLPController(net, input="feat", output="act", output_activation="tanh")
    scratch = {"center": (2,), **ctrl.scratch(), "v_inc": (n, 2)}
    features, spring_force, advance = make_funcs(n)
    spring = np.array([[s[2], s[3], s[4]] for s in springs], dtype)
    anchor = np.array([[s[0], s[1]] for s in springs], np.int32)
    sim = sm.physics.Simulation(
        state_shape=(n, 4), steps=steps - 1, params_shape=(ctrl.n_params,), scratch=scratch,
        step=[features, *ctrl.funcs(scratch, n_constants=3, takes_t=True), spring_force, advance],
        constants=(spring, anchor, np.array(GOAL, dtype)), checkpoint_every=checkpoint_every,
        time_loop=time_loop, name="mass_spring")
    x0 = np.zeros((n, 4), dtype)
    x0[:, :2] = objects

    def loss(params):
        return -sim(sm.tensor(x0), ctrl.flatten(params))[HEAD, 0]
    return sim, x0, net, ctrl, loss


def start_params(net, n_in, ns):
    """The original's start weights (np.random.seed(0); W1 then W2, row by row; zero biases) as a pytree shaped
    like ``net.params()`` (sciml's Linear stores the weight as (in, out): the transposes)."""
    rs = np.random.RandomState(0)
    w1 = rs.randn(N_HIDDEN, n_in) * math.sqrt(2 / (N_HIDDEN + n_in)) * 2
    w2 = rs.randn(ns, N_HIDDEN) * math.sqrt(2 / (N_HIDDEN + ns)) * 3
    return {"layers": {"0": {"weight": sm.tensor(w1.T.copy()), "bias": sm.zeros((N_HIDDEN,))},
                       "1": {"weight": sm.tensor(w2.T.copy()), "bias": sm.zeros((ns,))}}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=int(os.environ.get("DIFFTAICHI_STEPS", 2048 // 3)))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--float32", action="store_true", help="float32 (default float64)")
    ap.add_argument("--per-launch", action="store_true", help="forward one launch per step (no generated time loop)")
    ap.add_argument("--quick", action="store_true", help="100 steps, 3 iterations (smoke test)")
    ap.add_argument("--bench-out", default=None, help="write gradients and timings at the original's start weights")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.iters = 100, 3
    dtype = "float32" if args.float32 else "float64"
    sm.init(arch="cpu", dtype=dtype)
    sim, x0, net, ctrl, loss = build(args.steps, dtype=np.dtype(dtype), time_loop=not args.per_launch)
    n, ns = x0.shape[0], sim.constants[1].shape[0]
    params = start_params(net, net.sizes[0], ns)
    vg = sm.value_and_grad(loss)
    if args.bench_out:
        import resource
        times = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            value, g = vg(params)
            float(value)
            times.append(time.perf_counter() - t0)
        L = g["layers"]
        np.savez(args.bench_out, loss=float(value), g_weights1=L["0"]["weight"].numpy().T, g_bias1=L["0"]["bias"].numpy(),
                 g_weights2=L["1"]["weight"].numpy().T, g_bias2=L["1"]["bias"].numpy(), times=np.array(times),
                 peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, n_objects=n, steps=args.steps)
        return None
    history = []
    for it in range(args.iters):  # the original's update: a step of global norm 0.2 along the gradient
        t0 = time.perf_counter()
        value, g = vg(params)
        history.append(float(value))
        leaves = [g["layers"][k][w] for k in ("0", "1") for w in ("weight", "bias")]
        norm = math.sqrt(sum(float((v * v).sum()) for v in leaves))
        print(f"iter {it:3d}  loss {float(value):.5f}  |grad| {norm:.3e}  ({time.perf_counter() - t0:.2f} s)")
        scale = 0.2 / (norm + 1e-6)
        params = {"layers": {k: {w: params["layers"][k][w] - scale * g["layers"][k][w] for w in ("weight", "bias")}
                             for k in ("0", "1")}}
    return history


if __name__ == "__main__":
    main()
