"""curvature.hvp skips the dead primal of the gradient's last products (tangent-only sweep)."""
import numpy as np

import sciml as sm
from sciml.autodiff import curvature as CV
from sciml.autodiff.primitive import Primitive
from sciml.kernels import linalg as LK


def _mlp_loss(x, y):
    def loss(p):
        h = sm.tanh(x @ p["w1"] + p["b1"])
        h = sm.relu(h @ p["w2"] + p["b2"])
        out = h @ p["w3"] + p["b3"]
        return ((out - y) ** 2).mean() + (p["w1"] * p["w1"]).sum() * 1e-3  # w1 used twice
    return loss


def _setup(seed=0):
    sm.init(arch="cpu", dtype="float64")
    rng = np.random.default_rng(seed)
    x, y = sm.tensor(rng.standard_normal((7, 3))), sm.tensor(rng.standard_normal((7, 2)))
    shapes = {"w1": (3, 5), "b1": (5,), "w2": (5, 4), "b2": (4,), "w3": (4, 2), "b3": (2,)}
    p = {k: sm.tensor(rng.standard_normal(s) * 0.7) for k, s in shapes.items()}
    v = {k: sm.tensor(rng.standard_normal(s)) for k, s in shapes.items()}
    return _mlp_loss(x, y), p, v


def _count_gemms(monkeypatch):
    calls = [0]
    orig = LK.matmul

    def counted(*a, **k):
        calls[0] += 1
        return orig(*a, **k)
    monkeypatch.setattr(LK, "matmul", counted)
    return calls


def test_hvp_equals_grad_and_hvp_and_finite_differences(monkeypatch):
    f, p, v = _setup()
    calls = _count_gemms(monkeypatch)
    hv = CV.hvp(f, p, v)
    n_lazy = calls[0]
    calls[0] = 0
    g, hv2 = CV.grad_and_hvp(f, p, v)
    n_full = calls[0]
    assert n_lazy == n_full - 3  # the three weight-gradient GEMMs are dead in H v
    for k in p:
        np.testing.assert_allclose(hv[k].numpy(), hv2[k].numpy(), rtol=1e-13, atol=1e-13)
    # central differences of the gradient along v
    eps = 1e-6
    gp = sm.grad(f)({k: p[k] + eps * v[k] for k in p})
    gm = sm.grad(f)({k: p[k] - eps * v[k] for k in p})
    for k in p:
        np.testing.assert_allclose(hv[k].numpy(), (gp[k].numpy() - gm[k].numpy()) / (2 * eps), rtol=1e-6, atol=1e-7)


def test_rule_reading_a_skipped_value_falls_back(monkeypatch):
    """A VJP rule that post-processes a weight-gradient product with an op that needs its value."""
    from sciml.autodiff import backward as B
    f0, p, v = _setup(1)
    sweeps = []
    orig = B._sweep

    def counted(*a):
        sweeps.append(a[-1])
        return orig(*a)
    monkeypatch.setattr(B, "_sweep", counted)

    def fwd(w):
        return w._buf.copy(), w.shape, w.dtype
    ident = Primitive("ident_then_scale", fwd)
    # the cotangent of w: (g @ I) * 2 computed from a matmul output (tangent-only) and a mul (needs it)
    ident.def_vjp(lambda g, w, out: ((g @ sm.tensor(np.eye(g.shape[-1]))) * 0.5,))
    ident.def_jvp(lambda ts, w, out: ts[0])

    def f(q):
        return f0({**q, "w2": ident(q["w2"])})
    hv = CV.hvp(f, p, v)
    assert sweeps == [True, False]  # the tangent-only sweep failed and was redone in full
    g, hv2 = CV.grad_and_hvp(f, p, v)
    for k in p:
        np.testing.assert_allclose(hv[k].numpy(), hv2[k].numpy(), rtol=1e-13, atol=1e-13)


def test_nested_grad_inside_the_loss_is_unaffected():
    """Inner gradients (PINN-style d/dx inside the loss) keep their values."""
    sm.init(arch="cpu", dtype="float64")
    rng = np.random.default_rng(2)
    x = sm.tensor(rng.standard_normal((6, 1)))
    p = {"w": sm.tensor(rng.standard_normal((1, 4))), "u": sm.tensor(rng.standard_normal((4, 1)))}
    v = {"w": sm.tensor(rng.standard_normal((1, 4))), "u": sm.tensor(rng.standard_normal((4, 1)))}

    def f(q):
        du = sm.grad(lambda xx: (sm.tanh(xx @ q["w"]) @ q["u"]).sum())(x)
        return (du ** 2).sum()
    hv = CV.hvp(f, p, v)
    _, hv2 = CV.grad_and_hvp(f, p, v)
    for k in p:
        np.testing.assert_allclose(hv[k].numpy(), hv2[k].numpy(), rtol=1e-12, atol=1e-12)
