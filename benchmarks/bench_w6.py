"""W6: 100-D Rosenbrock in float64 from the standard start (-1.2, 1, ...) to ||grad||_2 < 1e-6:
iterations, loss(+gradient) evaluations, HVPs and wall time of sciml's LBFGS and NewtonCG vs
torch.optim.LBFGS (strong Wolfe, history 10) and SciPy's L-BFGS-B / Newton-CG, in one run.

sciml rows:
- ``sciml/W6_lbfgs_ops``: ``sciml.optim.lbfgs`` (history 10, strong Wolfe), the loss written with
  sciml ops (generic autodiff: ~10 forward + ~20 backward kernel launches per evaluation);
- ``sciml/W6_lbfgs_sm_fuse``: the same with the elementwise part of the loss in ``sm.fuse`` (one
  generated kernel forward, one per input backward);
- ``sciml/W6_lbfgs_fused``: the same optimizer on a loss written as ONE fused Taichi kernel
  primitive (value) whose VJP is one more kernel (gradient): isolates the optimizer's own cost;
- ``sciml/W6_newton_cg_default``: ``sciml.optim.newton_cg`` with its defaults (``jit="auto"``,
  ``hessian="auto"``: here the dense H, traced and replayed), the loss in sciml ops;
- ``sciml/W6_newton_cg_ops``: ``newton_cg(jit=False, hessian="products")`` (truncated CG on
  Hessian-vector products through the gradient's graph, SciPy's forcing term; the default before
  ``auto``);
- ``sciml/W6_newton_cg_dense_ops``: ``jit=False, hessian="dense"`` (H formed once per Newton
  iteration by batched forward over reverse; the CG products are matrix-vector products);
- ``sciml/W6_newton_cg_ops_jit`` / ``sciml/W6_newton_cg_dense_ops_jit``: the two above with
  ``jit=True`` (loss+gradient and the product / dense Hessian traced once per solve by
  ``sciml.jit`` and replayed; tracing included in the time). On CPU at this size the CG loop
  itself runs in numpy (``newton.HOST_CG_MAX``).

    python -m benchmarks.bench_w6 [--repeat 3] [--no-peers] [--only newton_cg ...]
    python -m benchmarks.bench_w6 --interleaved 5     # Newton-CG rows and SciPy Newton-CG alternately

``--interleaved N``: N rounds that each run SciPy's Newton-CG and every sciml Newton-CG row once, in
turn, in one process (what survives a shared, loaded machine).
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _arch  # noqa: E402
from benchmarks import peers  # noqa: E402
from benchmarks.peers import common as PC  # noqa: E402

GTOL = 1e-6


def _sm():
    import sciml as sm
    sm.init(arch=_arch.ARCH, dtype="float64")
    return sm


def rosen_ops(sm):
    def f(x):
        return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()
    return f


def rosen_sm_fuse(sm):
    """The loss with ``sm.fuse`` on the elementwise part: one generated kernel forward, one per
    input backward (the fused chain's VJP is fused too); the slices and the sum stay ops."""
    body = sm.fuse(lambda a, b: 100.0 * (b - a * a) ** 2 + (1.0 - a) ** 2)

    def f(x):
        return body(x[:-1], x[1:]).sum()
    return f


def rosen_fused(sm):
    """Rosenbrock as one sciml primitive: forward = one Taichi kernel, VJP = g * (one kernel)."""
    import taichi as ti
    from sciml import backend
    from sciml.autodiff.primitive import Primitive
    from sciml.kernels import _common as C
    A = C.arr("float64")

    @ti.kernel
    def val(x: A, out: A, n: ti.i32):
        out[0] = 0.0
        ti.loop_config(serialize=True)
        for i in range(n - 1):
            a = x[i + 1] - x[i] * x[i]
            b = 1.0 - x[i]
            out[0] += 100.0 * a * a + b * b

    @ti.kernel
    def grad(x: A, g: A, out: A, n: ti.i32):
        ti.loop_config(serialize=True)
        for i in range(n):
            gi = 0.0
            if i < n - 1:
                gi += -400.0 * x[i] * (x[i + 1] - x[i] * x[i]) - 2.0 * (1.0 - x[i])
            if i > 0:
                gi += 200.0 * (x[i] - x[i - 1] * x[i - 1])
            out[i] = g[0] * gi

    def fwd(x):
        out = backend.empty(1, "float64")
        val(x._buf, out, x.size)
        return out, (), "float64"

    def gfwd(x, g):
        out = backend.empty(x.size, "float64")
        grad(x._buf, g._buf, out, x.size)
        return out, x.shape, "float64"
    P = Primitive("rosenbrock", fwd)
    G = Primitive("rosenbrock_grad", gfwd, order=0)
    P.def_vjp(lambda g, x, out: (G(x, g),))
    return P


def run_sciml(repeat, only=None):
    sm = _sm()
    from sciml.optim import lbfgs, newton_cg
    x0 = sm.tensor(PC.rosenbrock_x0())
    res = []
    for name, fn, loss in (("sciml/W6_lbfgs_ops_jit", lbfgs, rosen_ops(sm)),
                           ("sciml/W6_lbfgs_ops", lbfgs, rosen_ops(sm)),
                           ("sciml/W6_lbfgs_sm_fuse", lbfgs, rosen_sm_fuse(sm)),
                           ("sciml/W6_lbfgs_fused", lbfgs, rosen_fused(sm)),
                           ("sciml/W6_newton_cg_default", newton_cg, rosen_ops(sm)),
                           ("sciml/W6_newton_cg_ops", newton_cg, rosen_ops(sm)),
                           ("sciml/W6_newton_cg_dense_ops", newton_cg, rosen_ops(sm)),
                           ("sciml/W6_newton_cg_ops_jit", newton_cg, rosen_ops(sm)),
                           ("sciml/W6_newton_cg_dense_ops_jit", newton_cg, rosen_ops(sm))):
        if only and not any(o in name for o in only):
            continue
        kw = dict(gtol=GTOL, ftol=0.0, xtol=0.0, max_iter=100000)
        if fn is lbfgs:
            kw.update(history=10, max_eval=200000)
        if fn is newton_cg and not name.endswith("_default"):
            kw.update(hessian="dense" if "dense_ops" in name else "products",
                      jit=name.endswith("_jit"))  # the loss in plain ops, traced once per solve (tracing timed)
        elif name.endswith("_jit"):
            kw.update(jit=True)
        out = {}

        def solve(fn=fn, loss=loss, kw=kw):
            out["r"] = fn(loss, x0, **kw)
        s = peers.timeit_samples(solve, 1, repeat)
        r = out["r"]
        x = r.params.numpy()
        g = np.zeros_like(x)
        g[:-1] = -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (1.0 - x[:-1])
        g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
        res.append(peers.make_result(name, s, converged=bool(np.linalg.norm(g) < GTOL), nit=r.iterations,
                                     nfev=r.nfev, nhvp=r.nhvp, grad_norm=float(np.linalg.norm(g)),
                                     x_err=float(np.abs(x - 1).max()), dtype="float64"))
    return res


NEWTON_ROWS = (("sciml/W6_newton_cg_default", {}),
               ("sciml/W6_newton_cg_ops", {"hessian": "products", "jit": False}),
               ("sciml/W6_newton_cg_dense_ops", {"hessian": "dense", "jit": False}),
               ("sciml/W6_newton_cg_ops_jit", {"hessian": "products", "jit": True}),
               ("sciml/W6_newton_cg_dense_ops_jit", {"hessian": "dense", "jit": True}))


def newton_interleaved(rounds, only=None):
    import time
    from scipy.optimize import minimize, rosen, rosen_der, rosen_hess_prod
    sm = _sm()
    from sciml.optim import newton_cg
    x0n = PC.rosenbrock_x0()
    x0 = sm.tensor(x0n)
    f = rosen_ops(sm)

    def scipy_run():
        def cb(intermediate_result):
            if np.linalg.norm(rosen_der(intermediate_result.x)) < GTOL:
                raise StopIteration
        r = minimize(rosen, x0n, method="Newton-CG", jac=rosen_der, hessp=rosen_hess_prod, callback=cb,
                     options=dict(xtol=1e-12, maxiter=100000))
        return r.nit, r.nfev, r.nhev
    fns = {"scipy/W6_rosenbrock100_Newton-CG": scipy_run}
    for name, extra in NEWTON_ROWS:
        if only and not any(o in name for o in only):
            continue

        def run(extra=extra):
            r = newton_cg(f, x0, gtol=GTOL, ftol=0.0, xtol=0.0, max_iter=100000, **extra)
            return r.iterations, r.nfev, r.nhvp
        fns[name] = run
    counts = {k: fn() for k, fn in fns.items()}
    ts = {k: [] for k in fns}
    load0 = os.getloadavg()[0]
    for _ in range(rounds):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            ts[k].append(time.perf_counter() - t)
    load1 = os.getloadavg()[0]
    res = [peers.make_result(k, v, nit=counts[k][0], nfev=counts[k][1], nhvp=counts[k][2]) for k, v in ts.items()]
    print(peers.format_table(res, f"W6 Newton-CG interleaved, {rounds} rounds, load average {load0:.1f} -> {load1:.1f}"))
    sp = res[0]
    for r in res[1:]:
        print(f"{r['name']}: median {r['median_s'] / sp['median_s']:.2f}x, min {r['min_s'] / sp['min_s']:.2f}x "
              "SciPy Newton-CG")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--only", nargs="+", metavar="SUBSTR",
                    help="sciml rows whose name contains one of these (e.g. newton_cg); peers unchanged")
    ap.add_argument("--interleaved", type=int, metavar="ROUNDS",
                    help="Newton-CG rows and SciPy Newton-CG alternately, ROUNDS rounds in one process")
    _arch.add_argument(ap)
    a = ap.parse_args(argv)
    _arch.use(a.arch)
    if a.interleaved:
        return newton_interleaved(a.interleaved, a.only)
    res = run_sciml(a.repeat, a.only)
    if not a.no_peers:
        tp = peers.load_peer("torch")
        if tp is not None:
            res.append(tp.torch_w6_rosenbrock_lbfgs(repeat=a.repeat))
        npp = peers.load_peer("numpy")
        if npp is not None:
            for m in ("L-BFGS-B", "Newton-CG"):
                res.append(npp.scipy_w6_rosenbrock(m, repeat=a.repeat))
    print(peers.format_table(res, f"W6: 100-D Rosenbrock, float64, to ||grad||_2 < 1e-6 ({_arch.label()})"))
    torch_t = [r["median_s"] for r in res if r["name"].startswith("torch")]
    family = {"lbfgs": ("torch/W6_rosenbrock100_lbfgs", "scipy/W6_rosenbrock100_L-BFGS-B"),
              "newton_cg": ("scipy/W6_rosenbrock100_Newton-CG",)}
    for r in res:
        if r["name"].startswith("sciml"):
            fam = "newton_cg" if "newton_cg" in r["name"] else "lbfgs"
            pe = [(p["nfev"], p["name"]) for p in res if p["name"] in family[fam] and p.get("converged")]
            msg = f"{r['name']}: {r['nfev']} evaluations"
            if pe:
                msg += f" (same-method peers: {', '.join(f'{n} {v}' for v, n in pe)})"
            if torch_t:
                msg += f"; {r['median_s'] * 1e3:.0f} ms = {r['median_s'] / torch_t[0]:.2f}x torch LBFGS"
            sp = [p["median_s"] for p in res if p["name"] == "scipy/W6_rosenbrock100_Newton-CG"]
            if fam == "newton_cg" and sp:
                msg += f", {r['median_s'] / sp[0]:.2f}x SciPy Newton-CG"
            print(msg)
    return res


if __name__ == "__main__":
    main()
