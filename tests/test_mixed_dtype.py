"""float64 results must not depend on the process's default dtype.

Taichi types a bare float literal inside a kernel as ``default_fp``: in a float32-default process ``r = 0.0``
makes a float32 local and ``x + 0.1`` adds a float32-rounded constant, so a float64 kernel silently computes
in float32 precision (sigmoid was 5.6e-8 off, erf/erfc 6e-8, log1p/expm1 1e-9, atan2(0, -0) gave a float32 pi).
The probe computes values, first and second derivatives of the elementwise ops, reductions, losses, layers with
an Adam step, a Hessian, linalg and an FFT in float64, once in each kind of process; the two must agree.
"""
import os
import subprocess
import sys

import numpy as np

PROBE = os.path.join(os.path.dirname(__file__), "mixed_dtype_probe.py")


def _run(default, path):
    env = dict(os.environ, SCIML_DTYPE=default)
    r = subprocess.run([sys.executable, PROBE, str(path)], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return np.load(path)


def test_float64_results_do_not_depend_on_the_default_dtype(tmp_path):
    a = _run("float32", tmp_path / "f32.npz")
    b = _run("float64", tmp_path / "f64.npz")
    assert a.files == b.files and len(a.files) > 150
    bad = {}
    for k in a.files:
        ref = b[k]
        assert a[k].dtype == ref.dtype == np.float64 or ref.dtype.kind != "f", k
        d = float(np.max(np.abs(a[k] - ref) / np.maximum(np.abs(ref), 1e-300))) if ref.size else 0.0
        if not d <= 1e-13:   # (NaN also fails)
            bad[k] = d
    assert not bad, f"float64 results that change in a float32-default process (max rel. diff): {bad}"
