"""Optimizer step alone on W1's parameters (MLP 784-512-512-10: 669,706 float32 values in 6 tensors).

    python -m benchmarks.bench_optim [--rounds 15] [--opt adam sgd rmsprop adagrad]

For each optimizer, interleaved rounds (same load for every entry; best batch per round, median
over rounds) of:
  * sciml ``opt.step(grads)`` with the CPU vector kernels (one grouped launch; the default),
  * the same with ``sciml.kernels.optim.VECTOR = False`` (one scalar kernel per parameter: the
    device path, and what every CPU step ran before the vector kernels),
  * ``torch.optim`` (foreach and, for Adam, fused) on the same shapes, 2 threads.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks import _arch  # noqa: E402

SIZES = [(784, 512), (512,), (512, 512), (512,), (512, 10), (10,)]


def _timer(fn, batch=10):
    def run():
        best = float("inf")
        for _ in range(batch):
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        return best
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--opt", nargs="+", default=["adam", "sgd", "rmsprop", "adagrad"])
    _arch.add_argument(ap)
    args = ap.parse_args(argv)
    _arch.use(args.arch)
    import sciml as sm
    from sciml.kernels import optim as K
    from sciml.models import Parameter
    from sciml import optim
    sm.init(arch=_arch.ARCH, dtype="float32")
    rng = np.random.default_rng(0)
    p0 = [rng.standard_normal(s).astype(np.float32) * 0.05 for s in SIZES]
    g0 = [rng.standard_normal(s).astype(np.float32) * 0.01 for s in SIZES]
    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    make = {"adam": (optim.Adam, dict(lr=1e-3), "Adam", [dict(foreach=True), dict(fused=True)]),
            "sgd": (optim.SGD, dict(lr=1e-2, momentum=0.9), "SGD", [dict(foreach=True)]),
            "rmsprop": (optim.RMSprop, dict(lr=1e-3), "RMSprop", [dict(foreach=True)]),
            "adagrad": (optim.Adagrad, dict(lr=1e-2), "Adagrad", [dict(foreach=True)])}
    print(f"optimizer step on {sum(int(np.prod(s)) for s in SIZES):,} float32 parameters in {len(SIZES)} tensors; "
          f"median over {args.rounds} interleaved rounds of the best of 10 (ms)")
    for name in args.opt:
        cls, kw, tname, tvariants = make[name]
        ps = [Parameter(a) for a in p0]
        opt = cls(ps, **kw)
        gs = [sm.tensor(g, "float32") for g in g0]

        def vec(opt=opt, gs=gs):
            K.VECTOR = True
            opt.step(gs)

        def scalar(opt=opt, gs=gs):
            K.VECTOR = False
            try:
                opt.step(gs)
            finally:
                K.VECTOR = True
        entries = {"sciml vector (grouped launch)": _timer(vec), "sciml scalar (per parameter)": _timer(scalar)}
        if torch is not None:
            for tv in tvariants:
                tp = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in p0]
                for t, g in zip(tp, g0):
                    t.grad = torch.from_numpy(g.copy())
                try:
                    topt = getattr(torch.optim, tname)(tp, **kw, **tv)
                    topt.step()
                except (RuntimeError, TypeError):  # pragma: no cover - variant not available
                    continue
                entries[f"torch {tname}({', '.join(f'{k}=True' for k in tv)})"] = _timer(topt.step)
        res = {k: [] for k in entries}
        for f in entries.values():
            f()
        for _ in range(args.rounds):
            for k, f in entries.items():
                res[k].append(f())
        print(f"\n{name}")
        base = np.median(res["sciml scalar (per parameter)"])
        for k, v in res.items():
            m = np.median(v)
            print(f"  {k:34s} {m * 1e3:7.3f}  (min {min(v) * 1e3:.3f}; {base / m:.2f}x the scalar kernels)")


if __name__ == "__main__":
    main()
