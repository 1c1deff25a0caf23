"""Frozen parameters (``requires_grad_(False)``) under the curvature optimizers: LBFGS, BFGS, Newton, NewtonCG,
Levenberg-Marquardt, Gauss-Newton, AdaHessian never move them, optimise the others, and return full pytrees."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import Linear
from sciml.optim.adahessian import AdaHessian
from sciml.optim.bfgs import BFGS
from sciml.optim.lbfgs import LBFGS
from sciml.optim.least_squares import GaussNewton, LevenbergMarquardt
from sciml.optim.newton import Newton, NewtonCG

R = np.random.default_rng(0)
X = sm.tensor(R.normal(size=(20, 3)))
Y = sm.tensor(X.numpy() @ np.array([[1.0], [-2.0], [0.5]]) + 0.7)

OPTS = [LBFGS, BFGS, Newton, NewtonCG, LevenbergMarquardt, GaussNewton, AdaHessian]


def _fn(cls, net):
    if cls in (LevenbergMarquardt, GaussNewton):  # these take the residual
        return lambda p: (net.apply(p, X) - Y).reshape((-1,))
    return lambda p: ((net.apply(p, X) - Y) ** 2).mean()


def _loss(net):
    return float(((net(X) - Y) ** 2).mean())


@pytest.mark.parametrize("cls", OPTS, ids=lambda c: c.__name__)
def test_frozen_parameter_does_not_move(cls):
    net = Linear(3, 1, seed=0)
    net.bias.requires_grad_(False)
    b0, w0, l0 = net.bias.numpy().copy(), net.weight.numpy().copy(), _loss(net)
    opt = cls(net.parameters())
    fn = _fn(cls, net)
    for _ in range(2):
        res = opt.step(lambda p: fn({"weight": p[0], "bias": p[1]}))
    np.testing.assert_array_equal(net.bias.numpy(), b0)
    assert not np.allclose(net.weight.numpy(), w0) and _loss(net) < l0
    assert len(res.params) == 2  # the full pytree, the frozen leaf at its value
    np.testing.assert_array_equal(res.params[1].numpy(), b0)
    np.testing.assert_array_equal(res.params[0].numpy(), net.weight.numpy())


def test_frozen_then_unfrozen_restarts_the_history():
    net = Linear(3, 1, seed=0)
    opt = LBFGS(net.params(), max_iter=5)
    fn = _fn(LBFGS, net)
    net.weight.requires_grad_(False)
    opt.step(fn)
    w = net.weight.numpy().copy()
    opt.step(fn)
    np.testing.assert_array_equal(net.weight.numpy(), w)
    net.weight.requires_grad_(True)
    res = opt.step(fn)  # a history over 1 parameter must not be reused for 4
    assert res.loss < 0.5 * _loss(Linear(3, 1, seed=0))
    assert opt.state_dict() is not None


def test_weight_only_bias_fit_is_exact_with_frozen_weight():
    """With the weight frozen at the true values, LBFGS fits the bias alone to 0.7."""
    net = Linear(3, 1, seed=0)
    net.weight._assign(np.array([[1.0], [-2.0], [0.5]]))
    net.weight.requires_grad_(False)
    fn = _fn(LBFGS, net)
    LBFGS([net.weight, net.bias], max_iter=50).step(lambda p: fn({"weight": p[0], "bias": p[1]}))
    np.testing.assert_allclose(net.bias.numpy(), [0.7], rtol=1e-6)
    np.testing.assert_array_equal(net.weight.numpy(), [[1.0], [-2.0], [0.5]])


def test_all_frozen_is_an_error():
    net = Linear(3, 1, seed=0)
    net.requires_grad_(False)
    with pytest.raises(ValueError, match="every bound parameter is frozen"):
        LBFGS(net.parameters()).step(lambda p: ((p[0] - 1.0) ** 2).sum())
