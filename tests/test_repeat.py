"""Repeatability: the same computation gives the same bits twice (tests/repeat_check.py, its own process).

On CPU every row must be equal: single ops, a W2 step's gradients, the curvature optimizers'
reductions over 100,000 parameters (several partials: kernels/_common.scratch) and short solves
with Adam + RAD, the main job's dense self-scaled Broyden stage and L-BFGS. On a GPU the same
script is run by benchmarks/cuda_session.sh (STAGES=repeat), in one process and across processes:
before the ordered reductions, two runs of the main job on an H200 ended at different errors.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_every_row_is_bitwise_repeatable_on_cpu(tmp_path):
    env = dict(os.environ, SCIML_ARCH="cpu",
               PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, os.path.join(HERE, "repeat_check.py"), "--dump", str(tmp_path / "a.npz")],
                       capture_output=True, text=True, env=env, timeout=900)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, (r.stdout + r.stderr)[-4000:]
    rows = json.loads(lines[-1])["rows"]
    assert len(rows) >= 14, rows
    bad = {k: v for k, v in rows.items() if not v.get("equal")}
    assert not bad and r.returncode == 0, bad
    # the --compare mode (two processes' dumps, as on a GPU): against itself, and against one changed bit
    import numpy as np

    def compare(a, b):
        c = subprocess.run([sys.executable, os.path.join(HERE, "repeat_check.py"), "--compare", str(a), str(b)],
                           capture_output=True, text=True, env=env, timeout=300)
        return c.returncode, json.loads(c.stdout.splitlines()[-1])["rows"]
    rc, same = compare(tmp_path / "a.npz", tmp_path / "a.npz")
    assert rc == 0 and all(v["equal"] for v in same.values()) and set(same) == set(rows), same
    d = dict(np.load(tmp_path / "a.npz"))
    key = next(k for k in d if k.startswith("w2_step_loss_and_grads/"))
    d[key] = np.nextafter(d[key], np.inf)
    np.savez(tmp_path / "b.npz", **d)
    rc, diff = compare(tmp_path / "a.npz", tmp_path / "b.npz")
    assert rc == 1 and diff["w2_step_loss_and_grads"]["equal"] == 0 and diff["w2_step_loss_and_grads"]["maxdiff"] > 0
    assert sum(v["equal"] for v in diff.values()) == len(diff) - 1, diff
