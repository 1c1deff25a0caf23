"""Transforms: closed-form Hessians, nesting, pytrees, argnums, has_aux, PyTorch-style API."""
import numpy as np
import pytest

import sciml as sm
from sciml.testing import check_grads


def test_hessian_of_sin_times_x_is_exact():
    x = np.array([0.3, 1.2])
    H = sm.hessian(lambda t: (sm.sin(t) * t).sum())(sm.tensor(x))
    np.testing.assert_allclose(H.numpy(), np.diag(2 * np.cos(x) - x * np.sin(x)), rtol=1e-13, atol=1e-15)


def test_hessian_of_quadratic_form_is_a_plus_at():
    A = np.random.default_rng(0).standard_normal((4, 4))
    x = sm.tensor(np.random.default_rng(1).standard_normal(4))
    H = sm.hessian(lambda v: v @ (sm.tensor(A) @ v))(x)
    np.testing.assert_allclose(H.numpy(), A + A.T, rtol=1e-13, atol=1e-13)


def _mlp_loss(p, x, y):
    h = sm.tanh(x @ p["W1"] + p["b1"])
    out = h @ p["W2"] + p["b2"]
    return ((out - y) ** 2).mean()


def _mlp_setup():
    rng = np.random.default_rng(2)
    x, y = sm.tensor(rng.standard_normal((5, 3))), sm.tensor(rng.standard_normal((5, 1)))
    p = {"W1": rng.standard_normal((3, 4)) * 0.5, "b1": rng.standard_normal(4) * 0.1,
         "W2": rng.standard_normal((4, 1)) * 0.5, "b2": rng.standard_normal(1) * 0.1}
    return {k: sm.tensor(v) for k, v in p.items()}, x, y


def test_hessian_of_mlp_loss_equals_jacfwd_of_jacrev():
    p, x, y = _mlp_setup()
    w = sm.tensor(np.random.default_rng(3).standard_normal(3 * 4))

    def f(wflat):
        q = dict(p, W1=wflat.reshape(3, 4))
        return _mlp_loss(q, x, y)
    H = sm.hessian(f)(w)
    H2 = sm.jacfwd(sm.jacrev(f))(w)
    H3 = sm.jacrev(sm.jacrev(f))(w)
    assert H.shape == (12, 12)
    np.testing.assert_allclose(H.numpy(), H2.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(H.numpy(), H3.numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(H.numpy(), H.numpy().T, rtol=1e-10, atol=1e-13)
    # against finite differences of the gradient
    g = sm.grad(f)
    e = 1e-6
    fd = np.stack([(g(sm.tensor(w.numpy() + e * np.eye(12)[i])).numpy()
                    - g(sm.tensor(w.numpy() - e * np.eye(12)[i])).numpy()) / (2 * e) for i in range(12)])
    np.testing.assert_allclose(H.numpy(), fd, atol=1e-7)


def test_grad_grad_grad():
    x = sm.tensor([0.5, -1.0, 2.0])
    f = lambda t: (t ** 4.0).sum()  # noqa: E731
    g3 = sm.grad(lambda a: sm.grad(lambda b: sm.grad(f)(b).sum())(a).sum())(x)
    np.testing.assert_allclose(g3.numpy(), 24 * x.numpy(), rtol=1e-12)


def test_hvp_equals_hessian_times_v():
    p, x, y = _mlp_setup()
    w = sm.tensor(np.random.default_rng(4).standard_normal(4))
    v = sm.tensor(np.random.default_rng(5).standard_normal(4))

    def f(b1):
        return _mlp_loss(dict(p, b1=b1), x, y)
    g, hv = sm.hvp(f, (w,), (v,))
    H = sm.hessian(f)(w).numpy()
    np.testing.assert_allclose(g[0].numpy(), sm.grad(f)(w).numpy(), rtol=1e-12)
    np.testing.assert_allclose(hv[0].numpy(), H @ v.numpy(), rtol=1e-11, atol=1e-14)


def test_jacrev_equals_jacfwd():
    rng = np.random.default_rng(6)
    A = sm.tensor(rng.standard_normal((3, 4)))
    f = lambda x: sm.tanh(A @ x) * x[:3]  # noqa: E731
    x = sm.tensor(rng.standard_normal(4))
    Jr, Jf = sm.jacrev(f)(x), sm.jacfwd(f)(x)
    assert Jr.shape == Jf.shape == (3, 4)
    np.testing.assert_allclose(Jr.numpy(), Jf.numpy(), rtol=1e-13, atol=1e-15)


def test_jacobian_of_matrix_function_shape():
    x = sm.tensor(np.random.default_rng(7).standard_normal((2, 3)))
    J = sm.jacrev(lambda t: sm.sin(t))(x)
    assert J.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(J.numpy().reshape(6, 6), np.diag(np.cos(x.numpy()).ravel()), atol=1e-15)
    np.testing.assert_allclose(sm.jacfwd(lambda t: sm.sin(t))(x).numpy(), J.numpy(), atol=1e-15)


def test_grad_with_pytrees_and_argnums():
    p, x, y = _mlp_setup()
    g = sm.grad(_mlp_loss)(p, x, y)
    assert set(g) == set(p) and all(g[k].shape == p[k].shape for k in p)
    gp, gx = sm.grad(_mlp_loss, argnums=(0, 1))(p, x, y)
    assert gx.shape == x.shape and set(gp) == set(p)
    np.testing.assert_allclose(gp["W1"].numpy(), g["W1"].numpy(), rtol=1e-14)
    # list / tuple pytrees
    f = lambda ws: (ws[0] * ws[1][0] + ws[1][1]).sum()  # noqa: E731
    a, b, c = sm.tensor([1.0, 2.0]), sm.tensor([3.0, 4.0]), sm.tensor([5.0, 6.0])
    ga = sm.grad(f)([a, (b, c)])
    assert isinstance(ga, list) and isinstance(ga[1], tuple)
    np.testing.assert_allclose(ga[0].numpy(), b.numpy())
    np.testing.assert_allclose(ga[1][0].numpy(), a.numpy())
    np.testing.assert_allclose(ga[1][1].numpy(), [1.0, 1.0])
    # negative argnums
    gl = sm.grad(lambda u, v: (u * v * v).sum(), argnums=-1)(a, b)
    np.testing.assert_allclose(gl.numpy(), 2 * a.numpy() * b.numpy())


def test_value_and_grad_has_aux():
    x = sm.tensor([1.0, 2.0])
    (v, aux), g = sm.value_and_grad(lambda t: ((t * t).sum(), {"n": t.size}), has_aux=True)(x)
    assert aux == {"n": 2}
    np.testing.assert_allclose(v.item(), 5.0)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    g2, aux2 = sm.grad(lambda t: ((t * t).sum(), "hi"), has_aux=True)(x)
    assert aux2 == "hi"
    np.testing.assert_allclose(g2.numpy(), [2.0, 4.0])


def test_vjp_and_jvp_with_pytrees():
    a, b = sm.tensor([0.1, 0.2]), sm.tensor([1.0, -1.0])
    f = lambda d: {"s": sm.sin(d["a"]) * d["b"], "t": (d["a"], d["b"] * 2.0)}  # noqa: E731
    out, pull = sm.vjp(f, {"a": a, "b": b})
    ct = {"s": sm.ones(2), "t": (sm.ones(2), sm.ones(2))}
    (g,) = pull(ct)
    np.testing.assert_allclose(g["a"].numpy(), np.cos(a.numpy()) * b.numpy() + 1)
    np.testing.assert_allclose(g["b"].numpy(), np.sin(a.numpy()) + 2)
    y, ty = sm.jvp(f, ({"a": a, "b": b},), ({"a": sm.ones(2), "b": sm.zeros(2)},))
    np.testing.assert_allclose(ty["s"].numpy(), np.cos(a.numpy()) * b.numpy())
    np.testing.assert_allclose(ty["t"][1].numpy(), [0.0, 0.0])
    np.testing.assert_allclose(y["s"].numpy(), out["s"].numpy())


def test_jvp_has_aux_and_multiple_args():
    x, y = sm.tensor([1.0, 2.0]), sm.tensor([3.0, 4.0])
    out, t, aux = sm.jvp(lambda a, b: (a * b, "aux"), (x, y), (sm.ones(2), sm.zeros(2)), has_aux=True)
    assert aux == "aux"
    np.testing.assert_allclose(t.numpy(), y.numpy())


def test_jacrev_jacfwd_argnums_tuple():
    x, y = sm.tensor([1.0, 2.0]), sm.tensor([3.0, 4.0, 5.0])
    f = lambda a, b: sm.concat([a * 2.0, b * b])  # noqa: E731
    for jac in (sm.jacrev, sm.jacfwd):
        Ja, Jb = jac(f, argnums=(0, 1))(x, y)
        assert Ja.shape == (5, 2) and Jb.shape == (5, 3)
        np.testing.assert_allclose(Ja.numpy()[:2], 2 * np.eye(2))
        np.testing.assert_allclose(Jb.numpy()[2:], np.diag(2 * y.numpy()))


def test_forward_over_forward_and_reverse_over_forward():
    x = sm.tensor([0.7])
    f = lambda t: sm.sin(t) * t  # noqa: E731
    d1 = lambda t: sm.jvp(f, (t,), (sm.ones(1),))[1]  # noqa: E731
    d2 = lambda t: sm.jvp(d1, (t,), (sm.ones(1),))[1]  # noqa: E731
    xv = 0.7
    np.testing.assert_allclose(d2(x).numpy(), [2 * np.cos(xv) - xv * np.sin(xv)], rtol=1e-13)
    rf = sm.grad(lambda t: d1(t).sum())(x)
    np.testing.assert_allclose(rf.numpy(), [2 * np.cos(xv) - xv * np.sin(xv)], rtol=1e-13)


def test_stop_gradient():
    x = sm.tensor([1.0, 2.0])
    g = sm.grad(lambda t: (t * sm.stop_gradient(t)).sum())(x)
    np.testing.assert_allclose(g.numpy(), x.numpy())
    tree = sm.stop_gradient({"a": x, "b": [x]})
    assert set(tree) == {"a", "b"}


def test_pytorch_style_backward_accumulates():
    x = sm.tensor([1.0, 2.0, 3.0]).requires_grad_()
    assert x.requires_grad
    loss = (x * x).sum()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy())
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + 3)
    w = sm.tensor([[1.0, 2.0], [3.0, 4.0]]).requires_grad_()
    y = w @ x[:2]
    y.backward(sm.tensor([1.0, 1.0]))
    np.testing.assert_allclose(w.grad.numpy(), np.outer([1.0, 1.0], [1.0, 2.0]))
    assert "requires_grad=True" in repr(x)


def test_no_grad_stops_recording():
    x = sm.tensor([1.0, 2.0]).requires_grad_()
    with sm.no_grad():
        y = x * x
    assert not y.requires_grad
    assert sm.is_grad_enabled()
    with pytest.raises(RuntimeError, match="does not depend on any tensor with requires_grad"):
        y.sum().backward()


def test_detach_and_requires_grad_false():
    x = sm.tensor([1.0]).requires_grad_()
    assert not x.detach().requires_grad
    assert not x.requires_grad_(False).requires_grad


def test_check_grads_catches_a_wrong_rule():
    bad = sm.Primitive("bad_sin", lambda x: (sm.sin(x)._buf, x.shape, x.dtype))
    bad.def_vjp(lambda g, x, out: (g * sm.sin(x),))  # wrong on purpose
    bad.def_jvp(lambda ts, x, out: ts[0] * sm.sin(x))
    with pytest.raises(AssertionError, match="finite differences"):
        check_grads(bad, (sm.tensor([0.3, 1.0]),), order=1)


def test_gradients_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))

    def f_sm(x, w):
        return (sm.log_softmax(sm.tanh(x @ w), -1) * sm.sigmoid(x[:, :2])).sum()

    def f_t(x, w):
        return (torch.log_softmax(torch.tanh(x @ w), -1) * torch.sigmoid(x[:, :2])).sum()
    ga, gb = sm.grad(f_sm, argnums=(0, 1))(sm.tensor(a), sm.tensor(b))
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    f_t(ta, tb).backward()
    np.testing.assert_allclose(ga.numpy(), ta.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gb.numpy(), tb.grad.numpy(), rtol=1e-12, atol=1e-14)
    # a Hessian
    x = rng.standard_normal(3)
    H = sm.hessian(lambda t: sm.logsumexp(t * t, 0))(sm.tensor(x))
    Ht = torch.autograd.functional.hessian(lambda t: torch.logsumexp(t * t, 0), torch.tensor(x))
    np.testing.assert_allclose(H.numpy(), Ht.numpy(), rtol=1e-12, atol=1e-14)
