"""A/B of the 16-byte vector elementwise kernels (``sciml.kernels.elementwise.VECTOR``) on the W4
benchmarks: the callables of ``bench_w4`` (W4a HVP both ways, W4b Hessian both batched paths) timed
with the vector kernels on and off in interleaved rounds in one process (the switch flips between
batches, so both variants see the same load). Prints per-variant medians and minima over all batches.

    python -m benchmarks.bench_vec_ab [--rounds 15] [--batch 3]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _arch  # noqa: E402
from benchmarks import bench_w4, peers  # noqa: E402


def _collect():
    """The (name, fn) pairs bench_w4 times (captured by patching its timer for one pass)."""
    got, names = [], []
    real = peers.timeit_samples

    def record(fn, warmup=3, repeat=20, number=1):
        got.append(fn)
        return [0.0]
    peers.timeit_samples = record
    try:
        names += [r["name"] for r in bench_w4.w4a(1)]
        names += [r["name"] for r in bench_w4.w4b(1, fast=True)]
    finally:
        peers.timeit_samples = real
    return list(zip(names, got))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--batch", type=int, default=3, help="calls per timed batch")
    _arch.add_argument(ap)
    a = ap.parse_args(argv)
    _arch.use(a.arch)
    from sciml.kernels import elementwise as E
    cases = _collect()
    res = {(n, v): [] for n, _ in cases for v in (True, False)}
    for _, fn in cases:  # compile both variants
        for v in (True, False):
            E.VECTOR = v
            fn()
    for r in range(a.rounds):
        for name, fn in cases:
            for v in ((True, False) if r % 2 else (False, True)):
                E.VECTOR = v
                t0 = time.perf_counter()
                for _ in range(a.batch):
                    fn()
                res[(name, v)].append((time.perf_counter() - t0) / a.batch)
    E.VECTOR = True
    print(f"vector vs scalar elementwise kernels, {a.rounds} interleaved rounds of {a.batch} calls, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'case':36s} {'vector med/min ms':>20s} {'scalar med/min ms':>20s} {'speedup (med)':>14s}")
    for name, _ in cases:
        v, s = res[(name, True)], res[(name, False)]
        mv, ms = statistics.median(v), statistics.median(s)
        print(f"{name:36s} {mv * 1e3:9.2f} /{min(v) * 1e3:8.2f} {ms * 1e3:9.2f} /{min(s) * 1e3:8.2f} {ms / mv:14.2f}")


if __name__ == "__main__":
    main()
