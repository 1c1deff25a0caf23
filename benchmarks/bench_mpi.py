"""Data-parallel step time and parallel efficiency over MPI: W1 (MLP 784-512-512-10 training step) and
W2 (Burgers PINN training step), at 1 and 2 ranks (and more with --ranks).

    python benchmarks/bench_mpi.py                 # launches mpirun -np 1 and -np 2 itself, prints a table
    python benchmarks/bench_mpi.py --ranks 1 2 4   # more rank counts (oversubscribes a small machine)
    mpirun -np 2 python benchmarks/bench_mpi.py --worker --json out.json    # one measurement

One data-parallel step = local loss + gradient on this rank's shard of the GLOBAL batch, one all-reduce
of loss + gradients (one flat buffer), and an Adam update (sciml.optim.Adam, fused kernels), float32 on
CPU, with the seeded inputs of benchmarks/peers/common.py (W1: global batch 256; W2: 10000 interior +
200 initial + 200 boundary points, MLP 2-32-32-32-32-1, derivatives from sciml.pinn.fused).

Configurations: 1 rank x 1 thread (one core: the baseline), 1 rank x all cores (one process using
the whole machine through Taichi's and the BLAS's thread pools), N ranks x auto threads (cores / N).
Strong scaling (fixed global batch): speedup = T(base) / T; weak scaling (global batch = ranks x the
1-rank batch): speedup = ranks * T(base) / T; efficiency = speedup / cores used. ``allreduce`` is the
time of the collective alone (median), which includes waiting for the slower rank. ``--trials K``
alternates the configurations K times and keeps each figure's best median (for a shared machine).

Across machines: the same script with a hostfile, e.g.
    mpirun --hostfile hosts -np 8 python benchmarks/bench_mpi.py --worker --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import _arch  # noqa: E402


def _w1(sm, dist, scale):
    from benchmarks.peers import common as PC
    from sciml.models.module import Parameter
    from sciml.optim import Adam
    d = PC.w1_inputs(0)
    x = np.concatenate([d["x"]] * scale)
    y = np.concatenate([d["y"]] * scale)
    onehot = np.eye(PC.W1_SIZES[-1], dtype=np.float32)[y]
    xl, yl = dist.shard((sm.tensor(x, "float32"), sm.tensor(onehot, "float32")))
    ps = [Parameter(a, "float32") for W, b in d["params"] for a in (W, b)]
    dist.broadcast_parameters(ps)

    def loss_fn(p, x, y):
        h = x
        for k in range(0, len(p), 2):
            h = h @ p[k] + p[k + 1]
            if k + 2 < len(p):
                h = sm.relu(h)
        return -(sm.log_softmax(h, axis=1) * y).sum() * (1.0 / y.shape[0])
    return loss_fn, ps, (xl, yl), Adam(ps, lr=PC.ADAM_LR)


def _w2(sm, dist, scale):
    from benchmarks.peers import common as PC
    from sciml.models.module import Parameter
    from sciml.optim import Adam
    from sciml.pinn import fused
    d = PC.w2_inputs(0)
    Xi = np.concatenate([d["X_int"]] * scale)
    X0 = np.concatenate([d["X_init"]] * scale)
    u0 = np.concatenate([d["u_init"]] * scale)
    Xb = np.concatenate([d["X_bnd"]] * scale)
    Xi, (X0, u0), Xb = dist.shard(Xi), dist.shard((X0, u0)), dist.shard(Xb)
    ni = len(Xi)
    X = sm.tensor(np.concatenate([Xi, X0, Xb]), "float32")
    target = sm.tensor(np.concatenate([u0, np.zeros(len(Xb), np.float32)])[:, None], "float32")
    nu = float(d["nu"])
    ps = [Parameter(a, "float32") for W, b in d["params"] for a in (W, b)]
    dist.broadcast_parameters(ps)
    derivs = [(), (0,), (1,), (0, 0)]

    def loss_fn(p, X, target):
        layers = [(p[k], p[k + 1]) for k in range(0, len(p), 2)]
        r = fused.mlp_derivatives(layers, sm.tanh, X, derivs)
        u, ux, ut, uxx = r[()], r[(0,)], r[(1,)], r[(0, 0)]
        res = ut[:ni] + u[:ni] * ux[:ni] - nu * uxx[:ni]
        e = u[ni:] - target
        return (res * res).mean() + 2.0 * (e * e).mean()
    return loss_fn, ps, (X, target), Adam(ps, lr=PC.ADAM_LR)


def worker(args):
    import sciml as sm
    import sciml.distributed as dist
    dist.init(threads=None if args.threads == "default" else args.threads if args.threads == "auto"
              else int(args.threads))  # before sm.init: sets the threads per rank
    sm.init(arch=_arch.ARCH, dtype="float32")
    out = {"ranks": dist.world_size(), "threads": sm.runtime.num_threads()}
    for name, build in (("W1", _w1), ("W2", _w2)):
        if args.only and name != args.only:
            continue
        for mode in ("strong", "weak"):
            scale = 1 if mode == "strong" else dist.world_size()
            loss_fn, ps, data, opt = build(sm, dist, scale)
            vg = sm.value_and_grad(loss_fn)
            t_comm = []

            def step():
                loss, g = vg(ps, *data)
                t0 = time.perf_counter()
                loss, g = dist.all_reduce((loss, g))
                t_comm.append(time.perf_counter() - t0)
                opt.step(g)
                return loss
            for _ in range(args.warmup):
                step()
            dist.barrier()
            times = []
            t_comm.clear()
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            # every rank's median; the step of the job is the slowest rank's
            med, best, comm = dist.all_reduce(
                np.array([statistics.median(times), min(times), statistics.median(t_comm)]), op="max")
            out[f"{name}_{mode}"] = {"step_s": float(med), "min_s": float(best), "allreduce_s": float(comm),
                                     "n_params": int(sum(p.size for p in ps))}
            dist.print0(f"  [{dist.world_size()} rank(s) x {out['threads']} threads] {name} {mode}: "
                        f"step {med * 1e3:.2f} ms, "
                        f"all-reduce {comm * 1e3:.2f} ms", file=sys.stderr)
    if dist.is_main() and args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)


def launch(args):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("bench_mpi: mpirun not found; install OpenMPI (apt-get install openmpi-bin "
                         "libopenmpi-dev) and mpi4py (pip install 'sciml[mpi]').")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    # configurations: (label, ranks, threads per rank, mpirun binding). The baseline is 1 rank with 1
    # thread (one core); 1 rank with every core's thread is the "whole machine, one process" case.
    cores = os.cpu_count() or 1
    configs = [("1x1", 1, "1", [])]
    if cores > 1:
        configs.append((f"1x{cores}", 1, str(cores), ["--bind-to", "none"]))
    configs += [(f"{n}x{args.threads}", n, args.threads, []) for n in args.ranks if n > 1]
    results = {}
    for _ in range(args.trials):  # alternate the configurations; keep each figure's best trial
        for label, n, threads, bind in configs:
            r = _launch_one(args, mpirun, env, n, threads, bind)
            if label not in results:
                results[label] = r
                continue
            for k, v in r.items():
                if isinstance(v, dict) and v["step_s"] < results[label][k]["step_s"]:
                    results[label][k] = v
    _table(results, configs)
    try:
        print(f"load average at the end: {os.getloadavg()[0]:.2f} (other processes skew the numbers); "
              f"best of {args.trials} trial(s)")
    except OSError:  # pragma: no cover
        pass


def _launch_one(args, mpirun, env, n, threads, bind):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        cmd = [mpirun, "-np", str(n), *bind, *args.mpi_args.split(), sys.executable, os.path.abspath(__file__),
               "--worker", "--json", path, "--repeat", str(args.repeat), "--warmup", str(args.warmup),
               "--threads", threads, "--arch", args.arch]
        if args.only:
            cmd += ["--only", args.only]
        print("$ " + " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, env=env, check=True)
        with open(path) as f:
            return json.load(f)


def _table(results, configs):
    base = results[configs[0][0]]
    print(f"\nData-parallel step (float32, CPU, {os.cpu_count()} cores; median of the slowest rank). "
          "Config = ranks x threads per rank; speedup and efficiency vs 1 rank x 1 thread.")
    print(f"{'workload':<9} {'scaling':<7} {'config':>7} {'step ms':>9} {'min ms':>8} {'allreduce ms':>13} "
          f"{'speedup':>8} {'efficiency':>10}")
    for w in ("W1", "W2"):
        for mode in ("strong", "weak"):
            key = f"{w}_{mode}"
            if key not in base:
                continue
            t1 = base[key]["step_s"]
            for label, n, _, _ in configs:
                r = results[label][key]
                t = r["step_s"]
                cores = n * results[label]["threads"]
                if mode == "strong":  # same global batch
                    speed = t1 / t
                else:  # the global batch grows with the ranks
                    speed = t1 * n / t
                eff = speed / max(cores, 1)
                print(f"{w:<9} {mode:<7} {f'{n}x' + str(results[label]['threads']):>7} {t * 1e3:>9.2f} "
                      f"{r['min_s'] * 1e3:>8.2f} {r['allreduce_s'] * 1e3:>13.2f} {speed:>8.2f} {eff * 100:>9.0f}%")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true", help="measure in this process (run under mpirun)")
    p.add_argument("--json", default=None)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--trials", type=int, default=1, help="launch every rank count this many times (alternating) "
                   "and keep the best median of each figure: for a noisy or shared machine")
    p.add_argument("--only", choices=["W1", "W2"], default=None)
    p.add_argument("--threads", default="auto", help="threads per rank: auto (cores / ranks per machine), "
                   "default (Taichi's and the BLAS's own: one per core in every rank) or a number")
    p.add_argument("--mpi-args", default="", help="extra mpirun arguments, e.g. '--bind-to none'")
    _arch.add_argument(p)
    args = p.parse_args()
    _arch.use(args.arch)
    if args.worker:
        worker(args)
    else:
        launch(args)


if __name__ == "__main__":
    main()
