"""Run under ``mpirun -np 2`` by tests/distributed/test_mpi.py (and importable, for the 1-rank reference).

    mpirun --allow-run-as-root --oversubscribe -np 2 python tests/distributed/mpi_job.py train OUT.npz
    mpirun --allow-run-as-root --oversubscribe -np 2 python tests/distributed/mpi_job.py die OUT.txt

``train``: collectives, then a small float64 MLP trained with data parallelism (SGD, Adam, weighted
mean on unequal shards, gradient descent and an HVP through ``wrap_loss``, and L-BFGS when
sciml.optim.LBFGS exists); rank 0 writes the resulting parameters to OUT.npz. The same functions run
in the pytest process on one rank over the whole global batch to give the reference.

``die``: rank 1 leaves after the first collective; rank 0 must get the timeout error (polled path,
``on_timeout="raise"``), then be stopped with the timeout message (default watchdog path).
"""
import os
import sys

import numpy as np

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import sciml as sm  # noqa: E402
import sciml.distributed as dist  # noqa: E402

SIZES = (3, 6, 2)
BATCH = 16


def global_data(n=BATCH):
    rng = np.random.default_rng(123)
    x = rng.standard_normal((n, SIZES[0]))
    y = np.stack([np.sin(x[:, 0]) * x[:, 1], np.cos(x[:, 2])], 1)
    return sm.tensor(x), sm.tensor(y)


def init_params(seed):
    rng = np.random.default_rng(seed)
    return {"W0": sm.tensor(rng.standard_normal((SIZES[0], SIZES[1])) * 0.5), "b0": sm.tensor(np.zeros(SIZES[1])),
            "W1": sm.tensor(rng.standard_normal((SIZES[1], SIZES[2])) * 0.5), "b1": sm.tensor(rng.random(SIZES[2]))}


def loss_fn(p, x, y):
    h = sm.tanh(x @ p["W0"] + p["b0"])
    return ((h @ p["W1"] + p["b1"] - y) ** 2).mean()


def _np(tree):
    return {k: v.numpy() for k, v in tree.items()}


def start_params():
    """Rank-dependent initialisation made identical by broadcast (rank 0's values win)."""
    return dist.broadcast(init_params(seed=7 + dist.rank()))


def train_first_order(method, steps=10, lr=0.05):
    x, y = dist.shard(global_data())
    p = {k: v.numpy() for k, v in start_params().items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    vg = dist.value_and_grad(loss_fn)
    losses = []
    for t in range(1, steps + 1):
        loss, g = vg({k: sm.tensor(a) for k, a in p.items()}, x, y)
        losses.append(float(loss))
        for k in p:
            gk = g[k].numpy()
            if method == "sgd":
                p[k] = p[k] - lr * gk
            else:  # Adam, the textbook lines
                m[k] = 0.9 * m[k] + 0.1 * gk
                v2[k] = 0.999 * v2[k] + 0.001 * gk * gk
                p[k] = p[k] - lr * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v2[k] / (1 - 0.999 ** t)) + 1e-8)
    return p, np.array(losses)


def train_sciml_adam(steps=10):
    """sciml.optim.Adam on sciml.models.Parameter (in place), parameters synced by broadcast_parameters."""
    from sciml.models import Parameter
    from sciml.optim import Adam
    x, y = dist.shard(global_data())
    params = {k: Parameter(v) for k, v in init_params(seed=7 + dist.rank()).items()}
    dist.broadcast_parameters(params)
    opt = Adam(params, lr=0.05)
    vg = dist.value_and_grad(lambda p: (loss_fn(p, x, y), {"half": loss_fn(p, x, y) * 0.5}), has_aux=True,
                             reduce_aux=True)
    for _ in range(steps):
        (loss, aux), g = vg(params)
        opt.step(g)
    return {k: v.numpy() for k, v in params.items()}, float(aux["half"]) * 2 - float(loss)


def trainer_fit(tmp_checkpoint=None):
    """sciml.train.Trainer + DataLoader, 10 steps (batches of 7 and 2: unequal shards on 2 ranks)."""
    from sciml.data import DataLoader
    from sciml.models import MLP
    from sciml.optim import Adam
    from sciml.train import Trainer
    x, y = global_data(9)
    net = MLP(list(SIZES), activation=sm.tanh, seed=5 + dist.rank())  # rank 0's weights win (broadcast)
    trainer = Trainer(net, lambda pred, t: ((pred - t) ** 2).mean(), Adam(net.parameters(), lr=0.05),
                      progress=False, checkpoint=tmp_checkpoint, checkpoint_every=10 if tmp_checkpoint else None)
    trainer.fit(DataLoader(x.numpy(), y.numpy(), batch_size=7, shuffle=True, seed=1), epochs=5)
    return {k: v for k, v in net.state_dict().items()}, np.array(trainer.history["loss"])


def weighted_unequal_shards():
    """Global batch of 15 over 2 ranks (8 + 7 points): weights make the mean the global mean."""
    x, y = dist.shard(global_data(15))
    p = start_params()
    loss, g = dist.value_and_grad(loss_fn, weight=x.shape[0])(p, x, y)
    wl = dist.wrap_loss(lambda q: loss_fn(q, x, y), weight=x.shape[0])
    loss2, g2 = sm.value_and_grad(wl)(p)
    return float(loss), _np(g), float(loss2), _np(g2)


def wrapped_gradient_descent(steps=10, lr=0.1):
    """The path curvature optimizers take: value, gradient and HVP of dist.wrap_loss."""
    x, y = dist.shard(global_data())
    p = start_params()
    f = dist.wrap_loss(lambda q: loss_fn(q, x, y))
    losses = []
    for _ in range(steps):
        loss, g = sm.value_and_grad(f)(p)
        losses.append(float(loss))
        p = {k: p[k] - lr * g[k] for k in p}
    v = {k: sm.tensor(np.full(a.shape, 0.5)) for k, a in p.items()}
    _, hv = sm.hvp(f, (p,), (v,))
    return _np(p), np.array(losses), _np(hv[0])


def lbfgs():
    """sciml.optim.LBFGS on the wrapped loss (skipped while sciml.optim has no LBFGS)."""
    try:
        from sciml.models import Parameter
        from sciml.optim import LBFGS
    except ImportError:
        return None
    x, y = dist.shard(global_data())
    params = {k: Parameter(v) for k, v in start_params().items()}
    opt = LBFGS(params, max_iter=15, history=5)
    res = opt.step(dist.wrap_loss(lambda q: loss_fn(q, x, y)))
    return {k: v.numpy() for k, v in params.items()}, float(res.loss)


def levenberg_marquardt():
    """sciml.optim.LevenbergMarquardt on dist.wrap_residuals (the union of the shards' residuals)."""
    try:
        from sciml.models import Parameter
        from sciml.optim import LevenbergMarquardt
    except ImportError:
        return None
    x, y = dist.shard(global_data())

    def residual(q):
        h = sm.tanh(x @ q["W0"] + q["b0"])
        return h @ q["W1"] + q["b1"] - y
    params = {k: Parameter(v) for k, v in start_params().items()}
    res = LevenbergMarquardt(params, max_iter=5).step(dist.wrap_residuals(residual, mean=False))
    return {k: v.numpy() for k, v in params.items()}, float(res.loss)


def newton_cg():
    """sciml.optim.NewtonCG (HVPs through wrap_loss inside truncated CG) on the wrapped loss."""
    try:
        from sciml.models import Parameter
        from sciml.optim import NewtonCG
    except ImportError:
        return None
    x, y = dist.shard(global_data())
    params = {k: Parameter(v) for k, v in start_params().items()}
    res = NewtonCG(params, max_iter=4, cg_max=6).step(dist.wrap_loss(lambda q: loss_fn(q, x, y)))
    return {k: v.numpy() for k, v in params.items()}, float(res.loss)


def pinn_solve(checkpoint=None):
    """A tiny Burgers PINN through sciml.pinn.solve (Adam then L-BFGS): every rank must end with rank 0's
    parameters bit for bit. Returns (max |params - rank 0's params| over ranks, rank 0's flat params)."""
    from sciml.pinn import problems
    res = problems.get("burgers").run(steps=(4, 3), points=64, sizes=[2, 6, 1], dtype="float64", verbose=False,
                                      checkpoint=checkpoint, seed=3)
    flat = np.concatenate([p.numpy().ravel() for p in sm.tree_leaves(res.params)])
    gap = dist.all_reduce(np.abs(flat - dist.broadcast(flat)).max(initial=0.0), op="max")
    return gap, flat


def collectives():
    r = dist.rank()
    tree = {"t": sm.tensor([1.0 + r, 2.0 * r]), "n": 3 + r, "a": np.array([[r]], np.float32)}
    mean = dist.all_reduce(tree)
    total = dist.all_reduce(tree, op="sum")
    mx = dist.all_reduce([sm.tensor([float(r), -float(r)])], op="max")
    w = dist.all_reduce(sm.tensor([10.0 * r]), weight=1.0 + r)
    b = dist.broadcast({"t": sm.tensor([float(r)] * 3), "s": 5.0 * r}, root=dist.world_size() - 1)
    assert isinstance(mean["t"], sm.Tensor) and isinstance(total["n"], int) and mean["a"].dtype == np.float32
    return {"mean_t": mean["t"].numpy(), "mean_a": mean["a"], "sum_n": total["n"], "max": mx[0].numpy(),
            "wmean": w.numpy(), "bcast_t": b["t"].numpy(), "bcast_s": b["s"]}


def run_train():
    out = {}
    for k, v in collectives().items():
        out["coll_" + k] = np.asarray(v)
    for method in ("sgd", "adam"):
        p, losses = train_first_order(method)
        out.update({f"{method}_{k}": v for k, v in p.items()})
        out[f"{method}_losses"] = losses
    sd, losses = trainer_fit()
    out.update({f"trainer_{k}": v for k, v in sd.items()})
    out["trainer_losses"] = losses
    p, aux_gap = train_sciml_adam()
    out.update({f"smadam_{k}": v for k, v in p.items()})
    out["aux_gap"] = np.asarray(aux_gap)
    loss, g, loss2, g2 = weighted_unequal_shards()
    out["w_loss"], out["w_loss2"] = np.asarray(loss), np.asarray(loss2)
    out.update({f"w_g_{k}": v for k, v in g.items()})
    out.update({f"w_g2_{k}": v for k, v in g2.items()})
    p, losses, hv = wrapped_gradient_descent()
    out.update({f"gd_{k}": v for k, v in p.items()})
    out["gd_losses"] = losses
    out.update({f"hvp_{k}": v for k, v in hv.items()})
    lb = lbfgs()
    if lb is not None:
        out.update({f"lbfgs_{k}": v for k, v in lb[0].items()})
        out["lbfgs_loss"] = np.asarray(lb[1])
    lm = levenberg_marquardt()
    if lm is not None:
        out.update({f"lm_{k}": v for k, v in lm[0].items()})
        out["lm_loss"] = np.asarray(lm[1])
    nc = newton_cg()
    if nc is not None:
        out.update({f"newton_{k}": v for k, v in nc[0].items()})
        out["newton_loss"] = np.asarray(nc[1])
    out["world_size"] = np.asarray(dist.world_size())
    return out


def run_solve(path):
    gap, flat = pinn_solve(checkpoint=path + ".ckpt.npz")
    return {"solve_gap": np.asarray(gap), "solve_params": flat}


def main(argv):
    scenario, path = argv[1], argv[2]
    sm.init(arch="cpu", dtype="float64", seed=0)
    dist.init(timeout=float(os.environ.get("SCIML_DIST_TIMEOUT", "120")))
    if scenario == "train":
        out = run_train()
        out.update(run_solve(path))
        if dist.is_main():
            np.savez(path, **out)
    elif scenario == "die":
        dist.all_reduce(sm.tensor([1.0]))  # both ranks are up (with the generous start-up timeout)
        if dist.rank() == 1:
            return 0  # leaves early (normal exit): rank 0 must not hang in the next collective
        dist.init(timeout=3.0, on_timeout="raise")  # first the polled path: an exception on this rank
        try:
            dist.all_reduce(sm.tensor([1.0]))
            msg = "no exception"
        except dist.DistributedTimeoutError as e:
            msg = "raised: " + str(e)
        with open(path, "w") as f:
            f.write(msg + "\n")
        dist.init(on_timeout="abort")  # then the default: blocking call + watchdog, which aborts the job
        dist.all_reduce(sm.tensor([1.0]))
        with open(path, "a") as f:
            f.write("rank 0 was not stopped\n")
    else:
        raise SystemExit(f"mpi_job.py: unknown scenario {scenario!r}; expected 'train' or 'die'.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
