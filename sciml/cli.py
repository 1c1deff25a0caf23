"""The ``sciml`` command.

    sciml                    this help
    sciml --version          the version
    sciml info               versions, arch, float dtype, threads, CPU GEMM library
    sciml demo               a ten-second tour of derivatives of any order
    sciml solve burgers      train a built-in PINN (``sciml solve --list`` lists the problems)

Bad arguments are refused before anything runs, with a message naming the flag; an error while
running prints one line (``sciml <command>: error: ...``) and exits with status 2.
"""
from __future__ import annotations

import argparse
import sys
import time

ARCHS = ("cpu", "vulkan", "cuda", "auto")      # sciml.runtime.ARCHS (not imported: keeps --help fast)
DTYPES = ("float32", "float64")
ERRORS = (ValueError, TypeError, RuntimeError, OSError, NotImplementedError)  # one line, exit 2


def _version():
    from . import __version__
    return __version__


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
    name = blas.name()
    hint = "" if name.startswith("mkl") else '; Intel MKL: pip install "sciml[mkl]"'
    print(f"blas     {name} (CPU dense GEMM; SCIML_BLAS=auto|mkl|openblas|numpy{hint})")
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


def build_parser() -> argparse.ArgumentParser:
    """The ``sciml`` argument parser (every command and flag; nothing is imported or run)."""
    p = argparse.ArgumentParser(
        prog="sciml", description="sciml: differentiable programming on Taichi kernels.",
        epilog="Run 'sciml COMMAND --help' for a command's flags. Environment: SCIML_ARCH, "
               "SCIML_DTYPE, SCIML_BLAS, SCIML_DEBUG=1 (Taichi's compile warnings).")
    p.add_argument("--version", action="version", version=f"sciml {_version()}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", title="commands")
    pi = sub.add_parser("info", help="versions, arch, dtype, threads, GEMM library",
                        description="Print the sciml, Taichi and numpy versions, the arch, the "
                        "float dtype, the thread count and the CPU GEMM library.")
    pi.add_argument("--arch", default=None, choices=ARCHS,
                    help="Taichi arch to start (default: env SCIML_ARCH or cpu)")
    pi.add_argument("--dtype", default=None, choices=DTYPES,
                    help="default float dtype (default: env SCIML_DTYPE or float32)")
    pi.set_defaults(fn=_info)
    pd = sub.add_parser("demo", help="a ten-second tour of derivatives of any order",
                        description="Gradient, Hessian and a third derivative of a small "
                        "function, checked against the exact values (float64).")
    pd.add_argument("--arch", default=None, choices=ARCHS,
                    help="Taichi arch to start (default: env SCIML_ARCH or cpu)")
    pd.set_defaults(fn=_demo)
    try:
        from .pinn import cli as pinn_cli
    except ImportError:  # pragma: no cover  (a build without the pinn package)
        pinn_cli = None
    if pinn_cli is not None:
        pinn_cli.add_parser(sub)
    return p


def main(argv=None):
    """Run the ``sciml`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    p = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        p.print_help()
        return 0
    args = p.parse_args(argv)
    if getattr(args, "fn", None) is None:
        p.print_help()
        return 0
    try:
        return args.fn(args)
    except ERRORS as e:
        print(f"sciml {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"sciml {args.cmd}: interrupted" + (f": {e}" if str(e) else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
