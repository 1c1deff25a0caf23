"""Peer (PyTorch / JAX / NumPy / SciPy) implementations of sciml's benchmark
workloads, for in-process CPU timing comparisons.

Importing this package imports torch (when installed) right away, before any sciml op runs:
sciml's CPU GEMM loads Intel MKL with its symbols global, and a torch imported after that binds
its MKL calls to sciml's sequential MKL (torch then reports one thread). Imported first, torch
uses its own MKL and threads as in a torch-only process. ``SCIML_BENCH_LAZY_PEERS=1`` turns this
off. Use :func:`available` / :func:`load_peer` to get a peer module when its framework is installed::

    from benchmarks import peers
    tp = peers.load_peer("torch")      # module or None
    if tp is not None:
        r = tp.torch_w1_mlp_step()     # {"name":..., "median_s":..., ...}

torch and jax are optional benchmark-only extras, never sciml dependencies.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import platform
import statistics
import time

from .common import (  # noqa: F401  (re-exported for sciml's scripts)
    flatten_params, mlp_init, n_params, rosenbrock_x0, unflatten_params,
    w1_inputs, w2_inputs, w3_inputs, w4a_inputs, w4b_inputs, w5_inputs,
    w5_reference,
)

__all__ = [
    "timeit", "timeit_samples", "autonumber", "available", "load_peer",
    "env_info", "make_result", "format_table", "w1_inputs", "w2_inputs",
    "w3_inputs", "w4a_inputs", "w4b_inputs", "w5_inputs", "w5_reference",
    "rosenbrock_x0", "mlp_init", "flatten_params", "unflatten_params",
    "n_params",
]

_PEER_MODULES = {
    "torch": ("torch", "benchmarks.peers.torch_peers"),
    "jax": ("jax", "benchmarks.peers.jax_peers"),
    "numpy": ("numpy", "benchmarks.peers.numpy_peers"),
}


def _preload_torch():
    if os.environ.get("SCIML_BENCH_LAZY_PEERS"):
        return
    try:
        if importlib.util.find_spec("torch") is not None:
            importlib.import_module("torch")
    except Exception:  # broken install: load_peer reports it unavailable later
        pass


_preload_torch()


# --------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------
SYNC = None  # set by benchmarks._arch.use for device archs: called after warm-up and each timed batch


def timeit_samples(fn, warmup=3, repeat=20, number=1):
    """Call ``fn()`` ``warmup`` times, then time ``repeat`` batches of
    ``number`` calls. Returns the list of per-call seconds (one per batch).

    ``fn`` must block until its work is done (e.g. ``block_until_ready`` for
    JAX); that is the caller's job.
    """
    sync = SYNC or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    out = []
    pc = time.perf_counter
    for _ in range(repeat):
        t0 = pc()
        for _ in range(number):
            fn()
        sync()
        out.append((pc() - t0) / number)
    return out


def timeit(fn, warmup=3, repeat=20, number=1):
    """Median seconds per call of ``fn()`` (see :func:`timeit_samples`)."""
    return statistics.median(timeit_samples(fn, warmup, repeat, number))


def autonumber(fn, target_s=2e-3, max_number=100000):
    """Calls per timed batch so that one batch takes about ``target_s``
    (for microsecond-scale ops where timer/loop overhead matters)."""
    fn()
    t0 = time.perf_counter()
    fn()
    dt = max(time.perf_counter() - t0, 1e-7)
    return int(min(max_number, max(1, math.ceil(target_s / dt))))


# --------------------------------------------------------------------------
# availability
# --------------------------------------------------------------------------
def available(name):
    """True if module ``name`` ('torch', 'jax', 'scipy', ...) can be
    imported. Never raises and does not import the module itself."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def load_peer(name):
    """Return the peer module for 'torch', 'jax' or 'numpy', or None when the
    framework is missing or fails to import."""
    dep, modname = _PEER_MODULES[name]
    if not available(dep):
        return None
    try:
        return importlib.import_module(modname)
    except Exception:  # broken install: treat as unavailable
        return None


def sciml_gemm_share(fn, repeat=20):
    """(median seconds per call of ``fn``, median seconds of a call spent in sciml's GEMMs, GEMM calls
    per call): ``sciml.kernels.linalg.matmul`` is timed while ``fn`` runs ``repeat`` times (after 10
    warm-up calls)."""
    from sciml.kernels import linalg as L
    acc, calls, orig = [0.0], [0], L.matmul

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            acc[0] += time.perf_counter() - t0
            calls[0] += 1
    for _ in range(10):  # warm: the first steps after a setup run slower (fresh buffers, optimizer state)
        fn()
    L.matmul = timed
    samples, per_call = [], []
    try:
        for _ in range(repeat):
            before = acc[0]
            samples.append(timeit_samples(fn, 0, 1)[0])
            per_call.append(acc[0] - before)
    finally:
        L.matmul = orig
    return statistics.median(samples), statistics.median(per_call), calls[0] / repeat


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------
def env_info():
    """Machine / library facts to store next to the numbers."""
    info = {
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    import sys
    for mod in ("numpy", "scipy", "torch", "jax", "jaxlib"):
        m = sys.modules.get(mod)
        if m is not None:
            info[mod] = getattr(m, "__version__", "?")
    t = sys.modules.get("torch")
    if t is not None:
        info["torch_threads"] = t.get_num_threads()
    return info


def make_result(name, samples, **extra):
    """Standard result dict from per-call samples (seconds)."""
    r = {
        "name": name,
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "repeat": len(samples),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
    }
    r.update(extra)
    return r


def _fmt(v):
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, str):
        return v
    return None  # arrays etc. are not printed


_SKIP = {"name", "median_s", "min_s", "repeat", "openblas_coretype"}


def format_table(results, title=None):
    """Plain-text table: name, median ms, min ms, then scalar extras."""
    lines = []
    if title:
        lines.append(title)
    lines.append(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')!r}  "
                 + "  ".join(f"{k}={v}" for k, v in env_info().items()
                             if k != "OPENBLAS_CORETYPE"))
    w = max([len(r["name"]) for r in results] + [8])
    lines.append(f"{'name':<{w}}  {'median_ms':>11}  {'min_ms':>11}  extras")
    lines.append("-" * (w + 40))
    for r in results:
        ex = []
        for k, v in r.items():
            if k in _SKIP:
                continue
            s = _fmt(v)
            if s is not None:
                ex.append(f"{k}={s}")
        lines.append(f"{r['name']:<{w}}  {r['median_s'] * 1e3:>11.4f}  "
                     f"{r['min_s'] * 1e3:>11.4f}  " + " ".join(ex))
    return "\n".join(lines)


def to_jsonable(results):
    """Drop / convert array values so results can be json.dump'ed."""
    out = []
    for r in results:
        d = {}
        for k, v in r.items():
            if hasattr(v, "tolist") and getattr(v, "ndim", 0) > 0:
                continue
            if hasattr(v, "item"):
                v = v.item()
            d[k] = v
        out.append(d)
    return out


def cli_main(run_all, title, argv=None):
    """Shared ``python -m benchmarks.peers.X`` entry point."""
    import argparse
    import json
    ap = argparse.ArgumentParser(description=title)
    ap.add_argument("--json", help="also write results to this JSON file")
    ap.add_argument("--only", help="comma-separated substrings of names")
    args = ap.parse_args(argv)
    only = args.only.split(",") if args.only else None
    t0 = time.perf_counter()
    results = run_all(only=only)
    wall = time.perf_counter() - t0
    print(format_table(results, title=f"{title}  (total wall {wall:.1f}s)"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env_info(), "wall_s": wall,
                       "results": to_jsonable(results)}, f, indent=1)
    return results
