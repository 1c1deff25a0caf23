"""LBFGS's (s, y) history is part of its state_dict: a resumed run continues exactly."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS


def _problem():
    sm.init(arch="cpu", dtype="float64")
    rng = np.random.default_rng(0)
    x = sm.tensor(rng.uniform(-1, 1, (32, 1)))
    y = sm.tensor(np.sin(3 * x.numpy()))
    net = MLP([1, 8, 1], activation=sm.tanh, seed=0, dtype="float64")

    def loss(p):
        return ((net.apply(p, x) - y) ** 2).mean()
    return net, loss


def _flat(net):
    return np.concatenate([p.numpy().ravel() for p in net.parameters()])


def test_resume_is_exact():
    net, loss = _problem()
    opt = LBFGS(net.params(), max_iter=6, history=5)
    for _ in range(4):
        opt.step(loss)
    ref = _flat(net)

    net2, loss2 = _problem()
    opt2 = LBFGS(net2.params(), max_iter=6, history=5)
    opt2.step(loss2)
    opt2.step(loss2)
    sd = opt2.state_dict()
    params = {k: np.array(v) for k, v in net2.state_dict().items()}
    assert sd["state"]["lbfgs.S"].shape == (5 * len(_flat(net2)),)

    net3, loss3 = _problem()
    net3.load_state_dict(params)
    opt3 = LBFGS(net3.params(), max_iter=6, history=5)
    opt3.load_state_dict(sd)
    opt3.step(loss3)
    opt3.step(loss3)
    np.testing.assert_array_equal(_flat(net3), ref)

    # without the history the continuation differs (the test above is not vacuous)
    net4, loss4 = _problem()
    net4.load_state_dict(params)
    opt4 = LBFGS(net4.params(), max_iter=6, history=5)
    opt4.step(loss4)
    opt4.step(loss4)
    assert not np.array_equal(_flat(net4), ref)


def test_fresh_state_roundtrip_and_mismatch():
    net, loss = _problem()
    opt = LBFGS(net.params(), max_iter=3, history=4)
    assert opt.state_dict()["state"] == {}
    opt.load_state_dict(opt.state_dict())
    opt.step(loss)
    sd = opt.state_dict()
    other = LBFGS(net.params(), max_iter=3, history=7)
    with pytest.raises(ValueError, match="history=4 over .* this optimizer has history=7"):
        other.load_state_dict(sd)
    broken = {"step": 1, "state": {"lbfgs.S": sd["state"]["lbfgs.S"]}}
    with pytest.raises(KeyError, match="missing"):
        other.load_state_dict(broken)


def test_step_max_iter_caps_one_call():
    net, loss = _problem()
    opt = LBFGS(net.params(), max_iter=50, gtol=0.0, ftol=0.0, xtol=0.0)
    r = opt.step(loss, max_iter=3)
    assert r.iterations <= 3 and r.reason in ("max_iter", "max_eval") and r.nfev <= 4  # max_eval = ceil(5/4 * 3)
    assert opt._opts["max_iter"] == 50  # restored
    r = opt.step(loss, max_iter=500)     # never raises the constructor's budget
    assert r.iterations <= 50
    with pytest.raises(ValueError, match="max_iter must be a positive integer"):
        opt.step(loss, max_iter=0)


@pytest.mark.parametrize("globalization", ["line_search", "trust_region"])
def test_newton_cg_dense_hessian_mode_same_iterates(globalization):
    """hessian='dense' forms H once per iteration; CG then multiplies by it: the same iterates."""
    from sciml.optim import newton_cg
    sm.init(arch="cpu", dtype="float64")
    x0 = sm.tensor(np.tile([-1.2, 1.0], 5))

    def f(x):
        return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()
    a = newton_cg(f, x0, gtol=1e-7, globalization=globalization, hessian="products")
    b = newton_cg(f, x0, gtol=1e-7, globalization=globalization, hessian="dense")
    assert a.success and b.success
    assert a.iterations == b.iterations and a.nfev == b.nfev and a.nhvp == b.nhvp
    np.testing.assert_allclose(b.params.numpy(), a.params.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b.params.numpy(), np.ones(10), atol=1e-6)
    with pytest.raises(ValueError, match="hessian='exact'; expected 'auto', 'products'"):
        newton_cg(f, x0, hessian="exact")
