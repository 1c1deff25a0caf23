"""Batched forward mode (tangents with a leading batch axis B): batched_jvp equals the stack of B
unbatched JVPs for every op spec of test_ops (also through each op's VJP rules, i.e. forward over
reverse), the loop fallback for primitives without a batched rule, and jacfwd / hessian built on it
against jacrev, the per-basis-vector path and finite differences (float64)."""
import numpy as np
import pytest

import sciml as sm
from sciml.autodiff import curvature as CV
from sciml.autodiff import primitive as P
from sciml.autodiff.ops import conv as CO

from test_ops import OPS, _tensors  # noqa: E402  (tests/autodiff is on sys.path: no __init__.py)

NB = 3


def _batched_tangents(args, seed):
    rng = np.random.default_rng(seed)
    return tuple(sm.tensor(rng.standard_normal((NB,) + a.shape)) for a in args)


def _stacked_jvps(f, args, tb):
    outs = []
    for b in range(NB):
        outs.append(sm.jvp(f, args, tuple(sm.tensor(t.numpy()[b]) for t in tb))[1].numpy())
    return np.stack(outs)


def _check_batched(f, args, seed=0, rtol=1e-12, atol=1e-12):
    tb = _batched_tangents(args, seed)
    y, ty = sm.batched_jvp(f, args, tb)
    want = _stacked_jvps(f, args, tb)
    assert ty.shape == (NB,) + y.shape
    np.testing.assert_allclose(ty.numpy(), want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(y.numpy(), f(*args).numpy(), rtol=1e-14, atol=1e-14)


DIFF_OPS = [s for s in OPS if s.diff]


@pytest.mark.parametrize("spec", DIFF_OPS, ids=str)
def test_batched_jvp_equals_stacked_jvps(spec):
    args = _tensors(spec.sample("float64", seed=1), "float64")
    _check_batched(spec.op, args)


@pytest.mark.parametrize("spec", DIFF_OPS, ids=str)
def test_batched_jvp_through_vjp_rules(spec):
    """Forward over reverse: the JVPs of the ops that each VJP rule records (what hessian runs)."""
    args = _tensors(spec.sample("float64", seed=2), "float64")
    out = spec.op(*args)
    ct = sm.tensor(np.random.default_rng(5).standard_normal(out.shape))

    def pulled(*a):
        r = sm.vjp(spec.op, *a)[1](ct)
        return sm.concat([sm.reshape(g, (-1,)) for g in r]) if len(r) > 1 else r[0]
    _check_batched(pulled, args, seed=3)


def _mlp_loss(w):
    x = sm.tensor(np.linspace(-1.0, 1.0, 10).reshape(5, 2))
    W1 = sm.reshape(w[:6], (2, 3))
    b1 = w[6:9]
    W2 = sm.reshape(w[9:12], (3, 1))
    h = sm.tanh(x @ W1 + b1)
    return ((h @ W2 + w[12]) ** 2).mean()


def _rosen(x):
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


def _shapes_fn(x):
    """Reductions over axes, reshape, transpose, indexing, take, concat, softmax family, where, max."""
    m = sm.reshape(x, (3, 4))
    a = sm.sum(sm.sin(m) * m, axis=0)                       # (4,)
    b = sm.mean(m.T ** 2, axis=1, keepdims=True)            # (4, 1)
    c = sm.logsumexp(m, axis=0) + sm.log_softmax(m, 1)[1]   # (4,)
    d = sm.take(m, [2, 0, 2])[:, ::-1] * m[1, :]             # (3, 4)
    e = sm.concat([m[:, :2], sm.exp(m[:, 2:] * 0.3)], 1)    # (3, 4)
    f = sm.where(m > 0, m * m, sm.softplus(m))
    g = sm.max(m * m, axis=1) + sm.var(m, 0)[:3]
    return (a @ b).sum() + (c * c).sum() + (d * e).sum() + (f @ sm.softmax(m, 0).T).sum() + (g ** 3).sum()


FUNCS = [("mlp", _mlp_loss, 13), ("rosenbrock", _rosen, 7), ("shapes", _shapes_fn, 12)]


def _fd_hessian(f, x, eps=1e-5):
    g = sm.grad(f)
    n = x.size
    H = np.zeros((n, n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = eps
        H[:, i] = (g(sm.tensor(x + e)).numpy() - g(sm.tensor(x - e)).numpy()) / (2 * eps)
    return H


@pytest.mark.parametrize("name,f,n", FUNCS, ids=[f[0] for f in FUNCS])
def test_hessian_matches_finite_differences_and_per_vector_path(name, f, n):
    x = np.random.default_rng(7).standard_normal(n) * 0.7
    H = sm.hessian(f)(sm.tensor(x)).numpy()
    H_loop = sm.hessian(f, batched=False)(sm.tensor(x)).numpy()
    np.testing.assert_allclose(H, H_loop, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(H, _fd_hessian(f, x), rtol=1e-6, atol=1e-6)
    for cs in (1, 5):
        np.testing.assert_allclose(sm.hessian(f, chunk_size=cs)(sm.tensor(x)).numpy(), H, rtol=1e-12, atol=1e-12)
    Hd = CV.hessian_dense(f, sm.tensor(x)).numpy()
    Hr = CV.hessian_dense(f, sm.tensor(x), method="rows").numpy()
    np.testing.assert_allclose(Hd, H, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Hr, H, rtol=1e-10, atol=1e-10)


def test_hessian_dense_pytree_params_and_chunking():
    p = {"a": sm.tensor([[0.3, -0.2], [0.5, 0.1]]), "b": sm.tensor([0.7, -1.1, 0.4])}

    def f(q):
        return (sm.tanh(q["a"] @ q["b"][:2]) * q["b"][2]).sum() + (q["a"] ** 3).sum() * (q["b"] ** 2).sum()
    Hr = CV.hessian_dense(f, p, method="rows").numpy()
    for cs in (None, 1, 3, 100):
        np.testing.assert_allclose(CV.hessian_dense(f, p, chunk_size=cs).numpy(), Hr, rtol=1e-11, atol=1e-12)
    with pytest.raises(ValueError, match="method"):
        CV.hessian_dense(f, p, method="cols")


def test_jacfwd_equals_jacrev_and_finite_differences():
    def f(x, y):
        m = sm.reshape(x, (2, 3))
        return sm.concat([sm.sum(sm.sin(m) * y, 1), sm.reshape(m.T @ sm.exp(m), (-1,))[:4]])
    x = np.random.default_rng(1).standard_normal(6)
    y = sm.tensor([0.5, -1.0, 2.0])
    Jf = sm.jacfwd(f)(sm.tensor(x), y).numpy()
    Jr = sm.jacrev(f)(sm.tensor(x), y).numpy()
    assert Jf.shape == (6, 6)
    np.testing.assert_allclose(Jf, Jr, rtol=1e-12, atol=1e-12)
    eps = 1e-6
    fd = np.stack([(f(sm.tensor(x + eps * e), y).numpy() - f(sm.tensor(x - eps * e), y).numpy()) / (2 * eps)
                   for e in np.eye(6)], -1)
    np.testing.assert_allclose(Jf, fd, rtol=1e-7, atol=1e-8)
    # both arguments, matrix-valued input, chunks that do not divide n
    J0, J1 = sm.jacfwd(f, argnums=(0, 1), chunk_size=4)(sm.tensor(x), y)
    R0, R1 = sm.jacrev(f, argnums=(0, 1))(sm.tensor(x), y)
    np.testing.assert_allclose(J0.numpy(), R0.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(J1.numpy(), R1.numpy(), rtol=1e-12, atol=1e-12)
    A = sm.tensor(np.random.default_rng(2).standard_normal((3, 2)))
    g = lambda a: sm.tanh(a @ a.T)  # noqa: E731
    np.testing.assert_allclose(sm.jacfwd(g)(A).numpy(), sm.jacrev(g)(A).numpy(), rtol=1e-12, atol=1e-12)


def test_jacfwd_has_aux_scalar_output_and_third_order():
    x = sm.tensor([0.3, -0.8, 1.1])
    J, aux = sm.jacfwd(lambda v: ((v ** 3).sum(), "tag"), has_aux=True)(x)
    assert aux == "tag"
    np.testing.assert_allclose(J.numpy(), 3 * x.numpy() ** 2, rtol=1e-13)
    # nested batched levels: jacfwd of hessian = third derivative tensor
    f3 = lambda v: (sm.sin(v) * v[0]).sum()  # noqa: E731
    T3 = sm.jacfwd(sm.hessian(f3))(x).numpy()
    T3_loop = sm.jacfwd(sm.hessian(f3, batched=False), batched=False)(x).numpy()
    np.testing.assert_allclose(T3, T3_loop, rtol=1e-12, atol=1e-12)
    eps, xv = 1e-5, x.numpy()
    want = np.stack([(sm.hessian(f3)(sm.tensor(xv + eps * e)).numpy() - sm.hessian(f3)(sm.tensor(xv - eps * e)).numpy())
                     / (2 * eps) for e in np.eye(3)], -1)
    np.testing.assert_allclose(T3, want, rtol=1e-6, atol=1e-7)


# --- the fallback loop (primitives without a batched rule) -----------------------------------
def _copy_prim(name, src, jvp):
    p = sm.Primitive(name, src.forward)
    p.def_vjp(src.vjp)
    if jvp:
        p.def_jvp(src.jvp)
    return p


@pytest.mark.parametrize("with_jvp", [True, False], ids=["jvp_rule", "double_vjp"])
def test_fallback_loop_for_primitives_without_batched_rule(with_jvp):
    from sciml.autodiff.ops import elementwise as E
    from sciml.autodiff.ops import linalg as LA
    sin2 = _copy_prim("sin_nobatch", E.sin.primitive, with_jvp)
    mm2 = _copy_prim("mm_nobatch", LA._mm, with_jvp)
    assert sin2.batched_jvp is None
    A = sm.tensor(np.random.default_rng(3).standard_normal((4, 3)))

    def f(x):
        return sin2(mm2(A, sm.reshape(x, (3, 2)), ta=False, tb=False)) * 2.0
    x = sm.tensor(np.random.default_rng(4).standard_normal(6))
    _check_batched(f, (x,))
    g = lambda v: (f(v) ** 2).sum()  # noqa: E731
    np.testing.assert_allclose(sm.hessian(g)(x).numpy(), sm.hessian(g, batched=False)(x).numpy(),
                               rtol=1e-11, atol=1e-12)


# --- other primitives with batched rules --------------------------------------------------------
def test_nn_layer_primitives_batched():
    rng = np.random.default_rng(9)
    h = sm.tensor(rng.standard_normal((4, 3)))
    b = sm.tensor(rng.standard_normal(3))
    for act in ("identity", "tanh", "sigmoid"):
        _check_batched(lambda h_, b_: CO.bias_act(h_, b_, act), (h, b))
        _check_batched(lambda h_, b_: sm.vjp(lambda u, v: CO.bias_act(u, v, act) ** 2, h_, b_)[1](
            sm.ones((4, 3)))[1], (h, b))
    q = sm.tensor(np.abs(rng.standard_normal((4, 3))))
    for red in ("mean", "sum", "none"):
        _check_batched(lambda x: CO.softmax_cross_entropy(x, q, red), (h,))
    img = sm.tensor(rng.standard_normal((2, 1, 4, 4)))
    _check_batched(lambda x: CO.unfold(x, 2, stride=1, padding=1) ** 2, (img,))
    cols = CO.unfold(img, 2)
    _check_batched(lambda c: CO.fold(c * c, (2, 1, 4, 4), 2), (cols,))


def test_fused_primitive_batched():
    f = sm.fuse(lambda x, y: sm.tanh(x * y) + x)
    x = sm.tensor(np.linspace(-1, 1, 5))
    y = sm.tensor(np.linspace(0.5, 2, 5))
    _check_batched(f, (x, y))


def test_batched_jvp_validates_and_keeps_unbatched_jvp_intact():
    x = sm.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"\(B,\)"):
        sm.batched_jvp(sm.sin, (x,), (sm.ones((2, 3)),))
    with pytest.raises(ValueError, match="one B"):
        sm.batched_jvp(lambda a, b: a * b, (x, x), (sm.ones((2, 2)), sm.ones((3, 2))))
    y, ty = sm.batched_jvp(lambda v: v ** 3, (x,), (sm.eye(2),))
    np.testing.assert_allclose(ty.numpy(), np.diag([3.0, 12.0]))
    assert not P._batched_levels  # the level is unregistered after the call
    # an output that does not depend on the input: zero tangents of shape (B,) + out.shape
    _, tz = sm.batched_jvp(lambda v: sm.ones((4,)), (x,), (sm.eye(2),))
    assert tz.shape == (2, 4) and not tz.numpy().any()
    # the ordinary jvp is unchanged
    np.testing.assert_allclose(sm.jvp(lambda v: v ** 3, (x,), (sm.ones((2,)),))[1].numpy(), [3.0, 12.0])


# --- the row-wise gather / scatter and the expanded general broadcast (large tensors, CPU) ------
def test_rowwise_views_broadcasts_and_general_binary_on_large_tensors():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((9, 64, 33))
    x = sm.tensor(a)
    cases = [(lambda t: sm.transpose(t, (0, 2, 1)), lambda v: v.transpose(0, 2, 1)),
             (lambda t: sm.transpose(t, (2, 0, 1)), lambda v: v.transpose(2, 0, 1)),
             (lambda t: t[:, ::-2, 3:], lambda v: v[:, ::-2, 3:]),
             (lambda t: t[2:, 1:40, :], lambda v: v[2:, 1:40, :]),
             (lambda t: sm.broadcast_to(t[0], (5, 64, 33)), lambda v: np.broadcast_to(v[0], (5, 64, 33))),
             (lambda t: sm.broadcast_to(t[:, :1, :], (9, 64, 33)), lambda v: np.broadcast_to(v[:, :1, :], (9, 64, 33))),
             (lambda t: t + t[:, :1, :], lambda v: v + v[:, :1, :]),
             (lambda t: t[:, :1, :] * t, lambda v: v[:, :1, :] * v),
             (lambda t: t[:, :, :1] - t[:1, :, :], lambda v: v[:, :, :1] - v[:1, :, :]),
             (lambda t: t * t[0], lambda v: v * v[0]), (lambda t: t[0] - t, lambda v: v[0] - v),
             (lambda t: t / (t[1] + 9.0), lambda v: v / (v[1] + 9.0)),
             (lambda t: (t[1] + 9.0) / (t + 9.0), lambda v: (v[1] + 9.0) / (v + 9.0)),
             (lambda t: t[2] + t, lambda v: v[2] + v),
             (lambda t: sm.maximum(t, t[0]), lambda v: np.maximum(v, v[0]))]
    for op, ref in cases:
        np.testing.assert_array_equal(op(x).numpy(), ref(a))
    c = rng.standard_normal((300, 5, 3))  # short inner runs: the fallbacks
    z = sm.tensor(c)
    np.testing.assert_array_equal((z + z[:, :1, :]).numpy(), c + c[:, :1, :])
    np.testing.assert_array_equal((z[:1] * z[:, :, :1]).numpy(), c[:1] * c[:, :, :1])
    np.testing.assert_array_equal(sm.transpose(z, (2, 1, 0)).numpy(), c.transpose(2, 1, 0))
    # derivative products (tanh_grad, twice_mul) on suffix broadcasts: batched tangent x unbatched primal
    w = a[0] * 0.3
    for fn, d in ((sm.tanh, lambda v: 1 - np.tanh(v) ** 2), (sm.square, lambda v: 2 * v)):
        _, tw = sm.batched_jvp(fn, (sm.tensor(w),), (x,))
        np.testing.assert_allclose(tw.numpy(), a * d(w), rtol=1e-14, atol=1e-14)
    # the transposes of the views (unview = strided scatter), through reverse mode
    g = sm.grad(lambda t: (t[:, ::-2, 3:] * sm.tensor(a[:, ::-2, 3:])).sum())(x).numpy()
    want = np.zeros_like(a)
    want[:, ::-2, 3:] = a[:, ::-2, 3:]
    np.testing.assert_array_equal(g, want)


def test_hessian_with_argnums_tuple_and_pytree_outputs():
    """H[i][j] = d2f / dx_i dx_j (outer: gradient entries, inner: argnums), as JAX."""
    f = lambda a, b: (sm.sin(a) * b[0] + a ** 2 * b[1]).sum()  # noqa: E731
    a, b = sm.tensor([0.3, -0.7]), sm.tensor([1.5, 0.4])
    H = sm.hessian(f, argnums=(0, 1))(a, b)
    x = np.concatenate([a.numpy(), b.numpy()])
    Hfull = sm.hessian(lambda v: f(v[:2], v[2:]))(sm.tensor(x)).numpy()
    for i, si in enumerate((slice(0, 2), slice(2, 4))):
        for j, sj in enumerate((slice(0, 2), slice(2, 4))):
            np.testing.assert_allclose(H[i][j].numpy(), Hfull[si, sj], rtol=1e-12, atol=1e-13)
    J = sm.jacfwd(lambda v: {"s": sm.sin(v), "t": (v * v).sum()})(a)
    np.testing.assert_allclose(J["s"].numpy(), np.diag(np.cos(a.numpy())), rtol=1e-13)
    np.testing.assert_allclose(J["t"].numpy(), 2 * a.numpy(), rtol=1e-13)


def test_default_chunking_follows_the_measured_budget(monkeypatch):
    from sciml.autodiff import transforms as T
    calls = []
    orig = T.batched_jvp

    def counting(f, primals, tangents, has_aux=False):
        calls.append(next(t for t in tangents if t is not None).shape[0])
        return orig(f, primals, tangents, has_aux)
    monkeypatch.setattr(T, "batched_jvp", counting)
    monkeypatch.setattr(T, "FIRST_CHUNK", 10)
    monkeypatch.setattr(T, "PROBE_CHUNK", 4)
    monkeypatch.setattr(T, "CHUNK_BUDGET", 200)
    x = np.random.default_rng(3).standard_normal(13)
    H = sm.hessian(_rosen)(sm.tensor(x)).numpy()
    assert calls[0] == 4 and len(calls) > 2 and sum(calls) == 13
    per_col = T._last_cost[0]
    assert all(c == max(1, min(13, 200 // per_col)) for c in calls[1:-1])
    np.testing.assert_allclose(H, sm.hessian(_rosen, batched=False)(sm.tensor(x)).numpy(), rtol=1e-12, atol=1e-12)
    calls.clear()
    sm.hessian(_rosen)(sm.tensor(x[:9]))  # n <= FIRST_CHUNK: one pass
    assert calls == [9]


def test_fused_product_rule_on_large_tensors():
    """mul / twice_mul / tanh_grad / sigmoid_grad with both tangents batched (ops/pair.py), against the
    stacked unbatched JVPs, also one level up (hessian through them) and by reverse mode through it."""
    from sciml.autodiff.ops import elementwise as E
    rng = np.random.default_rng(12)
    x = sm.tensor(rng.standard_normal((64, 70)))
    y = sm.tensor(np.tanh(rng.standard_normal((64, 70))))
    for fn in (sm.mul, E.twice_mul, E.tanh_grad, E.sigmoid_grad):
        _check_batched(fn, (x, y))
    # the fused primitive differentiates: jacobian of its batched tangent w.r.t. the primal, both modes
    tb = _batched_tangents((x, y), 1)

    def tang(u):
        return sm.batched_jvp(lambda a, b: E.tanh_grad(a, b), (u, y), tb)[1].sum(axis=(0, 1))
    u = sm.tensor(rng.standard_normal((64, 70)))
    g_rev = sm.jacrev(tang)(u).numpy()
    g_fwd = sm.jacfwd(tang)(u).numpy()
    np.testing.assert_allclose(g_rev, g_fwd, rtol=1e-11, atol=1e-11)
    # closed form: d/du[r, j] of sum_{b, rows} (t_u (1 - y^2) - 2 u y t_y)[., j] = -2 y[r, j] sum_b t_y[b, r, j]
    want = np.zeros((70, 64, 70))
    col = -2.0 * y.numpy() * tb[1].numpy().sum(0)
    for j in range(70):
        want[j, :, j] = col[:, j]
    np.testing.assert_allclose(g_rev, want, rtol=1e-11, atol=1e-11)
