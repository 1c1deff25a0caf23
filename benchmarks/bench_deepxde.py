"""DeepXDE's examples, ported to sciml (examples/deepxde/*.py), against DeepXDE itself
(examples/deepxde/dde/*.py: the published programs on the PyTorch backend), in one session:
relative L2 error (and fitted coefficients), wall time of the training, and lines of user
code. Writes the table into docs/pinn.md (between the ``bench_deepxde`` markers).

    python -m benchmarks.bench_deepxde                       # the examples' own iterations
    python -m benchmarks.bench_deepxde --steps 2000 --write   # equal, cut budget in both
    python -m benchmarks.bench_deepxde --quick               # CI smoke (SCIML_QUICK=1)
    python -m benchmarks.bench_deepxde --steps 500 --seeds 3  # median (min-max) over seeds 0-2
    python -m benchmarks.bench_deepxde --cut 10 --full euler_beam ode_system   # those two at
        # their own iterations, every other port at 1/10 of its own (Adam and L-BFGS) in both

``--seeds N`` runs every port N times in each library, with ``SCIML_SEED`` = 0 .. N-1 (the
sciml ports seed their network and points with it, the DeepXDE twins call
``dde.config.set_random_seed``), and reports the median error (min-max), its mean and the
median time. ``--same-init`` starts each sciml run from the initial weights of the DeepXDE run
of the same seed (benchmarks/_same_init.py records them; the scripts run unchanged), so that
the two columns differ by the library alone, not by the random draw of the weights.

DeepXDE runs in a subprocess with ``DDE_BACKEND=pytorch``; ``--peer-path DIR`` (or
``SCIML_PEER_PATH``) is prepended to its PYTHONPATH when DeepXDE and torch are installed
outside the environment (``pip install --target DIR deepxde torch``). Without DeepXDE the
sciml column is still measured.
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _arch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS_DIR = os.path.join(ROOT, "examples", "deepxde")
DOC = os.path.join(ROOT, "docs", "pinn.md")
BEGIN, END = "<!-- bench_deepxde begin -->", "<!-- bench_deepxde end -->"
_HARNESS = re.compile(r"os\.environ|perf_counter|^import (os|time)$|RESULT|^wall = |^t0 = "
                      r"|^LBFGS_STEPS = |^LB = |^PER = |LBFGS_options")   # + the L-BFGS budget cut with --steps


def ports():
    """Names of the ports (examples/deepxde/<name>.py with a DeepXDE twin in dde/)."""
    return sorted(f[:-3] for f in os.listdir(PORTS_DIR)
                  if f.endswith(".py") and os.path.exists(os.path.join(PORTS_DIR, "dde", f)))


_OWN = re.compile(r"^STEPS = int\(os\.environ\.get\(\"SCIML_STEPS\", .* else (\d+)\)\)", re.M)
_LBFGS = re.compile(r"^LBFGS_STEPS = STEPS \* (\d+) // (\d+)", re.M)


def own_steps(name):
    """The example's own (Adam steps, L-BFGS iterations) as its port declares them."""
    src = open(os.path.join(PORTS_DIR, f"{name}.py")).read()
    m = _OWN.search(src)
    if m is None:
        raise ValueError(f"{name}.py: no `STEPS = int(os.environ.get(\"SCIML_STEPS\", ...))` line")
    lb = _LBFGS.search(src)
    return int(m.group(1)), (int(lb.group(1)) if lb else 0)


def budget(name, args):
    """(Adam steps, L-BFGS iterations) this run gives the port in both libraries: its own, or
    ``--steps``, or its own divided by ``--cut`` unless it is named in ``--full``; the ports
    (and their DeepXDE twins) scale L-BFGS by the same factor as Adam."""
    adam, lb = own_steps(name)
    steps = args.steps or (adam // args.cut if args.cut and name not in (args.full or ()) else adam)
    steps = max(1, steps)
    return steps, (max(1, steps * lb // adam) if lb else 0)


def user_lines(path):
    """Lines of user code: no docstring, comments, blank lines or benchmark harness (step
    counts from the environment, timing, the DeepXDE side's final error evaluation)."""
    import ast
    src = open(path).read()
    tree = ast.parse(src)
    skip = set()
    doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) else None
    if doc is not None and isinstance(getattr(doc, "value", None), ast.Constant):
        skip |= set(range(doc.lineno, doc.end_lineno + 1))
    n, after_wall = 0, False
    for i, line in enumerate(src.splitlines(), 1):
        s = line.strip()
        if s.startswith("wall = "):
            after_wall = True
        if i in skip or not s or s.startswith("#") or _HARNESS.search(s) or after_wall:
            continue
        n += 1
    return n


def _run(cmd, env, timeout):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout, time.perf_counter() - t0   # the scripts' own result lines


def _launch(script, weights, mode):
    """The command running ``script``; with ``weights`` (or ``--readout best``) through
    benchmarks/_same_init.py (``mode`` 'dump' for the DeepXDE twin, 'load' for the sciml port)."""
    if weights is None and os.environ.get("SCIML_READOUT", "last") == "last":
        return [sys.executable, script]
    weights = weights or "-"   # the readout's wrappers alone
    return [sys.executable, "-m", "benchmarks._same_init", mode, weights, script]


def run_sciml(name, env, timeout, weights=None):
    out, _ = _run(_launch(os.path.join(PORTS_DIR, f"{name}.py"), weights, "load"), env, timeout)
    last = [l for l in out.splitlines() if "relative L2 error" in l][-1]
    res = {"rel_l2": float(re.search(r"relative L2 error ([-+.\deE]+)", last).group(1)),
           "time": float(re.search(r"\(([\d.]+) s\)", last).group(1))}
    for k, v in re.findall(r"\b([A-Za-z]\w*) = ([-+.\deE]+)", last):
        res[k] = float(v)
    return res


def run_deepxde(name, env, timeout, peer_path, weights=None):
    env = dict(env, DDE_BACKEND="pytorch")
    if peer_path:
        env["PYTHONPATH"] = peer_path + os.pathsep + env.get("PYTHONPATH", "")
    out, _ = _run(_launch(os.path.join(PORTS_DIR, "dde", f"{name}.py"), weights, "dump"), env,
                  timeout)
    last = [l for l in out.splitlines() if l.startswith("RESULT ")][-1]
    return {k: float(v) for k, v in re.findall(r"(\w+)=([-+.\deE]+)", last)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="iterations in both libraries "
                    "(default: each example's own)")
    ap.add_argument("--cut", type=int, default=None, help="run every port at 1/CUT of its own "
                    "iterations (Adam and L-BFGS) in both libraries, except those in --full")
    ap.add_argument("--full", nargs="*", default=None, help="with --cut: ports that run their "
                    "own iterations")
    ap.add_argument("--quick", action="store_true", help="SCIML_QUICK=1: a few steps each")
    ap.add_argument("--only", nargs="*", default=None, help="ports to run (default: all)")
    ap.add_argument("--no-peer", action="store_true", help="sciml only")
    ap.add_argument("--peer-path", default=os.environ.get("SCIML_PEER_PATH"))
    ap.add_argument("--seeds", type=int, default=1, help="runs per port and library (seeds "
                    "0..N-1); the table shows the median error, its min-max and the mean")
    ap.add_argument("--jobs", type=int, default=1, help="rows run at once (default 1; "
                    "each row's two libraries stay interleaved, one run at a time)")
    ap.add_argument("--same-init", action="store_true", help="the sciml port starts from the "
                    "DeepXDE twin's initial weights (each seed: DeepXDE first, its weights recorded; "
                    "benchmarks/_same_init.py), so the columns differ by the library, not the draw")
    ap.add_argument("--readout", choices=("last", "best"), default="last", help="the error of the "
                    "last step's parameters (default) or of each library's best model: the logged step "
                    "with the lowest training loss, logged every tenth of the Adam iterations in both, "
                    "as DeepXDE's 'Best model at step N' (benchmarks/_same_init.py)")
    ap.add_argument("--timeout", type=int, default=7200)
    ap.add_argument("--write", action="store_true", help=f"write the table into {DOC}")
    ap.add_argument("--block", default=None, help="with --write: the table goes between the "
                    "markers '<!-- bench_deepxde BLOCK begin/end -->' (a section of its own, added "
                    "at the end when missing) instead of the main ones")
    _arch.add_argument(ap)
    args = ap.parse_args(argv)
    _arch.use(args.arch)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env["SCIML_READOUT"] = os.environ["SCIML_READOUT"] = args.readout
    env["SCIML_ARCH"] = args.arch          # the ports' sciml side runs on it (DeepXDE stays on the CPU)
    if args.quick:
        env["SCIML_QUICK"] = "1"
    if args.steps:
        env["SCIML_STEPS"] = str(args.steps)
    if args.cut is not None and (args.cut < 1 or args.steps):
        ap.error(f"--cut: expected a factor >= 1 and no --steps, got --cut {args.cut}")
    if args.full and not args.cut:
        ap.error("--full needs --cut")
    for name in (args.only or []) + (args.full or []):
        if name not in ports():
            ap.error(f"no port {name!r}; the ports are {', '.join(ports())}")
    if args.jobs < 1:
        ap.error(f"--jobs: expected a count >= 1, got {args.jobs}")
    if args.seeds < 1:
        ap.error(f"--seeds: expected a count >= 1, got {args.seeds}")
    if args.same_init and args.no_peer:
        ap.error("--same-init needs DeepXDE (drop --no-peer)")
    rows, load0, t_start = {}, os.getloadavg(), time.time()
    names = args.only or ports()

    def run_row(name):
        env_row, ss, dxs = dict(env), [], []
        its = budget(name, args) if not args.quick else None
        if its and (args.cut or args.steps):
            env_row["SCIML_STEPS"] = str(its[0])
        for seed in range(args.seeds):
            if args.seeds > 1:
                env_row["SCIML_SEED"] = str(seed)
            if args.same_init:   # DeepXDE first: its initial weights, then sciml from them
                import tempfile
                with tempfile.TemporaryDirectory() as tmp:
                    w = os.path.join(tmp, "init.npz")
                    dxs.append(run_deepxde(name, env_row, args.timeout, args.peer_path, w))
                    ss.append(run_sciml(name, env_row, args.timeout, w))
            else:
                ss.append(run_sciml(name, env_row, args.timeout))
                if not args.no_peer:
                    dxs.append(run_deepxde(name, env_row, args.timeout, args.peer_path))
            print(f"  {name} seed {seed}: sciml {ss[-1]['rel_l2']:.3e}"
                  + (f", DeepXDE {dxs[-1]['rel_l2']:.3e}" if dxs else ""), flush=True)
        return {"name": name, "sciml": _summary(ss), "deepxde": _summary(dxs) if dxs else None,
                "lines": (user_lines(os.path.join(PORTS_DIR, f"{name}.py")),
                          user_lines(os.path.join(PORTS_DIR, "dde", f"{name}.py"))),
                "iters": its and (its, own_steps(name))}

    # --jobs N: N rows at once (each row's runs, sciml then DeepXDE per seed, stay in sequence)
    from concurrent.futures import ThreadPoolExecutor, as_completed
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_row, name): name for name in names}
        for fut in as_completed(futures):
            row = fut.result()
            rows[row["name"]] = row
            print(_row(row), flush=True)
            args.load = (load0, os.getloadavg())
            args.span = (t_start, time.time())
            if args.write and len(rows) < len(names):   # a run cut short leaves the rows it has
                _write(_table([rows[n] for n in names if n in rows], args,
                              pending=len(names) - len(rows)), args.block)
    rows = [rows[n] for n in names]
    table = _table(rows, args)
    print(table)
    if args.write:
        _write(table, args.block)
    return rows


def _summary(runs):
    """Median of each number over the runs; ``rel_l2_range`` (min, max) when several."""
    import numpy as np
    out = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    out["n"] = len(runs)
    if len(runs) > 1:
        out["rel_l2_range"] = (min(r["rel_l2"] for r in runs), max(r["rel_l2"] for r in runs))
        out["rel_l2_mean"] = float(np.mean([r["rel_l2"] for r in runs]))
    return out


def _fmt(r, key, f="{:.2e}"):
    if r is None or key not in r:
        return "–"
    if key == "rel_l2" and "rel_l2_range" in r:
        lo, hi = r["rel_l2_range"]
        return f"{r[key]:.2e} ({lo:.1e}–{hi:.1e}), mean {r['rel_l2_mean']:.1e}"
    return f.format(r[key])


def _row(row):
    s, dx = row["sciml"], row["deepxde"]
    extra = [k for k in s if k not in ("rel_l2", "time", "n", "rel_l2_range", "rel_l2_mean")]
    cells = [f"`{row['name']}`", _fmt(s, "rel_l2"), _fmt(dx, "rel_l2"),
             _fmt(s, "time", "{:.0f} s"), _fmt(dx, "time", "{:.0f} s"),
             f"{row['lines'][0]}", f"{row['lines'][1]}"]
    cells.append(", ".join(f"{k}: {s[k]:.4g} / {_fmt(dx, k, '{:.4g}')}" for k in extra) or "")
    cells.append(_iters(row.get("iters")))
    return "| " + " | ".join(cells) + " |"


def _iters(it):
    """'5000 + 375 L-BFGS (own 20000 + 15000)' or '10000 (own)'."""
    if not it:
        return "–"
    (a, lb), (oa, olb) = it
    run = f"{a}" + (f" + {lb} L-BFGS" if lb else "")
    own = f"{oa}" + (f" + {olb}" if olb else "")
    return f"{run} (own)" if (a, lb) == (oa, olb) else f"{run} (own {own})"


def _table(rows, args, pending=0):
    cut = getattr(args, "cut", None)
    if args.quick:
        budget = "quick mode"
    elif args.steps:
        budget = f"{args.steps} iterations in both"
    elif cut:
        full = getattr(args, "full", None) or []
        budget = (f"{', '.join(full)} at the example's own iterations, every other port at 1/{cut} "
                  f"of its own (Adam and L-BFGS), in both libraries" if full else
                  f"1/{cut} of each example's own iterations (Adam and L-BFGS) in both libraries")
    else:
        budget = "each example's own iterations"
    seeds = getattr(args, "seeds", 1)
    cmd = "python -m benchmarks.bench_deepxde" + (" --quick" if args.quick else "") + \
        (f" --steps {args.steps}" if args.steps else "") + \
        (f" --cut {cut}" if cut else "") + \
        (" --full " + " ".join(args.full) if getattr(args, "full", None) else "") + \
        (f" --seeds {seeds}" if seeds > 1 else "") + \
        (f" --jobs {args.jobs}" if getattr(args, "jobs", 1) > 1 else "") + \
        (" --same-init" if getattr(args, "same_init", False) else "") + \
        (" --readout best" if getattr(args, "readout", "last") == "best" else "") + \
        (" --only " + " ".join(args.only) if args.only else "") + " --write" + \
        (f" --block {args.block}" if getattr(args, "block", None) else "")
    if getattr(args, "jobs", 1) > 1:
        budget += f"; {args.jobs} rows at a time"
    if getattr(args, "same_init", False):
        budget += "; the sciml port starts from DeepXDE's initial weights of the same seed"
    if getattr(args, "readout", "last") == "best":
        budget += ("; errors of each library's best model (the logged step with the lowest training "
                   "loss, logged every tenth of the Adam iterations), not of the last step")
    if seeds > 1:
        budget += (f"; median (min–max), mean over seeds 0–{seeds - 1} in each library, "
                   "median times")
    load = getattr(args, "load", None)
    if load:
        budget += (f"; load average {load[0][0]:.1f} at the start, {load[1][0]:.1f} at the end "
                   f"(1-minute)")
    span = getattr(args, "span", None)
    when = (f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(span[0]))}–"
            f"{time.strftime('%H:%M UTC', time.gmtime(span[1]))}" if span else
            time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()))
    if pending:
        budget += f"; INCOMPLETE: {pending} more row(s) were still to run"
    head = (f"Produced by `{cmd}` ({budget}; {when}, "
            f"{os.cpu_count()} cores; wall times are of training only):\n\n"
            "| port | sciml rel. L2 | DeepXDE rel. L2 | sciml time | DeepXDE time | sciml lines "
            "| DeepXDE lines | fitted (sciml / DeepXDE) | iterations |\n|---|---|---|---|---|---|---|---|---|")
    return head + "\n" + "\n".join(_row(r) for r in rows)


def _write(table, name=None):
    doc = open(DOC).read()
    begin, end = (BEGIN, END) if not name else (f"<!-- bench_deepxde {name} begin -->",
                                               f"<!-- bench_deepxde {name} end -->")
    block = f"{begin}\n{table}\n{end}"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        title = "DeepXDE's examples in sciml" + (f" ({name})" if name else "")
        doc = doc.rstrip("\n") + f"\n\n## {title}\n\n" + block + "\n"
    from sciml._io import atomic_write
    with atomic_write(DOC) as tmp:
        with open(tmp, "w") as f:
            f.write(doc)


if __name__ == "__main__":
    main()
