"""Neural-network training steps, sciml vs PyTorch eager side by side in one process (issue 16's targets).

    python -m benchmarks.bench_nn [--rounds 7] [--cases cnn mlp lstm transformer cnn-jit mlp-jit] [--threads N]

Cases (one optimisation step each: forward, backward, Adam):
  * cnn: the digits CNN (conv 1->16 3x3, ReLU, max-pool, conv 16->32, BatchNorm2d, ReLU, max-pool, Dropout,
    Linear 128->64, ReLU, Linear 64->10), batch 64 of 8x8 images; target <= 1.0x PyTorch.
  * mlp: 10-128-128-1 with SiLU and Dropout(0.1), batch 256, MSE; target <= 1.0x.
  * lstm: LSTM(1, 128), sequence 100, batch 32, last output -> Linear; target <= 1.0x.
  * transformer: 2 TransformerEncoderLayers (d 64, 4 heads, ff 128, batch_first), batch 32 x 16 tokens; <= 1.5x.
  * cnn-jit, mlp-jit: the same networks and data, sciml's functional step (``value_and_grad`` over ``params()``
    under ``sm.jit``, then ``opt.step(grads)``) against the same PyTorch eager step.
sciml steps use PyTorch-style code (``loss.backward(); opt.step(); opt.zero_grad()``) and, where noted, the
functional ``value_and_grad`` path. Timings: rounds interleave sciml and torch; per round the best of a few
steps; the table shows the median over rounds in ms and the ratio, wall-clock time and (after the bar) the process
CPU time of the same steps (all threads; on a shared, loaded machine the CPU columns are the steadier comparison:
wall time there counts the time other processes hold the cores). Without torch only sciml's column is shown.
Both run float32 on the same number of threads: ``--threads`` (default: sciml's, the Taichi CPU thread
count) sets sciml's BLAS threads (``sciml.kernels.blas.set_threads``) and ``torch.set_num_threads``; Taichi's
parallel loops use its own pool (the CPU count). The header names the CPU, the BLAS, the thread count and the
load average (a loaded machine makes every number slower and noisier).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _arch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _best(fn, n):
    """(best wall time, best process CPU time) of n calls, in seconds."""
    best, cpu = float("inf"), float("inf")
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    return best, cpu


def _sciml_cases(sm, np, cases):
    from sciml.models import (LSTM, BatchNorm2d, Conv2d, Dropout, Flatten, Linear, MaxPool2d, Module, ReLU,
                              Sequential, SiLU, TransformerEncoderLayer, cross_entropy, mse)
    from sciml.optim import Adam
    rng = np.random.default_rng(0)
    out = {}

    def stepper(net, loss_fn, x, y):
        opt = Adam(net.parameters(), lr=1e-3)

        def step():
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return float(loss)
        return step

    def jit_stepper(net, loss_fn, x, y):
        """The functional step: value_and_grad over net.params() under sm.jit (one trace, then replays of the
        recorded launches: no Python per op), then the optimizer."""
        opt = Adam(net.parameters(), lr=1e-3)
        vg = sm.jit(sm.value_and_grad(lambda p: loss_fn(net.apply(p, x), y)))

        def step():
            v, g = vg(net.params())
            opt.step(g)
            return float(v)
        return step

    for name, make in (("cnn", stepper), ("cnn-jit", jit_stepper)):
        if name in cases:
            net = Sequential(Conv2d(1, 16, 3, padding=1), ReLU(), MaxPool2d(2), Conv2d(16, 32, 3, padding=1),
                             BatchNorm2d(32), ReLU(), MaxPool2d(2), Dropout(0.25), Flatten(), Linear(128, 64), ReLU(),
                             Linear(64, 10))
            x = sm.tensor(rng.standard_normal((64, 1, 8, 8)), "float32")
            y = rng.integers(0, 10, 64).astype(np.int32)
            out[name] = make(net, cross_entropy, x, y)
    for name, make in (("mlp", stepper), ("mlp-jit", jit_stepper)):
        if name in cases:
            net = Sequential(Linear(10, 128), SiLU(), Dropout(0.1), Linear(128, 128), SiLU(), Dropout(0.1),
                             Linear(128, 1))
            x = sm.tensor(rng.standard_normal((256, 10)), "float32")
            y = sm.tensor(rng.standard_normal((256, 1)), "float32")
            out[name] = make(net, mse, x, y)
    if "lstm" in cases:
        class Net(Module):
            def __init__(self):
                self.lstm = LSTM(1, 128, batch_first=True)
                self.head = Linear(128, 1)

            def forward(self, x):
                return self.head(self.lstm(x)[0][:, -1])
        x = sm.tensor(rng.standard_normal((32, 100, 1)), "float32")
        y = sm.tensor(rng.standard_normal((32, 1)), "float32")
        out["lstm"] = stepper(Net(), mse, x, y)
    if "transformer" in cases:
        class Enc(Module):
            def __init__(self):
                self.layers = [TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True) for _ in range(2)]
                self.head = Linear(64, 1)

            def forward(self, x):
                for l in self.layers:
                    x = l(x)
                return self.head(x.mean(1))
        x = sm.tensor(rng.standard_normal((32, 16, 64)), "float32")
        y = sm.tensor(rng.standard_normal((32, 1)), "float32")
        out["transformer"] = stepper(Enc(), mse, x, y)
    return out


def _torch_cases(torch, np, cases):
    nn = torch.nn
    rng = np.random.default_rng(0)
    out = {}

    def stepper(net, loss_fn, x, y):
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)

        def step():
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.item()
        return step

    f32 = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    if "cnn" in cases or "cnn-jit" in cases:
        net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1),
                            nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(),
                            nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
        out["cnn"] = stepper(net, nn.functional.cross_entropy, f32(rng.standard_normal((64, 1, 8, 8))),
                             torch.tensor(rng.integers(0, 10, 64)))
    if "mlp" in cases or "mlp-jit" in cases:
        net = nn.Sequential(nn.Linear(10, 128), nn.SiLU(), nn.Dropout(0.1), nn.Linear(128, 128), nn.SiLU(),
                            nn.Dropout(0.1), nn.Linear(128, 1))
        out["mlp"] = stepper(net, nn.functional.mse_loss, f32(rng.standard_normal((256, 10))),
                             f32(rng.standard_normal((256, 1))))
    for k in ("cnn", "mlp"):   # the -jit rows compare with the same eager PyTorch step
        if k + "-jit" in cases:
            out[k + "-jit"] = out[k]
    if "lstm" in cases:
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm, self.head = nn.LSTM(1, 128, batch_first=True), nn.Linear(128, 1)

            def forward(self, x):
                return self.head(self.lstm(x)[0][:, -1])
        out["lstm"] = stepper(Net(), nn.functional.mse_loss, f32(rng.standard_normal((32, 100, 1))),
                              f32(rng.standard_normal((32, 1))))
    if "transformer" in cases:
        class Enc(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
                                             for _ in range(2)])
                self.head = nn.Linear(64, 1)

            def forward(self, x):
                for l in self.layers:
                    x = l(x)
                return self.head(x.mean(1))
        out["transformer"] = stepper(Enc(), nn.functional.mse_loss, f32(rng.standard_normal((32, 16, 64))),
                                     f32(rng.standard_normal((32, 1))))
    return out


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "unknown CPU"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3, help="steps per round (best kept)")
    ap.add_argument("--cases", nargs="+", default=["cnn", "mlp", "lstm", "transformer", "cnn-jit", "mlp-jit"],
                    choices=["cnn", "mlp", "lstm", "transformer", "cnn-jit", "mlp-jit"])
    ap.add_argument("--threads", type=int, default=None, help="threads for both (default: sciml's thread count)")
    _arch.add_argument(ap)
    args = ap.parse_args(argv)
    _arch.use(args.arch)
    import numpy as np
    import sciml as sm
    from sciml import runtime
    from sciml.kernels import blas
    sm.init(arch=_arch.ARCH, dtype="float32", seed=0)
    threads = args.threads or runtime.num_threads()
    blas.set_threads(threads)
    ours = _sciml_cases(sm, np, args.cases)
    try:
        import torch
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        theirs = _torch_cases(torch, np, args.cases)
        peer = f"torch {torch.__version__} eager, {torch.get_num_threads()} threads"
    except ImportError:
        theirs = {}
        peer = "torch is not installed: sciml column only; pip install -e '.[bench]'"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# {_cpu_name()}, {os.cpu_count()} CPUs, load average {load:.1f}; arch {_arch.ARCH}, float32, "
          f"{threads} threads; BLAS {blas.name()}; {peer}")
    for f in list(ours.values()) + list(theirs.values()):   # warm-up: compile kernels, allocate
        f()
        f()
    times = {k: ([], []) for k in args.cases}
    for _ in range(args.rounds):
        for k in args.cases:
            times[k][0].append(_best(ours[k], args.steps))
            if k in theirs:
                times[k][1].append(_best(theirs[k], args.steps))
    targets = {"cnn": 1.0, "mlp": 1.0, "lstm": 1.0, "transformer": 1.5, "cnn-jit": 1.0, "mlp-jit": 1.0}
    print(f"{'step':<12}{'sciml ms':>10}{'torch ms':>10}{'ratio':>8}{'target':>8}  |{'cpu sciml':>10}"
          f"{'cpu torch':>10}{'ratio':>8}")
    for k in args.cases:
        a, ac = (1e3 * float(np.median([t[i] for t in times[k][0]])) for i in (0, 1))
        if times[k][1]:
            b, bc = (1e3 * float(np.median([t[i] for t in times[k][1]])) for i in (0, 1))
            print(f"{k:<12}{a:>10.2f}{b:>10.2f}{a / b:>8.2f}{targets[k]:>8.1f}  |{ac:>10.2f}{bc:>10.2f}"
                  f"{ac / bc:>8.2f}")
        else:
            print(f"{k:<12}{a:>10.2f}{'-':>10}{'-':>8}{targets[k]:>8.1f}  |{ac:>10.2f}{'-':>10}{'-':>8}")


if __name__ == "__main__":
    main()
