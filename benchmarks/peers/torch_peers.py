"""PyTorch (eager, CPU) peers of sciml's benchmark workloads.

Every ``torch_*`` function returns ``{"name", "median_s", "min_s", "repeat",
"openblas_coretype", ...extras}``. Run ``python -m benchmarks.peers.torch_peers``
for a table. Requires torch (optional; see ``benchmarks.peers.load_peer``).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
import torch.nn.functional as F

from . import common as C
from . import cli_main, make_result, timeit_samples

torch.manual_seed(0)

# benchmarks/_arch.py sets SCIML_BENCH_TORCH_DEVICE=cuda for ``--arch cuda``: the W2/W3 peers then
# run on the GPU too (same device as sciml); everything else stays on the CPU.
DEVICE = "cuda" if (os.environ.get("SCIML_BENCH_TORCH_DEVICE") == "cuda" and torch.cuda.is_available()) else "cpu"


def _dev(a):
    """numpy array -> tensor on DEVICE."""
    return torch.from_numpy(a).to(DEVICE)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def _params(np_params, requires_grad=True):
    """numpy [(W,b)] -> flat list of leaf tensors [W1,b1,W2,b2,...]."""
    out = []
    for W, b in np_params:
        out.append(torch.tensor(W, requires_grad=requires_grad, device=DEVICE))
        out.append(torch.tensor(b, requires_grad=requires_grad, device=DEVICE))
    return out


def _mlp(ps, x, act):
    h = x
    n = len(ps) // 2
    for i in range(n):
        h = torch.addmm(ps[2 * i + 1], h, ps[2 * i])
        if i < n - 1:
            h = act(h)
    return h


def _adam(ps, fused=None):
    return torch.optim.Adam(ps, lr=C.ADAM_LR, betas=(C.ADAM_B1, C.ADAM_B2),
                            eps=C.ADAM_EPS, fused=fused)


def _gnorm(ps):
    return float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in ps)))


def _train_result(name, loss_and_grad_fn, ps, warmup, repeat, fused, **extra):
    """Time ``zero_grad; loss=fn(); loss.backward(); opt.step()``."""
    # first evaluation at the initial parameters, for cross-checks
    loss0 = loss_and_grad_fn()
    loss0.backward()
    g0 = _gnorm(ps)
    for p in ps:
        p.grad = None
    opt = _adam(ps, fused)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_and_grad_fn()
        loss.backward()
        opt.step()

    s = timeit_samples(step, warmup, repeat)
    return make_result(name, s, loss0=loss0.item(), grad_norm0=g0,
                       steps_per_s=1.0 / float(np.median(s)), dtype="float32",
                       adam_fused=bool(fused), **extra)


# --------------------------------------------------------------------------
# W1: MLP 784-512-512-10 train step
# --------------------------------------------------------------------------
def torch_w1_mlp_step(seed=0, warmup=5, repeat=20, fused=None):
    """One Adam training step (fwd + bwd + update), batch 256, float32."""
    d = C.w1_inputs(seed)
    x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"])
    ps = _params(d["params"])

    def loss_fn():
        return F.cross_entropy(_mlp(ps, x, torch.relu), y)

    r = _train_result("torch/W1_mlp_step", loss_fn, ps, warmup, repeat,
                      fused)
    r["samples_per_s"] = C.W1_BATCH / r["median_s"]
    return r


# --------------------------------------------------------------------------
# W2: Burgers PINN step (autograd.grad with create_graph)
# --------------------------------------------------------------------------
def _burgers_loss(ps, X, Xi, ui, Xb, nu):
    X = X.detach().requires_grad_(True)
    u = _mlp(ps, X, torch.tanh)
    (g,) = torch.autograd.grad(u.sum(), X, create_graph=True)
    u_x, u_t = g[:, 0], g[:, 1]
    (g2,) = torch.autograd.grad(u_x.sum(), X, create_graph=True)
    u_xx = g2[:, 0]
    u = u[:, 0]
    r = u_t + u * u_x - nu * u_xx
    e0 = _mlp(ps, Xi, torch.tanh)[:, 0] - ui
    eb = _mlp(ps, Xb, torch.tanh)[:, 0]
    return (r * r).mean() + (e0 * e0).mean() + (eb * eb).mean()


def torch_w2_burgers_step(seed=0, warmup=5, repeat=20, fused=None):
    d = C.w2_inputs(seed)
    X, Xi, ui, Xb = (_dev(d[k]) for k in
                     ("X_int", "X_init", "u_init", "X_bnd"))
    ps = _params(d["params"])
    fn = lambda: _burgers_loss(ps, X, Xi, ui, Xb, d["nu"])  # noqa: E731
    return _train_result("torch/W2_burgers_pinn_step", fn, ps, warmup,
                         repeat, fused)


# --------------------------------------------------------------------------
# W3: Poisson 2-D PINN step
# --------------------------------------------------------------------------
def _poisson_loss(ps, X, f, Xb):
    X = X.detach().requires_grad_(True)
    u = _mlp(ps, X, torch.tanh)
    (g,) = torch.autograd.grad(u.sum(), X, create_graph=True)
    (gx,) = torch.autograd.grad(g[:, 0].sum(), X, create_graph=True)
    (gy,) = torch.autograd.grad(g[:, 1].sum(), X, create_graph=True)
    r = -(gx[:, 0] + gy[:, 1]) - f
    eb = _mlp(ps, Xb, torch.tanh)[:, 0]
    return (r * r).mean() + (eb * eb).mean()


def torch_w3_poisson_step(seed=0, warmup=5, repeat=20, fused=None):
    d = C.w3_inputs(seed)
    X, f, Xb = (_dev(d[k]) for k in ("X_int", "f_int", "X_bnd"))
    ps = _params(d["params"])
    fn = lambda: _poisson_loss(ps, X, f, Xb)  # noqa: E731
    return _train_result("torch/W3_poisson_pinn_step", fn, ps, warmup,
                         repeat, fused)


# --------------------------------------------------------------------------
# W4a: HVP of the W1 loss
# --------------------------------------------------------------------------
def torch_w4a_hvp(seed=0, warmup=3, repeat=20, return_vector=False):
    """Two results: double-backward and torch.func jvp(grad)."""
    from torch.func import grad, jvp
    d = C.w4a_inputs(seed)
    x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"])
    ps = _params(d["params"])
    v = [torch.from_numpy(a) for pair in d["v"] for a in pair]

    def loss_of(plist):
        return F.cross_entropy(_mlp(plist, x, torch.relu), y)

    def hvp_db():
        loss = loss_of(ps)
        g = torch.autograd.grad(loss, ps, create_graph=True)
        return torch.autograd.grad(g, ps, grad_outputs=v)

    pt = tuple(p.detach() for p in ps)
    vt = tuple(v)
    g_fn = grad(lambda pp: loss_of(list(pp)))

    def hvp_func():
        return jvp(g_fn, (pt,), (vt,))[1]

    res = []
    for name, fn in (("torch/W4a_hvp_double_backward", hvp_db),
                     ("torch/W4a_hvp_func_jvp_grad", hvp_func)):
        hv = torch.cat([h.reshape(-1) for h in fn()]).double()
        s = timeit_samples(fn, warmup, repeat)
        r = make_result(name, s, hv_norm=float(hv.norm()), dtype="float32")
        if return_vector:
            r["hv"] = hv.numpy()
        res.append(r)
    return res


# --------------------------------------------------------------------------
# W4b: full Hessian of a 1-16-16-1 tanh MLP MSE (321 params)
# --------------------------------------------------------------------------
def torch_w4b_hessian(seed=0, warmup=3, repeat=20, dtype="float32",
                      return_hessian=False):
    from torch.func import hessian
    d = C.w4b_inputs(seed, np.dtype(dtype))
    x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"])
    theta = torch.from_numpy(d["theta"])
    sizes = d["sizes"]

    def loss_flat(th):
        ps, k = [], 0
        for i, o in zip(sizes[:-1], sizes[1:]):
            ps.append(th[k:k + i * o].view(i, o))
            k += i * o
            ps.append(th[k:k + o])
            k += o
        e = _mlp(ps, x, torch.tanh) - y
        return (e * e).mean()

    hfn = hessian(loss_flat)
    H = hfn(theta)
    s = timeit_samples(lambda: hfn(theta), warmup, repeat)
    Hd = H.double()
    r = make_result("torch/W4b_full_hessian_321", s, n_params=theta.numel(),
                    hess_fro=float(Hd.norm()),
                    hess_asym=float((Hd - Hd.T).abs().max()), dtype=dtype)
    if return_hessian:
        r["hessian"] = H.numpy()
    return r


# --------------------------------------------------------------------------
# W5: heat diffusion, eager loop, float64
# --------------------------------------------------------------------------
def _heat(u, steps, r):
    for _ in range(steps):
        inner = u[1:-1] + r * (u[:-2] - 2.0 * u[1:-1] + u[2:])
        u = F.pad(inner, (1, 1))
    return u


def torch_w5_heat_grad(seed=0, warmup=1, repeat=5, steps=C.W5_STEPS):
    """loss=sum((u_T-target)^2), grad wrt u0. Returns "grad" (np.float64)."""
    u0n, tn = C.w5_inputs(seed)
    target = torch.from_numpy(tn)

    def fwd_bwd():
        u0 = torch.from_numpy(u0n).requires_grad_(True)
        loss = ((_heat(u0, steps, C.W5_R) - target) ** 2).sum()
        loss.backward()
        return loss, u0.grad

    def fwd():
        with torch.no_grad():
            return ((_heat(torch.from_numpy(u0n), steps, C.W5_R)
                     - target) ** 2).sum()

    loss, g = fwd_bwd()
    s = timeit_samples(fwd_bwd, warmup, repeat)
    sf = timeit_samples(fwd, warmup, repeat)
    return make_result("torch/W5_heat_grad_eager", s, loss=loss.item(),
                       forward_only_s=float(np.median(sf)),
                       grad=g.numpy().copy(), dtype="float64")


# --------------------------------------------------------------------------
# W6: Rosenbrock 100-D, torch.optim.LBFGS
# --------------------------------------------------------------------------
def _rosen(x):
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


def torch_w6_rosenbrock_lbfgs(n=C.W6_N, warmup=1, repeat=5, gtol=1e-6):
    """LBFGS(strong_wolfe, history 10) until ||g||_inf <= gtol/sqrt(n), which
    guarantees ||g||_2 < gtol. float64."""
    x0 = torch.from_numpy(C.rosenbrock_x0(n))
    info = {}

    def solve():
        x = x0.clone().requires_grad_(True)
        opt = torch.optim.LBFGS([x], lr=1, max_iter=100000, max_eval=200000,
                                tolerance_grad=gtol / math.sqrt(n),
                                tolerance_change=1e-30, history_size=10,
                                line_search_fn="strong_wolfe")
        calls = [0]

        def closure():
            calls[0] += 1
            opt.zero_grad()
            f = _rosen(x)
            f.backward()
            return f

        opt.step(closure)
        st = opt.state[x]
        x.grad = None
        f = _rosen(x)
        (g,) = torch.autograd.grad(f, x)
        info.update(nit=int(st["n_iter"]), nfev=int(st["func_evals"]),
                    closure_calls=calls[0], f_final=f.item(),
                    grad_norm=float(g.norm()), grad_inf=float(g.abs().max()),
                    x_err=float((x.detach() - 1).abs().max()))

    s = timeit_samples(solve, warmup, repeat)
    return make_result("torch/W6_rosenbrock100_lbfgs", s,
                       converged=info["grad_norm"] < gtol, dtype="float64",
                       **info)


# --------------------------------------------------------------------------
# elementwise / matmul reference ops (torch eager, float32)
# --------------------------------------------------------------------------
def torch_elementwise(seed=0, warmup=3, repeat=20):
    from . import autonumber
    rng = np.random.default_rng(seed)
    res = []

    def rec(name, fn, **extra):
        num = autonumber(fn)
        s = timeit_samples(fn, warmup, repeat, num)
        res.append(make_result(name, s, number=num, **extra))
        return res[-1]

    for n in (10_000, 1_000_000):
        a, b, c = (torch.from_numpy(rng.standard_normal(n).astype(np.float32))
                   for _ in range(3))
        out = torch.empty_like(a)
        tag = f"1e{int(round(math.log10(n)))}"
        r = rec(f"torch/add_{tag}", lambda: torch.add(a, b, out=out), n=n)
        r["GB_per_s"] = 12 * n / r["median_s"] / 1e9
        rec(f"torch/fused_tanh_axb_c_{tag}", lambda: torch.tanh(a * b + c),
            n=n)
        r = rec(f"torch/sum_{tag}", lambda: a.sum(), n=n)
        r["GB_per_s"] = 4 * n / r["median_s"] / 1e9
    for (m, k, nn) in ((256, 784, 512), (512, 512, 512), (1024, 1024, 1024),
                       (10000, 32, 32)):
        A = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32))
        B = torch.from_numpy(rng.standard_normal((k, nn)).astype(np.float32))
        O = torch.empty(m, nn)
        r = rec(f"torch/matmul_{m}x{k}x{nn}",
                lambda: torch.matmul(A, B, out=O))
        r["GFLOP_per_s"] = 2 * m * k * nn / r["median_s"] / 1e9
    return res


# --------------------------------------------------------------------------
def run_all(only=None):
    jobs = [
        ("W1", torch_w1_mlp_step), ("W2", torch_w2_burgers_step),
        ("W3", torch_w3_poisson_step), ("W4a", torch_w4a_hvp),
        ("W4b", torch_w4b_hessian), ("W5", torch_w5_heat_grad),
        ("W6", torch_w6_rosenbrock_lbfgs),
    ]
    # the elementwise/matmul reference ops run from numpy_peers by default
    if only:
        jobs.append(("elementwise", torch_elementwise))
    out = []
    for key, fn in jobs:
        if only and not any(o.lower() in key.lower() for o in only):
            continue
        r = fn()
        out.extend(r if isinstance(r, list) else [r])
    return out


if __name__ == "__main__":
    cli_main(run_all, f"torch peers (torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads)")
