"""Gaussian-process regression: fit the kernel's hyperparameters by L-BFGS through a Cholesky factor.

Squared-exponential kernel k(x, x') = s_f^2 exp(-|x - x'|^2 / (2 l^2)) plus noise s_n^2 on the diagonal.
The negative log marginal likelihood

    nll = 1/2 y^T K^{-1} y + sum(log diag L) + n/2 log(2 pi),     K = L L^T,

is computed with sm.linalg.cholesky and sm.linalg.triangular_solve; its gradient in (log l, log s_f, log s_n)
flows through both (derivative rules in sciml ops). The fitted likelihood is checked against scikit-learn's
GaussianProcessRegressor at the same hyperparameters (an independent implementation), and scikit-learn's own
fit is reported for comparison.

    python examples/gp_regression.py                # 80 points
    python examples/gp_regression.py --plot gp.png  # and a figure (.png, .pdf or .svg) of the posterior
    python examples/gp_regression.py --quick        # smoke test
"""
import argparse
import math

import numpy as np

try:
    import sciml as sm
except ImportError:  # running from a source checkout without `pip install -e .`
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import sciml as sm
from sciml._io import atomic_write, check_plot_arg
from sciml.models import Parameter
from sciml.optim import LBFGS


def kernel(p, a, b):
    d = sm.reshape(a, (-1, 1)) - sm.reshape(b, (1, -1))
    return sm.exp(2.0 * p["log_sf"]) * sm.exp(-0.5 * d * d * sm.exp(-2.0 * p["log_l"]))


def nll(p, x, y):
    n = x.shape[0]
    k = kernel(p, x, x) + sm.exp(2.0 * p["log_sn"]) * sm.eye(n, dtype=x.dtype)
    L = sm.linalg.cholesky(k)
    alpha = sm.linalg.triangular_solve(L, y, lower=True)          # L^{-1} y
    return 0.5 * (alpha * alpha).sum() + sm.log(sm.diagonal(L)).sum() + 0.5 * n * math.log(2 * math.pi)


def predict(p, x, y, xs):
    n = x.shape[0]
    L = sm.linalg.cholesky(kernel(p, x, x) + sm.exp(2.0 * p["log_sn"]) * sm.eye(n, dtype=x.dtype))
    a = sm.linalg.triangular_solve(L, sm.linalg.triangular_solve(L, y, lower=True), lower=True, trans=1)
    return sm.matmul(kernel(p, xs, x), a)


def posterior_std(p, x, xs):
    """Standard deviation of the latent function at xs: sqrt(k(xs, xs) - v^T v), v = L^{-1} k(x, xs)."""
    n = x.shape[0]
    L = sm.linalg.cholesky(kernel(p, x, x) + sm.exp(2.0 * p["log_sn"]) * sm.eye(n, dtype=x.dtype))
    v = sm.linalg.triangular_solve(L, kernel(p, x, xs), lower=True)
    return sm.sqrt(sm.maximum(sm.exp(2.0 * p["log_sf"]) - (v * v).sum(0), 0.0))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=80)
    ap.add_argument("--plot", metavar="PATH", default=None,
                    help="write a figure of the data and the fitted posterior (.png, .pdf or .svg)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    args.plot = check_plot_arg(ap, args.plot)  # a bad path fails now, not after training
    sm.init(dtype="float64", seed=0)
    n = 25 if args.quick else args.n
    rng = np.random.default_rng(0)
    xn = np.sort(rng.uniform(-3, 3, n))
    yn = np.sin(2 * xn) + 0.3 * xn + 0.1 * rng.standard_normal(n)
    x, y = sm.tensor(xn), sm.tensor(yn)
    params = {"log_l": Parameter(sm.tensor(0.0)), "log_sf": Parameter(sm.tensor(0.0)), "log_sn": Parameter(sm.tensor(-1.0))}
    start = float(nll(params, x, y))
    res = LBFGS(params, max_iter=15 if args.quick else 100).step(lambda p: nll(p, x, y))
    p = res.params
    hyp = {k: float(np.exp(float(v))) for k, v in p.items()}
    print(f"nll {start:.4f} -> {res.loss:.4f} in {res.iterations} L-BFGS iterations ({res.reason}); "
          f"l = {hyp['log_l']:.4f}, s_f = {hyp['log_sf']:.4f}, s_n = {hyp['log_sn']:.4f}")
    xt = np.linspace(-3, 3, 200)
    mean = predict(p, x, y, sm.tensor(xt)).numpy()
    rmse = float(np.sqrt(np.mean((mean - (np.sin(2 * xt) + 0.3 * xt)) ** 2)))
    print(f"posterior-mean RMSE against the noiseless function: {rmse:.4f}")
    out = {"nll_start": start, "nll": res.loss, "rmse": rmse, **hyp}
    if args.plot is not None:
        std = posterior_std(p, x, sm.tensor(xt)).numpy()
        plot(xn, yn, xt, mean, std, hyp, rmse, args.plot)
    try:
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, RBF, WhiteKernel
    except ImportError:  # pragma: no cover
        return out
    kern = ConstantKernel(hyp["log_sf"] ** 2) * RBF(hyp["log_l"]) + WhiteKernel(hyp["log_sn"] ** 2)
    gp = GaussianProcessRegressor(kern, optimizer=None, normalize_y=False).fit(xn[:, None], yn)
    out["sklearn_nll_at_ours"] = -gp.log_marginal_likelihood_value_
    gp2 = GaussianProcessRegressor(ConstantKernel() * RBF() + WhiteKernel(0.1), n_restarts_optimizer=2,
                                   random_state=0).fit(xn[:, None], yn)
    out["sklearn_nll_fit"] = -gp2.log_marginal_likelihood_value_
    print(f"scikit-learn: nll at our hyperparameters {out['sklearn_nll_at_ours']:.4f}; "
          f"its own fit {out['sklearn_nll_fit']:.4f}")
    return out


def plot(xn, yn, xt, mean, std, hyp, rmse, path):
    """Data, the noiseless function, the posterior mean and its 95% band, one panel."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(7.5, 4))
    ax = fig.subplots()
    ax.fill_between(xt, mean - 1.96 * std, mean + 1.96 * std, color="tab:blue", alpha=0.2,
                    label="95% band of the latent function")
    ax.plot(xt, np.sin(2 * xt) + 0.3 * xt, "k--", lw=1, label="true function sin(2x) + 0.3x")
    ax.plot(xt, mean, color="tab:blue", lw=1.5, label=f"posterior mean (RMSE {rmse:.3f})")
    ax.plot(xn, yn, "o", color="tab:red", ms=3, label=f"{len(xn)} noisy observations")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + 0.3 * (hi - lo))   # room for the legend above the data
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"Gaussian-process regression, hyperparameters fitted by L-BFGS through a Cholesky factor\n"
                 f"length scale l = {hyp['log_l']:.3f}, signal s_f = {hyp['log_sf']:.3f}, "
                 f"noise s_n = {hyp['log_sn']:.3f}", fontsize=9)
    fig.tight_layout()
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=100)
    print(f"wrote {path}")
    return fig


if __name__ == "__main__":
    main()
