"""Newton-CG's fast paths: the CG loop in numpy on CPU (small n) and ``jit=True`` (traced product /
dense Hessian replays) give the iterates of the kernel path, counted the same way."""
import numpy as np
import pytest

import sciml as sm
import importlib

N = importlib.import_module("sciml.optim.newton")
NA = importlib.import_module("sciml.optim.newton_auto")
from sciml.optim.newton import NewtonCG, newton_cg

sm.init(arch="cpu", dtype="float64")


def rosen(x):
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


def rosen_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return g


def x0(n):
    x = np.ones(n)
    x[::2] = -1.2
    return x


KW = dict(gtol=1e-8, ftol=0.0, xtol=0.0, max_iter=500)


def run(monkeypatch, host, **kw):
    monkeypatch.setattr(N, "HOST_CG_MAX", 1 << 16 if host else 0)
    kw.setdefault("jit", False)
    return newton_cg(rosen, sm.tensor(x0(4)), **KW, **kw)


@pytest.mark.parametrize("hessian", ["products", "dense"])
def test_host_cg_same_iterates_as_kernel_cg(monkeypatch, hessian):
    a = run(monkeypatch, False, hessian=hessian)
    b = run(monkeypatch, True, hessian=hessian)
    assert a.success and b.success
    assert (a.iterations, a.nfev, a.nhvp) == (b.iterations, b.nfev, b.nhvp)
    if hessian == "products":  # sums left to right as the serialized kernels: the same bits
        np.testing.assert_array_equal(b.params.numpy(), a.params.numpy())
        assert b.loss == a.loss
    else:  # the dense product is a numpy matvec on the host: last-bit differences
        np.testing.assert_allclose(b.params.numpy(), a.params.numpy(), rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.params.numpy(), np.ones(4), atol=1e-7)


@pytest.mark.parametrize("hessian", ["products", "dense"])
def test_jit_same_iterates_as_eager(monkeypatch, hessian):
    a = run(monkeypatch, True, hessian=hessian)
    b = run(monkeypatch, True, hessian=hessian, jit=True)
    assert b.success and b.reason == "gtol"
    assert (a.iterations, a.nfev, a.nhvp, a.ngev) == (b.iterations, b.nfev, b.nhvp, b.ngev)
    np.testing.assert_allclose(b.params.numpy(), a.params.numpy(), rtol=0, atol=1e-9)
    assert np.linalg.norm(rosen_grad(b.params.numpy())) <= 1e-8


def test_jit_kernel_cg_path_and_trust_region(monkeypatch):
    # the device-style CG (fused kernels) with jitted products, and Steihaug-CG with a jitted dense H
    a = run(monkeypatch, False)
    b = run(monkeypatch, False, jit=True)
    assert (a.iterations, a.nfev, a.nhvp) == (b.iterations, b.nfev, b.nhvp)
    c = newton_cg(rosen, sm.tensor(x0(4)), gtol=1e-8, globalization="trust_region", jit=False, hessian="products")
    d = newton_cg(rosen, sm.tensor(x0(4)), gtol=1e-8, globalization="trust_region", jit=True, hessian="dense")
    assert c.success and d.success
    assert abs(c.iterations - d.iterations) <= 1
    np.testing.assert_allclose(d.params.numpy(), np.ones(4), atol=1e-7)


def test_jit_pytree_params_and_shell_traces_once():
    w = {"a": sm.tensor(np.array([[0.5, -1.0], [2.0, 0.3]])), "b": sm.tensor(np.array([1.0, -2.0, 0.5]))}
    target = np.arange(7.0) / 7.0

    def loss(p):
        z = sm.concat([p["a"].reshape((-1,)), p["b"]])
        return ((z - sm.tensor(target)) ** 4).sum() + ((z - sm.tensor(target)) ** 2).sum()
    r0 = newton_cg(loss, w, gtol=1e-9, jit=False, hessian="products")
    r1 = newton_cg(loss, w, gtol=1e-9, jit=True, hessian="dense")
    assert r1.success
    np.testing.assert_allclose(r1.params["a"].numpy(), r0.params["a"].numpy(), atol=1e-7)
    np.testing.assert_allclose(r1.params["b"].numpy(), target[4:], atol=1e-6)

    from sciml.models.module import Parameter
    params = {k: Parameter(v) for k, v in w.items()}
    opt = NewtonCG(list(params.values()), max_iter=2, jit=True, hessian="products")
    opt.step(lambda p: loss({"a": p[0], "b": p[1]}))
    opt.step(lambda p: loss({"a": p[0], "b": p[1]}))  # a new lambda: new key, retraced (not reused)
    fn = lambda p: loss({"a": p[0], "b": p[1]})  # noqa: E731
    opt.step(fn)
    hv = opt._jit_cache["hvp"]
    opt.step(fn)
    assert opt._jit_cache["hvp"] is hv and hv.stats["traces"] == 1
    np.testing.assert_allclose(params["b"].numpy(), target[4:], atol=1e-6)


def test_jit_argument_checked():
    with pytest.raises(TypeError, match="jit must be .auto., True or False"):
        newton_cg(rosen, sm.tensor(x0(4)), jit="yes")
    with pytest.raises(TypeError, match="jit must be .auto., True or False"):
        NewtonCG(jit=1)


# --- the defaults: jit="auto", hessian="auto" ---------------------------------------------------
def test_defaults_are_jitted_dense_with_the_explicit_iterates(monkeypatch):
    # small n on CPU: the dense H, traced; the same iterates and counts as spelling it out, and the
    # evaluation and H of an accepted point come from ONE replayed pass (no separate Hessian pass)
    a = newton_cg(rosen, sm.tensor(x0(6)), **KW)
    b = newton_cg(rosen, sm.tensor(x0(6)), **KW, jit=True, hessian="dense")
    c = newton_cg(rosen, sm.tensor(x0(6)), **KW, jit=False, hessian="dense")
    assert a.success and a.reason == "gtol"
    for r in (b, c):
        assert (a.iterations, a.nfev, a.ngev, a.nhvp) == (r.iterations, r.nfev, r.ngev, r.nhvp)
        np.testing.assert_allclose(a.params.numpy(), r.params.numpy(), rtol=0, atol=1e-12)
    got = []
    orig = N._jit_functions
    monkeypatch.setattr(N, "_jit_functions", lambda *args: got.append(orig(*args)) or got[-1])
    d = newton_cg(rosen, sm.tensor(x0(6)), **KW)
    assert (d.iterations, d.nfev, d.nhvp) == (a.iterations, a.nfev, a.nhvp)
    assert got and all(h.stats["traces"] == 0 and h.stats["eager"] == 0 for _, h in got)  # no separate H pass


def test_auto_hessian_rule(monkeypatch):
    from sciml.optim.result import Flat
    prob = Flat(rosen, sm.tensor(x0(6)), "t")
    assert NA._auto_hessian(prob, prob.x0) == "dense"
    monkeypatch.setattr(NA, "AUTO_DENSE_WORK", 6 * 5)  # less than one pass of this loss produces
    assert NA._auto_hessian(prob, prob.x0) == "products"
    monkeypatch.setattr(NA, "AUTO_DENSE_N", 5)
    monkeypatch.setattr(NA, "AUTO_DENSE_WORK", 1 << 30)
    assert NA._auto_hessian(prob, prob.x0) == "products"
    # products chosen: the same iterates as asking for them
    monkeypatch.setattr(NA, "AUTO_DENSE_N", 0)
    a = newton_cg(rosen, sm.tensor(x0(4)), **KW)
    b = newton_cg(rosen, sm.tensor(x0(4)), **KW, jit=False, hessian="products")
    assert (a.iterations, a.nfev, a.nhvp) == (b.iterations, b.nfev, b.nhvp)
    np.testing.assert_allclose(a.params.numpy(), b.params.numpy(), rtol=0, atol=1e-9)


def test_auto_jit_runs_an_untraceable_loss_eagerly_without_warning(recwarn):
    seen = []

    def loss(x):  # a host read inside the loss: sciml.jit cannot trace it
        seen.append(float(x.sum()))
        return rosen(x)
    for hessian in ("dense", "products"):
        seen.clear()
        a = newton_cg(loss, sm.tensor(x0(4)), **KW, hessian=hessian)
        b = newton_cg(loss, sm.tensor(x0(4)), **KW, hessian=hessian, jit=False)
        assert a.success and (a.iterations, a.nfev, a.nhvp) == (b.iterations, b.nfev, b.nhvp)
        np.testing.assert_allclose(a.params.numpy(), b.params.numpy(), rtol=0, atol=1e-9)
    assert not [w for w in recwarn.list if "sciml.jit" in str(w.message)]
    with pytest.raises(Exception, match="host|float"):
        newton_cg(loss, sm.tensor(x0(4)), **KW, jit=True)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_host_vector_helper_matches_the_kernels(dtype):
    from sciml import backend
    from sciml.optim.lbfgs import _Vec
    rng = np.random.default_rng(0)
    n = 37
    a, b, c = (backend.from_numpy(rng.standard_normal(n).astype(dtype), dtype) for _ in range(3))
    kv, hv = _Vec(n, dtype), NA._HostVec(n, dtype)
    assert kv.dots(a, b, c) == hv.dots(a, b, c)
    assert kv.dots(a, b, b) == hv.dots(a, b, b)
    np.testing.assert_array_equal(np.asarray(kv.axpy(a, 0.37, b))[:n], np.asarray(hv.axpy(a, 0.37, b))[:n])


@pytest.mark.parametrize("cg_tol", [None, 1e-9])
def test_dense_float64_cg_loop_equals_the_generic_host_loop(monkeypatch, cg_tol):
    """The float64 dense-H loop (``_cg_dense64``: product inline, preallocated temporaries) gives the generic
    host loop's iterates bit for bit (the same operations in the same order)."""
    def solve(lean):
        orig = N._counted_matvec

        def mv(prob, H):
            op = orig(prob, H)
            if not lean:
                del op.matrix
            return op
        monkeypatch.setattr(N, "_counted_matvec", mv)
        calls = []
        monkeypatch.setattr(N._NewtonCG, "_cg_dense64",
                            lambda self, *a, f=N._NewtonCG._cg_dense64: calls.append(1) or f(self, *a))
        r = newton_cg(rosen, sm.tensor(x0(10)), hessian="dense", cg_tol=cg_tol, **KW)
        monkeypatch.undo()
        return r, len(calls)
    (a, na), (b, nb) = solve(True), solve(False)
    assert na > 0 and nb == 0
    assert (a.iterations, a.nfev, a.nhvp) == (b.iterations, b.nfev, b.nhvp)
    np.testing.assert_array_equal(a.params.numpy(), b.params.numpy())
    assert np.linalg.norm(rosen_grad(a.params.numpy())) < 1e-6  # a stationary point (stalled at precision)
