"""Command line: ``sciml info``, ``sciml demo``, ``sciml solve ...``, ``sciml bench ...``."""
from __future__ import annotations

import argparse
import sys
import time


def _info(args):
    import numpy as np

    from . import __version__, runtime
    runtime.init(arch=args.arch, dtype=args.dtype)
    import taichi as ti
    print(f"sciml    {__version__}")
    print(f"taichi   {ti.__version__[0]}.{ti.__version__[1]}.{ti.__version__[2]}")
    print(f"numpy    {np.__version__}")
    print(f"arch     {runtime.arch()}")
    print(f"dtype    {runtime.default_dtype()}")
    print(f"threads  {runtime.num_threads()}")
    from .kernels import blas
    print(f"blas     {blas.name()} (CPU dense GEMM; SCIML_BLAS=mkl|openblas|numpy)")
    return 0


def _demo(args):
    """A small end-to-end tour of derivatives of any order."""
    import numpy as np

    from . import runtime
    runtime.init(arch=args.arch, dtype="float64")
    import sciml as sm
    t0 = time.perf_counter()
    x = sm.tensor([0.3, 1.2])
    f = lambda x: (sm.sin(x) * x).sum()  # noqa: E731
    H = sm.hessian(f)(x)
    xn = x.numpy()
    exact = np.diag(2 * np.cos(xn) - xn * np.sin(xn))
    print(f"f(x) = sum(sin(x) * x) at x = {xn}")
    print(f"grad f          = {sm.grad(f)(x).numpy()}")
    print(f"hessian f       =\n{H.numpy()}")
    print(f"max |H - exact| = {np.abs(H.numpy() - exact).max():.1e}")
    d3 = sm.grad(lambda z: sm.grad(lambda y: sm.grad(lambda w: sm.sin(w).sum())(y).sum())(z).sum())(x)
    print(f"d3/dx3 sin      = {d3.numpy()}  (exact -cos: {-np.cos(xn)})")
    print(f"done in {time.perf_counter() - t0:.2f} s on arch={runtime.arch()}")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="sciml", description="sciml: differentiable programming on Taichi.")
    sub = p.add_subparsers(dest="cmd", required=True)
    pi = sub.add_parser("info", help="versions, arch, dtype, threads")
    pi.add_argument("--arch", default=None)
    pi.add_argument("--dtype", default=None)
    pi.set_defaults(fn=_info)
    pd = sub.add_parser("demo", help="a small tour of derivatives of any order")
    pd.add_argument("--arch", default=None)
    pd.set_defaults(fn=_demo)
    try:
        from .pinn import cli as pinn_cli
        pinn_cli.add_parser(sub)
    except ImportError:
        pass
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, TypeError, RuntimeError) as e:
        print(f"sciml {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
