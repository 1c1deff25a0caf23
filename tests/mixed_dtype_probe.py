"""float64 results of many ops, layers and an optimizer step, written to an .npz (argv[1]). tests/test_mixed_dtype.py runs
it in a float32-default and a float64-default process: the float64 numbers must not depend on the default
(Taichi types a bare float literal in a kernel as default_fp, so `r = 0.0` or `x + 0.1` in a float64 kernel
rounds to float32 in a float32 process)."""
import sys, numpy as np, sciml as sm
from sciml import models as nn
rng = np.random.default_rng(0)
x = rng.uniform(-3, 3, 257); xp = rng.uniform(0.05, 3, 257); xu = rng.uniform(-0.95, 0.95, 257)
X = rng.normal(size=(9, 7))
T = lambda a: sm.tensor(a, dtype="float64")
out = {}
un = ["exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "softplus", "sqrt", "abs", "square", "sign", "reciprocal",
      "floor", "log1p", "expm1", "erf", "erfc", "sinh", "cosh", "tan", "arcsin", "arccos", "arctan", "arcsinh",
      "arccosh", "arctanh", "gelu", "silu"]
for n in un:
    a = {"log": xp, "sqrt": xp, "arcsin": xu, "arccos": xu, "arctanh": xu, "arccosh": 1 + xp, "log1p": xp - 0.9,
         "tan": xu}.get(n, x)
    f = getattr(sm, n)
    out[n] = f(T(a)).numpy()
    g = sm.grad(lambda t: sm.sum(f(t) * T(a)))(T(a))
    out[n + "_grad"] = g.numpy()
    if n not in ("relu", "abs", "sign", "floor"):
        h = sm.grad(lambda t: sm.sum(sm.grad(lambda u: sm.sum(f(u)))(t) * T(a)))(T(a))
        out[n + "_grad2"] = h.numpy()
for n in ["softmax", "log_softmax", "logsumexp"]:
    out[n] = getattr(sm, n)(T(X), axis=1).numpy()
    out[n + "_grad"] = sm.grad(lambda t: sm.sum(getattr(sm, n)(t, axis=1) * 0.37))(T(X)).numpy()
out["pow"] = sm.pow(T(xp), 0.3).numpy(); out["atan2"] = sm.atan2(T(x), T(xp)).numpy()
out["atan2_zeros"] = sm.atan2(T([0.0, 0.0, -0.0, -0.0]), T([-0.0, 0.0, -0.0, 0.0])).numpy()
out["var"] = sm.var(T(X), axis=0).numpy(); out["std"] = sm.std(T(X), axis=0).numpy(); out["mean"] = sm.mean(T(X) * 0.1).numpy()
out["clip"] = sm.clip(T(x), -0.3, 0.7).numpy(); out["scale"] = (T(x) * 0.1 + 0.3).numpy(); out["div"] = (T(x) / 0.7).numpy()
out["linspace"] = sm.linspace(0, 1, 11, dtype="float64").numpy(); out["arange"] = sm.arange(0, 1, 0.1, dtype="float64").numpy()
from sciml.models import losses
Y = T(rng.normal(size=(9, 7)))
for ln in ["mse", "huber", "smooth_l1", "l1"]:
    if hasattr(losses, ln):
        out[ln] = np.asarray(getattr(losses, ln)(T(X), Y).numpy())
# layers, forward and parameter gradients, and one Adam step, all float64
def layer_case(name, mod, inp):
    p = mod.params()
    f = lambda q: (lambda r: r[0] if isinstance(r, tuple) else r)(mod.apply(q, T(inp)))
    out[name] = f(p).numpy()
    g = sm.grad(lambda q: sm.sum(sm.tanh(f(q))))(p)
    for i, leaf in enumerate(sm.tree_leaves(g)):
        out[f"{name}_g{i}"] = leaf.numpy()
    opt = sm.optim.Adam(p, lr=1e-2)
    opt.step(g)
    opt.step(g)
    for i, leaf in enumerate(sm.tree_leaves(opt.params if hasattr(opt, "params") else p)):
        out[f"{name}_adam{i}"] = leaf.numpy()
sm.manual_seed(3)
layer_case("linear", nn.Linear(7, 5, dtype="float64"), X)
layer_case("layernorm", nn.LayerNorm(7, dtype="float64"), X)
layer_case("batchnorm", nn.BatchNorm1d(7, dtype="float64"), X)
layer_case("conv", nn.Conv2d(2, 3, 3, dtype="float64"), rng.normal(size=(2, 2, 6, 6)))
layer_case("lstm", nn.LSTM(3, 4, batch_first=True, dtype="float64"), rng.normal(size=(2, 5, 3)))
layer_case("tel", nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True, dtype="float64"), rng.normal(size=(2, 3, 4)))
net = nn.MLP([2, 8, 8, 1], activation=sm.tanh, dtype="float64")
P = T(rng.uniform(-1, 1, (5, 2)))
out["mlp_hessian"] = sm.hessian(lambda q: sm.sum(sm.tanh(net(q))))(P).numpy()
A = rng.normal(size=(6, 6)); A = A @ A.T + 6 * np.eye(6)
out["cholesky"] = sm.linalg.cholesky(T(A)).numpy()
out["solve_grad"] = sm.grad(lambda a: sm.sum(sm.linalg.solve(a, T(X[:6, :2])) ** 2))(T(A)).numpy()
re_im = sm.fft.rfft(T(X), axis=1)
out["rfft"] = np.asarray([v.numpy() for v in sm.tree_leaves(re_im)])
np.savez(sys.argv[1], **out)
print(len(out), "results")
