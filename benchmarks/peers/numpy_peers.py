"""NumPy / SciPy baselines: elementwise ops, reductions, matmul GFLOP/s, the
W5 hand-written adjoint, and SciPy's optimizers on W6 (100-D Rosenbrock).

``python -m benchmarks.peers.numpy_peers`` prints a table; when torch is
installed it also runs the same elementwise/matmul ops in torch for reference
(``torch_peers.torch_elementwise``).
"""

from __future__ import annotations

import math

import numpy as np

from . import autonumber, cli_main, load_peer, make_result, timeit_samples
from . import common as C


def _rec(res, name, fn, warmup, repeat, **extra):
    num = autonumber(fn)
    s = timeit_samples(fn, warmup, repeat, num)
    r = make_result(name, s, number=num, **extra)
    res.append(r)
    return r


def numpy_elementwise(seed=0, warmup=3, repeat=20):
    """add / tanh(a*b+c) / sum at n=1e4 and 1e6, float32.

    ``median_s`` is for the preallocated-output form where one exists
    (``np.add(a, b, out=c)``) and the plain expression otherwise; extras give
    the other form (``alloc_s`` / ``inplace_s``).
    """
    rng = np.random.default_rng(seed)
    res = []
    for n in (10_000, 1_000_000):
        a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
        out = np.empty_like(a)
        tag = f"1e{int(round(math.log10(n)))}"
        r = _rec(res, f"numpy/add_{tag}", lambda: np.add(a, b, out=out),
                 warmup, repeat, n=n)
        r["GB_per_s"] = 12 * n / r["median_s"] / 1e9
        fa = lambda: a + b  # noqa: E731
        r["alloc_s"] = float(np.median(timeit_samples(fa, warmup, repeat,
                                                      autonumber(fa))))

        def chain_inplace():
            np.multiply(a, b, out=out)
            np.add(out, c, out=out)
            np.tanh(out, out=out)

        r = _rec(res, f"numpy/fused_tanh_axb_c_{tag}",
                 lambda: np.tanh(a * b + c), warmup, repeat, n=n)
        r["inplace_s"] = float(np.median(timeit_samples(
            chain_inplace, warmup, repeat, autonumber(chain_inplace))))
        r = _rec(res, f"numpy/sum_{tag}", lambda: a.sum(), warmup, repeat,
                 n=n)
        r["GB_per_s"] = 4 * n / r["median_s"] / 1e9
    return res


MATMUL_SHAPES = ((256, 784, 512), (512, 512, 512), (1024, 1024, 1024),
                 (10000, 32, 32))


def numpy_matmul(seed=0, warmup=3, repeat=20, shapes=MATMUL_SHAPES):
    """(m,k)@(k,n) float32 into a preallocated output; reports GFLOP/s."""
    rng = np.random.default_rng(seed)
    res = []
    for m, k, n in shapes:
        A = rng.standard_normal((m, k)).astype(np.float32)
        B = rng.standard_normal((k, n)).astype(np.float32)
        O = np.empty((m, n), np.float32)
        r = _rec(res, f"numpy/matmul_{m}x{k}x{n}",
                 lambda: np.matmul(A, B, out=O), warmup, repeat)
        r["GFLOP_per_s"] = 2 * m * k * n / r["median_s"] / 1e9
    return res


def numpy_w5_heat_adjoint(seed=0, warmup=1, repeat=5):
    """NumPy forward loop + hand-written adjoint (reference gradient)."""
    u0, target = C.w5_inputs(seed)
    loss, g = C.w5_reference(u0, target)
    s = timeit_samples(lambda: C.w5_reference(u0, target), warmup, repeat)
    return make_result("numpy/W5_heat_grad_adjoint", s, loss=loss, grad=g,
                       dtype="float64")


def scipy_w6_rosenbrock(method="L-BFGS-B", n=C.W6_N, warmup=1, repeat=5,
                        gtol=1e-6):
    """scipy.optimize.minimize on the n-D Rosenbrock from the standard start,
    stopped when ||grad||_2 < gtol (callback) or by the method's own test.

    L-BFGS-B: maxcor=10, gtol=gtol/sqrt(n) (inf-norm), ftol ~ 0.
    Newton-CG: hessp=scipy.optimize.rosen_hess_prod, xtol=1e-12.
    """
    from scipy.optimize import minimize, rosen, rosen_der, rosen_hess_prod
    x0 = C.rosenbrock_x0(n)

    def cb(intermediate_result):
        if np.linalg.norm(rosen_der(intermediate_result.x)) < gtol:
            raise StopIteration

    if method == "L-BFGS-B":
        kw = dict(jac=rosen_der, options=dict(
            maxcor=10, gtol=gtol / math.sqrt(n), ftol=1e-300,
            maxiter=100000, maxfun=200000))
    elif method == "Newton-CG":
        kw = dict(jac=rosen_der, hessp=rosen_hess_prod,
                  options=dict(xtol=1e-12, maxiter=100000))
    else:
        raise ValueError(method)
    out = {}

    def solve():
        out["r"] = minimize(rosen, x0, method=method, callback=cb, **kw)

    s = timeit_samples(solve, warmup, repeat)
    r = out["r"]
    g = rosen_der(r.x)
    extra = dict(nit=int(r.nit), nfev=int(r.nfev), njev=int(r.njev))
    if "nhev" in r:
        extra["nhev"] = int(r.nhev)
    return make_result(f"scipy/W6_rosenbrock100_{method}", s,
                       converged=bool(np.linalg.norm(g) < gtol),
                       f_final=float(r.fun), grad_norm=float(np.linalg.norm(g)),
                       grad_inf=float(np.abs(g).max()),
                       x_err=float(np.abs(r.x - 1).max()), status=int(r.status),
                       dtype="float64", **extra)


def run_all(only=None, with_torch=True):
    jobs = [
        ("elementwise", numpy_elementwise), ("matmul", numpy_matmul),
        ("W5", numpy_w5_heat_adjoint),
        ("W6", lambda: scipy_w6_rosenbrock("L-BFGS-B")),
        ("W6", lambda: scipy_w6_rosenbrock("Newton-CG")),
    ]
    out = []
    for key, fn in jobs:
        if only and not any(o.lower() in key.lower() for o in only):
            continue
        r = fn()
        out.extend(r if isinstance(r, list) else [r])
    tp = load_peer("torch") if with_torch else None
    if tp is not None and (not only or any(o.lower() in ("elementwise",
                                                         "matmul", "torch")
                                           for o in only)):
        out.extend(tp.torch_elementwise())
    return out


if __name__ == "__main__":
    cli_main(run_all, "numpy/scipy baselines (+ torch reference ops)")
