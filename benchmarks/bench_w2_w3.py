"""W2 (Burgers PINN) and W3 (Poisson 2-D PINN) training-step time: sciml's fused path vs peers.

One step = loss + gradient w.r.t. every parameter + Adam update, float32, on CPU, with the
seeded inputs of ``benchmarks/peers/common.py``; PyTorch (autograd with create_graph) and JAX
(jit) run the same step in the same process.

sciml's step: ``sciml.pinn.fused.mlp_derivatives`` gives u and the needed input derivatives as
stacked Taylor streams (one GEMM + one fused Taichi kernel per layer, hand-written adjoint); the
residual and loss are ordinary sciml ops; ``sciml.optim.Adam`` updates the parameters (one fused
kernel each). The initial/boundary points ride along with the interior points in the same fused
call (their derivative streams are computed and ignored: 4 % more rows, one call fewer).

    python -m benchmarks.bench_w2_w3 [--repeat 20] [--rounds 3] [--only W2|W3] [--no-peers]

Prints a table (median / min ms, ratio to the faster peer) and a per-step breakdown of sciml's
step (BLAS GEMM, fused Taylor kernels, other Taichi kernels, kernel launches, Python/tape).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _arch  # noqa: E402
from benchmarks import peers  # noqa: E402
from benchmarks.peers import common as PC  # noqa: E402


def _setup():
    import sciml as sm
    sm.init(arch=_arch.ARCH, dtype="float32")
    return sm


def _params(sm, np_params):
    from sciml.models.module import Parameter
    ps = []
    for W, b in np_params:
        ps += [Parameter(W, "float32"), Parameter(b, "float32")]
    return ps


def w2_step(seed=0, jit=False):
    """(step function, loss/grad at the initial parameters) for W2 Burgers (``jit``: the loss and
    gradient through ``sm.jit``, replayed without the tape: what a device needs)."""
    sm = _setup()
    from sciml.pinn import fused
    d = PC.w2_inputs(seed)
    ni, n0 = len(d["X_int"]), len(d["X_init"])
    X = sm.tensor(np.concatenate([d["X_int"], d["X_init"], d["X_bnd"]]), "float32")
    # rows ni.. : initial points (target u_init) then boundary points (target 0), 200 each
    target = sm.tensor(np.concatenate([d["u_init"], np.zeros(len(d["X_bnd"]), np.float32)])[:, None], "float32")
    assert n0 == len(d["X_bnd"])  # equal counts: mean_init + mean_bnd = 2 * mean over both
    nu = float(d["nu"])
    ps = _params(sm, d["params"])
    derivs = [(), (0,), (1,), (0, 0)]     # u, u_x, u_t, u_xx   (columns are (x, t))

    def loss_fn(*p):
        layers = [(p[2 * k], p[2 * k + 1]) for k in range(len(p) // 2)]
        r = fused.mlp_derivatives(layers, sm.tanh, X, derivs)
        u, ux, ut, uxx = r[()], r[(0,)], r[(1,)], r[(0, 0)]
        res = ut[:ni] + u[:ni] * ux[:ni] - nu * uxx[:ni]
        e = u[ni:] - target
        return (res * res).mean() + 2.0 * (e * e).mean()

    return _trainer(sm, loss_fn, ps, jit)


def w3_step(seed=0, jit=False):
    sm = _setup()
    from sciml.pinn import fused
    d = PC.w3_inputs(seed)
    ni = len(d["X_int"])
    X = sm.tensor(np.concatenate([d["X_int"], d["X_bnd"]]), "float32")
    f = sm.tensor(d["f_int"][:, None], "float32")
    ps = _params(sm, d["params"])
    derivs = [(), (0, 0), (1, 1)]

    def loss_fn(*p):
        layers = [(p[2 * k], p[2 * k + 1]) for k in range(len(p) // 2)]
        r = fused.mlp_derivatives(layers, sm.tanh, X, derivs)
        res = -(r[(0, 0)][:ni] + r[(1, 1)][:ni]) - f
        ub = r[()][ni:]
        return (res * res).mean() + (ub * ub).mean()

    return _trainer(sm, loss_fn, ps, jit)


def _trainer(sm, loss_fn, ps, jit=False):
    from sciml.optim import Adam
    vg = sm.value_and_grad(loss_fn, argnums=tuple(range(len(ps))))
    if jit:
        vg = sm.jit(vg, fallback=False)
    loss0, g0 = vg(*ps)
    gnorm0 = float(np.sqrt(sum(float((g.numpy().astype(np.float64) ** 2).sum()) for g in g0)))
    opt = Adam(ps, lr=PC.ADAM_LR, betas=(PC.ADAM_B1, PC.ADAM_B2), eps=PC.ADAM_EPS)

    def step():
        loss, grads = vg(*ps)
        opt.step(list(grads))
        return loss
    return step, float(loss0), gnorm0


# --- per-step breakdown ---------------------------------------------------------------------
class _Profile:
    """Wraps BLAS/Taichi GEMM and every cached Taichi kernel with timers while active."""

    def __init__(self):
        self.t = {"gemm": 0.0, "taylor": 0.0, "other": 0.0}
        self.n = {"gemm": 0, "taylor": 0, "other": 0}

    def __enter__(self):
        from sciml.kernels import _common as C
        from sciml.kernels import linalg as LK
        self._C, self._LK = C, LK
        self._mm = LK.matmul
        pc = time.perf_counter

        def timed_gemm(fn):
            def w(*a, **k):
                t0 = pc()
                r = fn(*a, **k)
                self.t["gemm"] += pc() - t0
                self.n["gemm"] += 1
                return r
            return w
        LK.matmul = timed_gemm(self._mm)
        from sciml.pinn import fused_gemm as F  # a GEMM split over two threads: one host call, not LK.matmul
        self._F, self._split = F, F._split_gemm
        F._split_gemm = timed_gemm(self._split)
        self._orig_cached = C.cached
        prof = self

        def cached(key, build):
            k = prof._orig_cached(key, build)
            cat = "taylor" if isinstance(key, tuple) and str(key[0]).startswith("taylor") else "other"

            def w(*a):
                t0 = pc()
                r = k(*a)
                prof.t[cat] += pc() - t0
                prof.n[cat] += 1
                return r
            return w
        C.cached = cached
        from sciml.kernels import _vec as V
        self._V, self._orig_vcached = V, V.cached

        class Timed:   # a vector-lane kernel (VecLaunch): timed calls, its attributes passed through
            def __init__(self, k, cat):
                self._k, self._cat = k, cat

            def __getattr__(self, name):
                return getattr(self._k, name)

            def __call__(self, *a):
                t0 = pc()
                r = self._k(*a)
                prof.t[self._cat] += pc() - t0
                prof.n[self._cat] += 1
                return r

        def vcached(key, build, *a, **kw):
            k = prof._orig_vcached(key, build, *a, **kw)
            return Timed(k, "taylor" if isinstance(key, tuple) and str(key[0]).startswith("taylor") else "other")
        V.cached = vcached
        return self

    def __exit__(self, *exc):
        self._LK.matmul = self._mm
        self._F._split_gemm = self._split
        self._C.cached = self._orig_cached
        self._V.cached = self._orig_vcached


def breakdown(step, steps=10):
    for _ in range(2):
        step()
    with _Profile() as p:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        total = (time.perf_counter() - t0) / steps
    ms = {k: v / steps * 1e3 for k, v in p.t.items()}
    cnt = {k: v / steps for k, v in p.n.items()}
    py = total * 1e3 - sum(ms.values())
    return total * 1e3, ms, cnt, py


def cpu_one_thread(work, tp, warmup, repeat):
    """CPU ms per step with everything on one thread (sciml: serialized Taichi loops and one BLAS
    thread; PyTorch: set_num_threads(1)); process time, so it hardly depends on the machine's load."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        print("  (skipped: needs threadpoolctl)")
        return []
    from sciml.kernels import _common as C
    from sciml.pinn import fused
    out = []
    prev = C.SERIAL_BELOW
    C.SERIAL_BELOW, fused._THREADS.enabled = 1 << 40, False
    try:
        with threadpool_limits(1, user_api="blas"):
            for w in work:
                step = (w2_step if w == "W2" else w3_step)()[0]
                for _ in range(warmup):
                    step()
                t0 = time.process_time()
                for _ in range(repeat):
                    step()
                row = {"workload": w, "sciml_cpu_ms": (time.process_time() - t0) / repeat * 1e3}
                if tp is not None:
                    import torch
                    nthreads = torch.get_num_threads()
                    torch.set_num_threads(1)
                    fn = tp.torch_w2_burgers_step if w == "W2" else tp.torch_w3_poisson_step
                    t0 = time.process_time()
                    fn(warmup=warmup, repeat=repeat)
                    row["torch_cpu_ms"] = (time.process_time() - t0) / (warmup + repeat + 1) * 1e3
                    torch.set_num_threads(nthreads)
                out.append(row)
    finally:
        C.SERIAL_BELOW, fused._THREADS.enabled = prev, True
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--only", choices=["W2", "W3"], default=None)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-cpu", action="store_true", help="skip the one-thread CPU-time comparison")
    ap.add_argument("--jit", action="store_true", help="also time sciml's step through sm.jit (row sciml/W2_jit)")
    _arch.add_argument(ap)
    a = ap.parse_args(argv)
    _arch.use(a.arch)
    work = [w for w in ("W2", "W3") if a.only in (None, w)]
    tp = None if a.no_peers else peers.load_peer("torch")
    jp = None if a.no_peers else peers.load_peer("jax")
    results, summary, details = [], [], []
    for w in work:
        step, loss0, g0 = (w2_step if w == "W2" else w3_step)()
        runners = [("sciml", None)]
        if a.jit:
            step_jit = (w2_step if w == "W2" else w3_step)(jit=True)[0]
            runners.append(("sciml-jit", step_jit))
        if tp is not None:
            runners.append(("torch", tp.torch_w2_burgers_step if w == "W2" else tp.torch_w3_poisson_step))
        if jp is not None:
            runners.append(("jax", jp.jax_w2_burgers_step if w == "W2" else jp.jax_w3_poisson_step))
        # The VM is shared and noisy: interleave the frameworks in rounds and keep each one's best
        # round (median over the round's steps), so that all see the same conditions.
        best = {}
        for _ in range(a.rounds):
            for name, fn in runners:
                if fn is None or name == "sciml-jit":
                    s = peers.timeit_samples(fn or step, a.warmup, a.repeat)
                    r = peers.make_result(f"sciml/{w}_fused" + ("_jit" if fn else ""), s, loss0=loss0,
                                          grad_norm0=g0, dtype="float32")
                else:
                    r = fn(warmup=a.warmup, repeat=a.repeat)
                if name not in best or r["median_s"] < best[name]["median_s"]:
                    best[name] = r
        rows = [best[name] for name, _ in runners]
        print(f"{w}: " + ", ".join(f"{x['name']} {x['median_s'] * 1e3:.2f} ms" for x in rows), flush=True)
        r = rows[0]
        peer_rows = [x for (name, _), x in zip(runners, rows) if not name.startswith("sciml")]
        bp = min(peer_rows, key=lambda x: x["median_s"]) if peer_rows else None
        for x in rows:
            if bp is not None:
                x["ratio_vs_best_peer"] = x["median_s"] / bp["median_s"]
        results += rows
        tot, ms, cnt, py = breakdown(step)
        details.append(
            f"{w} sciml per-step breakdown (profiled run, {tot:.2f} ms/step incl. timer overhead): "
            f"GEMM {ms['gemm']:.2f} ms ({cnt['gemm']:.0f} calls), fused Taylor kernels {ms['taylor']:.2f} ms "
            f"({cnt['taylor']:.0f} launches), other Taichi kernels {ms['other']:.2f} ms ({cnt['other']:.0f} "
            f"launches), Python/tape/rest {py:.2f} ms")
        if bp is not None:
            summary.append(f"{w}: sciml {r['median_s'] * 1e3:.2f} ms vs best peer {bp['name']} "
                           f"{bp['median_s'] * 1e3:.2f} ms -> ratio {r['median_s'] / bp['median_s']:.2f} "
                           f"({bp['median_s'] / r['median_s']:.2f}x faster); loss0 sciml {loss0:.6g} / peer "
                           f"{bp.get('loss0', float('nan')):.6g}, |grad0| sciml {g0:.6g} / peer "
                           f"{bp.get('grad_norm0', float('nan')):.6g}")
            if a.jit:
                rj = best["sciml-jit"]
                summary.append(f"{w}: sciml jit {rj['median_s'] * 1e3:.2f} ms -> ratio "
                               f"{rj['median_s'] / bp['median_s']:.2f} vs {bp['name']}")
    print(peers.format_table(results, f"W2/W3 PINN training step ({_arch.label()}, float32)"))
    print()
    for line in details + summary:
        print(line)
    if not a.no_cpu:
        print()
        print("One-thread CPU time per step (process time; robust to other load on the machine):")
        for row in cpu_one_thread(work, tp, a.warmup, a.repeat):
            t = row.get("torch_cpu_ms")
            extra = f", torch {t:.2f} ms -> ratio {row['sciml_cpu_ms'] / t:.2f}" if t else ""
            print(f"  {row['workload']}: sciml {row['sciml_cpu_ms']:.2f} ms{extra}")
    return results


if __name__ == "__main__":
    main()
