"""First-order optimizers: textbook formulas, convergence, resume, binding, errors."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP, Parameter
from sciml.optim import SGD, Adagrad, Adam, AdamW, RMSprop, Optimizer, schedules
from textbook import textbook  # noqa: E402  (tests/optim is on sys.path: no __init__.py)

RNG = np.random.default_rng(0)
P0 = [RNG.normal(size=(3, 2)), RNG.normal(size=(2,))]
GS = [[RNG.normal(size=(3, 2)), RNG.normal(size=(2,))] for _ in range(4)]


def _params(dtype="float64"):
    return [Parameter(p, dtype=dtype) for p in P0]


def _run(opt_cls, kw, dtype="float64", steps=4):
    ps = _params(dtype)
    opt = opt_cls(ps, **kw)
    for g in GS[:steps]:
        opt.step([sm.tensor(x, dtype) for x in g])
    return [p.numpy() for p in ps]


def _ref(kind, kw, steps=4):
    """Textbook updates in numpy (PyTorch's conventions), per parameter."""
    return [textbook(kind, kw, p0, list(gi)) for p0, gi in zip(P0, zip(*GS[:steps]))]

CASES = [
    (SGD, "sgd", dict(lr=0.1)),
    (SGD, "sgd", dict(lr=0.1, momentum=0.9)),
    (SGD, "sgd", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (Adam, "adam", dict(lr=0.01)),
    (Adam, "adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)),
    (AdamW, "adamw", dict(lr=0.01, weight_decay=0.1)),
    (RMSprop, "rmsprop", dict(lr=0.01)),
    (RMSprop, "rmsprop", dict(lr=0.01, momentum=0.5, weight_decay=0.01)),
    (Adagrad, "adagrad", dict(lr=0.1)),
]


@pytest.mark.parametrize("cls,kind,kw", CASES, ids=lambda c: str(c) if not isinstance(c, type) else c.__name__)
def test_first_steps_match_textbook(cls, kind, kw):
    got, want = _run(cls, kw), _ref(kind, kw)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cls", [SGD, Adam])
def test_float32(cls):
    got = _run(cls, dict(lr=0.01), dtype="float32")
    want = _ref(cls.__name__.lower(), dict(lr=0.01))
    for a, b in zip(got, want):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _quadratic(p):
    A = sm.tensor(np.diag([1.0, 3.0]))
    return 0.5 * (p @ A * p).sum() + p.sum()


def _rosenbrock(p):
    return (1 - p[0]) ** 2 + 100.0 * (p[1] - p[0] ** 2) ** 2


OPTS = [(SGD, dict(lr=1e-3, momentum=0.9)), (SGD, dict(lr=0.002, clip_norm=10.0)), (Adam, dict(lr=0.05)), (AdamW, dict(lr=0.05, weight_decay=0.0)),
        (RMSprop, dict(lr=0.01)), (Adagrad, dict(lr=0.5))]


@pytest.mark.parametrize("cls,kw", OPTS, ids=lambda c: c.__name__ if isinstance(c, type) else "")
@pytest.mark.parametrize("fn", [_quadratic, _rosenbrock], ids=["quadratic", "rosenbrock"])
def test_decreases_convex_quadratic_and_rosenbrock(cls, kw, fn):
    p = Parameter(np.array([-1.0, 1.5]))
    opt = cls([p], **kw)
    vg = sm.value_and_grad(fn)
    first, fmin = float(fn(p)), (-2.0 / 3.0 if fn is _quadratic else 0.0)
    for _ in range(100):
        _, g = vg(p)
        opt.step([g])
    assert float(fn(p)) < first - 0.5 * (first - fmin)


def test_resume_equals_uninterrupted(tmp_path):
    def make():
        net = MLP([2, 4, 1], seed=0)
        return net, Adam(net.parameters(), lr=schedules.cosine_decay(0.05, 10), clip_norm=0.5)
    x, y = sm.tensor(RNG.normal(size=(8, 2))), sm.tensor(RNG.normal(size=(8, 1)))
    loss = lambda net: (lambda p: ((net.apply(p, x) - y) ** 2).mean())

    def steps(net, opt, n):
        for _ in range(n):
            g = sm.grad(loss(net))(net.params())
            opt.step(sm.tree_leaves(g) if False else [g_ for g_ in _ordered(net, g)])

    net1, opt1 = make()
    steps(net1, opt1, 6)
    net2, opt2 = make()
    steps(net2, opt2, 3)
    net2.save(tmp_path / "m.npz")
    sd = opt2.state_dict()
    net3, opt3 = make()
    net3.load(tmp_path / "m.npz")
    opt3.load_state_dict(sd)
    steps(net3, opt3, 3)
    for a, b in zip(net1.parameters(), net3.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _ordered(net, g):
    return [_get(g, n) for n, _ in net.named_parameters()]


def _get(tree, dotted):
    for k in dotted.split("."):
        tree = tree[k]
    return tree


def test_bind_later_params_dict_read_write():
    net = MLP([2, 3, 1], seed=0)
    opt = Adam(lr=0.1)
    with pytest.raises(RuntimeError, match="no parameters yet"):
        opt.step([])
    opt.bind(net.params())
    x = sm.ones((1, 2))
    before = opt._read()
    y0 = net(x).numpy()
    opt.step(sm.grad(lambda p: net.apply(p, x).sum())(net.params()))
    assert not np.allclose(net(x).numpy(), y0)     # model sees the new values
    opt._write(before)
    np.testing.assert_array_equal(net(x).numpy(), y0)
    assert sm.tree_map(lambda t: t.shape, before) == sm.tree_map(lambda t: t.shape, net.params())


def test_backward_style_step_and_zero_grad():
    p = Parameter(np.array([1.0, -2.0]))
    p.requires_grad_()
    opt = SGD([p], lr=0.5)
    (p * p).sum().backward()
    opt.step()
    np.testing.assert_allclose(p.numpy(), [0.0, 0.0])
    opt.zero_grad()
    assert p.grad is None


def test_errors():
    p = [Parameter(np.zeros(3))]
    with pytest.raises(ValueError, match=r"gradient 0 has shape \(2,\); expected \(3,\)"):
        Adam(p).step([sm.zeros((2,))])
    with pytest.raises(ValueError, match="grads has 2 leaves"):
        Adam(p).step([sm.zeros((3,)), sm.zeros((3,))])
    with pytest.raises(TypeError, match="expected sciml.models.Parameter"):
        Adam([sm.zeros((3,))])
    with pytest.raises(ValueError, match="nesterov=True needs momentum > 0"):
        SGD(p, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        Adam(p, betas=(1.0, 0.9))
    opt = Adam(p)
    with pytest.raises(KeyError, match="do not match this optimizer"):
        opt.load_state_dict(SGD(p, momentum=0.9).state_dict())
    with pytest.raises(ValueError, match="has 2 values; parameter 0 has shape"):
        opt.load_state_dict(Adam([Parameter(np.zeros(2))]).state_dict())


# --- the functional transforms give the fused optimizers' numbers ------------------------------
from sciml.optim import adam, adamw, adagrad, rmsprop, sgd, chain, clip_by_global_norm  # noqa: E402

PAIRS = [(SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01), sgd(0.1, 0.9, True, 0.01)),
         (Adam(lr=0.01, weight_decay=0.1), adam(0.01, weight_decay=0.1)),
         (AdamW(lr=0.01, weight_decay=0.1), adamw(0.01, weight_decay=0.1)),
         (RMSprop(lr=0.01), rmsprop(0.01)), (Adagrad(lr=0.1), adagrad(0.1)),
         (Adam(lr=schedules.linear_warmup(0.01, 2, schedules.exponential_decay(0.01, 0.5)), clip_norm=0.7),
          chain(clip_by_global_norm(0.7),
                adam(schedules.linear_warmup(0.01, 2, schedules.exponential_decay(0.01, 0.5)))))]


@pytest.mark.parametrize("i", range(len(PAIRS)))
def test_transform_chains_equal_fused_optimizers(i):
    fused, tx = PAIRS[i]
    a, b = _params(), _params()
    fused.bind(a)
    opt = Optimizer(b, tx)
    for g in GS:
        fused.step([sm.tensor(x) for x in g])
        opt.step([sm.tensor(x) for x in g])
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-10, atol=1e-13)


def test_transform_optimizer_state_dict_resume():
    a, b = _params(), _params()
    o1 = Optimizer(a, adam(0.01))
    for g in GS:
        o1.step([sm.tensor(x) for x in g])
    o2 = Optimizer(b, adam(0.01))
    for g in GS[:2]:
        o2.step([sm.tensor(x) for x in g])
    sd = o2.state_dict()
    c = [Parameter(p.numpy()) for p in b]
    o3 = Optimizer(c, adam(0.01))
    o3.load_state_dict(sd)
    for g in GS[2:]:
        o3.step([sm.tensor(x) for x in g])
    for x, y in zip(a, c):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_schedules():
    s = schedules
    assert s.step_decay(1.0, 2, 0.5)(3) == 0.5 and s.exponential_decay(1.0, 0.9)(2) == pytest.approx(0.81)
    c = s.cosine_decay(1.0, 10, 0.1)
    assert c(0) == 1.0 and c(10) == pytest.approx(0.1) and c(5) == pytest.approx(0.55)
    w = s.linear_warmup(1.0, 4)
    assert [w(i) for i in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    wc = s.warmup_cosine(1.0, 2, 12)
    assert wc(1) == 1.0 and wc(12) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="step_size=0; expected a positive integer"):
        s.step_decay(1.0, 0)
    opt = SGD(_params(), lr=s.step_decay(0.1, 1, 0.5))
    assert opt.current_lr() == 0.1
    opt.step([sm.zeros((3, 2)), sm.zeros((2,))])
    assert opt.current_lr() == 0.05


def test_clipping_scales_to_max_norm():
    p = [Parameter(np.zeros(2))]
    opt = SGD(p, lr=1.0, clip_norm=1.0)
    opt.step([sm.tensor([3.0, 4.0])])
    np.testing.assert_allclose(p[0].numpy(), [-0.6, -0.8])


@pytest.mark.parametrize("cls,kind", [(Adam, "adam"), (SGD, "sgd")])
def test_large_parameter_parallel_kernel_path(cls, kind):
    n = 70_000  # above the serial threshold: the parallel, blocked kernel
    p0, g = RNG.normal(size=n), RNG.normal(size=n)
    p = Parameter(p0)
    kw = dict(lr=0.01, momentum=0.9) if kind == "sgd" else dict(lr=0.01)
    opt = cls([p], **kw)
    opt.step([sm.tensor(g)])
    opt.step([sm.tensor(g)])
    if kind == "adam":
        want = p0 - 0.02 * g / (np.abs(g) + 1e-8)
    else:
        want = p0 - 0.01 * g - 0.01 * (0.9 * g + g)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-9, atol=1e-12)


def test_list_bound_optimizer_accepts_params_shaped_grads():
    net, net2 = MLP([2, 3, 1], seed=0), MLP([2, 3, 1], seed=0)
    x = sm.ones((4, 2))
    f = lambda n: (lambda p: (n.apply(p, x) ** 2).sum())
    o1, o2 = Adam(net.parameters(), lr=0.1), Adam(net2.params(), lr=0.1)
    o1.step(sm.grad(f(net))(net.params()))          # dict grads, list-bound optimizer
    o2.step(sm.grad(f(net2))(net2.params()))
    for a, b in zip(net.parameters(), net2.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="has no entry 'layers.1.weight'"):
        o1.step({"layers": {"0": {"weight": sm.zeros((2, 3)), "bias": sm.zeros((3,))}}})
