"""W5: differentiable 1-D heat rollout (1024 cells, 2000 steps, float64), loss and gradient w.r.t. u0.

    python -m benchmarks.bench_w5 [--repeat 20] [--no-peers] [--no-memory] [--auto-rule]

Rows: sciml fused path (time loop in one kernel + hand-written adjoint), sciml per-step path
(one launch per step from cached launch contexts, Taichi's step.grad per step), the step written as a
ti.func (the generated in-kernel time loop forward, the generated step kernel's .grad per step backward;
and the same kernels launched once per step), the plain DiffTaichi style (fields, one kernel
per step, ti.ad.Tape), PyTorch (eager) and JAX (lax.scan, jit). The gradient is compared with
JAX's (and with the NumPy reference). Then the memory of a 1e5-step differentiated rollout, with
and without checkpointing (tracemalloc peak: numpy buffers are traced).
"""
# No `from __future__ import annotations`: this file defines Taichi kernels.

import argparse
import statistics
import time
import tracemalloc

import numpy as np

from benchmarks import _arch  # noqa: E402
from benchmarks import peers
from benchmarks.peers import common as C


def _samples(fn, warmup, repeat):
    return peers.timeit_samples(fn, warmup=warmup, repeat=repeat)


def bench_sciml(sm, mode, repeat):
    u0n, tn = C.w5_inputs(0)
    sim = sm.physics.heat1d(C.W5_N, C.W5_STEPS, mode=mode)
    target, r = sm.tensor(tn), sm.tensor([C.W5_R])
    vg = sm.value_and_grad(lambda u: ((sim(u, r) - target) ** 2).sum())
    u0 = sm.tensor(u0n)
    loss, g = vg(u0)
    fwd = lambda: float(((sim(u0, r) - target) ** 2).sum())  # noqa: E731
    n = repeat if mode == "fused" else max(3, repeat // 4)  # per-step: as many samples as the DiffTaichi row
    s = _samples(lambda: vg(u0)[0].item(), 2 if mode == "fused" else 1, n)
    sf = _samples(fwd, 1, repeat if mode == "fused" else 3)
    return peers.make_result(f"sciml/W5_{mode}", s, loss=float(loss), forward_only_s=statistics.median(sf),
                             grad=g.numpy(), dtype="float64")


def heat_func(ti):
    """W5's step written as a ``ti.func`` (a user's step: no hand-written adjoint). Its loop over 1024 cells is
    serialized: one step is ~10 us of work, less than a thread-pool wake-up."""
    @ti.func
    def step(u: ti.template(), p: ti.template(), c: ti.template(), out: ti.template()):
        ti.loop_config(serialize=True)
        for i in range(1, u.shape[0] - 1):
            out[i] = u[i] + p[0] * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    return step


def bench_sciml_func(sm, ti, repeat, time_loop=True):
    """The step as a ti.func: forward = the generated in-kernel time loop (one launch), backward = the generated
    step kernel's .grad per step (time_loop=False: the same kernels, one launch per step forward too)."""
    u0n, tn = C.w5_inputs(0)
    sim = sm.physics.Simulation(state_shape=(C.W5_N,), steps=C.W5_STEPS, step=heat_func(ti), time_loop=time_loop,
                                name="heat_func")
    target, r, u0 = sm.tensor(tn), sm.tensor([C.W5_R]), sm.tensor(u0n)
    vg = sm.value_and_grad(lambda u: ((sim(u, r) - target) ** 2).sum())
    loss, g = vg(u0)
    fwd = lambda: float(((sim(u0, r) - target) ** 2).sum())  # noqa: E731
    s = _samples(lambda: vg(u0)[0].item(), 1, max(3, repeat // 2))
    sf = _samples(fwd, 1, max(3, repeat // 2))
    name = "sciml/W5_func_time_loop" if time_loop else "sciml/W5_func_per_launch"
    return peers.make_result(name, s, loss=float(loss), forward_only_s=statistics.median(sf), grad=g.numpy(),
                             dtype="float64")


def bench_difftaichi(ti, repeat):
    """Plain DiffTaichi style: a (steps+1, n) field, one kernel launch per step, ti.ad.Tape."""
    n, steps, r = C.W5_N, C.W5_STEPS, C.W5_R
    u0n, tn = C.w5_inputs(0)
    u = ti.field(ti.f64, shape=(steps + 1, n), needs_grad=True)
    target = ti.field(ti.f64, shape=n)
    loss = ti.field(ti.f64, shape=(), needs_grad=True)
    target.from_numpy(tn)

    @ti.kernel
    def init(a: ti.types.ndarray(dtype=ti.f64, ndim=1)):
        for i in range(n):
            u[0, i] = a[i]

    @ti.kernel
    def step(t: ti.i32):
        for i in range(1, n - 1):
            u[t + 1, i] = u[t, i] + r * (u[t, i - 1] - 2.0 * u[t, i] + u[t, i + 1])

    @ti.kernel
    def compute_loss():
        for i in range(n):
            loss[None] += (u[steps, i] - target[i]) ** 2

    def run():
        init(u0n)
        with ti.ad.Tape(loss=loss):
            for t in range(steps):
                step(t)
            compute_loss()
        return loss[None]

    lv = run()
    g = u.grad.to_numpy()[0].copy()
    s = _samples(run, 1, max(3, repeat // 4))
    return peers.make_result("taichi/W5_difftaichi_tape_per_step", s, loss=float(lv), grad=g, dtype="float64")


def memory_1e5(sm):
    """Peak traced bytes of one differentiated 1e5-step rollout, stored vs checkpointed."""
    rows = []
    u0n, tn = C.w5_inputs(0)
    for k in (None, "auto"):
        budget = (2 << 30) if k is None else (64 << 20)
        sim = sm.physics.heat1d(C.W5_N, 100_000, checkpoint_every=k, memory_budget=budget)
        target, r, u0 = sm.tensor(tn), sm.tensor([C.W5_R]), sm.tensor(u0n)
        tracemalloc.start()
        t0 = time.perf_counter()
        loss, g = sm.value_and_grad(lambda u: ((sim(u, r) - target) ** 2).sum())(u0)
        dt = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rows.append((sim.checkpoint_every, sim.memory_bytes(sim.checkpoint_every), peak, dt, g.numpy()))
    return rows


def auto_rule(sm):
    """Fused vs per-step path of heat1d at growing sizes (the measurement behind mode='auto')."""
    rows = []
    rng = np.random.default_rng(0)
    for n, steps in ((65536, 50), (262144, 20), (1 << 20, 10)):
        u0, r = sm.tensor(rng.random(n)), sm.tensor([0.2])
        res = {}
        for mode in ("fused", "per_step"):
            sim = sm.physics.heat1d(n, steps, mode=mode)
            vg = sm.value_and_grad(lambda u, sim=sim: (sim(u, r) ** 2).sum())
            g = vg(u0)[1].numpy()
            res[mode] = (min(_samples(lambda: vg(u0)[0].item(), 0, 3)), g)
        rows.append((n, steps, res["fused"][0], res["per_step"][0],
                     float(np.abs(res["fused"][1] - res["per_step"][1]).max())))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--auto-rule", action="store_true", help="only: fused vs per-step path at 65K-1M cells")
    _arch.add_argument(ap)
    args = ap.parse_args(argv)
    _arch.use(args.arch)
    import sciml as sm
    sm.init(arch=_arch.ARCH, dtype="float64")
    import taichi as ti
    if args.auto_rule:
        print(f"{'cells':>9} {'steps':>6} {'fused ms':>9} {'per_step ms':>12} {'max |grad diff|':>16}")
        for n, steps, tf, tp, d in auto_rule(sm):
            print(f"{n:>9} {steps:>6} {tf * 1e3:>9.1f} {tp * 1e3:>12.1f} {d:>16.2e}")
        return None

    results = [bench_sciml(sm, "fused", args.repeat), bench_sciml(sm, "per_step", args.repeat),
               bench_sciml_func(sm, ti, args.repeat), bench_sciml_func(sm, ti, args.repeat, time_loop=False),
               bench_difftaichi(ti, args.repeat)]
    if not args.no_peers:
        for name, fn in (("torch", "torch_w5_heat_grad"), ("jax", "jax_w5_heat_grad")):
            mod = peers.load_peer(name)
            if mod is not None:
                results.append(getattr(mod, fn)())
    ref_loss, ref_g = C.w5_reference(*C.w5_inputs(0))
    jax_g = next((r["grad"] for r in results if r["name"].startswith("jax")), None)
    fused = results[0]["median_s"]
    for r in results:
        g = r.get("grad")
        r["rel_err_vs_numpy"] = float(np.abs(g - ref_g).max() / np.abs(ref_g).max())
        if jax_g is not None:
            r["rel_err_vs_jax"] = float(np.abs(g - jax_g).max() / np.abs(jax_g).max())
        r["time_vs_sciml_fused"] = r["median_s"] / fused
    print(peers.format_table(results, title="W5: heat 1-D, 1024 cells x 2000 steps, loss + grad wrt u0, float64"))
    if not args.no_memory:
        print("\nW5 at 1e5 steps (1024 cells, float64), one loss + gradient:")
        print(f"{'checkpoint_every':>18}  {'states MiB (model)':>19}  {'peak traced MiB':>16}  {'time s':>7}")
        rows = memory_1e5(sm)
        for k, model, peak, dt, _ in rows:
            print(f"{k:>18}  {model / 2**20:>19.1f}  {peak / 2**20:>16.1f}  {dt:>7.2f}")
        print(f"max |grad_stored - grad_checkpointed| = {np.abs(rows[0][4] - rows[1][4]).max():.3e}")
    return results


if __name__ == "__main__":
    main()
