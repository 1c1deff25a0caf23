"""Adam's late spikes, step by step, in a DeepXDE twin and its sciml port from the same weights.

    python -m benchmarks.adam_spikes laplace_disk --seeds 0 1 3 5 [--peer-path DIR] [--out DIR]
    python -m benchmarks.adam_spikes ode_system --seeds 0 1 2 3 4 5 --table-only --out DIR

For each seed: the DeepXDE twin runs first (its initial weights recorded, ``benchmarks/_same_init.py``)
with its optimizer's ``step`` wrapped to keep every step's training loss; then the sciml port from
those weights with ``solve(log_every=1)`` and a callback keeping each step's loss and rel. L2 error.
The traces go to ``OUT/{name}_{lib}_{seed}.npy``; the table compares the second half of the run:
median and 90th-percentile loss, the share of steps more than 10x above the running minimum (in a
spike), the number of spikes (a rise of >10x over the last 50 steps' minimum; one per 50 steps at
most) and the last step's loss, DeepXDE / sciml, plus sciml's median error over that half and the
share of its steps with an error above 3x that median. This is the check behind docs/pinn.md's
"Adam's late spikes": whether one library spikes more often, or only the last step's draw differs.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS = os.path.join(ROOT, "examples", "deepxde")


def _trace_deepxde(weights, script, out):
    import deepxde as dde

    from benchmarks import _same_init
    rec, compile_ = [], dde.Model.compile

    def compile(self, *a, **k):
        compile_(self, *a, **k)
        step = self.opt.step

        def wrapped(closure=None):
            loss = step(closure)
            rec.append(float(loss))
            return loss
        self.opt.step = wrapped

    dde.Model.compile = compile
    _same_init.dump(weights, script)
    np.save(out, np.array(rec))


def _trace_sciml(weights, script, out):
    import sciml.pinn as P

    from benchmarks import _same_init
    rec, solve = [], P.solve

    def wrapped(*a, **k):
        k["log_every"] = 1
        k["callbacks"] = [lambda p: rec.append((p.step, p.loss, np.nan if p.rel_l2 is None else p.rel_l2))]
        return solve(*a, **k)

    P.solve = wrapped
    _same_init.load(weights, script)
    np.save(out, np.array(rec, dtype=float))


def _spikes(loss, window=50):
    n, i = 0, 0
    while i < len(loss) - 1:
        if loss[i + 1] > 10 * loss[max(0, i - window):i + 1].min():
            n, i = n + 1, i + window
        else:
            i += 1
    return n


def late_stats(loss):
    """The second half of a loss trace: median, p90, share in a spike, spike count, last loss."""
    loss = np.asarray(loss, dtype=float)
    half = len(loss) // 2
    late = loss[half:]
    ratio = late / np.minimum.accumulate(loss)[half:]
    return {"median": float(np.median(late)), "p90": float(np.quantile(late, 0.9)),
            "in_spike": float(np.mean(ratio > 10)), "spikes": _spikes(late), "last": float(loss[-1])}


def table(name, seeds, out):
    rows = ["| seed | median loss | p90 loss | steps in a spike | spikes | last loss | sciml error: median, share > 3x |",
            "|---|---|---|---|---|---|---|"]
    agg = []
    for seed in seeds:
        d = np.load(os.path.join(out, f"{name}_deepxde_{seed}.npy"))
        s = np.load(os.path.join(out, f"{name}_sciml_{seed}.npy"))
        a, b = late_stats(d), late_stats(s[:, 1])
        err = s[len(s) // 2:, 2]
        rows.append(f"| {seed} | {a['median']:.2e} / {b['median']:.2e} | {a['p90']:.2e} / {b['p90']:.2e} | "
                    f"{100 * a['in_spike']:.1f} / {100 * b['in_spike']:.1f} % | {a['spikes']} / {b['spikes']} | "
                    f"{a['last']:.2e} / {b['last']:.2e} | {np.median(err):.2e}, "
                    f"{100 * np.mean(err > 3 * np.median(err)):.0f} % |")
        agg.append((a["in_spike"], b["in_spike"], a["spikes"], b["spikes"]))
    m = np.mean(agg, axis=0)
    rows.append(f"| mean | | | {100 * m[0]:.1f} / {100 * m[1]:.1f} % | {m[2]:.1f} / {m[3]:.1f} | | |")
    return "\n".join(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="a port in examples/deepxde/ (Adam-only: laplace_disk, ode_system, ...)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default="adam_spikes")
    ap.add_argument("--peer-path", default=os.environ.get("SCIML_PEER_PATH"))
    ap.add_argument("--table-only", action="store_true", help="the table from traces already in --out")
    ap.add_argument("--_run", nargs=3, help=argparse.SUPPRESS)   # internal: LIB SEED OUT (one trace)
    a = ap.parse_args(argv)
    script = {"deepxde": os.path.join(PORTS, "dde", f"{a.name}.py"), "sciml": os.path.join(PORTS, f"{a.name}.py")}
    if a._run:
        lib, seed, out = a._run
        os.environ["SCIML_SEED"] = seed
        weights = os.path.join(os.path.dirname(out), f"{a.name}_init_{seed}.npz")
        (_trace_deepxde if lib == "deepxde" else _trace_sciml)(weights, script[lib], out)
        return 0
    if not os.path.exists(script["sciml"]):
        ap.error(f"no port {a.name!r} in {PORTS}")
    os.makedirs(a.out, exist_ok=True)
    if not a.table_only:
        for seed in a.seeds:
            for lib in ("deepxde", "sciml"):   # DeepXDE first: its initial weights
                env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                           DDE_BACKEND="pytorch",
                           PYTHONPATH=os.pathsep.join(p for p in (a.peer_path if lib == "deepxde" else None,
                                                                  ROOT, os.environ.get("PYTHONPATH")) if p))
                out = os.path.abspath(os.path.join(a.out, f"{a.name}_{lib}_{seed}.npy"))
                subprocess.run([sys.executable, "-m", "benchmarks.adam_spikes", a.name, "--_run", lib, str(seed), out],
                               env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
                print(f"  {a.name} seed {seed}: {lib} traced", flush=True)
    print(table(a.name, a.seeds, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
