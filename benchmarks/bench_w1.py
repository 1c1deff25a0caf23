"""Benchmark W1: one training step (forward, backward, Adam) of an MLP 784-512-512-10, ReLU,
softmax cross-entropy, batch 256, float32 — sciml vs PyTorch (eager) and JAX (jit), same inputs
(benchmarks/peers/common.py w1_inputs), measured in the same run.

    python benchmarks/bench_w1.py [--repeat 30] [--json out.json] [--breakdown]
    python benchmarks/bench_w1.py --interleaved 15    # sciml vs torch, alternating rounds (shared machines)

sciml's step: ``sciml.jit(value_and_grad(...))`` (``--eager``: without jit) of ``cross_entropy(net.apply(params, x), y)`` over ``net.params()``
(each hidden layer = one BLAS GEMM + one fused bias+ReLU Taichi kernel; the loss one fused softmax
cross-entropy kernel; their adjoints one kernel each) and ``Adam.step`` (one fused in-place Taichi
kernel per parameter).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import sciml as sm  # noqa: E402
from benchmarks import _arch  # noqa: E402
from benchmarks import peers  # noqa: E402
from benchmarks.peers import common as C  # noqa: E402


_JIT = [True]  # --eager turns it off


def _sciml_setup(seed):
    """W1's inputs, the sciml MLP loaded with them, Adam and the loss's value_and_grad (under
    ``sciml.jit`` unless --eager: traced once, its kernels and GEMMs replayed without Python)."""
    from sciml.models import MLP, cross_entropy
    from sciml.optim import Adam
    d = C.w1_inputs(seed)
    net = MLP(list(C.W1_SIZES), activation=sm.relu)
    net.load_state_dict({f"layers.{i}.{k}": v for i, (W, b) in enumerate(d["params"])
                         for k, v in (("weight", W), ("bias", b))})
    x, y = sm.tensor(d["x"], "float32"), d["y"].astype(np.int32)
    opt = Adam(net.params(), lr=C.ADAM_LR, betas=(C.ADAM_B1, C.ADAM_B2), eps=C.ADAM_EPS)
    vg = sm.value_and_grad(lambda p: cross_entropy(net.apply(p, x), y))
    if _JIT[0]:
        vg = sm.jit(vg, fallback=False)
    return d, net, opt, vg


def sciml_w1_step(seed=0, warmup=5, repeat=30, breakdown=False):
    d, net, opt, vg = _sciml_setup(seed)

    def step():
        loss, grads = vg(net.params())
        opt.step(grads)
        return loss

    loss0 = float(vg(net.params())[0])
    samples = peers.timeit_samples(step, warmup=warmup, repeat=repeat)
    r = peers.make_result("sciml/W1_mlp_step", samples, loss0=loss0, dtype="float32")
    r["samples_per_s"] = C.W1_BATCH / r["median_s"]
    if not breakdown:
        return r
    grads = vg(net.params())[1]
    parts = [r,
             peers.make_result("  sciml fwd+bwd only", peers.timeit_samples(lambda: vg(net.params()), warmup, repeat)),
             peers.make_result("  sciml Adam only", peers.timeit_samples(lambda: opt.step(grads), warmup, repeat)),
             peers.make_result("  numpy: the step's 8 GEMMs", peers.timeit_samples(_gemms(d), warmup, repeat))]
    return parts


def _gemms(d):
    """The 8 float32 GEMMs of one W1 step through numpy's BLAS: the floor of any numpy-BLAS design."""
    f, rng = np.float32, np.random.default_rng(0)
    X = d["x"]
    W = [p[0].copy() for p in d["params"]]
    h1, h2 = np.empty((256, 512), f), np.empty((256, 512), f)
    o, g3 = np.empty((256, 10), f), rng.standard_normal((256, 10)).astype(f)
    dW = [np.empty_like(w) for w in W]
    dh2, dh1 = np.empty_like(h2), np.empty_like(h1)

    def run():
        np.matmul(X, W[0], out=h1), np.matmul(h1, W[1], out=h2), np.matmul(h2, W[2], out=o)
        np.matmul(h2.T, g3, out=dW[2]), np.matmul(g3, W[2].T, out=dh2)
        np.matmul(h1.T, dh2, out=dW[1]), np.matmul(dh2, W[1].T, out=dh1)
        np.matmul(X.T, dh1, out=dW[0])
    return run


def interleaved(rounds, batch=8):
    """sciml's and torch's W1 steps timed in alternating rounds (best of ``batch`` steps per round,
    median over rounds): both see the same machine load, so the ratio is meaningful on a busy host."""
    from benchmarks.peers import torch_peers as TP
    import torch
    import torch.nn.functional as F
    d, net, opt, vg = _sciml_setup(0)

    def sciml_step():
        opt.step(vg(net.params())[1])
    tx, ty = torch.from_numpy(d["x"]), torch.from_numpy(d["y"])
    ps = TP._params(d["params"])
    topt = TP._adam(ps)

    def torch_step():
        topt.zero_grad(set_to_none=True)
        F.cross_entropy(TP._mlp(ps, tx, torch.relu), ty).backward()
        topt.step()
    entries = {"sciml W1 step": sciml_step, "torch W1 step": torch_step}
    res = {k: [] for k in entries}
    for f in entries.values():
        for _ in range(5):
            f()
    for _ in range(rounds):
        for k, f in entries.items():
            best = float("inf")
            for _ in range(batch):
                t = time.perf_counter()
                f()
                best = min(best, time.perf_counter() - t)
            res[k].append(best)
    print(f"W1 interleaved: {rounds} rounds, best of {batch} steps per round; median (min) ms")
    for k, v in res.items():
        print(f"  {k:14s} {np.median(v) * 1e3:7.3f} ({min(v) * 1e3:.3f})")
    print(f"  ratio sciml/torch: {np.median(res['sciml W1 step']) / np.median(res['torch W1 step']):.3f} (medians), "
          f"{min(res['sciml W1 step']) / min(res['torch W1 step']):.3f} (minima)")
    return res


def _blas_limit(n):
    import contextlib
    if not n:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits
    return threadpool_limits(n, user_api="blas")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--json", default=None)
    ap.add_argument("--breakdown", action="store_true", help="also time fwd+bwd, Adam and the bare GEMMs")
    ap.add_argument("--interleaved", type=int, default=0, metavar="ROUNDS",
                    help="only time sciml vs torch in alternating rounds (fair on a loaded machine)")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="limit numpy's BLAS threads (threadpoolctl) for sciml's run; default: as configured")
    ap.add_argument("--eager", action="store_true", help="sciml's value_and_grad without sciml.jit")
    _arch.add_argument(ap)
    args = ap.parse_args(argv)
    _arch.use(args.arch)
    _JIT[0] = not args.eager
    sm.init(arch=_arch.ARCH, dtype="float32")
    if args.interleaved:
        return interleaved(args.interleaved)
    with _blas_limit(args.blas_threads):  # sciml's run only; the peers keep their own thread settings
        results = [sciml_w1_step(repeat=args.repeat)]
        extra = sciml_w1_step(repeat=args.repeat, breakdown=True)[1:] if args.breakdown else []
    for name, fn in (("torch", "torch_w1_mlp_step"), ("jax", "jax_w1_mlp_step")):
        mod = peers.load_peer(name)
        if mod is not None:
            results.append(getattr(mod, fn)(repeat=args.repeat))
    ours = results[0]["median_s"]
    for r in results[1:]:
        key = "torch" if "torch" in r["name"] else "jax"
        results[0][f"ratio_vs_{key}"] = ours / r["median_s"]
    print(peers.format_table(results + extra, title=f"W1: MLP 784-512-512-10 training step (fwd+bwd+Adam), batch 256, f32, {_arch.label()}"))
    for r in results[1:]:
        if "loss0" in r:
            print(f"loss0 check: sciml {results[0]['loss0']:.6f} vs {r['name']} {r['loss0']:.6f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(peers.to_jsonable(results), f, indent=1)
    return results


if __name__ == "__main__":
    main()
