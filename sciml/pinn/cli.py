"""``sciml solve burgers|poisson|heat|wave|helmholtz``: train a built-in PINN, print its error
against the reference and the time, optionally write a plot.

    sciml solve burgers --plot burgers.png
    sciml solve poisson --dtype float64 --steps 1000,2000 --points 2048
"""
import argparse
import os
import sys
import time

from .problems import PROBLEMS


def _steps(s):
    parts = [p for p in s.replace("+", ",").split(",") if p.strip()]
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps {s!r}: expected ADAM[,LBFGS] step counts, "
                                         "e.g. 2000,2000") from None
    if not 1 <= len(vals) <= 2 or any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"--steps {s!r}: expected one or two counts >= 0, "
                                         "e.g. 2000 or 2000,2000.")
    return vals[0], (vals[1] if len(vals) > 1 else None)


def _net(s):
    """'32x4' (width x hidden layers) or '32,32,32' (hidden widths)."""
    try:
        if "x" in s:
            w, n = s.lower().split("x")
            return [int(w)] * int(n)
        return [int(v) for v in s.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--net {s!r}: expected WIDTHxDEPTH (32x4) or hidden "
                                         "widths (32,32,32).") from None


def add_parser(subparsers):
    """Register ``solve`` on the ``sciml`` command's subparsers."""
    p = subparsers.add_parser("solve", help="train a built-in PINN and report its error",
                              description="Train a PINN for a built-in problem, print the "
                              "relative L2 error against the reference solution and the "
                              "wall time.")
    p.add_argument("problem", choices=sorted(PROBLEMS), help="which problem")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--steps", type=_steps, default=None,
                   help="ADAM[,LBFGS] steps, e.g. 2000,2000 (default per problem)")
    p.add_argument("--points", type=int, default=None, help="interior collocation points")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None, metavar="FILE", help="write a figure (png/pdf)")
    p.add_argument("--net", type=_net, default=None, metavar="SPEC",
                   help="hidden layers: WIDTHxDEPTH (32x4) or widths (32,32,32)")
    p.add_argument("--arch", default=None, help="Taichi arch: cpu (default), vulkan, cuda, auto")
    p.add_argument("--optimizer", default=None, choices=("lbfgs", "bfgs", "ssbfgs", "ssbroyden", "lm"),
                   help="second stage: L-BFGS, dense BFGS (Oren-Luenberger self-scaled), "
                   "self-scaled BFGS / Broyden (Urban et al. 2024) or Levenberg-Marquardt "
                   "(default per problem and dtype)")
    p.add_argument("--loss", default=None, choices=("mse", "sqrt", "log"),
                   help="what the second stage minimises: the loss L, sqrt(L) or log(L) "
                   "(default per problem and dtype)")
    p.add_argument("--log-every", type=int, default=None)
    p.add_argument("--quiet", action="store_true", help="only the final lines")
    p.set_defaults(fn=run)
    return p


def run(args):
    from .. import distributed as dist
    from .. import runtime
    dist.init()  # under `mpirun -np N`: join the job (and split the cores) before Taichi starts
    if not dist.is_main():  # only rank 0 prints and writes the plot
        sys.stdout = open(os.devnull, "w")
    runtime.init(arch=args.arch, dtype=args.dtype)
    from .problems import get
    setup = get(args.problem).for_dtype(args.dtype)   # float64 Burgers has its own recipe
    steps = setup.steps
    if args.steps is not None:
        adam, second = args.steps
        steps = (adam, setup.steps[1] if second is None else second)
    points = setup.points
    if args.points is not None:
        if args.points <= 0:
            raise ValueError(f"--points must be > 0, got {args.points}.")
        points = dict(points) if isinstance(points, dict) else {}
        scale = args.points / points.get("interior", args.points)
        points = {k: (args.points if k == "interior" else max(16, int(v * scale ** 0.5)))
                  for k, v in points.items()}
    sizes = None
    if args.net is not None:
        sizes = [setup.sizes[0]] + args.net + [setup.sizes[-1]]
    n_int = points["interior"] if isinstance(points, dict) else points
    optimizer = args.optimizer or setup.optimizer
    transform = setup.loss_transform if args.loss is None else (None if args.loss == "mse" else args.loss)
    print(f"sciml solve {args.problem}: net {sizes or setup.sizes} {setup.activation}, "
          f"{n_int} interior points, Adam {steps[0]} + {optimizer.upper()} {steps[1]} "
          f"steps" + (f" on {transform}(loss)" if transform else "") + f", {args.dtype}, arch {runtime.arch()}"
          + (f", {dist.world_size()} MPI ranks" if dist.is_distributed() else ""), flush=True)
    t0 = time.perf_counter()
    result = setup.run(steps=steps, points=points, seed=args.seed, dtype=args.dtype, sizes=sizes,
                       optimizer=optimizer, verbose=not args.quiet,
                       log_every=args.log_every, loss_transform=transform)
    wall = time.perf_counter() - t0
    print(f"relative L2 error: {result.rel_l2:.3e}")
    print(f"max abs error:     {result.errors.get('max_abs', float('nan')):.3e}")
    print(f"time:              {wall:.1f} s (derivative path: {result.path})")
    if args.plot and dist.is_main():
        result.plot(args.plot)
        print(f"plot written to {args.plot}")
    return 0


def main(argv=None):
    """``python -m sciml.pinn.cli burgers ...`` (same as ``sciml solve burgers ...``)."""
    parser = argparse.ArgumentParser(prog="sciml")
    sub = parser.add_subparsers(dest="cmd", required=True)
    add_parser(sub)
    args = parser.parse_args(["solve"] + list(sys.argv[1:] if argv is None else argv))
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
