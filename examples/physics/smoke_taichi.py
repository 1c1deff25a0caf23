"""DiffTaichi's smoke control (``smoke_taichi``), written the way docs/physics.md teaches.

An incompressible 2-D fluid on a periodic n x n grid carries a checkerboard of smoke for 99 steps;
the initial velocity field (n x n x 2 values) is optimized so that the smoke ends up forming a
target image. Each step: advect the velocity by itself (semi-Lagrangian, bilinear), compute its
divergence, run 10 Jacobi iterations for the pressure (warm-started from the previous step's
pressure), subtract the pressure gradient, advect the smoke by the new velocity. The original (kept
runnable in ``benchmarks/difftaichi/smoke_taichi.py``) stores every field of every step (the
pressure 11 times per step) in global fields; here the step is one ``Simulation`` step:

* the state is one (n, n, 5) array: velocity (2), smoke, and the last two pressure iterates of the
  step (the original warm-starts the next step's Jacobi iterations from the last iterate and
  projects the velocity with the second-to-last iterate of the previous step: kept as it is);
* the advected velocity, the divergence and the Jacobi iterates are ``scratch``: zeroed each step,
  differentiated, recomputed in the backward pass (never stored);
* five kernels per step (the original launches 14): the Jacobi iterations are one kernel of
  ``ti.static``-unrolled top-level loops, each writing its own iterate (docs rule 2);
* the loss is ordinary sciml code on the final state, the optimized variable is ``v0`` itself.

    python examples/physics/smoke_taichi.py                 # gradient descent, as DiffTaichi (lr 400)
    python examples/physics/smoke_taichi.py --quick         # smoke test (32 x 32 grid, 10 steps)
    python examples/physics/smoke_taichi.py --bench-out g.npz --iters 3   # gradient + timings (benchmarks)
"""
import argparse
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

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TARGET_PNG = os.path.join(ROOT, "benchmarks", "difftaichi", "taichi.png")  # the original's target image
a3 = ti.types.ndarray(ndim=3)
a1 = ti.types.ndarray(ndim=1)


def make_step(n, jacobi):
    """The five kernels of one step on an n x n periodic grid with ``jacobi`` pressure iterations.

    Every kernel takes the Simulation's arguments ``(s, w, c, sn, vu, dv, pr)``: state x_t, the
    (unused) parameters and control, state x_{t+1}, and the scratch arrays advected velocity
    (n, n, 2), divergence (n, n) and Jacobi iterates (jacobi, n, n)."""
    dx = 1.0 / n

    @ti.func
    def imod(i, divisor):
        ret = i % divisor
        if ret < 0:
            ret += divisor
        return ret

    @ti.func
    def dec(i):
        j = i - 1
        if j < 0:
            j = n - 1
        return j

    @ti.func
    def inc(i):
        j = i + 1
        if j >= n:
            j = 0
        return j

    @ti.func
    def lerp_source(vx, vy, y, x):
        """The original's ``advect``: source cell indices and weights for cell (y, x), velocity (vx, vy)."""
        center_x = y - vx
        center_y = x - vy
        left_ix = ti.cast(ti.floor(center_x), ti.i32)
        top_ix = ti.cast(ti.floor(center_y), ti.i32)
        rw = center_x - left_ix
        bw = center_y - top_ix
        left_ix = imod(left_ix, n)
        right_ix = inc(left_ix)
        top_ix = imod(top_ix, n)
        bot_ix = inc(top_ix)
        return left_ix, right_ix, top_ix, bot_ix, rw, bw

    @ti.kernel
    def advect_velocity(s: a3, w: a1, c: a1, sn: a3, vu: a3, dv: ti.types.ndarray(ndim=2), pr: a3):
        for y, x in ti.ndrange(n, n):
            l, r, tp, b, rw, bw = lerp_source(s[y, x, 0], s[y, x, 1], y, x)
            for d in ti.static(range(2)):
                vu[y, x, d] = (1 - rw) * ((1 - bw) * s[l, tp, d] + bw * s[l, b, d]) + rw * (
                    (1 - bw) * s[r, tp, d] + bw * s[r, b, d])

    @ti.kernel
    def divergence(s: a3, w: a1, c: a1, sn: a3, vu: a3, dv: ti.types.ndarray(ndim=2), pr: a3):
        for y, x in ti.ndrange(n, n):
            dv[y, x] = -0.5 * dx * (vu[inc(y), x, 0] - vu[dec(y), x, 0] + vu[y, inc(x), 1] - vu[y, dec(x), 1])

    @ti.kernel
    def pressure(s: a3, w: a1, c: a1, sn: a3, vu: a3, dv: ti.types.ndarray(ndim=2), pr: a3):
        for k in ti.static(range(jacobi)):  # one top-level loop per iterate, each writing its own row
            for y, x in ti.ndrange(n, n):
                if ti.static(k == 0):  # warm start: the previous step's last iterate (state channel 3)
                    pr[0, y, x] = (dv[y, x] + s[dec(y), x, 3] + s[inc(y), x, 3] + s[y, dec(x), 3]
                                   + s[y, inc(x), 3]) / 4.0
                else:
                    pr[k, y, x] = (dv[y, x] + pr[k - 1, dec(y), x] + pr[k - 1, inc(y), x] + pr[k - 1, y, dec(x)]
                                   + pr[k - 1, y, inc(x)]) / 4.0

    @ti.kernel
    def project(s: a3, w: a1, c: a1, sn: a3, vu: a3, dv: ti.types.ndarray(ndim=2), pr: a3):
        for y, x in ti.ndrange(n, n):
            # the original projects with the previous step's second-to-last iterate (state channel 4)
            sn[y, x, 0] = vu[y, x, 0] - 0.5 * (s[inc(y), x, 4] - s[dec(y), x, 4]) / dx
            sn[y, x, 1] = vu[y, x, 1] - 0.5 * (s[y, inc(x), 4] - s[y, dec(x), 4]) / dx
            sn[y, x, 3] = pr[jacobi - 1, y, x]
            if ti.static(jacobi > 1):
                sn[y, x, 4] = pr[jacobi - 2, y, x]
            else:
                sn[y, x, 4] = s[y, x, 3]

    @ti.kernel
    def advect_smoke(s: a3, w: a1, c: a1, sn: a3, vu: a3, dv: ti.types.ndarray(ndim=2), pr: a3):
        for y, x in ti.ndrange(n, n):  # by the new velocity (x_{t+1}, written by `project`)
            l, r, tp, b, rw, bw = lerp_source(sn[y, x, 0], sn[y, x, 1], y, x)
            sn[y, x, 2] = (1 - rw) * ((1 - bw) * s[l, tp, 2] + bw * s[l, b, 2]) + rw * (
                (1 - bw) * s[r, tp, 2] + bw * s[r, b, 2])

    return [advect_velocity, divergence, pressure, project, advect_smoke]


def load_target(n, path=TARGET_PNG):
    """The original's target: the blue channel of taichi.png resized to n x n (bilinear), in [0, 1].
    Without the image, a ring (so the example still runs)."""
    if path and os.path.exists(path):
        from PIL import Image
        img = Image.open(path).convert("RGB").getchannel("B")
        return np.asarray(img.resize((n, n), Image.BILINEAR), dtype=np.float64) / 255.0
    yy, xx = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    r = np.hypot(yy - n / 2, xx - n / 2)
    return ((r > n / 5) & (r < n / 3)).astype(np.float64)


def build(n=128, steps=100, jacobi=10, checkpoint_every="auto", target_path=TARGET_PNG):
    """``(sim, loss_fn, x_rest)``: ``loss_fn(v0)`` is the original's loss after ``steps - 1`` advances
    (the original's ``steps`` counts the start state) from velocity ``v0`` of shape (n, n, 2)."""
    sim = sm.physics.Simulation(
        state_shape=(n, n, 5), steps=steps - 1, step=make_step(n, jacobi),
        scratch={"v_advected": (n, n, 2), "div": (n, n), "p": (jacobi, n, n)},
        checkpoint_every=checkpoint_every, name="smoke")
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    rest = np.zeros((n, n, 3))
    rest[:, :, 0] = (i // 16 + j // 16) % 2  # the smoke: the original's checkerboard; pressure starts at 0
    rest_t = sm.tensor(rest)
    target = sm.tensor(load_target(n, target_path))

    def loss(v0):
        s_T = sim(sm.concat([v0, rest_t], axis=2))
        return ((target - s_T[:, :, 2]) ** 2 * (1 / n ** 2)).sum()
    return sim, loss, rest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-grid", type=int, default=int(os.environ.get("DIFFTAICHI_N_GRID", 128)))
    ap.add_argument("--steps", type=int, default=int(os.environ.get("DIFFTAICHI_STEPS", 100)))
    ap.add_argument("--jacobi", type=int, default=int(os.environ.get("DIFFTAICHI_JACOBI", 10)))
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--lr", type=float, default=400.0, help="gradient-descent step (the original's 400)")
    ap.add_argument("--float32", action="store_true", help="float32 (default float64)")
    ap.add_argument("--quick", action="store_true", help="32 x 32 grid, 10 steps, 3 iterations (smoke test)")
    ap.add_argument("--out", default=None, help="figure: start smoke, final smoke, target")
    ap.add_argument("--bench-out", default=None,
                    help="write the gradient and timings at the benchmark's start velocity")
    args = ap.parse_args(argv)
    if args.quick:
        args.n_grid, args.steps, args.iters = 32, 10, 3
    sm.init(arch="cpu", dtype="float32" if args.float32 else "float64")
    n = args.n_grid
    sim, loss, rest = build(n, args.steps, args.jacobi)
    vg = sm.value_and_grad(loss)
    if args.bench_out:
        import resource
        rng = np.random.default_rng(0)  # the same start velocity as the original's --bench-out
        v0 = sm.tensor(rng.standard_normal((n, n, 2)) * float(os.environ.get("DIFFTAICHI_V0_SCALE", 0.5)))
        times = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            value, g = vg(v0)
            times.append(time.perf_counter() - t0)
        np.savez(args.bench_out, loss=float(value), g_v0=g.numpy(), times=np.array(times),
                 peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, n_grid=n, steps=args.steps)
        return None
    v0 = sm.zeros((n, n, 2))  # the original starts from rest
    history = []
    for it in range(args.iters):
        t0 = time.perf_counter()
        value, g = vg(v0)
        history.append(float(value))
        print(f"iter {it:3d}  loss {float(value):.6f}  ({time.perf_counter() - t0:.2f} s)")
        v0 = v0 - args.lr * g  # plain gradient descent, as the original
    if args.out:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        final = sim.trajectory(sm.concat([v0, sm.tensor(rest)], axis=2), every=args.steps - 1)[-1]
        fig, ax = plt.subplots(1, 3, figsize=(9, 3.2))
        for a, img, title in zip(ax, (rest[:, :, 0], final[:, :, 2], load_target(n)),
                                 ("start smoke", f"after {args.iters} iterations", "target")):
            a.imshow(img, cmap="gray", vmin=0, vmax=1)
            a.set_title(title)
            a.axis("off")
        fig.tight_layout()
        fig.savefig(args.out, dpi=90)
    return history


if __name__ == "__main__":
    main()
