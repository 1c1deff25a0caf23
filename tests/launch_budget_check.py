"""Count launches, host reads and uploads per step on a device arch (run by tests/test_launch_budget.py).

    SCIML_ARCH=vulkan python tests/launch_budget_check.py      # prints one JSON line: {scenario: counts}

Scenarios (small sizes, float32; counts of a step after two warm-up steps):
  w2_step       a W2-like fused PINN step: ``value_and_grad`` of a Burgers residual + boundary loss
                through ``pinn.fused.mlp_derivatives`` (2-32-32-32-32-1, 300 points) and ``Adam.step``;
                ``names``: launches per kernel name
  w2_fused      ``w2_step`` with the loss expression as one ``sm.fuse_region`` (one kernel forward, one backward)
  w2_bench      the same at the W2 benchmark's 10,400 points (long sums: the GEMMs and column sums split)
  w2_bench_fused  ``w2_bench`` with the fused loss
  solve_adam    ``pinn.solve`` on Burgers (soft conditions, 300 points), Adam: per step, as the
                difference of a 5-step and a 2-step run (log lines are outside both); ``names`` too
  lbfgs_iter    ``pinn.solve`` with ``LBFGS(history=3)``: the largest per-iteration counts over
                iterations with one function evaluation, once the history is full; ``own_launch``:
                the launches outside the loss's value_and_grad (L-BFGS's own); ``names``: those of
                the iteration with the most launches
  solve_fused_history  ``pinn.solve`` with fused loss terms and without: ``same_bits`` 1 if the histories agree
  all_reduce    ``distributed.all_reduce`` of a Tensor pytree with one process
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sciml as sm  # noqa: E402

sm.init(arch=os.environ.get("SCIML_ARCH", "vulkan"), dtype="float32", seed=0)
import launch_count  # noqa: E402

launch_count.install()
POINTS = 300
SIZES = [2, 32, 32, 32, 32, 1]


def _burgers(hard=False):
    from sciml.pinn import Dirichlet, Initial, Interval, Problem, TimeInterval, d
    nu = 0.01 / np.pi
    domain = Interval(-1, 1) * TimeInterval(0, 1)

    def residual(u, x, t):
        return d(u, t) + u * d(u, x) - nu * d(u, x, x)
    return Problem(domain, residual, conditions=[Dirichlet(0.0, on="boundary", hard=hard),
                                                 Initial(lambda x: -np.sin(np.pi * x), hard=hard)])


def w2_step(ni=POINTS, nb=60, fused_loss=False):
    from sciml.models import MLP
    from sciml.optim import Adam
    from sciml.pinn import fused
    rng = np.random.default_rng(0)
    X = sm.tensor(rng.uniform(-1, 1, (ni + nb, 2)).astype(np.float32))
    target = sm.tensor(rng.standard_normal((nb, 1)).astype(np.float32))
    net = MLP(SIZES, activation=sm.tanh, seed=0)
    ps = list(net.parameters())
    nu = 0.01 / np.pi
    derivs = [(), (0,), (1,), (0, 0)]

    def loss_terms(u, ux, ut, uxx):
        res = ut[:ni] + u[:ni] * ux[:ni] - nu * uxx[:ni]
        e = u[ni:] - target
        return (res * res).mean() + 2.0 * (e * e).mean()
    terms = sm.fuse_region(loss_terms, strict=True) if fused_loss else loss_terms

    def loss_fn(*p):
        layers = [(p[2 * k], p[2 * k + 1]) for k in range(len(p) // 2)]
        r = fused.mlp_derivatives(layers, sm.tanh, X, derivs)
        return terms(r[()], r[(0,)], r[(1,)], r[(0, 0)])

    vg = sm.value_and_grad(loss_fn, argnums=tuple(range(len(ps))))
    opt = Adam(ps, lr=1e-3)
    for _ in range(2):
        loss, g = vg(*ps)
        opt.step(list(g))
    float(loss)
    with launch_count.counting() as c:
        loss, g = vg(*ps)
        opt.step(list(g))
    out = {**c, "names": dict(c.names.most_common())}
    if fused_loss:  # the fused loss and gradients against the unfused ops' at the same parameters, bit for bit
        def unfused(*p):
            layers = [(p[2 * k], p[2 * k + 1]) for k in range(len(p) // 2)]
            r = fused.mlp_derivatives(layers, sm.tanh, X, derivs)
            return loss_terms(r[()], r[(0,)], r[(1,)], r[(0, 0)])
        (la, ga), (lb, gb) = vg(*ps), sm.value_and_grad(unfused, argnums=tuple(range(len(ps))))(*ps)
        out["same_bits"] = int(la.numpy() == lb.numpy() and all(np.array_equal(a.numpy(), b.numpy())
                                                               for a, b in zip(ga, gb)))
    return out


def w2_fused():
    """``w2_step`` with the loss expression (slices, residual, means) as ONE ``sm.fuse_region`` kernel
    forward and one backward (were 39 elementwise / strided-gather launches)."""
    return w2_step(fused_loss=True)


def w2_bench_fused():
    return w2_step(10000, 400, fused_loss=True)


def w2_bench():
    """``w2_step`` at the W2 benchmark's size (benchmarks/bench_w2_w3.py: 10,000 interior points,
    200 initial and 200 boundary points): the weight-gradient GEMMs have k = 10,400 x streams."""
    return w2_step(10000, 400)


def solve_adam():
    from sciml.models import MLP
    from sciml.optim import Adam
    from sciml.pinn import solve
    problem = _burgers()
    kw = dict(points=POINTS, verbose=False, progress=False, log_every=10 ** 9)
    solve(problem, MLP(SIZES, activation=sm.tanh, seed=0), stages=[(Adam(lr=1e-3), 2)], **kw)  # compiles
    runs = {}
    for steps in (2, 5):
        with launch_count.counting() as c:
            solve(problem, MLP(SIZES, activation=sm.tanh, seed=0), stages=[(Adam(lr=1e-3), steps)], **kw)
        runs[steps] = c
    out = {k: (runs[5][k] - runs[2][k]) / 3 for k in runs[5]}
    names = runs[5].names.copy()
    names.subtract(runs[2].names)
    out["names"] = {k: v / 3 for k, v in names.most_common() if v}
    return out


def lbfgs_iter():
    from sciml.models import MLP
    from sciml.optim import LBFGS
    from sciml.pinn import solve
    import collections

    import sciml.autodiff as AD
    problem = _burgers()
    rows = []
    evals = collections.Counter()
    vg = AD.value_and_grad

    def counted_vg(*a, **k):   # the launches of the loss and its gradient, to tell L-BFGS's own apart
        f = vg(*a, **k)

        def g(*x, **kw):
            before = launch_count.TOTAL["launch"]
            try:
                return f(*x, **kw)
            finally:
                evals["launch"] += launch_count.TOTAL["launch"] - before
        return g
    AD.value_and_grad = counted_vg

    def collections_snapshot():
        return {**launch_count.TOTAL, "eval_launch": evals["launch"], "names": collections.Counter(launch_count.NAMES)}

    def cb(info):
        rows.append((info.nfev, collections_snapshot()))
        return False
    kw = dict(points=POINTS, verbose=False, progress=False, log_every=10 ** 9)
    # one run: its first iterations compile (and are skipped below); the history is full from the 4th
    solve(problem, MLP(SIZES, activation=sm.tanh, seed=0), stages=[(LBFGS(history=3, callback=cb), 8)], **kw)
    worst = {}
    for i, ((f0, s0), (f1, s1)) in enumerate(zip(rows, rows[1:])):
        if f1 - f0 != 1 or i < 3:  # one evaluation, history full
            continue
        for k in ("launch", "read", "upload", "alloc"):
            worst[k] = max(worst.get(k, 0), s1.get(k, 0) - s0.get(k, 0))
        if s1["launch"] - s0["launch"] >= worst.get("launch", 0):
            names = s1["names"].copy()
            names.subtract(s0["names"])
            worst["names"] = {k: v for k, v in names.most_common() if v}
        worst["own_launch"] = max(worst.get("own_launch", 0),
                                  s1["launch"] - s0["launch"] - (s1["eval_launch"] - s0["eval_launch"]))
    worst["iterations"] = sum(1 for (f0, _), (f1, _) in list(zip(rows, rows[1:]))[3:] if f1 - f0 == 1)
    AD.value_and_grad = vg
    return worst


def solve_fused_history():
    """``pinn.solve`` (Adam then L-BFGS) with the loss terms as fused regions (the device default) and
    unfused: the histories must be the same bits on the device (its sums add in order either way)."""
    from sciml.models import MLP
    from sciml.optim import LBFGS, Adam
    from sciml.pinn import fused_loss, solve
    hs = []
    for mode in (True, False):
        fused_loss.MODE[0] = mode
        r = solve(_burgers(), MLP([2, 16, 16, 1], activation=sm.tanh, seed=0), points=POINTS, log_every=3,
                  stages=[(Adam(lr=1e-3), 6), (LBFGS(history=3), 3)], verbose=False, progress=False)
        hs.append(r.history)
    fused_loss.MODE[0] = None
    keys = [k for k in hs[0] if k not in ("time", "rel_l2", "stage_name")]
    return {"same_bits": int(all(hs[0][k] == hs[1][k] for k in keys)), "steps": len(hs[0]["step"])}


def all_reduce():
    from sciml import distributed as dist
    tree = {"w": sm.tensor(np.ones((4, 3), np.float32)), "b": [sm.tensor(np.zeros(3, np.float32)), 2.0]}
    sm.tensor(np.ones(2, np.float32)).sum()  # anything lazy settles outside the count
    with launch_count.counting() as c:
        out = dist.all_reduce(tree)
        dist.broadcast(tree)
    assert out is tree
    return dict(c)


if __name__ == "__main__":
    which = sys.argv[1:] or ["w2_step", "w2_fused", "w2_bench", "w2_bench_fused", "solve_adam", "lbfgs_iter",
                             "solve_fused_history", "all_reduce"]
    res = {"arch": sm.arch()}
    for name in which:
        res[name] = globals()[name]()
    print("COUNTS " + json.dumps(res))
