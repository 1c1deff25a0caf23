"""``compat="torch"``: sciml's L-BFGS runs torch.optim.LBFGS(line_search_fn="strong_wolfe")'s
iteration (DeepXDE's PyTorch L-BFGS) iterate for iterate; and the pieces of that variant, without torch."""
import math

import numpy as np
import pytest

import sciml as sm
from sciml.models import Parameter
from sciml.optim import LBFGS
from sciml.optim.lbfgs import lbfgs
from sciml.optim.line_search import strong_wolfe

KEYS = ("W1", "b1", "W2", "b2")


def _data(seed=0, hidden=6):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (24, 1))
    p0 = {"W1": rng.normal(0, 1, (1, hidden)), "b1": rng.normal(0, 0.1, (hidden,)),
          "W2": rng.normal(0, 0.5, (hidden, 1)), "b2": np.zeros(1)}
    return x, np.sin(3 * x), p0


def _sciml_iterates(x, y, p0, **opts):
    sm.init(arch="cpu", dtype="float64")
    xs, ys = sm.tensor(x), sm.tensor(y)

    def loss(p):
        h = sm.tanh(xs @ p["W1"] + p["b1"])
        return ((h @ p["W2"] + p["b2"] - ys) ** 2).mean()
    out = []
    r = lbfgs(loss, {k: sm.tensor(p0[k]) for k in KEYS}, callback=lambda i: out.append(
        (np.concatenate([i.params[k].numpy().ravel() for k in KEYS]), i.step_size, i.loss)), **opts)
    return out, r


def _torch_iterates(x, y, p0, steps, **opts):
    torch = pytest.importorskip("torch")
    ps = [torch.tensor(p0[k], dtype=torch.float64, requires_grad=True) for k in KEYS]
    xt, yt = torch.tensor(x), torch.tensor(y)
    opt = torch.optim.LBFGS(ps, line_search_fn="strong_wolfe", **opts)
    out, inside = [], [False]
    add, de = opt._add_grad, opt._directional_evaluate

    def directional(*a):   # the line search's trial points
        inside[0] = True
        try:
            return de(*a)
        finally:
            inside[0] = False

    def add_grad(t, d):    # outside the line search: the accepted step of an iteration
        add(t, d)
        if not inside[0]:
            out.append(np.concatenate([p.detach().numpy().ravel() for p in ps]))
    opt._directional_evaluate, opt._add_grad = directional, add_grad

    def closure():
        opt.zero_grad()
        h = torch.tanh(xt @ ps[0] + ps[1])
        loss = ((h @ ps[2] + ps[3] - yt) ** 2).mean()
        loss.backward()
        return loss
    for _ in range(steps):
        opt.step(closure)
    return out, opt.state[opt._params[0]]


def test_compat_torch_reproduces_torch_lbfgs_iterates():
    x, y, p0 = _data()
    ref, state = _torch_iterates(x, y, p0, 1, lr=1, max_iter=40, history_size=5, tolerance_grad=0,
                                 tolerance_change=0)
    got, r = _sciml_iterates(x, y, p0, compat="torch", history=5, max_iter=40, gtol=0, ftol=0, xtol=0)
    # 39 iterations: the default max_eval int(40 * 1.25) = 50 ends both runs one short
    assert len(ref) == len(got) == r.iterations == state["n_iter"] == 39
    assert r.nfev == state["func_evals"] and r.reason == "max_eval"
    for k, (a, (b, _, _)) in enumerate(zip(ref, got)):
        assert np.abs(a - b).max() <= 1e-9 * (1 + np.abs(a).max()), f"iterate {k + 1}"
    # sciml's own rules differ from the first step on (1/||g||_2 against torch's 1/||g||_1)
    own, _ = _sciml_iterates(x, y, p0, history=5, max_iter=3, gtol=0, ftol=0, xtol=0)
    assert np.abs(own[0][0] - ref[0]).max() > 1e-3


def test_compat_torch_matches_over_calls_and_eval_budget():
    """Several ``step`` calls (torch keeps its state between them, as DeepXDE calls it) with a
    max_eval that cuts calls short: the same iterates, evaluations and iteration counts."""
    torch = pytest.importorskip("torch")
    x, y, p0 = _data(1)
    ref, state = _torch_iterates(x, y, p0, 4, lr=1, max_iter=9, max_eval=10, history_size=4,
                                 tolerance_grad=0, tolerance_change=0)
    sm.init(arch="cpu", dtype="float64")
    xs, ys = sm.tensor(x), sm.tensor(y)
    params = {k: Parameter(sm.tensor(p0[k])) for k in KEYS}
    got = []
    opt = LBFGS(params, compat="torch", history=4, max_iter=9, max_eval=10, gtol=0, ftol=0, xtol=0,
                callback=lambda i: got.append(np.concatenate([i.params[k].numpy().ravel() for k in KEYS])))

    def loss(p):
        h = sm.tanh(xs @ p["W1"] + p["b1"])
        return ((h @ p["W2"] + p["b2"] - ys) ** 2).mean()
    nfev = sum(opt.step(loss).nfev for _ in range(4))
    assert len(got) == len(ref) == state["n_iter"] and nfev == state["func_evals"]
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-9)
    del torch


def test_compat_torch_first_step_uses_l1_norm():
    """torch's first trial step is min(1, 1/||g||_1) lr; sciml's own is min(1, 1/||g||_2) lr. On
    f = 0.5 |x|^2 from x0 (g = x0) the first trial satisfies both Wolfe conditions when it lies in
    [0.1, 1.9998], so the first iterate shows which one was taken."""
    sm.init(arch="cpu", dtype="float64")
    x0 = np.array([0.3, -0.4, 0.5, 0.2])            # ||g||_1 = 1.4, ||g||_2 = 0.735
    f = lambda x: 0.5 * (x * x).sum()               # noqa: E731
    for compat, norm in ((None, np.linalg.norm(x0)), ("torch", np.abs(x0).sum())):
        its = []
        lbfgs(f, sm.tensor(x0), compat=compat, max_iter=1, gtol=0, ftol=0, xtol=0,
              callback=lambda i: its.append(i.step_size))
        assert its[0] == pytest.approx(min(1.0, 1.0 / norm), rel=1e-12)


def test_compat_torch_stops_on_non_descent():
    """torch never restarts along -g: a direction with g.d >= 0 ends the run (reason 'descent');
    sciml's own rule restarts from -g. The direction is made ascending by a stored pair with
    s.y < 0 (loaded state: s = 1, y = -1, gamma = -1 give d = +g on f = x^2)."""
    sm.init(arch="cpu", dtype="float64")
    out = {}
    for compat in (None, "torch"):
        p = Parameter(sm.tensor([1.0]))
        opt = LBFGS([p], history=1, max_iter=5, compat=compat, gtol=1e-12, ftol=0, xtol=0)
        sd = opt.state_dict()
        sd["state"].update({"lbfgs.S": np.array([1.0]), "lbfgs.Y": np.array([-1.0]), "lbfgs.rho": np.array([-1.0]),
                            "lbfgs.slots": np.array([0]), "lbfgs.gamma": np.array([-1.0]),
                            "lbfgs.shape": np.array([1, 1])})
        opt.load_state_dict(sd)
        out[compat] = (opt.step(lambda ps: (ps[0] * ps[0]).sum()), float(p.numpy()[0]))
    r, x = out["torch"]
    assert r.reason == "descent" and r.iterations == 0 and x == 1.0 and r.nfev == 1
    r, x = out[None]
    assert r.iterations >= 1 and abs(x) < 1e-6


def _phi_table(table):
    """phi(t) from a table of (t, f, gtd), looked up by the trial number."""
    calls = []

    def phi(t):
        f, g = table[len(calls)]
        calls.append(t)
        return f, g, len(calls)
    return phi, calls


def test_strong_wolfe_torch_checks_previous_trial_from_the_third():
    """Alg. 3.5 brackets [t1, t2] when f(t2) >= f(t1) at the second trial; torch's variant only
    from the third trial on (its ls_iter > 1), so it extrapolates once more."""
    f0, g0 = 1.0, -1.0
    table = [(0.5, -0.95), (0.6, -0.95), (0.7, 0.5), (0.4, 0.0), (0.4, 0.0), (0.4, 0.0)]
    phi, calls = _phi_table(table)
    strong_wolfe(phi, f0, g0, 1.0, 1.0, max_evals=6)
    assert calls[0] < calls[2] < calls[1]      # sciml zooms inside [t1, t2] after the second trial
    phi, calls_t = _phi_table(table)
    strong_wolfe(phi, f0, g0, 1.0, 1.0, max_evals=6, torch=True)
    assert calls_t[:2] == calls[:2] and calls_t[2] > calls_t[1]   # torch extrapolates beyond t2


def test_strong_wolfe_torch_budget_end_returns_zero_or_last():
    """When the budget ends while extrapolating, torch takes the lower of t = 0 and the last trial."""
    phi, calls = _phi_table([(0.5, -0.95), (0.6, -0.95)])
    t, f, _, st, evals, ok = strong_wolfe(phi, 1.0, -1.0, 1.0, 1.0, max_evals=2, torch=True)
    assert (t, f, evals, ok) == (calls[1], 0.6, 2, False)
    phi, calls = _phi_table([(0.5, -0.95), (1.5, -0.95)])
    t, f, _, st, evals, ok = strong_wolfe(phi, 1.0, -1.0, 1.0, 1.0, max_evals=2, torch=True, state0="x0")
    assert (t, f, st) == (0.0, 1.0, "x0")
    phi, calls = _phi_table([(0.5, -0.95), (1.5, -0.95)])   # sciml's own: the last but one
    t, f, _, st, evals, ok = strong_wolfe(phi, 1.0, -1.0, 1.0, 1.0, max_evals=2)
    assert (t, f) == (1.0, 0.5)


def test_compat_errors():
    with pytest.raises(ValueError, match="compat"):
        LBFGS(compat="scipy")
