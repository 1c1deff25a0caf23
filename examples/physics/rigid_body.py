"""DiffTaichi's rigid-body robot (``rigid_body``), written the way docs/physics.md teaches.

A 2-D robot of rigid boxes linked by springs and joints walks towards a goal: a neural controller
(sine waves of time + the boxes' positions, velocities and angles + the goal -> 32 tanh hidden
units -> one actuation per spring) changes the springs' rest lengths every step, the ground
pushes back with impulses (friction, time of impact), and the loss is the distance of the head box
to the goal after 2047 steps. The original (kept runnable in ``benchmarks/difftaichi/rigid_body.py``)
stores every box, hidden layer and actuation of every step in global fields and launches five
kernels per step; here the step is the original's five kernels as five ``ti.func``s (a
``Simulation`` runs them as one generated kernel per step, and its forward as ONE generated time
loop over all steps):

* the state is one (n_objects, 6) array: position (2), velocity (2), angle, angular velocity;
* the parameters are the controller's weights and biases, one flat vector (W1, b1, W2, b2);
* the hidden layer, the actuations and the impulses' increments are ``scratch``: zeroed each step,
  differentiated, recomputed in the backward pass (never stored);
* the controller reads the step index ``t`` (its clock) and the state: a closed-loop neural
  controller inside the per-step path, no per-step Python;
* the loops over a few boxes or springs are serialized (``ti.loop_config(serialize=True)``): a
  parallel loop pays a thread-pool wake-up per launch;
* the loss is ordinary sciml code on the final state.

Over 2047 steps the contacts make the rollout chaotic: a one-rounding difference at the first
contact (step 73) grows to 3e-4 in the final positions, so the port equals the original to rounding
only over shorter rollouts (5e-15 at 1 024 steps; see docs/physics.md).

    python examples/physics/rigid_body.py                 # 20 iterations of clipped gradient descent, as DiffTaichi
    python examples/physics/rigid_body.py --quick         # smoke test (300 steps, 3 iterations)
    python examples/physics/rigid_body.py --bench-out g.npz --iters 3   # gradients + timings (benchmarks)
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

DT = 0.001
ELASTICITY, GROUND, GRAVITY, FRICTION, DAMPING = 0.0, 0.1, -9.8, 1.0, 10
SPRING_OMEGA, DEFAULT_ACTUATION = 30, 0.05
N_SIN, N_HIDDEN = 10, 32
GOAL = (0.9, 0.15)



# --- the original's robots (robot_config.py) ------------------------------------------------------
def _robot(build):
    objects, springs = [], []

    def add_object(x, halfsize, rotation=0):
        objects.append([x, halfsize, rotation])
        return len(objects) - 1

    def add_spring(a, b, offset_a, offset_b, length, stiffness, actuation=0.0):
        springs.append([a, b, offset_a, offset_b, length, stiffness, actuation])
    head = build(add_object, add_spring)
    return objects, springs, head


def robot_a(add_object, add_spring):
    add_object(x=[0.3, 0.25], halfsize=[0.15, 0.03])
    add_object(x=[0.2, 0.15], halfsize=[0.03, 0.02])
    add_object(x=[0.3, 0.15], halfsize=[0.03, 0.02])
    add_object(x=[0.4, 0.15], halfsize=[0.03, 0.02])
    add_object(x=[0.4, 0.3], halfsize=[0.005, 0.03])
    length, s = 0.12, 15
    add_spring(0, 1, [-0.03, 0.00], [0.0, 0.0], length, s)
    add_spring(0, 1, [-0.1, 0.00], [0.0, 0.0], length, s)
    add_spring(0, 2, [-0.03, 0.00], [0.0, 0.0], length, s)
    add_spring(0, 2, [0.03, 0.00], [0.0, 0.0], length, s)
    add_spring(0, 3, [0.03, 0.00], [0.0, 0.0], length, s)
    add_spring(0, 3, [0.1, 0.00], [0.0, 0.0], length, s)
    add_spring(0, 4, [0.1, 0], [0, -0.05], -1, s)  # length -1: a joint
    return 0


def robot_b(add_object, add_spring):
    body = add_object([0.15, 0.25], [0.1, 0.03])
    back = add_object([0.08, 0.22], [0.03, 0.10])
    front = add_object([0.22, 0.22], [0.03, 0.10])
    rest_length, stiffness, act = 0.22, 50, 0.03
    add_spring(body, back, [0.08, 0.02], [0.0, -0.08], rest_length, stiffness, actuation=act)
    add_spring(body, front, [-0.08, 0.02], [0.0, -0.08], rest_length, stiffness, actuation=act)
    add_spring(body, back, [-0.08, 0.0], [0.0, 0.03], -1, stiffness)
    add_spring(body, front, [0.08, 0.0], [0.0, 0.03], -1, stiffness)
    return body


ROBOTS = [robot_a, robot_b]  # the original's robots 0 and 1


def make_step(n_objects, n_springs, head_id, toi=True):
    """One step: five ti.funcs of one loop each (the original's five kernels). They take the Simulation's arguments
    ``(s, w, c, sn, hidden, act, inc, body, spring, anchor, goal, t)``: state x_t (n_objects, 6),
    controller parameters, (unused) control, x_{t+1}, scratch (hidden layer, actuations, impulse
    increments (n_objects, 6): x_inc (2), v_inc (2), rotation_inc, omega_inc), then the constants
    (per body: half size (2), inverse mass, inverse inertia; per spring: offset a (2), offset b (2),
    rest length, stiffness, actuation; spring anchors (a, b); the goal), then the step index."""
    n_in = N_SIN + 6 * n_objects + 2
    W1, B1 = 0, N_HIDDEN * n_in
    W2 = B1 + N_HIDDEN
    B2 = W2 + n_springs * N_HIDDEN
    decay = math.exp(-DT * DAMPING)

    @ti.func
    def rotation_matrix(r):
        return ti.Matrix([[ti.cos(r), -ti.sin(r)], [ti.sin(r), ti.cos(r)]])

    @ti.func
    def to_world(s: ti.template(), i, rela_x):
        rot_matrix = rotation_matrix(s[i, 4])
        rela_pos = rot_matrix @ rela_x
        rela_v = s[i, 5] * ti.Vector([-rela_pos[1], rela_pos[0]])
        world_x = ti.Vector([s[i, 0], s[i, 1]]) + rela_pos
        world_v = ti.Vector([s[i, 2], s[i, 3]]) + rela_v
        return world_x, world_v, rela_pos

    @ti.func
    def apply_impulse(s: ti.template(), inc: ti.template(), body: ti.template(), i, impulse, location, toi_input):
        delta_v = impulse * body[i, 2]
        delta_omega = (location - ti.Vector([s[i, 0], s[i, 1]])).cross(impulse) * body[i, 3]
        toi_ = ti.min(ti.max(0.0, toi_input), DT)
        dx = toi_ * (-delta_v)
        inc[i, 0] += dx[0]  # += : atomic, reversed as a gather (docs rule 3)
        inc[i, 1] += dx[1]
        inc[i, 4] += toi_ * (-delta_omega)
        inc[i, 2] += delta_v[0]
        inc[i, 3] += delta_v[1]
        inc[i, 5] += delta_omega

    @ti.func
    def nn1(s: ti.template(), w: ti.template(), c: ti.template(), sn: ti.template(), hidden: ti.template(), act: ti.template(),
            inc: ti.template(), body: ti.template(), spring: ti.template(), anchor: ti.template(),
            goal: ti.template(), t: ti.template()):
        ti.loop_config(serialize=True)  # a few iterations: no thread-pool wake-up
        for i in range(N_HIDDEN):
            a = 0.0
            for j in ti.static(range(N_SIN)):
                a += w[W1 + i * n_in + j] * ti.sin(SPRING_OMEGA * t * DT + 2 * math.pi / N_SIN * j)
            for j in ti.static(range(n_objects)):
                o = W1 + i * n_in + j * 6 + N_SIN
                offset = ti.Vector([s[j, 0], s[j, 1]]) - ti.Vector([s[head_id, 0], s[head_id, 1]])
                a += w[o] * offset[0] * 0.05  # a smaller weight: there are many of them
                a += w[o + 1] * offset[1] * 0.05
                a += w[o + 2] * s[j, 2] * 0.05
                a += w[o + 3] * s[j, 3] * 0.05
                a += w[o + 4] * s[j, 4] * 0.05
                a += w[o + 5] * s[j, 5] * 0.05
            a += w[W1 + i * n_in + n_objects * 6 + N_SIN] * goal[0]
            a += w[W1 + i * n_in + n_objects * 6 + N_SIN + 1] * goal[1]
            a += w[B1 + i]
            hidden[i] = ti.tanh(a)

    @ti.func
    def nn2(s: ti.template(), w: ti.template(), c: ti.template(), sn: ti.template(), hidden: ti.template(), act: ti.template(),
            inc: ti.template(), body: ti.template(), spring: ti.template(), anchor: ti.template(),
            goal: ti.template(), t: ti.template()):
        ti.loop_config(serialize=True)  # a few iterations: no thread-pool wake-up
        for i in range(n_springs):
            a = 0.0
            for j in ti.static(range(N_HIDDEN)):
                a += w[W2 + i * N_HIDDEN + j] * hidden[j]
            a += w[B2 + i]
            act[i] = ti.tanh(a)

    @ti.func
    def collide(s: ti.template(), w: ti.template(), c: ti.template(), sn: ti.template(), hidden: ti.template(), act: ti.template(),
            inc: ti.template(), body: ti.template(), spring: ti.template(), anchor: ti.template(),
            goal: ti.template(), t: ti.template()):
        ti.loop_config(serialize=True)  # a few iterations: no thread-pool wake-up
        for i, k in ti.ndrange(n_objects, 4):  # each box's 4 corners: a runtime loop (3x faster to compile
            hs = ti.Vector([body[i, 0], body[i, 1]])  # than ti.static), the original's order of the +=
            inv_m, inv_i = body[i, 2], body[i, 3]
            offset_scale = ti.Vector([k % 2 * 2 - 1, k // 2 % 2 * 2 - 1])
            corner_x, corner_v, rela_pos = to_world(s, i, offset_scale * hs)
            corner_v = corner_v + DT * GRAVITY * ti.Vector([0.0, 1.0])
            normal = ti.Vector([0.0, 1.0])
            tao = ti.Vector([1.0, 0.0])
            rn = rela_pos.cross(normal)
            rt = rela_pos.cross(tao)
            impulse_contribution = inv_m + (rn) ** 2 * inv_i
            timpulse_contribution = inv_m + (rt) ** 2 * inv_i
            rela_v_ground = normal.dot(corner_v)
            impulse = 0.0
            timpulse = 0.0
            new_corner_x = corner_x + DT * corner_v
            toi_ = 0.0
            if rela_v_ground < 0 and new_corner_x[1] < GROUND:
                impulse = -(1 + ELASTICITY) * rela_v_ground / impulse_contribution
                if impulse > 0:  # friction
                    timpulse = -corner_v.dot(tao) / timpulse_contribution
                    timpulse = ti.min(FRICTION * impulse, ti.max(-FRICTION * impulse, timpulse))
                    if corner_x[1] > GROUND:
                        toi_ = -(corner_x[1] - GROUND) / ti.min(corner_v[1], -1e-3)
            apply_impulse(s, inc, body, i, impulse * normal + timpulse * tao, new_corner_x, toi_)
            # the original's penalty impulse reads a local `penalty` that is 0.0 (it shadows the
            # global 1e4), so it is always zero; kept so that the arithmetic is the original's
            penalty = 0.0
            if new_corner_x[1] < GROUND:
                penalty = -DT * penalty * (new_corner_x[1] - GROUND) / impulse_contribution
            apply_impulse(s, inc, body, i, penalty * normal, new_corner_x, 0)

    @ti.func
    def springs(s: ti.template(), w: ti.template(), c: ti.template(), sn: ti.template(), hidden: ti.template(), act: ti.template(),
            inc: ti.template(), body: ti.template(), spring: ti.template(), anchor: ti.template(),
            goal: ti.template(), t: ti.template()):
        ti.loop_config(serialize=True)  # a few iterations: no thread-pool wake-up
        for i in range(n_springs):
            a = anchor[i, 0]
            b = anchor[i, 1]
            pos_a, vel_a, rela_a = to_world(s, a, ti.Vector([spring[i, 0], spring[i, 1]]))
            pos_b, vel_b, rela_b = to_world(s, b, ti.Vector([spring[i, 2], spring[i, 3]]))
            dist = pos_a - pos_b
            length = dist.norm() + 1e-4
            is_joint = spring[i, 4] == -1
            target_length = spring[i, 4] * (1.0 + spring[i, 6] * act[i])
            if is_joint:
                target_length = 0.0
            impulse = DT * (length - target_length) * spring[i, 5] / length * dist
            if is_joint:
                rela_vel = vel_a - vel_b
                rela_vel_norm = rela_vel.norm() + 1e-1
                impulse_dir = rela_vel / rela_vel_norm
                impulse_contribution = body[a, 2] + impulse_dir.cross(rela_a) ** 2 * body[a, 3] + body[b, 2] + \
                    impulse_dir.cross(rela_b) ** 2 * body[b, 3]
                impulse += rela_vel_norm / impulse_contribution * impulse_dir  # project the relative velocity
            apply_impulse(s, inc, body, a, -impulse, pos_a, 0.0)
            apply_impulse(s, inc, body, b, impulse, pos_b, 0.0)

    @ti.func
    def advance(s: ti.template(), w: ti.template(), c: ti.template(), sn: ti.template(), hidden: ti.template(), act: ti.template(),
            inc: ti.template(), body: ti.template(), spring: ti.template(), anchor: ti.template(),
            goal: ti.template(), t: ti.template()):
        ti.loop_config(serialize=True)  # a few iterations: no thread-pool wake-up
        for i in range(n_objects):
            v = decay * ti.Vector([s[i, 2], s[i, 3]]) + ti.Vector([inc[i, 2], inc[i, 3]]) + \
                DT * GRAVITY * ti.Vector([0.0, 1.0])
            x = ti.Vector([s[i, 0], s[i, 1]]) + DT * v
            if ti.static(toi):
                x = x + ti.Vector([inc[i, 0], inc[i, 1]])
            omega = decay * s[i, 5] + inc[i, 5]
            rot = s[i, 4] + DT * omega
            if ti.static(toi):
                rot = rot + inc[i, 4]
            sn[i, 0], sn[i, 1], sn[i, 2], sn[i, 3] = x[0], x[1], v[0], v[1]
            sn[i, 4], sn[i, 5] = rot, omega

    # the original's five kernels as five ti.funcs, each one top-level loop: the Simulation calls them in order in
    # one generated kernel per step (one launch per step, and one recompute + one adjoint launch per step
    # backward), and its forward runs them in a generated time loop, ONE launch for all steps. Each loop reads
    # what the earlier ones wrote and never overwrites it; the impulses are accumulated with += (docs rules 2, 3)
    return [nn1, nn2, collide, springs, advance]


def build(robot=0, steps=2048, toi=True, checkpoint_every="auto", dtype=np.float64, time_loop=True):
    """``(sim, x0, loss_fn, n_params)``: ``loss_fn(params)`` is the original's loss (distance of the head
    box to the goal) after ``steps - 1`` advances (the original's ``steps`` counts the start state)."""
    objects, springs, head = _robot(ROBOTS[robot])
    n, ns = len(objects), len(springs)
    h = np.array([o[1] for o in objects], np.float64)
    body = np.zeros((n, 4))
    body[:, :2] = h
    body[:, 2] = 1.0 / (4 * h[:, 0] * h[:, 1])
    body[:, 3] = 1.0 / (4 / 3 * h[:, 0] * h[:, 1] * (h[:, 0] * h[:, 0] + h[:, 1] * h[:, 1]))
    spring = np.array([[*s[2], *s[3], s[4], s[5], s[6] or DEFAULT_ACTUATION] for s in springs], np.float64)
    anchor = np.array([[s[0], s[1]] for s in springs], np.int32)
    x0 = np.zeros((n, 6))
    x0[:, :2] = [o[0] for o in objects]
    x0[:, 4] = [o[2] for o in objects]
    n_in = N_SIN + 6 * n + 2
    n_params = N_HIDDEN * n_in + N_HIDDEN + ns * N_HIDDEN + ns
    sim = sm.physics.Simulation(
        state_shape=(n, 6), steps=steps - 1, params_shape=(n_params,), step=make_step(n, ns, head, toi),
        scratch={"hidden": (N_HIDDEN,), "act": (ns,), "inc": (n, 6)},
        constants=(body.astype(dtype), spring.astype(dtype), anchor, np.array(GOAL, dtype)),
        checkpoint_every=checkpoint_every, time_loop=time_loop, name="rigid_body")
    goal = sm.tensor(np.array(GOAL))

    def loss(params):
        d = sim(sm.tensor(x0), params)[head, :2] - goal
        return sm.sqrt((d * d).sum())
    return sim, x0, loss, n_params


def start_params(n_objects, n_springs, rng):
    """The original's initialisation (W1, W2 Gaussian, biases zero), drawn from ``rng``."""
    n_in = N_SIN + 6 * n_objects + 2
    w1 = rng.standard_normal((N_HIDDEN, n_in)) * math.sqrt(2 / (N_HIDDEN + n_in)) * 0.5
    w2 = rng.standard_normal((n_springs, N_HIDDEN)) * math.sqrt(2 / (N_HIDDEN + n_springs))
    return np.concatenate([w1.ravel(), np.zeros(N_HIDDEN), w2.ravel(), np.zeros(n_springs)])


def corners(states, body):
    """The boxes' corners, shape (..., n_objects, 4, 2), from states (..., n_objects, 6) (numpy)."""
    c, s = np.cos(states[..., 4]), np.sin(states[..., 4])
    out = []
    for sx, sy in ((-1, -1), (1, -1), (1, 1), (-1, 1)):
        ox, oy = sx * body[:, 0], sy * body[:, 1]
        out.append(np.stack([states[..., 0] + c * ox - s * oy, states[..., 1] + s * ox + c * oy], -1))
    return np.stack(out, -2)


def split(params, n_objects, n_springs):
    """``(W1, b1, W2, b2)`` views of a flat parameter vector."""
    n_in = N_SIN + 6 * n_objects + 2
    a, b = N_HIDDEN * n_in, N_HIDDEN * n_in + N_HIDDEN
    c = b + n_springs * N_HIDDEN
    return params[:a].reshape(N_HIDDEN, n_in), params[a:b], params[b:c].reshape(n_springs, N_HIDDEN), params[c:]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--robot", type=int, default=0, choices=range(len(ROBOTS)))
    ap.add_argument("--steps", type=int, default=int(os.environ.get("DIFFTAICHI_STEPS", 2048)))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-toi", action="store_true", help="advance without the time-of-impact correction")
    ap.add_argument("--float32", action="store_true", help="float32 (default float64)")
    ap.add_argument("--per-launch", action="store_true", help="forward one launch per step (no generated time loop)")
    ap.add_argument("--quick", action="store_true", help="300 steps, 3 iterations (smoke test)")
    ap.add_argument("--bench-out", default=None, help="write gradients and timings at the benchmark's start weights")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.iters = 300, 3
    dtype = "float32" if args.float32 else "float64"
    sm.init(arch="cpu", dtype=dtype)
    toi = not args.no_toi and os.environ.get("DIFFTAICHI_TOI", "1") == "1"
    sim, x0, loss, n_params = build(args.robot, args.steps, toi, dtype=np.dtype(dtype), time_loop=not args.per_launch)
    n, ns = sim.state_shape[0], len(sim.constants[2])
    params = sm.tensor(start_params(n, ns, np.random.default_rng(0)))  # the benchmark's start weights
    vg = sm.value_and_grad(loss)
    if args.bench_out:
        import resource
        times = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            value, g = vg(params)
            times.append(time.perf_counter() - t0)
        w1, b1, w2, b2 = split(g.numpy(), n, ns)
        np.savez(args.bench_out, loss=float(value), g_weights1=w1, g_bias1=b1, g_weights2=w2, g_bias2=b2,
                 times=np.array(times), peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                 n_objects=n, steps=args.steps)
        return None
    history = []
    for it in range(args.iters):  # the original's update: gradient descent, lr 1, global norm clipped to 0.2
        t0 = time.perf_counter()
        value, g = vg(params)
        history.append(float(value))
        norm = float(np.sqrt((g.numpy() ** 2).sum()))
        print(f"iter {it:3d}  loss {float(value):.5f}  |grad| {norm:.3e}  ({time.perf_counter() - t0:.2f} s)")
        params = params - min(1.0, 0.2 / (norm + 1e-4)) * g
    return history


if __name__ == "__main__":
    main()
