"""DiffTaichi's programs side by side with their sciml ports: gradients, time per iteration, peak memory.

    python -m benchmarks.difftaichi.bench [--program diffmpm] [--steps 1024] [--iters 4]

Each program runs in its own process (Taichi is initialised once per process), float64 on the
CPU, from the same start parameters: the original (``benchmarks/difftaichi/<program>.py``, its own
fields and ``ti.ad.Tape``) and the port (``examples/physics/<program>.py``, a ``sm.physics.Simulation``).
Reported: the loss, the largest relative difference of the gradients (max |a - b| / max |a|), the
median time of one loss + gradient after the first (compiling) iteration, and the peak resident
memory of the process (ru_maxrss: includes Python, Taichi and the compiled kernels).
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
PROGRAMS = {"diffmpm": (ROOT / "benchmarks/difftaichi/diffmpm.py", ROOT / "examples/physics/diffmpm.py")}


def _run(cmd, env, out):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return dict(np.load(out))


def run(program, steps, iters):
    orig, port = PROGRAMS[program]
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, DIFFTAICHI_F64="1", DIFFTAICHI_ARCH="cpu", DIFFTAICHI_STEPS=str(steps),
                   DIFFTAICHI_MAX_STEPS=str(steps), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        a = _run([sys.executable, str(orig), "--iters", str(iters), "--bench-out", f"{d}/a.npz"], env, f"{d}/a.npz")
        b = _run([sys.executable, str(port), "--steps", str(steps), "--iters", str(iters), "--bench-out",
                  f"{d}/b.npz"], env, f"{d}/b.npz")
    keys = [k for k in a if k.startswith("g_")]
    rel = max(float(np.abs(a[k] - b[k]).max() / np.abs(a[k]).max()) for k in keys)
    rows = []
    for name, r in (("DiffTaichi (fields, ti.ad.Tape)", a), ("sciml port (Simulation)", b)):
        t = list(r["times"][1:]) or list(r["times"])
        rows.append((name, float(r["loss"]), statistics.median(t), float(r["times"][0]), float(r["peak_rss"]) / 2**20))
    return rows, rel, int(a["n_particles"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--program", default="diffmpm", choices=sorted(PROGRAMS))
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=4, help="loss + gradient evaluations per program (first compiles)")
    args = ap.parse_args(argv)
    rows, rel, n = run(args.program, args.steps, args.iters)
    print(f"{args.program}: {n} particles, {args.steps} steps, float64, CPU; median of {args.iters - 1} iterations")
    print(f"{'program':<34} {'loss':>14} {'s / iteration':>14} {'first (compile) s':>18} {'peak RSS MiB':>13}")
    for name, loss, t, first, mem in rows:
        print(f"{name:<34} {loss:>14.10f} {t:>14.3f} {first:>18.1f} {mem:>13.0f}")
    print(f"gradients: max relative difference {rel:.2e} (target <= 1e-10)")
    print(f"time ratio sciml / DiffTaichi: {rows[1][2] / rows[0][2]:.2f}; memory ratio: {rows[1][4] / rows[0][4]:.2f}")
    return rows, rel


if __name__ == "__main__":
    main()
