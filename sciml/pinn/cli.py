"""``sciml solve PROBLEM``: train a built-in PINN, report its error against the reference and
the wall time, optionally write a plot.

    sciml solve --list
    sciml solve burgers --plot burgers.png
    sciml solve poisson --dtype float64 --steps 1000,2000 --points 2048

Every flag is checked before Taichi starts or anything trains; a bad value is refused with a
message naming the flag.
"""
import argparse
import inspect
import os
import sys

from .problems import OPTIMIZERS, PROBLEMS

ARCHS = ("cpu", "vulkan", "cuda", "auto")


def _steps(s):
    parts = [p.strip() for p in s.replace("+", ",").split(",")]
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: expected ADAM[,SECOND] step counts, e.g. "
                                         "2000 or 2000,2000") from None
    if not 1 <= len(vals) <= 2 or any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"{s!r}: expected one or two step counts >= 0, "
                                         "e.g. 2000 or 2000,2000")
    if len(vals) == 2 and vals == [0, 0]:
        raise argparse.ArgumentTypeError(f"{s!r}: both stages have 0 steps; nothing would be "
                                         "trained (e.g. 2000,2000 or 0,1000)")
    return vals[0], (vals[1] if len(vals) > 1 else None)


def _net(s):
    """'32x4' (width x hidden layers) or '32,32,32' (hidden widths)."""
    bad = argparse.ArgumentTypeError(f"{s!r}: expected WIDTHxDEPTH (32x4) or hidden widths "
                                     "(32,32,32), every number >= 1")
    try:
        if "x" in s.lower():
            w, n = s.lower().split("x")
            widths = [int(w)] * int(n) if int(n) >= 1 else []
        else:
            widths = [int(v) for v in s.split(",")]
    except ValueError:
        raise bad from None
    if not widths or any(w < 1 for w in widths):
        raise bad
    return widths


def _positive(what):
    def parse(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r}: expected {what}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{s!r}: expected {what}")
        return v
    return parse


def _seed(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: expected an integer >= 0") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{s!r}: expected an integer >= 0")
    return v


def describe(name):
    """One line about a built-in problem (the first line of its builder's docstring)."""
    doc = inspect.getdoc(PROBLEMS[name]) or ""
    return doc.splitlines()[0] if doc else ""


def add_parser(subparsers):
    """Register ``solve`` on the ``sciml`` command's subparsers."""
    p = subparsers.add_parser(
        "solve", help="train a built-in PINN and report its error",
        description="Train a PINN for a built-in problem (an Adam stage, then a second-order "
        "stage), print the relative L2 error against the reference solution and the wall time.",
        epilog="Problems: " + "; ".join(f"{n}: {describe(n)}" for n in PROBLEMS))
    p.add_argument("problem", nargs="?", choices=list(PROBLEMS), metavar="PROBLEM",
                   help="which problem: " + ", ".join(PROBLEMS) + " (see --list)")
    p.add_argument("--list", action="store_true", help="list the problems, one line each, and exit")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"),
                   help="float precision (default float32)")
    p.add_argument("--steps", type=_steps, default=None, metavar="ADAM[,SECOND]",
                   help="steps of the Adam stage and of the second stage, e.g. 2000,2000; "
                   "one number keeps the second stage's default (default per problem)")
    p.add_argument("--points", type=_positive("a number of points >= 1"), default=None, metavar="N",
                   help="interior collocation points (condition points scale with them; "
                   "default per problem)")
    p.add_argument("--net", type=_net, default=None, metavar="SPEC",
                   help="hidden layers: WIDTHxDEPTH (32x4) or widths (32,32,32) (default per problem)")
    p.add_argument("--optimizer", default=None, choices=OPTIMIZERS,
                   help="second stage: L-BFGS, dense BFGS (Oren-Luenberger self-scaled), "
                   "self-scaled BFGS / Broyden (Urban et al. 2024) or Levenberg-Marquardt "
                   "(default per problem and dtype)")
    p.add_argument("--loss", default=None, choices=("mse", "sqrt", "log"),
                   help="what the second stage minimises: the loss L, sqrt(L) or log(L) "
                   "(default per problem and dtype)")
    p.add_argument("--seed", type=_seed, default=0, metavar="N",
                   help="seed of the network's initial weights and of the point sampling (default 0)")
    p.add_argument("--arch", default=None, choices=ARCHS,
                   help="Taichi arch (default: env SCIML_ARCH or cpu)")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="write a figure of the solution, error and training curves "
                   "(.png, .pdf, .svg, ...; the folder must exist)")
    p.add_argument("--log-every", type=_positive("a number of steps >= 1"), default=None, metavar="N",
                   help="steps between progress updates and --verbose table rows "
                   "(default: about 20 a stage)")
    p.add_argument("--restore-best", action="store_true",
                   help="end with the best model (the logged step with the lowest training loss, "
                   "DeepXDE's 'Best model at step N') instead of the last step's parameters")
    talk = p.add_mutually_exclusive_group()
    talk.add_argument("--verbose", action="store_true",
                      help="print the per-interval table (loss terms, error, steps/s) instead "
                      "of the progress bar")
    talk.add_argument("--quiet", action="store_true",
                      help="no header or progress bar: only the result line")
    p.set_defaults(fn=run, parser=p)
    return p


def _check(args):
    """Everything that can be checked before Taichi starts; raises ValueError/OSError."""
    if args.plot is not None:
        from .plot import check_plot_path
        args.plot = check_plot_path(args.plot, arg="--plot")


def list_problems(out=None):
    out = out or sys.stdout
    width = max(map(len, PROBLEMS))
    for name in PROBLEMS:
        print(f"{name:<{width}}  {describe(name)}", file=out)


def _solve_kwargs(args):
    """``verbose`` / ``progress`` for ``solve`` as far as this version of it takes them."""
    from .solver import solve
    params = inspect.signature(solve).parameters
    if "progress" in params:         # solve shows its own header, bar and summary line
        return {"verbose": args.verbose, "progress": not args.quiet}, True
    return {"verbose": args.verbose or not args.quiet}, False


def run(args):
    if args.list:
        list_problems()
        return 0
    if args.problem is None:
        args.parser.error("give a PROBLEM (" + ", ".join(PROBLEMS) + ") or --list")
    _check(args)
    from .. import distributed as dist
    from .. import runtime
    dist.init()  # under `mpirun -np N`: join the job (and split the cores) before Taichi starts
    if not dist.is_main():  # only rank 0 prints and writes the plot
        sys.stdout = open(os.devnull, "w")
    runtime.init(arch=args.arch, dtype=args.dtype)
    from .problems import get
    setup = get(args.problem).for_dtype(args.dtype)
    steps = setup.steps
    if args.steps is not None:
        adam, second = args.steps
        steps = (adam, setup.steps[1] if second is None else second)
        if not any(steps):
            raise ValueError(f"--steps {adam}: with the default second stage of {args.problem} "
                             "that is 0 steps in all; nothing would be trained.")
    points = setup.points
    if args.points is not None:
        points = dict(points) if isinstance(points, dict) else {}
        scale = args.points / points.get("interior", args.points)
        points = {k: (args.points if k == "interior" else max(16, int(v * scale ** 0.5)))
                  for k, v in points.items()} or {"interior": args.points}
    sizes = None
    if args.net is not None:
        sizes = [setup.sizes[0]] + args.net + [setup.sizes[-1]]
    optimizer = args.optimizer or setup.optimizer
    transform = setup.loss_transform if args.loss is None else (None if args.loss == "mse" else args.loss)
    talk, shows_summary = _solve_kwargs(args)
    n_int = points["interior"] if isinstance(points, dict) else points
    header = (f"sciml solve {args.problem}: net {sizes or setup.sizes} {setup.activation}, "
              f"{n_int} interior points, Adam {steps[0]} + {optimizer.upper()} {steps[1]} steps"
              + (f" on {transform}(loss)" if transform else "") + f", {args.dtype}, arch {runtime.arch()}"
              + (f", {dist.world_size()} MPI ranks" if dist.is_distributed() else ""))
    if shows_summary:   # solve's own header gives points, steps and dtype: here only what it cannot know
        header = (f"sciml solve {args.problem}: net {sizes or setup.sizes} {setup.activation}, "
                  f"second stage {optimizer.upper()}" + (f" on {transform}(loss)" if transform else "")
                  + f", arch {runtime.arch()}" + (f", {dist.world_size()} MPI ranks" if dist.is_distributed() else ""))
    if not args.quiet:
        print(header, flush=True)
    result = setup.run(steps=steps, points=points, seed=args.seed, dtype=args.dtype, sizes=sizes,
                       optimizer=optimizer, log_every=args.log_every, loss_transform=transform,
                       restore_best=args.restore_best, **talk)
    if args.quiet or not shows_summary:   # else solve's own summary line said it
        max_abs = result.errors.get("max_abs", float("nan"))
        print(f"{args.problem}: relative L2 error {result.rel_l2:.3e}, max abs error {max_abs:.3e}, "
              f"{result.time:.1f} s ({result.path} derivatives)"
              + (f", best model at step {result.best_step}" if args.restore_best else ""), flush=True)
    if args.plot and dist.is_main():
        result.plot(args.plot)
        if not args.quiet:
            print(f"plot written to {args.plot}")
    return 0


def main(argv=None):
    """``python -m sciml.pinn.cli burgers ...`` (same as ``sciml solve burgers ...``)."""
    from ..cli import main as sciml_main
    return sciml_main(["solve"] + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
