"""DiffTaichi's programs side by side with their sciml ports: gradients, time per iteration, peak memory.

    python -m benchmarks.difftaichi.bench --program diffmpm [--steps 1024] [--iters 4]
    python -m benchmarks.difftaichi.bench --program smoke_taichi [--n-grid 128] [--steps 100] [--rounds 2]
    python -m benchmarks.difftaichi.bench --program rigid_body [--steps 2048] [--robot 0] [--rounds 2]
    python -m benchmarks.difftaichi.bench --program mass_spring [--steps 682] [--rounds 2]

Each program runs in its own process (Taichi is initialised once per process), float64 on the
CPU, from the same start parameters: the original (``benchmarks/difftaichi/<program>.py``, its own
fields and ``ti.ad.Tape``) and the port (``examples/physics/<program>.py``, a ``sm.physics.Simulation``).
With ``--rounds R`` the two alternate in one session (original, port, port, original, ...) so that
both see the same machine load. Reported: the loss, the largest relative difference of the
gradients (max |a - b| / max |a| over each gradient array), the median time of one loss + gradient
after the first (compiling) iteration (median over the rounds of each process's median), and the
peak resident memory of the process (ru_maxrss: includes Python, Taichi and the compiled kernels;
the largest over the rounds).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "benchmarks/difftaichi"
PORTS = ROOT / "examples/physics"
PROGRAMS = ("diffmpm", "smoke_taichi", "rigid_body", "mass_spring")
DEFAULT_STEPS = {"diffmpm": 1024, "smoke_taichi": 100, "rigid_body": 2048, "mass_spring": 2048 // 3}


def commands(program, steps, iters, out_a, out_b, n_grid=128, jacobi=10, robot=0):
    """``(env, original command, port command)`` for one program at these sizes."""
    env = dict(os.environ, DIFFTAICHI_F64="1", DIFFTAICHI_ARCH="cpu", DIFFTAICHI_STEPS=str(steps),
               DIFFTAICHI_MAX_STEPS=str(steps), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    py, it = sys.executable, ["--iters", str(iters)]
    if program == "diffmpm":
        a = [py, str(HERE / "diffmpm.py"), *it, "--bench-out", out_a]
        b = [py, str(PORTS / "diffmpm.py"), "--steps", str(steps), *it, "--bench-out", out_b]
    elif program == "smoke_taichi":
        env.update(DIFFTAICHI_N_GRID=str(n_grid), DIFFTAICHI_JACOBI=str(jacobi))
        a = [py, str(HERE / "smoke_taichi.py"), *it, "--bench-out", out_a]
        b = [py, str(PORTS / "smoke_taichi.py"), "--n-grid", str(n_grid), "--steps", str(steps), "--jacobi",
             str(jacobi), *it, "--bench-out", out_b]
    elif program == "rigid_body":
        a = [py, str(HERE / "rigid_body.py"), str(robot), "bench", "--bench-out", out_a, *it]
        b = [py, str(PORTS / "rigid_body.py"), "--robot", str(robot), "--steps", str(steps), *it, "--bench-out", out_b]
    elif program == "mass_spring":
        a = [py, str(HERE / "mass_spring.py"), "0", "bench", "--bench-out", out_a, *it]
        b = [py, str(PORTS / "mass_spring.py"), "--steps", str(steps), *it, "--bench-out", out_b]
    else:
        raise ValueError(f"--program: got {program!r}; expected one of {PROGRAMS}")
    return env, a, b


def _run(cmd, env, out):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return dict(np.load(out))


def grad_difference(a, b):
    """Largest relative difference over the gradient arrays (``g_*``) of two result dicts."""
    keys = [k for k in a if k.startswith("g_")]
    if not keys or sorted(keys) != sorted(k for k in b if k.startswith("g_")):
        raise ValueError(f"gradient arrays differ: {sorted(a)} vs {sorted(b)}")
    return max(float(np.abs(a[k] - b[k]).max() / np.abs(a[k]).max()) for k in keys)


def run(program, steps, iters, rounds=1, **sizes):
    res = {"a": [], "b": []}
    with tempfile.TemporaryDirectory() as d:
        out = {"a": f"{d}/a.npz", "b": f"{d}/b.npz"}
        env, ca, cb = commands(program, steps, iters, out["a"], out["b"], **sizes)
        for r in range(rounds):
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            for who in order:
                res[who].append(_run(ca if who == "a" else cb, env, out[who]))
    rel = max(grad_difference(a, b) for a, b in zip(res["a"], res["b"]))
    rows = []
    for name, rs in (("DiffTaichi (fields, ti.ad.Tape)", res["a"]), ("sciml port (Simulation)", res["b"])):
        per = [statistics.median(list(r["times"][1:]) or list(r["times"])) for r in rs]
        first = statistics.median(float(r["times"][0]) for r in rs)
        mem = max(float(r["peak_rss"]) for r in rs) / 2**20
        rows.append((name, float(rs[0]["loss"]), statistics.median(per), [round(float(p), 4) for p in per], first, mem))
    return rows, rel, res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--program", default="diffmpm", choices=PROGRAMS)
    ap.add_argument("--steps", type=int, default=None, help="time steps (default: the original's)")
    ap.add_argument("--iters", type=int, default=4, help="loss + gradient evaluations per process (first compiles)")
    ap.add_argument("--rounds", type=int, default=1, help="processes per program, alternating with the other's")
    ap.add_argument("--n-grid", type=int, default=128, help="smoke_taichi: grid size")
    ap.add_argument("--jacobi", type=int, default=10, help="smoke_taichi: pressure iterations per step")
    ap.add_argument("--robot", type=int, default=0, help="rigid_body: robot id (0 or 1)")
    args = ap.parse_args(argv)
    steps = args.steps or DEFAULT_STEPS[args.program]
    sizes = {"smoke_taichi": dict(n_grid=args.n_grid, jacobi=args.jacobi),
             "rigid_body": dict(robot=args.robot)}.get(args.program, {})
    rows, rel, res = run(args.program, steps, args.iters, args.rounds, **sizes)
    print(f"{args.program}: {steps} steps {sizes or ''}, float64, CPU; {args.rounds} round(s) interleaved, "
          f"median of {args.iters - 1} iterations per process")
    print(f"{'program':<34} {'loss':>16} {'s / iteration':>14} {'first (compile) s':>18} {'peak RSS MiB':>13}"
          "  per round")
    for name, loss, t, per, first, mem in rows:
        print(f"{name:<34} {loss:>16.12f} {t:>14.4f} {first:>18.1f} {mem:>13.0f}  {per}")
    print(f"gradients: max relative difference {rel:.2e} (target <= 1e-10)")
    print(f"time ratio sciml / DiffTaichi: {rows[1][2] / rows[0][2]:.2f}; memory ratio: {rows[1][5] / rows[0][5]:.2f}")
    return rows, rel


if __name__ == "__main__":
    main()
