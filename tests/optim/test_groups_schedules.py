"""Parameter groups, settable learning rates, the added optimizers (Adam amsgrad, NAdam, RAdam, Adamax, Lion)
against textbook numpy references (PyTorch's formulas), schedules, ReduceLROnPlateau, EMA and apply_updates."""
import math

import numpy as np
import pytest

import sciml as sm
from sciml.models import Linear, Parameter
from sciml.optim import (EMA, SGD, Adam, Adamax, AdamW, Lion, NAdam, RAdam, ReduceLROnPlateau, apply_updates, chain,
                         schedules as S, scale_by_adam, scale_by_lr)

RNG = np.random.default_rng(0)
P0 = RNG.standard_normal(7)
GRADS = [RNG.standard_normal(7) for _ in range(12)]


def _run(opt_cls, **kw):
    p = Parameter(P0.copy())
    opt = opt_cls([p], **kw)
    out = []
    for g in GRADS:
        opt.step([sm.tensor(g)])
        out.append(p.numpy().copy())
    return np.array(out)


def _ref_adam(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, amsgrad=False):
    p, m, v, vmax, out = P0.copy(), 0 * P0, 0 * P0, 0 * P0, []
    for t, g in enumerate(GRADS, 1):
        g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v)
        vd = vmax if amsgrad else v
        p = p - lr / (1 - b1 ** t) * m / (np.sqrt(vd) / math.sqrt(1 - b2 ** t) + eps)
        out.append(p.copy())
    return np.array(out)


def _ref_nadam(lr=2e-3, b1=0.9, b2=0.999, eps=1e-8, psi=4e-3):
    p, m, v, prod, out = P0.copy(), 0 * P0, 0 * P0, 1.0, []
    for t, g in enumerate(GRADS, 1):
        mu = b1 * (1 - 0.5 * 0.96 ** (t * psi))
        mu1 = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
        prod *= mu
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        denom = np.sqrt(v / (1 - b2 ** t)) + eps
        p = p - lr * (1 - mu) / (1 - prod) * g / denom - lr * mu1 / (1 - prod * mu1) * m / denom
        out.append(p.copy())
    return np.array(out)


def _ref_radam(lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    p, m, v, out = P0.copy(), 0 * P0, 0 * P0, []
    rho_inf = 2 / (1 - b2) - 1
    for t, g in enumerate(GRADS, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh = m / (1 - b1 ** t)
        rho = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        if rho > 5:
            r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
            p = p - lr * mh * r * math.sqrt(1 - b2 ** t) / (np.sqrt(v) + eps)
        else:
            p = p - lr * mh
        out.append(p.copy())
    return np.array(out)


def _ref_adamax(lr=2e-3, b1=0.9, b2=0.999, eps=1e-8):
    p, m, u, out = P0.copy(), 0 * P0, 0 * P0, []
    for t, g in enumerate(GRADS, 1):
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u, np.abs(g) + eps)
        p = p - lr / (1 - b1 ** t) * m / u
        out.append(p.copy())
    return np.array(out)


def _ref_lion(lr=1e-4, b1=0.9, b2=0.99, wd=0.0):
    p, m, out = P0.copy(), 0 * P0, []
    for g in GRADS:
        c = b1 * m + (1 - b1) * g
        p = p * (1 - lr * wd) - lr * np.sign(c)
        m = b2 * m + (1 - b2) * g
        out.append(p.copy())
    return np.array(out)


@pytest.mark.parametrize("cls, kw, ref", [
    (Adam, dict(lr=0.05, amsgrad=True), lambda: _ref_adam(lr=0.05, amsgrad=True)),
    (Adam, dict(lr=0.05, amsgrad=True, weight_decay=0.1), lambda: _ref_adam(lr=0.05, amsgrad=True, wd=0.1)),
    (NAdam, dict(lr=0.05), lambda: _ref_nadam(lr=0.05)),
    (RAdam, dict(lr=0.05), lambda: _ref_radam(lr=0.05)),
    (RAdam, dict(lr=0.05, betas=(0.9, 0.5)), lambda: _ref_radam(lr=0.05, b2=0.5)),   # rho_t > 5 branch early
    (Adamax, dict(lr=0.05), lambda: _ref_adamax(lr=0.05)),
    (Lion, dict(lr=0.01, weight_decay=0.5), lambda: _ref_lion(lr=0.01, wd=0.5)),
])
def test_optimizers_match_textbook(cls, kw, ref):
    np.testing.assert_allclose(_run(cls, **kw), ref(), rtol=1e-10, atol=1e-12)


def test_new_optimizers_resume_exactly():
    for cls in (NAdam, RAdam, Adamax, Lion, lambda ps, **k: Adam(ps, amsgrad=True, **k)):
        p = Parameter(P0.copy())
        opt = cls([p], lr=0.05)
        for g in GRADS[:5]:
            opt.step([sm.tensor(g)])
        sd = opt.state_dict()
        q = Parameter(p.numpy())
        opt2 = cls([q], lr=0.05)
        opt2.load_state_dict(sd)
        for g in GRADS[5:]:
            opt.step([sm.tensor(g)])
            opt2.step([sm.tensor(g)])
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_param_groups_use_their_own_options():
    a, b = Parameter(P0.copy()), Parameter(P0.copy())
    opt = SGD([{"params": [a], "lr": 0.5}, {"params": [b]}], lr=0.1, momentum=0.0)
    g = sm.tensor(GRADS[0])
    opt.step([g, g])
    np.testing.assert_allclose(a.numpy(), P0 - 0.5 * GRADS[0])
    np.testing.assert_allclose(b.numpy(), P0 - 0.1 * GRADS[0])
    assert [grp["lr"] for grp in opt.param_groups] == [0.5, 0.1]
    opt.param_groups[1]["lr"] = 0.0                                 # takes effect at the next step
    opt.step([g, g])
    np.testing.assert_allclose(b.numpy(), P0 - 0.1 * GRADS[0])
    # per-group Adam hyper-parameters equal two separate optimizers
    c, d = Parameter(P0.copy()), Parameter(P0.copy())
    opt = Adam([{"params": [c], "betas": (0.5, 0.9)}, {"params": [d], "weight_decay": 0.1}], lr=0.05)
    c2, d2 = Parameter(P0.copy()), Parameter(P0.copy())
    o1, o2 = Adam([c2], lr=0.05, betas=(0.5, 0.9)), Adam([d2], lr=0.05, weight_decay=0.1)
    for gr in GRADS[:4]:
        opt.step([sm.tensor(gr), sm.tensor(-gr)])
        o1.step([sm.tensor(gr)])
        o2.step([sm.tensor(-gr)])
    np.testing.assert_allclose(c.numpy(), c2.numpy(), rtol=1e-12)
    np.testing.assert_allclose(d.numpy(), d2.numpy(), rtol=1e-12)


def test_param_groups_from_modules_and_params_shaped_grads():
    l1, l2 = Linear(3, 2, seed=0), Linear(2, 1, seed=1)
    opt = AdamW([{"params": l1.parameters(), "lr": 1e-2}, {"params": l2.parameters(), "weight_decay": 0.0}], lr=1e-3)
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["lr"] == 1e-3
    with pytest.raises(ValueError, match="unknown option"):
        Adam([{"params": [Parameter(P0)], "momentum": 0.9}])
    p = Parameter(P0)
    with pytest.raises(ValueError, match="more than once"):
        Adam([{"params": [p]}, {"params": [p]}])
    opt.add_param_group({"params": [Parameter(P0.copy())], "lr": 0.3})
    assert len(opt.param_groups) == 3 and opt.param_groups[2]["lr"] == 0.3


def test_setting_lr_takes_effect():
    p = Parameter(P0.copy())
    opt = SGD([p], lr=0.1)
    opt.lr = 0.01
    assert opt.lr == 0.01 and opt.param_groups[0]["lr"] == 0.01 and opt.current_lr() == 0.01
    opt.step([sm.tensor(GRADS[0])])
    np.testing.assert_allclose(p.numpy(), P0 - 0.01 * GRADS[0])
    q = Parameter(P0.copy())
    adam = Adam([q], lr=0.1)
    adam.lr = 0.0
    adam.step([sm.tensor(GRADS[0])])
    np.testing.assert_array_equal(q.numpy(), P0)
    adam.weight_decay = 0.5
    assert adam.param_groups[0]["weight_decay"] == 0.5
    with pytest.raises(ValueError, match="lr"):
        adam.lr = -1.0
    from sciml.optim import LBFGS, Optimizer, adam as adam_tx
    for other in (Optimizer([Parameter(P0)], adam_tx(1e-3)), LBFGS([Parameter(P0)])):
        with pytest.raises(AttributeError, match="setting .lr has no effect"):
            other.lr = 0.1


def _torch_one_cycle(s, max_lr, T, pct=0.3, div=25.0, fdiv=1e4):
    """PyTorch OneCycleLR's documented formula (cosine annealing, two phases), written out."""
    init, low = max_lr / div, max_lr / div / fdiv
    e1 = pct * T - 1
    if s <= e1:
        a, b, x = init, max_lr, s / e1
    else:
        a, b, x = max_lr, low, (s - e1) / (T - 1 - e1)
    return b + (a - b) / 2 * (1 + math.cos(math.pi * x))


def test_schedules():
    ms = S.multistep_decay(1.0, [3, 6], gamma=0.5)
    assert [ms(s) for s in (0, 2, 3, 5, 6, 10)] == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    poly = S.polynomial_decay(1.0, 10, power=2.0)
    assert poly(0) == 1.0 and poly(5) == pytest.approx(0.25) and poly(10) == 0.0 and poly(20) == 0.0
    oc = S.one_cycle(0.1, 100)
    for s in (0, 10, 29, 30, 60, 99):
        assert oc(s) == pytest.approx(_torch_one_cycle(s, 0.1, 100), rel=1e-12)
    assert oc(0) == pytest.approx(0.004) and oc(29) == pytest.approx(0.1) and oc(99) == pytest.approx(4e-7)
    wr = S.cosine_warm_restarts(1.0, 4, T_mult=2, eta_min=0.0)
    # periods [0, 4), [4, 12), [12, 28)
    assert wr(0) == 1.0 and wr(4) == 1.0 and wr(12) == 1.0
    assert wr(2) == pytest.approx(0.5) and wr(8) == pytest.approx(0.5) and wr(20) == pytest.approx(0.5)
    wr1 = S.cosine_warm_restarts(1.0, 5)
    assert wr1(5) == 1.0 and wr1(7) == pytest.approx((1 + math.cos(math.pi * 2 / 5)) / 2)
    pc = S.piecewise_constant([10, 20], [1.0, 0.1, 0.01])
    assert [pc(s) for s in (0, 9, 10, 19, 20, 99)] == [1.0, 1.0, 0.1, 0.1, 0.01, 0.01]
    j = S.join_schedules([S.linear_warmup(1.0, 4), S.cosine_decay(1.0, 10)], [4])
    assert j(0) == 0.25 and j(3) == 1.0 and j(4) == 1.0 and j(9) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="piecewise_constant"):
        S.piecewise_constant([1, 2], [1.0])
    with pytest.raises(ValueError, match="one_cycle: pct_start"):
        S.one_cycle(0.1, 10, pct_start=1.5)
    # a schedule in a param group is evaluated at the optimizer's step count
    p = Parameter(np.zeros(1))
    opt = SGD([{"params": [p], "lr": ms}])
    for s in range(4):
        assert opt.current_lr() == ms(s)
        opt.step([sm.ones((1,))])


def test_reduce_lr_on_plateau_follows_pytorch_rule():
    p = Parameter(np.zeros(2))
    opt = SGD([{"params": [p], "lr": 1.0}], lr=1.0)
    sched = ReduceLROnPlateau(opt, factor=0.5, patience=2, cooldown=1, min_lr=0.2)
    losses = [1.0, 0.9, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95]
    lrs = []
    for v in losses:
        sched.step(v)
        lrs.append(opt.param_groups[0]["lr"])
    # best 0.9 at call 2; bad calls 3, 4, 5 -> reduce at call 5 (num_bad 3 > 2); cooldown 1 swallows call 6;
    # bad 7, 8, 9 -> reduce at 9 (0.25); then floor 0.2 at 13 (not reached)
    assert lrs == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25]
    sd = sched.state_dict()
    s2 = ReduceLROnPlateau(SGD([Parameter(np.zeros(2))], lr=1.0), factor=0.5, patience=2, cooldown=1, min_lr=0.2)
    s2.load_state_dict(sd)
    assert s2.optimizer.param_groups[0]["lr"] == 0.25 and s2.best == 0.9
    with pytest.raises(TypeError, match="is a schedule"):
        ReduceLROnPlateau(SGD([Parameter(np.zeros(1))], lr=S.constant(0.1)))
    with pytest.raises(ValueError, match="factor"):
        ReduceLROnPlateau(opt, factor=2.0)


def test_ema_of_weights():
    p = Parameter(np.array([0.0, 1.0]))
    ema = EMA([p], decay=0.5)
    p._assign(np.array([2.0, 3.0]))
    ema.update()
    np.testing.assert_allclose(ema.shadow[0], [1.0, 2.0])
    with ema.average_parameters():
        np.testing.assert_allclose(p.numpy(), [1.0, 2.0])
    np.testing.assert_allclose(p.numpy(), [2.0, 3.0])
    w = EMA([p], decay=0.999, warmup=True)
    assert w.current_decay() == pytest.approx(0.1)
    sd = ema.state_dict()
    e2 = EMA([Parameter(np.zeros(2))], decay=0.5)
    e2.load_state_dict(sd)
    np.testing.assert_allclose(e2.shadow[0], [1.0, 2.0])


def test_apply_updates_with_an_optax_chain():
    params = {"w": sm.tensor(P0.copy())}
    tx = chain(scale_by_adam(), scale_by_lr(0.05))
    state = tx.init(params)
    for g in GRADS:
        updates, state = tx.update({"w": sm.tensor(g)}, state, params)
        params = apply_updates(params, updates)
    np.testing.assert_allclose(params["w"].numpy(), _ref_adam(lr=0.05)[-1], rtol=1e-10)
