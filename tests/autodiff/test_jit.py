"""sciml.jit: a replay equals an eager call on new inputs, for every op spec, their gradients and
Hessians, an MLP's value_and_grad and HVP; what cannot be traced is refused clearly; outputs are
fresh; closed-over parameters updated in place are seen; L-BFGS with jit follows the eager run."""
import warnings

import numpy as np
import pytest

import sciml as sm
from sciml.autodiff import curvature as CV
from sciml.testing import check_grads

from test_ops import OPS, _tensors  # noqa: E402  (tests/autodiff is on sys.path: no __init__.py)


def _same(a, b, rtol=1e-12, atol=1e-13):
    la, lb = sm.tree_leaves(a), sm.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=rtol, atol=atol)


def _replays(f, make_args, n=3, **kw):
    """jit(f) on a first argument set (trace), then on n new ones (replays) against eager f."""
    j = sm.jit(f, fallback=False, **kw)
    _same(j(*make_args(0)), f(*make_args(0)))
    for s in range(1, n + 1):
        args = make_args(s)
        _same(j(*args), f(*args))
    assert j.stats == {"traces": 1, "replays": n, "eager": 0}
    return j


@pytest.mark.parametrize("spec", OPS, ids=str)
def test_every_op_replays_like_eager(spec):
    _replays(spec.op, lambda s: _tensors(spec.sample("float64", seed=s), "float64"), n=2)


@pytest.mark.parametrize("spec", [s for s in OPS if s.diff], ids=str)
def test_every_op_gradient_replays_like_eager(spec):
    k = len(spec.shapes)
    g = sm.grad(lambda *a: (spec.op(*a) * spec.op(*a)).sum(), argnums=tuple(range(k)))
    _replays(g, lambda s: _tensors(spec.sample("float64", seed=s), "float64"), n=2)


@pytest.mark.parametrize("name", ["sin", "tanh", "mul", "matmul", "exp", "softmax", "logsumexp", "sum_axis0", "getitem", "take"])
def test_second_order_replays(name):
    spec = next((s for s in OPS if s.name == name), None)
    if spec is None:
        pytest.fail(f"no op spec named {name}")
    h = sm.hessian(lambda a, *rest: (spec.op(a, *rest) ** 2).sum())
    _replays(h, lambda s: _tensors(spec.sample("float64", seed=s), "float64"), n=2)


def _mlp_loss():
    rng = np.random.default_rng(0)
    x = sm.tensor(rng.standard_normal((32, 3)))
    y = sm.tensor(rng.standard_normal((32, 2)))

    def loss(p):
        h = sm.tanh(x @ p["W1"] + p["b1"])
        return ((h @ p["W2"] + p["b2"] - y) ** 2).mean()

    def params(s):
        r = np.random.default_rng(100 + s)
        return {"W1": sm.tensor(r.standard_normal((3, 16)) * 0.5), "b1": sm.tensor(r.standard_normal(16) * 0.1),
                "W2": sm.tensor(r.standard_normal((16, 2)) * 0.5), "b2": sm.tensor(r.standard_normal(2) * 0.1)}
    return loss, params


def test_mlp_value_and_grad_hvp_and_hessian_replay():
    loss, params = _mlp_loss()
    _replays(sm.value_and_grad(loss), lambda s: (params(s),))
    v = params(50)
    _replays(lambda p, t: CV.hvp(loss, p, t), lambda s: (params(s), v))

    flat = lambda th: loss({"W1": th[:48].reshape((3, 16)), "b1": th[48:64],  # noqa: E731
                            "W2": th[64:96].reshape((16, 2)), "b2": th[96:98]})
    _replays(sm.hessian(flat), lambda s: (sm.tensor(np.random.default_rng(s).standard_normal(98) * 0.3),), n=2)


def test_jitted_gradient_matches_finite_differences_first_and_second_order():
    g = sm.jit(sm.grad(lambda x: (sm.sin(x) * x * x).sum()), fallback=False)
    x = sm.tensor([0.3, -1.2, 2.0])
    g(x)
    check_grads(lambda u: (g(u.detach()) * 0 + sm.grad(lambda w: (sm.sin(w) * w * w).sum())(u)).sum(), (x,),
                order=2)
    a = np.array([0.7, -0.4, 1.1])
    h = 1e-6
    fd = np.array([((np.sin(a + h * e) * (a + h * e) ** 2).sum() - (np.sin(a - h * e) * (a - h * e) ** 2).sum())
                   / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(g(sm.tensor(a)).numpy(), fd, rtol=1e-8)
    H = sm.jit(sm.hessian(lambda x: (sm.sin(x) * x * x).sum()), fallback=False)
    H(x)
    want = np.diag(2 * np.sin(a) + 4 * a * np.cos(a) - a * a * np.sin(a))
    np.testing.assert_allclose(H(sm.tensor(a)).numpy(), want, rtol=1e-10, atol=1e-12)
    assert H.stats["replays"] == 1


def test_outputs_are_fresh_and_inputs_untouched():
    f = sm.jit(lambda x: x * 2.0 + 1.0, fallback=False)
    x1, x2 = sm.tensor([1.0, 2.0]), sm.tensor([3.0, 4.0])
    f(x1)
    a, b = f(x1), f(x2)
    np.testing.assert_array_equal(a.numpy(), [3.0, 5.0])  # not overwritten by the second call
    np.testing.assert_array_equal(b.numpy(), [7.0, 9.0])
    np.testing.assert_array_equal(x1.numpy(), [1.0, 2.0])


def test_new_shapes_and_static_arguments_retrace():
    f = sm.jit(lambda x, k: (x * k).sum(), fallback=False)
    assert float(f(sm.tensor([1.0, 2.0]), 2.0)) == 6.0
    assert float(f(sm.tensor([1.0, 2.0, 3.0]), 2.0)) == 12.0
    assert float(f(sm.tensor([1.0, 2.0]), 3.0)) == 9.0
    assert float(f(sm.tensor([2.0, 2.0]), 3.0)) == 12.0
    assert f.stats == {"traces": 3, "replays": 1, "eager": 0}


def test_closed_over_parameters_updated_in_place_are_seen():
    from sciml.models import MLP, mse
    from sciml.optim import Adam
    net = MLP([2, 8, 1], activation=sm.tanh, seed=0)
    x = sm.tensor(np.random.default_rng(0).standard_normal((16, 2)))
    y = sm.tensor(np.random.default_rng(1).standard_normal((16, 1)))
    vg = sm.value_and_grad(lambda p: mse(net.apply(p, x), y))
    net2 = MLP([2, 8, 1], activation=sm.tanh, seed=0)
    vg2 = sm.jit(sm.value_and_grad(lambda p: mse(net2.apply(p, x), y)), fallback=False)
    opt, opt2 = Adam(net.parameters(), lr=1e-2), Adam(net2.parameters(), lr=1e-2)
    for _ in range(5):
        l1, g1 = vg(net.params())
        l2, g2 = vg2(net2.params())
        assert float(l1) == pytest.approx(float(l2), rel=1e-12)
        opt.step(g1)
        opt2.step(g2)
    assert vg2.stats["replays"] == 4


def test_host_read_is_refused_with_a_clear_error_or_runs_eagerly():
    def f(x):
        s = x.sum()
        return x * 2.0 if float(s) > 0 else x * 3.0
    with pytest.raises(sm.JitError, match="reads a value computed from the inputs on the host"):
        sm.jit(f, fallback=False)(sm.tensor([1.0, 2.0]))
    j = sm.jit(f, fallback="eager")
    with pytest.warns(RuntimeWarning, match="Running it eagerly"):
        assert j(sm.tensor([1.0, 2.0])).numpy().tolist() == [2.0, 4.0]
    assert j(sm.tensor([-1.0, -2.0])).numpy().tolist() == [-3.0, -6.0]  # eager: the branch follows the data
    assert j.stats["eager"] == 2


def test_random_draws_are_refused():
    with pytest.raises(sm.JitError, match="draws random numbers"):
        sm.jit(lambda x: x + sm.rand(2), fallback=False)(sm.tensor([1.0, 2.0]))
    f = sm.jit(lambda x: x + sm.rand(2, seed=3), fallback=False)  # a seeded draw is a constant, as eager
    x = sm.tensor([1.0, 2.0])
    _same(f(x), f(x))


def test_user_taichi_kernels_are_refused():
    import taichi as ti

    @ti.kernel
    def double(u: ti.types.ndarray(dtype=ti.f64, ndim=1), out: ti.types.ndarray(dtype=ti.f64, ndim=1)):
        for i in u:
            out[i] = 2.0 * u[i]
    f = sm.taichi_function(double, inputs={"u": (3,)}, outputs={"out": (3,)})
    # the bridge reads its inputs on the host, and launches a kernel outside sciml's cache: either is refused
    with pytest.raises(sm.JitError, match="launches the Taichi kernel 'double' directly|reads a value computed"):
        sm.jit(lambda u: f(u), fallback=False)(sm.tensor([1.0, 2.0, 3.0]))


def test_inside_a_transform_the_call_runs_eagerly():
    f = sm.jit(lambda x: (sm.sin(x) * x).sum(), fallback=False)
    x = sm.tensor([0.3, 1.2])
    f(x)
    g = sm.grad(lambda u: f(u))(x)  # derivatives flow through the eager call
    np.testing.assert_allclose(g.numpy(), np.sin([0.3, 1.2]) + np.array([0.3, 1.2]) * np.cos([0.3, 1.2]),
                               rtol=1e-12)
    assert f.stats["eager"] == 1


def test_bad_arguments():
    f = sm.jit(lambda x, opts: x)
    with pytest.raises(TypeError, match="argument leaf 1 is a set"):
        f(sm.tensor([1.0]), {1, 2})


def test_lbfgs_with_jit_follows_the_eager_trajectory():
    from sciml.optim import LBFGS, lbfgs

    def rosen(x):
        return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()
    x0 = sm.tensor(np.tile([-1.2, 1.0], 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no eager fallback
        a = lbfgs(rosen, x0, gtol=1e-8, max_iter=500)
        b = lbfgs(rosen, x0, gtol=1e-8, max_iter=500, jit=True)
    assert a.reason == b.reason == "gtol"
    assert (a.iterations, a.nfev) == (b.iterations, b.nfev)
    np.testing.assert_allclose(b.params.numpy(), a.params.numpy(), rtol=1e-10)
    # the shell keeps its trace across steps
    from sciml.models import Parameter
    p = Parameter(sm.tensor(np.tile([-1.2, 1.0], 5)))
    opt = LBFGS([p], max_iter=10, jit=True)
    for _ in range(3):
        opt.step(lambda ps: rosen(ps[0]))
    assert opt._jit_cache["fn"].stats["traces"] == 1


# --- bounded trace cache, static arguments, concretization errors (issues 13 and 17) -------------
def test_traces_are_lru_bounded():
    import gc
    import weakref
    f = sm.jit(lambda x: (sm.sin(x) * 2.0).sum(), max_traces=3)
    refs = []
    for n in range(1, 7):                       # six shapes: at most three kept
        x = sm.tensor(np.linspace(0, 1, n))
        _same(f(x), (sm.sin(x) * 2.0).sum())
        refs.append(weakref.ref(next(reversed(f.plans.values()))))
    assert len(f.plans) == 3 and f.evictions == 3 and f.stats["traces"] == 6
    gc.collect()
    assert [r() is None for r in refs] == [True, True, True, False, False, False]   # evicted plans are freed
    f(sm.tensor(np.linspace(0, 1, 4)))          # a hit refreshes shape (4,): the next eviction drops (5,)
    assert f.stats["replays"] == 1
    f(sm.tensor(np.linspace(0, 1, 7)))
    assert [k[1][0][0] for k in f.plans] == [(6,), (4,), (7,)]
    g = sm.jit(lambda x: x * 2.0, max_traces=None)
    for n in range(1, 40):
        g(sm.ones((n,)))
    assert len(g.plans) == 39 and g.evictions == 0
    assert len(sm.jit(lambda x: x).plans) == 0 and sm.jit(lambda x: x).max_traces == 32
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match=r"sciml.jit\(max_traces=...\): got .*expected a positive int or None"):
            sm.jit(lambda x: x, max_traces=bad)


def test_static_argnums_and_argnames():
    calls = []

    def f(x, n, scale=1.0, *, mode="sin"):
        calls.append((n, mode))
        u = sm.sin(x) if mode == "sin" else sm.cos(x)
        for _ in range(n):                      # Python control flow on a static value
            u = u * scale
        return u.sum()
    x = sm.tensor([0.3, 1.2, -0.5])

    def ref(n, scale=1.0, mode="sin"):
        return (np.sin if mode == "sin" else np.cos)(x.numpy()).sum() * scale ** n
    j = sm.jit(f, static_argnums=1, static_argnames="mode")
    assert j.static_argnums == (1,) and j.static_argnames == ("mode", "n")
    np.testing.assert_allclose(j(x, 2, 0.5).numpy(), ref(2, 0.5), rtol=1e-12)
    np.testing.assert_allclose(j(x, n=2, scale=0.5).numpy(), ref(2, 0.5), rtol=1e-12)   # by name: same static
    np.testing.assert_allclose(j(x, 3, 0.5).numpy(), ref(3, 0.5), rtol=1e-12)           # new value: new trace
    np.testing.assert_allclose(j(x, 3, 0.5, mode="cos").numpy(), ref(3, 0.5, "cos"), rtol=1e-12)
    y = sm.tensor([1.0, 2.0, 3.0])
    np.testing.assert_allclose(j(y, 3, 0.5, mode="cos").numpy(), np.cos([1, 2, 3]).sum() * 0.125, rtol=1e-12)
    assert j.stats == {"traces": 4, "replays": 1, "eager": 0}    # (scale by keyword: another tree, as in JAX)
    k = sm.jit(f, static_argnames=("n",))     # completed from the signature: position 1
    assert k.static_argnums == (1,)
    assert sm.jit(lambda a, b: a, static_argnums=-1).static_argnames == ("b",)
    with pytest.raises(TypeError, match="static argument 1 is a list, which is not hashable.*tuple"):
        sm.jit(lambda a, b: a, static_argnums=1)(x, [1, 2])
    with pytest.raises(TypeError, match="static argument 1 is a Tensor; static arguments must be hashable Python "
                                        "values"):
        sm.jit(lambda a, b: a, static_argnums=1)(x, x)
    with pytest.raises(ValueError, match=r"static_argnames=...\): '<lambda>' has no argument 'nn'; its arguments "
                                         "are a, b"):
        sm.jit(lambda a, b: a, static_argnames="nn")
    with pytest.raises(ValueError, match=r"static_argnums=...\): argument 5 is out of range"):
        sm.jit(lambda a, b: a, static_argnums=5)
    with pytest.raises(TypeError, match="static_argnums=...\\): got 'a'"):
        sm.jit(lambda a, b: a, static_argnums=["a"])
    dec = sm.jit(static_argnums=(1,))(lambda a, p: a ** p)         # as a decorator with arguments
    np.testing.assert_allclose(dec(x, 3).numpy(), x.numpy() ** 3, rtol=1e-12)


def test_keyword_tensor_arguments_are_traced():
    j = sm.jit(lambda x, w=None: (x * w).sum())
    x, w = sm.tensor([1.0, 2.0]), sm.tensor([3.0, 4.0])
    assert j(x, w=w).numpy() == 11.0
    assert j(sm.tensor([2.0, 2.0]), w=w).numpy() == 14.0
    assert j.stats == {"traces": 1, "replays": 1, "eager": 0}


def test_concretization_error_is_the_default_and_says_what_and_how():
    def f(x):
        s = x.sum()
        if s > 0:                               # bool(t) on a traced value
            return x * 2.0
        return x * 3.0
    with pytest.raises(sm.ConcretizationError) as e:
        sm.jit(f)(sm.tensor([1.0, 2.0]))
    msg = str(e.value)
    assert msg.startswith("sciml.jit(f): concretization error: bool(t)")
    assert "a traced Tensor (shape (), bool)" in msg                 # the value of `s > 0`
    assert "test_jit.py:" in msg and "in f: `if s > 0:" in msg       # the line that read it
    for hint in ("sm.where", "static_argnums", "fallback='eager'"):
        assert hint in msg
    assert isinstance(e.value, sm.JitError)
    for read, how in ((lambda t: float(t.sum()), "float(t)"), (lambda t: t.numpy(), "t.numpy()"),
                      (lambda t: t.sum().item(), "t.item()")):
        with pytest.raises(sm.ConcretizationError, match=r"concretization error: " + how.replace("(", r"\(")
                           .replace(")", r"\)").replace(".", r"\.")):
            sm.jit(lambda t, r=read: t * r(t))(sm.tensor([1.0, 2.0]))
    j = sm.jit(f, fallback="eager")             # asked for: warn once, then eager for this signature
    with pytest.warns(RuntimeWarning, match="concretization error.*Running it eagerly"):
        assert j(sm.tensor([1.0, 2.0])).numpy().tolist() == [2.0, 4.0]
    assert j(sm.tensor([-1.0, -2.0])).numpy().tolist() == [-3.0, -6.0]
    assert j.stats["eager"] == 2
    with pytest.raises(ValueError, match="fallback=...\\): got 'maybe'; expected 'raise' or 'eager'"):
        sm.jit(f, fallback="maybe")
    # a read of a closed-over constant (not computed from the inputs) is fine
    c = sm.tensor([5.0])
    assert sm.jit(lambda t: t * float(c.numpy()[0]))(sm.tensor([1.0])).numpy().tolist() == [5.0]


def test_jitted_function_from_two_threads():
    import threading
    f = sm.jit(lambda x: (sm.tanh(x) * x).sum())
    xs = [sm.tensor(np.linspace(-1, 1, 5) * (i + 1)) for i in range(4)]
    want = [float((np.tanh(x.numpy()) * x.numpy()).sum()) for x in xs]
    got, errors = [], []

    def run():
        try:
            for _ in range(10):
                got.append([float(f(x).numpy()) for x in xs])
        except BaseException as e:   # pragma: no cover
            errors.append(e)
    ts = [threading.Thread(target=run) for _ in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors and len(got) == 20
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-13)
