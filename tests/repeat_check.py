"""Is the same computation bitwise the same twice in one process? (run by tests/test_repeat.py)

    SCIML_ARCH=cpu    python tests/repeat_check.py          # CI: every row must be equal
    SCIML_ARCH=vulkan python tests/repeat_check.py
    SCIML_ARCH=cuda   python tests/repeat_check.py          # benchmarks/cuda_session.sh, STAGES=repeat
    python tests/repeat_check.py --dump a.npz; python tests/repeat_check.py --dump b.npz
    python tests/repeat_check.py --compare a.npz b.npz       # the same rows across two processes

Prints one JSON line, ``{row: {"equal": 0|1, "maxdiff": float}}``, where each row runs the same call
twice on the same inputs (float32) and compares every output bit for bit. The rows go from single
ops (the sums, the GEMM shapes of a PINN step, the scatter-add behind indexing's gradient, the
curvature optimizers' dot products) to a whole W2 step's loss and gradients and short ``pinn.solve``
runs (Adam with RAD; the main job's recipe with its dense self-scaled Broyden stage, and with L-BFGS): the first unequal op row names where a run
stops being repeatable; the step and solve rows say whether it matters. Exit code 0 when all rows
are equal, 1 otherwise (on CPU a run is repeatable by design: a parallel sum's chunking depends on
the size only, kernels/reduce.py).
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sciml as sm  # noqa: E402

ARCH = os.environ.get("SCIML_ARCH", "cpu")
sm.init(arch=ARCH, dtype="float32", seed=0)
RNG = np.random.default_rng(0)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [y for x in out for y in _leaves(x)]
    return [np.asarray(out.numpy() if hasattr(out, "numpy") else out, dtype=np.float64)]


def _compare(f):
    a, b = _leaves(f()), _leaves(f())
    equal = all(x.shape == y.shape and np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))
    diff = max((float(np.nanmax(np.abs(x - y))) if x.size else 0.0) for x, y in zip(a, b))
    return {"equal": int(equal), "maxdiff": diff}


def op_rows():
    big = sm.tensor(_arr(1 << 20))
    tall = sm.tensor(_arr(10400, 32))
    w = sm.tensor(_arr(32, 32))
    g = sm.tensor(_arr(10400, 32))
    idx = RNG.integers(0, 64, 4096).astype(np.int32)    # repeated rows: the gradient scatter-adds
    table = sm.tensor(_arr(64, 16))
    logits = sm.tensor(_arr(512, 100))
    return {
        "sum_1M": lambda: big.sum(),
        "mean_1M": lambda: big.mean(),
        "colsum_10400x32": lambda: tall.sum(axis=0),
        "gemm_10400x32@32x32": lambda: sm.matmul(tall, w),
        "gemm_t_32x10400@10400x32": lambda: sm.matmul(tall.T, g),   # a weight gradient's shape (split k)
        "gemm_grads": lambda: sm.grad(lambda a, b: (sm.matmul(a, b) * g).sum(), argnums=(0, 1))(tall, w),
        "take_grad_scatter_add": lambda: sm.grad(lambda t: (t[idx] * t[idx]).sum())(table),
        "softmax_grad": lambda: sm.grad(lambda z: (sm.softmax(z, axis=-1) ** 2).sum())(logits),
        "optimizer_dots_100k": lambda: _dots(100000),
    }


def _dots(n):   # the curvature optimizers' reductions (kernels/lbfgs.py) over n parameters, several partials
    from sciml import backend
    from sciml.kernels import lbfgs as K
    dt, acc = "float32", K.acc_dtype("float32")
    rng = np.random.default_rng(7)
    a, b, c = (backend.from_numpy(rng.standard_normal(n).astype(np.float32), dt) for _ in range(3))
    out = backend.zeros(8, acc)
    K.dots(a, b, c, out, n, dt)
    d1 = backend.to_numpy(out, (8,), acc).copy()
    S, Y = backend.zeros(2 * n, dt), backend.zeros(2 * n, dt)
    K.push_pair(a, b, c, a, S, Y, 1, out, n, dt)
    return [d1, backend.to_numpy(out, (8,), acc).copy()]



SIZES = [2, 32, 32, 32, 32, 1]


def _burgers():
    from sciml.pinn import Dirichlet, Initial, Interval, Problem, TimeInterval, d
    nu = 0.01 / np.pi

    def residual(u, x, t):
        return d(u, t) + u * d(u, x) - nu * d(u, x, x)
    return Problem(Interval(-1, 1) * TimeInterval(0, 1), residual,
                   conditions=[Dirichlet(0.0, on="boundary"), Initial(lambda x: -np.sin(np.pi * x))])


def step_rows():   # a W2 step's loss and gradients (tests/launch_budget_check.py) at the benchmark's size
    from sciml.models import MLP
    from sciml.pinn import fused
    X = sm.tensor(RNG.uniform(-1, 1, (10400, 2)).astype(np.float32))
    ps = list(MLP(SIZES, activation=sm.tanh, seed=0).parameters())
    nu, ni = 0.01 / np.pi, 10000

    def loss(*p):
        layers = [(p[2 * k], p[2 * k + 1]) for k in range(len(p) // 2)]
        r = fused.mlp_derivatives(layers, sm.tanh, X, [(), (0,), (1,), (0, 0)])
        u, ux, ut, uxx = r[()], r[(0,)], r[(1,)], r[(0, 0)]
        res = ut[:ni] + u[:ni] * ux[:ni] - nu * uxx[:ni]
        return (res * res).mean() + (u[ni:] * u[ni:]).mean()
    def forward():
        layers = [(ps[2 * k], ps[2 * k + 1]) for k in range(len(ps) // 2)]
        r = fused.mlp_derivatives(layers, sm.tanh, X, [(), (0,), (1,), (0, 0)])
        return [r[m] for m in [(), (0,), (1,), (0, 0)]]
    vg = sm.value_and_grad(loss, argnums=tuple(range(len(ps))))
    return {"w2_fused_forward": forward, "w2_step_loss_and_grads": lambda: vg(*ps)}


def solve_rows():
    from sciml.models import MLP
    from sciml.optim import Adam
    from sciml.pinn import solve
    problem = _burgers()

    def run():
        r = solve(problem, MLP(SIZES, activation=sm.tanh, seed=0), points=2000,
                  stages=[(Adam(lr=1e-3), 60)], verbose=False, progress=False, log_every=10,
                  resample={"method": "rad", "every": 20})
        return [np.asarray(r.history["loss"])] + [np.asarray(p.numpy()) for p in r.net.parameters()]
    def recipe(optimizer):   # the README main job's recipe (sciml solve burgers), short: hard conditions, RAD
        def run():
            from sciml.pinn import problems
            r = problems.burgers().run(steps=(40, 30), points={"interior": 2048, "boundary": 64, "initial": 64},
                                       optimizer=optimizer, verbose=False, progress=False, log_every=10)
            return [np.asarray(r.history["loss"])] + [np.asarray(p.numpy()) for p in r.net.parameters()]
        return run
    return {"solve_adam_60_resample": run, "solve_burgers_recipe_ssbroyden": recipe("ssbroyden"),
            "solve_burgers_recipe_lbfgs": recipe("lbfgs")}


def compare_dumps(a, b):
    """Rows of two ``--dump`` files (two processes): equal bit for bit, and the largest difference."""
    A, B = np.load(a), np.load(b)
    rows = {}
    for key in sorted(A.files):
        name = key.rsplit("/", 1)[0]
        x, y = A[key], B[key]
        eq = x.shape == y.shape and np.array_equal(x, y, equal_nan=True)
        d = float(np.nanmax(np.abs(x - y))) if eq is False and x.shape == y.shape and x.size else 0.0
        r = rows.setdefault(name, {"equal": 1, "maxdiff": 0.0})
        r["equal"] &= int(eq)
        r["maxdiff"] = max(r["maxdiff"], d)
    return rows


def main(argv):
    if argv[:1] == ["--compare"]:   # two processes' dumps
        rows = compare_dumps(*argv[1:3])
        print(json.dumps({"compare": argv[1:3], "rows": rows}))
        return 0 if all(r["equal"] for r in rows.values()) else 1
    dump = argv[1] if argv[:1] == ["--dump"] else None
    rows, saved = {}, {}
    for make in (op_rows, step_rows, solve_rows):
        for name, f in make().items():
            try:
                rows[name] = _compare(f)
                if dump:
                    saved.update({f"{name}/{i}": x for i, x in enumerate(_leaves(f()))})
            except Exception as e:  # one broken row must not hide the others
                rows[name] = {"equal": 0, "error": f"{type(e).__name__}: {e}"[:300]}
    if dump:
        np.savez(dump, **saved)
    print(json.dumps({"arch": ARCH, "rows": rows}))
    return 0 if all(r.get("equal") for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
