"""W4: curvature. (a) Hessian-vector product of the W1 MLP loss (784-512-512-10 relu, softmax
cross-entropy, batch 256, float32); (b) the full Hessian of a 1-16-16-1 tanh MLP MSE
(321 parameters, 64 points, float32). sciml vs PyTorch (double backward, torch.func) and JAX,
same process, seeded inputs from ``benchmarks/peers/common.py``.

sciml: the first row of each part is the same computation under ``sciml.jit`` (traced once, then
its kernel launches and BLAS calls replayed without Python); then (a) ``sciml.autodiff.curvature.hvp`` (forward over reverse: JVP rules through the
backward pass) and ``hvp_operator`` (reverse over reverse, graph recording included);
(b) ``sciml.autodiff.curvature.hessian_dense`` and ``sciml.hessian`` (both forward over reverse with
batched tangents: all 321 basis vectors in one pass), and for comparison the per-basis-vector paths
``hessian_dense(method="rows")`` (one backward pass of the gradient graph per row) and
``sm.hessian(batched=False)`` (one JVP of the gradient per column).

    python -m benchmarks.bench_w4 [--repeat 10] [--only W4a|W4b] [--no-peers] [--no-baselines]
    python -m benchmarks.bench_w4 --interleaved 21      # W4b: sciml jit / eager / torch.func alternately
    python -m benchmarks.bench_w4 --interleaved 21 --replay-gemm-threads   # + the replay's GEMMs multi-threaded

``--interleaved N``: N rounds that each time the sciml jitted Hessian, the eager ``hessian_dense`` and
torch.func's Hessian once, in turn, in one process (what survives a shared, loaded machine; for one core
and one thread each: ``TI_CPU_MAX_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 taskset -c 1``).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _arch  # noqa: E402
from benchmarks import peers  # noqa: E402
from benchmarks.peers import common as PC  # noqa: E402


def _sm():
    import sciml as sm
    sm.init(arch=_arch.ARCH, dtype="float32")
    return sm


def _mlp(sm, ps, x, act):
    h = x
    for i in range(0, len(ps), 2):
        h = sm.matmul(h, ps[i]) + ps[i + 1]
        if i + 2 < len(ps):
            h = act(h)
    return h


def w4a(repeat):
    sm = _sm()
    from sciml.autodiff import curvature as CV
    d = PC.w4a_inputs(0)
    x = sm.tensor(d["x"], "float32")
    onehot = np.zeros((len(d["y"]), PC.W1_SIZES[-1]), np.float32)
    onehot[np.arange(len(d["y"])), d["y"]] = 1.0
    oh = sm.tensor(onehot, "float32")
    ps = [sm.tensor(a, "float32") for pair in d["params"] for a in pair]
    v = [sm.tensor(a, "float32") for pair in d["v"] for a in pair]

    def loss(p):
        logits = _mlp(sm, p, x, sm.relu)
        return -(sm.log_softmax(logits, axis=-1) * oh).sum() * (1.0 / len(d["y"]))

    def run():
        hv = CV.hvp(loss, ps, v)
        return [h.numpy() for h in hv[-1:]]  # block on the result
    hv = np.concatenate([h.numpy().ravel() for h in CV.hvp(loss, ps, v)])
    hvp_jit = sm.jit(lambda p, t: CV.hvp(loss, p, t), fallback=False)  # traced once, replayed (sciml.jit)
    hvj = np.concatenate([h.numpy().ravel() for h in hvp_jit(ps, v)])
    s = peers.timeit_samples(lambda: [h.numpy() for h in hvp_jit(ps, v)[-1:]], 2, repeat)
    out = [peers.make_result("sciml/W4a_hvp_jit", s, hv_norm=float(np.linalg.norm(hvj.astype(np.float64))),
                             max_diff_vs_eager=float(np.abs(hvj - hv).max()), dtype="float32")]
    s = peers.timeit_samples(run, 2, repeat)
    out.append(peers.make_result("sciml/W4a_hvp_fwd_over_rev", s,
                                 hv_norm=float(np.linalg.norm(hv.astype(np.float64))), dtype="float32"))
    hvp_s, gemm_s, calls = peers.sciml_gemm_share(run, repeat)
    out.append(peers.make_result("  sciml GEMMs inside the HVP", [gemm_s], calls=calls,
                                 share=round(gemm_s / hvp_s, 3)))

    def run_rr():
        hv = CV.hvp_operator(loss, ps)(v)
        return [h.numpy() for h in hv[-1:]]
    hv2 = np.concatenate([h.numpy().ravel() for h in CV.hvp_operator(loss, ps)(v)])
    s = peers.timeit_samples(run_rr, 2, repeat)
    out.append(peers.make_result("sciml/W4a_hvp_rev_over_rev", s,
                                 hv_norm=float(np.linalg.norm(hv2.astype(np.float64))), dtype="float32"))
    return out


def w4b(repeat, fast=False):
    sm = _sm()
    from sciml.autodiff import curvature as CV
    d = PC.w4b_inputs(0, np.float32)
    x, y = sm.tensor(d["x"], "float32"), sm.tensor(d["y"], "float32")
    sizes = d["sizes"]
    theta = sm.tensor(d["theta"], "float32")

    def loss_flat(th):
        ps, k = [], 0
        for i, o in zip(sizes[:-1], sizes[1:]):
            ps.append(sm.reshape(th[k:k + i * o], (i, o)))
            k += i * o
            ps.append(th[k:k + o])
            k += o
        e = _mlp(sm, ps, x, sm.tanh) - y
        return (e * e).mean()

    H = CV.hessian_dense(loss_flat, theta).numpy().astype(np.float64)
    hess_jit = sm.jit(sm.hessian(loss_flat), fallback=False)  # traced once, replayed (sciml.jit)
    Hj = hess_jit(theta).numpy().astype(np.float64)
    s = peers.timeit_samples(lambda: hess_jit(theta).numpy(), 3, repeat)
    out = [peers.make_result("sciml/W4b_hessian_jit", s, n_params=theta.size, max_diff_vs_eager=float(np.abs(Hj - H).max()),
                             dtype="float32")]
    s = peers.timeit_samples(lambda: CV.hessian_dense(loss_flat, theta).numpy(), 3, repeat)
    out += [peers.make_result("sciml/W4b_hessian_dense_batched", s, n_params=theta.size,
                             hess_fro=float(np.linalg.norm(H)), hess_asym=float(np.abs(H - H.T).max()),
                             dtype="float32")]
    s = peers.timeit_samples(lambda: sm.hessian(loss_flat)(theta).numpy(), 3, repeat)
    out.append(peers.make_result("sciml/W4b_sm_hessian_batched", s, n_params=theta.size, dtype="float32"))
    if not fast:  # the per-basis-vector paths (before batched tangents), for comparison
        H2 = CV.hessian_dense(loss_flat, theta, method="rows").numpy().astype(np.float64)
        s = peers.timeit_samples(lambda: CV.hessian_dense(loss_flat, theta, method="rows").numpy(), 1,
                                 max(2, repeat // 2))
        out.append(peers.make_result("sciml/W4b_hessian_dense_rows", s, n_params=theta.size,
                                     max_diff_vs_batched=float(np.abs(H2 - H).max()), dtype="float32"))
        s = peers.timeit_samples(lambda: sm.hessian(loss_flat, batched=False)(theta).numpy(), 0, max(2, repeat // 4))
        out.append(peers.make_result("sciml/W4b_sm_hessian_per_vector", s, n_params=theta.size, dtype="float32"))
    return out


def w4b_interleaved(rounds, gemm_threads=False):
    """W4b: sciml jit / sciml eager / torch.func.hessian, one call each per round, same process. With
    ``gemm_threads``, also the jitted Hessian traced with ``kernels.linalg.REPLAY_ONE_THREAD = False`` (its
    replay's GEMMs at the process-wide BLAS thread count instead of one)."""
    import time
    sm = _sm()
    from sciml.autodiff import curvature as CV
    d = PC.w4b_inputs(0, np.float32)
    x, y = sm.tensor(d["x"], "float32"), sm.tensor(d["y"], "float32")
    sizes = d["sizes"]
    theta = sm.tensor(d["theta"], "float32")

    def loss_flat(th):
        ps, k = [], 0
        for i, o in zip(sizes[:-1], sizes[1:]):
            ps.append(sm.reshape(th[k:k + i * o], (i, o)))
            k += i * o
            ps.append(th[k:k + o])
            k += o
        e = _mlp(sm, ps, x, sm.tanh) - y
        return (e * e).mean()
    hj = sm.jit(sm.hessian(loss_flat), fallback=False)
    fns = {"sciml/W4b_hessian_jit": lambda: hj(theta).numpy(),
           "sciml/W4b_hessian_dense_batched": lambda: CV.hessian_dense(loss_flat, theta).numpy()}
    if gemm_threads:
        from sciml.kernels import linalg as KL
        hn = sm.jit(sm.hessian(loss_flat), fallback=False)
        KL.REPLAY_ONE_THREAD = False
        try:
            hn(theta)  # traced now: its GEMMs replay at the process-wide thread count
        finally:
            KL.REPLAY_ONE_THREAD = True
        fns["sciml/W4b_hessian_jit_gemm_threads"] = lambda: hn(theta).numpy()
    try:
        import torch
        from torch.func import hessian as thessian
        tx, ty, tth = (torch.from_numpy(d[k]) for k in ("x", "y", "theta"))

        def tloss(th):
            h, k = tx, 0
            for j, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
                w = th[k:k + i * o].view(i, o)
                k += i * o
                h = h @ w + th[k:k + o]
                k += o
                if j < len(sizes) - 2:
                    h = torch.tanh(h)
            e = h - ty
            return (e * e).mean()
        th_f = thessian(tloss)
        fns["torch/W4b_full_hessian_321"] = lambda: th_f(tth).numpy()
    except ImportError:
        pass
    Hs = {k: f().astype(np.float64) for k, f in fns.items()}
    ref = Hs.get("torch/W4b_full_hessian_321", Hs["sciml/W4b_hessian_dense_batched"])
    for f in fns.values():
        for _ in range(3):
            f()
    ts = {k: [] for k in fns}
    load0 = os.getloadavg()[0]
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            ts[k].append(time.perf_counter() - t)
    load1 = os.getloadavg()[0]
    res = [peers.make_result(k, v, max_diff_vs_ref=float(np.abs(Hs[k] - ref).max()), dtype="float32")
           for k, v in ts.items()]
    print(peers.format_table(res, f"W4b interleaved, {rounds} rounds, load average {load0:.1f} -> {load1:.1f}"))
    tr = [r for r in res if r["name"].startswith("torch")]
    for r in res:
        if tr and r["name"].startswith("sciml"):
            print(f"{r['name']}: median {r['median_s'] / tr[0]['median_s']:.2f}x, min "
                  f"{r['min_s'] / tr[0]['min_s']:.2f}x torch.func")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--only", choices=["W4a", "W4b"])
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-baselines", action="store_true", help="skip the per-basis-vector Hessian paths")
    ap.add_argument("--interleaved", type=int, metavar="ROUNDS", help="W4b only: alternate sciml jit / eager / "
                    "torch.func per round in one process")
    ap.add_argument("--replay-gemm-threads", action="store_true", help="with --interleaved: also a jitted Hessian "
                    "whose replay runs its GEMMs at the process-wide BLAS thread count (default: one thread)")
    _arch.add_argument(ap)
    a = ap.parse_args(argv)
    _arch.use(a.arch)
    if a.interleaved:
        return w4b_interleaved(a.interleaved, a.replay_gemm_threads)
    res = []
    tp = None if a.no_peers else peers.load_peer("torch")
    jp = None if a.no_peers else peers.load_peer("jax")
    if a.only in (None, "W4a"):
        res += w4a(a.repeat)
        if tp is not None:
            res += tp.torch_w4a_hvp(repeat=a.repeat)
        if jp is not None:
            res.append(jp.jax_w4a_hvp(repeat=a.repeat))
    if a.only in (None, "W4b"):
        res += w4b(a.repeat, a.no_baselines)
        if tp is not None:
            res.append(tp.torch_w4b_hessian(repeat=a.repeat))
        if jp is not None:
            res.append(jp.jax_w4b_hessian(repeat=a.repeat))
    print(peers.format_table(res, f"W4: HVP of the W1 MLP loss (a) and full 321x321 Hessian (b), float32, {_arch.label()}"))
    for key in ("W4a", "W4b"):
        mine = [r for r in res if r["name"].startswith("sciml/" + key)]
        torch_ = [r for r in res if r["name"].startswith("torch/" + key)]
        if mine and torch_:
            best = min(r["median_s"] for r in torch_)
            print(f"{key}: sciml {mine[0]['median_s'] * 1e3:.2f} ms = {mine[0]['median_s'] / best:.2f}x the faster "
                  f"PyTorch ({best * 1e3:.2f} ms)")
    return res


if __name__ == "__main__":
    main()
