"""sm.vmap (sciml/autodiff/vmap.py): vmap equals a Python loop for ops of every rule kind, in_axes / out_axes,
per-example gradients, nesting, composition with grad / jvp / jacfwd / jit, the loop fallback, errors."""
import numpy as np
import pytest

import sciml as sm
from sciml import linalg as LA
from sciml.autodiff import primitive as P
from sciml.autodiff.ops import array as A
from sciml.autodiff.vmap import loop_fallback_primitives
from sciml.testing import check_grads

rng = np.random.default_rng(0)
B = 4


def t(a):
    return sm.tensor(a, "float64")


def loop(f, in_axes, args, out_axes=0):
    outs = []
    for b in range(B):
        outs.append(f(*[a if ax is None else sm.tensor(np.take(a.numpy(), b, ax), a.dtype)
                        for a, ax in zip(args, in_axes)]))
    return np.stack([o.numpy() for o in outs], out_axes)


SPD = rng.standard_normal((B, 3, 3))
SPD = SPD @ SPD.transpose(0, 2, 1) + 3 * np.eye(3)
CASES = [  # name, f, in_axes, args
    ("elementwise", lambda x, y: sm.sin(x) * y + sm.exp(-x) / (1.0 + y * y), (0, 0),
     (rng.standard_normal((B, 3)), rng.standard_normal((B, 3)))),
    ("broadcast_unbatched", lambda x, y: x * y - sm.maximum(x, y), (0, None),
     (rng.standard_normal((B, 2, 3)), rng.standard_normal(3))),
    ("scalar_vs_vector", lambda s, v: s * v + s, (0, None), (rng.standard_normal(B), rng.standard_normal(5))),
    ("where_compare", lambda x, y: sm.where(x > y, x, y * 2.0), (0, None),
     (rng.standard_normal((B, 3)), rng.standard_normal(3))),
    ("reductions", lambda x: x.sum(0) + x.max(1).sum() + x.mean() + sm.logsumexp(x, 0).sum(), (0,),
     (rng.standard_normal((B, 3, 2)),)),
    ("views", lambda x: x[1:, ::-1].T.reshape(-1) + x[0, 0], (0,), (rng.standard_normal((B, 3, 2)),)),
    ("concat_take", lambda x, y: sm.concat([x, y, x[:1]], 0)[np.array([0, 3, 1])], (0, None),
     (rng.standard_normal((B, 2, 2)), rng.standard_normal((2, 2)))),
    ("matmul_left", lambda x, w: x @ w, (0, None), (rng.standard_normal((B, 3, 4)), rng.standard_normal((4, 2)))),
    ("matmul_right", lambda w, x: w @ x, (None, 0), (rng.standard_normal((3, 4)), rng.standard_normal((B, 4, 2)))),
    ("matmul_both", lambda x, w: sm.matmul(x, w, transpose_b=True), (0, 0),
     (rng.standard_normal((B, 3, 4)), rng.standard_normal((B, 2, 4)))),
    ("matvec", lambda w, x: w @ x, (None, 0), (rng.standard_normal((3, 4)), rng.standard_normal((B, 4)))),
    ("softmax", lambda x: sm.softmax(x, 0) * sm.log_softmax(x, -1), (0,), (rng.standard_normal((B, 3, 2)),)),
    ("linalg", lambda a, b: LA.solve(LA.cholesky(a), b) + LA.eigvalsh(a)[:, None] + LA.det(a), (0, None),
     (SPD, rng.standard_normal((3, 2)))),
    ("array_ops", lambda x: A.cumsum(x, 0) * A.sort(x, 1) + A.prod(x, 1, keepdims=True), (0,),
     (rng.standard_normal((B, 3, 2)),)),
    ("einsum", lambda x, y: A.einsum("ij,jk->ik", x, y), (0, None),
     (rng.standard_normal((B, 2, 3)), rng.standard_normal((3, 2)))),
    ("linalg_more", lambda a, b: LA.qr(a)[0] @ LA.triangular_solve(LA.cholesky(b), a, lower=True)
     + LA.pinv(a) + LA.svd(a, full_matrices=False)[1].sum() + LA.inv(b) + LA.norm(a, "nuc"), (0, 0),
     (rng.standard_normal((B, 3, 3)), SPD)),
    ("array_more", lambda x: sm.concat([A.topk(x, 2)[0], A.argmax(x, -1, keepdims=True).astype("float64"),
                                        A.cumprod(x, 1)], 1), (0,), (rng.uniform(0.5, 2, (B, 3, 4)),)),
    ("layout", lambda x, y: A.pad(A.roll(x, 1, 0), 1, mode="reflect")[:3, :3] + A.kron(x[:1, :1], y)
     + A.trace(x) + A.diag(A.diagonal(x)[:3]) + A.cross(x[:, :3], x[:, 1:4]).sum(), (0, None),
     (rng.standard_normal((B, 3, 4)), rng.standard_normal((3, 3)))),
    ("fft", lambda x: sm.fft.irfft(sm.fft.rfft(x) * sm.fft.rfft(x), 6), (0,), (rng.standard_normal((B, 2, 6)),)),
    ("axis1", lambda x, y: x * y, (1, 0), (rng.standard_normal((3, B)), rng.standard_normal((B, 3)))),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_vmap_equals_loop(case):
    _, f, axes, args = case
    args = tuple(t(a) for a in args)
    got = sm.vmap(f, in_axes=axes)(*args).numpy()
    np.testing.assert_allclose(got, loop(f, axes, args), rtol=1e-12, atol=1e-12)


def test_out_axes_and_pytrees():
    x = t(rng.standard_normal((B, 3)))
    f = lambda d: {"s": d["a"] * 2.0, "t": (d["a"].sum(), d["c"])}
    out = sm.vmap(f, in_axes=({"a": 0, "c": None},), out_axes=1)({"a": x, "c": t(np.ones(2))})
    np.testing.assert_allclose(out["s"].numpy(), 2 * x.numpy().T)
    np.testing.assert_allclose(out["t"][0].numpy(), x.numpy().sum(1))
    assert out["t"][1].shape == (2, B)  # unbatched outputs are broadcast along the batch axis
    r = sm.vmap(lambda: sm.ones(2) * 3.0, in_axes=(), axis_size=3)()
    assert r.shape == (3, 2)


def test_per_example_gradients():
    def loss(p, x, y):
        return ((sm.tanh(x @ p["w"]) + p["b"] - y) ** 2).sum()
    p = {"w": t(rng.standard_normal((3, 2))), "b": t(rng.standard_normal(2))}
    x, y = t(rng.standard_normal((B, 3))), t(rng.standard_normal((B, 2)))
    g = sm.vmap(sm.grad(loss), in_axes=(None, 0, 0))(p, x, y)
    for b in range(B):
        gb = sm.grad(loss)(p, x[b], y[b])
        np.testing.assert_allclose(g["w"].numpy()[b], gb["w"].numpy(), rtol=1e-12)
        np.testing.assert_allclose(g["b"].numpy()[b], gb["b"].numpy(), rtol=1e-12)
    net = sm.models.MLP([3, 5, 2], activation=sm.tanh, seed=0)  # fused bias+activation kernels inside
    mlp_loss = lambda q, xi, yi: ((net.apply(q, sm.reshape(xi, (1, 3))) - yi) ** 2).sum()
    gm = sm.vmap(sm.grad(mlp_loss), in_axes=(None, 0, 0))(net.params(), x, y)
    for b in range(B):
        for u, v in zip(sm.tree_leaves(gm), sm.tree_leaves(sm.grad(mlp_loss)(net.params(), x[b], y[b]))):
            np.testing.assert_allclose(u.numpy()[b], v.numpy(), rtol=1e-12, atol=1e-14)
    h = sm.vmap(sm.hessian(lambda z: (sm.sin(z) * z.sum()).sum()))(x)
    for b in range(B):
        np.testing.assert_allclose(h.numpy()[b], sm.hessian(lambda z: (sm.sin(z) * z.sum()).sum())(x[b]).numpy(),
                                   rtol=1e-12)


def test_nested_vmap():
    a, b = t(rng.standard_normal(3)), t(rng.standard_normal(B))
    h = sm.vmap(sm.vmap(lambda u, v: u * v + sm.exp(u), in_axes=(0, None)), in_axes=(None, 0))(a, b)
    np.testing.assert_allclose(h.numpy(), a.numpy()[None] * b.numpy()[:, None] + np.exp(a.numpy())[None])
    m = t(rng.standard_normal((B, 3, 2)))
    mm = sm.vmap(sm.vmap(lambda r: r @ r.T))(t(rng.standard_normal((B, 3, 2, 2))))
    assert mm.shape == (B, 3, 2, 2)
    dots = sm.vmap(sm.vmap(lambda u, v: (u * v).sum(), (0, None)), (None, 0))(m[0], m[1])
    np.testing.assert_allclose(dots.numpy(), m.numpy()[1] @ m.numpy()[0].T, rtol=1e-12)


def test_derivatives_through_vmap_second_order():
    w = t(rng.standard_normal((3, 2)))
    x = t(rng.standard_normal((B, 3)))
    f = lambda x_, w_: sm.tanh(x_ @ w_).sum() * sm.sin(x_).mean()
    check_grads(lambda xs, ws: sm.vmap(f, in_axes=(0, None))(xs, ws), (x, w), order=2)
    vj = sm.vmap(lambda u: sm.jvp(lambda z: sm.sin(z) * z, (u,), (sm.ones_like(u),))[1])(x)
    np.testing.assert_allclose(vj.numpy(), np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy()), rtol=1e-12)


def test_jit_of_vmap_replays():
    w = t(rng.standard_normal((3, 2)))
    f = sm.jit(sm.vmap(lambda x_, w_: sm.tanh(x_ @ w_).sum(), in_axes=(0, None)))
    for s in range(2):
        x = t(np.random.default_rng(s).standard_normal((B, 3)))
        np.testing.assert_allclose(f(x, w).numpy(), np.tanh(x.numpy() @ w.numpy()).sum(1), rtol=1e-12)
    assert f.stats["replays"] == 1
    inner = sm.jit(lambda x_, w_: sm.tanh(x_ @ w_).sum())
    inner(t(np.ones(3)), w)  # traced on a single example first
    x = t(rng.standard_normal((B, 3)))
    np.testing.assert_allclose(sm.vmap(inner, in_axes=(0, None))(x, w).numpy(),
                               np.tanh(x.numpy() @ w.numpy()).sum(1), rtol=1e-12)
    assert inner.stats["eager"] == 1


def test_loop_fallback_for_a_primitive_without_rule():
    prim = P.Primitive("test_cube", lambda x: ((x * x * x)._buf, x.shape, x.dtype))
    prim.def_vjp(lambda g, x, out: (3.0 * g * x * x,))
    x = t(rng.standard_normal((B, 3)))
    r = sm.vmap(lambda z: prim(z) + 1.0)(x)
    np.testing.assert_allclose(r.numpy(), x.numpy() ** 3 + 1.0, rtol=1e-12)
    assert "test_cube" in loop_fallback_primitives()
    g = sm.vmap(sm.grad(lambda z: prim(z).sum()))(x)
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2, rtol=1e-12)


def test_errors():
    x = t(np.ones((B, 3)))
    with pytest.raises(ValueError, match="batch sizes differ"):
        sm.vmap(lambda a, b: a + b)(x, t(np.ones((2, 3))))
    with pytest.raises(ValueError, match="in_axes 2"):
        sm.vmap(lambda a: a, in_axes=2)(x)
    with pytest.raises(ValueError, match="one entry per"):
        sm.vmap(lambda a, b: a, in_axes=(0,))(x, x)
    with pytest.raises(ValueError, match="axis_size"):
        sm.vmap(lambda a: a, in_axes=None)(x)
    with pytest.raises(ZeroDivisionError):
        sm.vmap(lambda a: a * (1 / 0))(x)
    import importlib
    J = importlib.import_module("sciml.autodiff.jit")
    assert P.CALL_HOOK[0] is None and J.EAGER_HOOK[0] is None  # the hooks are gone after (and despite) errors


def test_hooks_route_only_while_vmap_runs():
    """primitive.CALL_HOOK and jit.EAGER_HOOK are set during a vmap and cleared after; a jitted function
    called on batched Tensors inside vmap runs eagerly (with keyword arguments too)."""
    import importlib
    J = importlib.import_module("sciml.autodiff.jit")
    seen = []
    f = sm.jit(lambda a, scale=1.0: a * scale)

    def g(a):
        seen.append((P.CALL_HOOK[0] is not None, J.EAGER_HOOK[0] is not None))
        return f(a, scale=t(2.0))
    out = sm.vmap(g)(t(np.arange(6.0).reshape(B, -1) if 6 % B == 0 else np.ones((B, 2))))
    assert seen == [(True, True)] and f.stats["eager"] == 1 and f.stats["traces"] == 0
    assert P.CALL_HOOK[0] is None and J.EAGER_HOOK[0] is None
    np.testing.assert_allclose(out.numpy(), 2 * (np.arange(6.0).reshape(B, -1) if 6 % B == 0 else np.ones((B, 2))))


def test_random_draws_over_a_batch_of_keys():
    keys = sm.random.split(sm.random.key(0), B)
    got = sm.vmap(lambda k: sm.random.normal(k, (2,)) + sm.random.uniform(sm.random.split(k)[1], (2,)))(keys)
    for b in range(B):
        k = keys[b]
        want = sm.random.normal(k, (2,)).numpy() + sm.random.uniform(sm.random.split(k)[1], (2,)).numpy()
        np.testing.assert_array_equal(got.numpy()[b], want)
    x = t(np.zeros((B, 3)))
    noisy = sm.vmap(lambda xi: xi + sm.random.normal(sm.random.key(1), (3,)))(x)  # unbatched key: same draw
    np.testing.assert_array_equal(noisy.numpy()[0], noisy.numpy()[1])
