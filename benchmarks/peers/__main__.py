"""Run every available peer module, each in its own process (so torch's
OpenMP threads, XLA's thread pool and OpenBLAS don't interfere), and print
one combined table.

    python -m benchmarks.peers [--json out.json] [--only W1,W5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from . import available, format_table


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write combined results here")
    ap.add_argument("--only", help="comma-separated workload keys")
    args = ap.parse_args(argv)
    mods = [("numpy", "benchmarks.peers.numpy_peers"),
            ("torch", "benchmarks.peers.torch_peers"),
            ("jax", "benchmarks.peers.jax_peers")]
    results, envs, t0 = [], {}, time.perf_counter()
    for dep, mod in mods:
        if not available(dep):
            print(f"[skip] {mod}: {dep} not installed", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as td:
            path = os.path.join(td, "r.json")
            cmd = [sys.executable, "-m", mod, "--json", path]
            if args.only:
                cmd += ["--only", args.only]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0 or not os.path.exists(path):
                print(f"[fail] {mod}:\n{p.stderr[-3000:]}", file=sys.stderr)
                continue
            with open(path) as f:
                d = json.load(f)
        results.extend(d["results"])
        envs[mod] = d["env"]
    wall = time.perf_counter() - t0
    print(format_table(results, title=f"all peers (total wall {wall:.1f}s)"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": envs, "wall_s": wall, "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
