"""sciml.fuse_region: a loss expression (slices, elementwise ops, sums) as one kernel forward and one
backward; equal bit for bit to the unfused ops, derivatives to second order against finite differences."""
import numpy as np
import pytest

import sciml as sm
from sciml.autodiff import fuse_region as FR
from sciml.kernels import elementwise as E
from sciml.testing import check_grads

NI, NB, NU = 7, 4, 0.003


@pytest.fixture
def scalar_kernels(monkeypatch):
    """The unfused CPU kernels on their scalar paths (the vector-lane sum of >= 4096 elements adds in
    another order than a fused sum; elementwise ops are the same bits either way)."""
    sm.init(arch="cpu", dtype="float64")
    monkeypatch.setattr(E, "VECTOR", False)


def _burgers(u, ux, ut, uxx, target):
    res = ut[:NI] + u[:NI] * ux[:NI] - NU * uxx[:NI]
    e = u[NI:] - target
    return (res * res).mean() + 2.0 * (e * e).mean()


def _columns(x, s):
    """Column views (strided), a step slice, a 0-d argument broadcast, unary ops, sum and mean."""
    a = x[:, 0] * sm.tanh(x[:, 2]) - s * sm.exp(-x[::2, 1].sum() * 0.1)
    return (a * a).sum() / 3.0 + sm.sin(x[1:, 1]).mean() * s


def _inputs(dtype="float64", seed=0, n=NI + NB):
    rng = np.random.default_rng(seed)
    ts = [sm.tensor(rng.standard_normal((n, 1)), dtype) for _ in range(4)]
    return ts + [sm.tensor(rng.standard_normal((n - NI, 1)), dtype)]


def test_values_and_gradients_are_bit_identical_to_the_unfused_ops(scalar_kernels):
    ts = _inputs()
    f = sm.fuse_region(_burgers, strict=True)
    assert f(*ts).numpy() == _burgers(*ts).numpy()
    la, ga = sm.value_and_grad(_burgers, argnums=(0, 1, 2, 3))(*ts)
    lb, gb = sm.value_and_grad(f, argnums=(0, 1, 2, 3))(*ts)
    assert la.numpy() == lb.numpy()
    for a, b in zip(ga, gb):
        assert np.array_equal(a.numpy(), b.numpy())
    # second order (grad of a function of the gradient): per-input fused regions, the same bits
    h = [sm.grad(lambda u, g=g: (sm.grad(g, argnums=0)(u, *ts[1:]) ** 2).sum())(ts[0]).numpy() for g in (_burgers, f)]
    assert np.array_equal(h[0], h[1])


def test_long_sums_add_in_the_unfused_order(scalar_kernels):
    """A sum longer than the host's single sequence (SERIAL_BELOW): chunks, then the partials, in
    order (checked against that order in Python). The unfused CPU kernel, compiled with fast math,
    may let LLVM reassociate its loop: equal to rounding there; the gradient has no sum: same bits."""
    from sciml.kernels import _common as C
    from sciml.kernels import fused_region as KR
    n = C.SERIAL_BELOW + 1234
    a = np.random.default_rng(3).standard_normal(n)
    x = sm.tensor(a)
    f = sm.fuse_region(lambda v: v.sum(), strict=True)
    (chunk, nch), = KR.sum_plan(n, True)
    acc = 0.0
    for c in range(nch):
        part = 0.0
        for t in a[c * chunk:(c + 1) * chunk].tolist():
            part += t
        acc += part
    assert float(f(x)) == acc
    body = lambda v: ((v[1:] - v[:-1]) ** 2).mean() + v.sum() * 1e-3  # noqa: E731
    g = sm.fuse_region(body, strict=True)
    np.testing.assert_allclose(g(x).numpy(), body(x).numpy(), rtol=1e-13)
    assert np.array_equal(sm.grad(g)(x).numpy(), sm.grad(body)(x).numpy())


@pytest.mark.parametrize("fn", [_burgers, _columns], ids=["rows", "columns"])
def test_derivatives_match_finite_differences_to_second_order(fn):
    sm.init(arch="cpu", dtype="float64")
    if fn is _burgers:
        args = _inputs(seed=1)
    else:
        rng = np.random.default_rng(2)
        args = [sm.tensor(rng.standard_normal((6, 3))), sm.tensor(0.8)]
    f = sm.fuse_region(fn, strict=True)
    np.testing.assert_allclose(f(*args).numpy(), fn(*args).numpy(), rtol=1e-14)
    check_grads(f, args, order=2)


def test_hessian_through_the_fused_region_equals_the_unfused_one():
    sm.init(arch="cpu", dtype="float64")
    rng = np.random.default_rng(4)
    x, s = sm.tensor(rng.standard_normal((5, 3))), sm.tensor(0.6)
    f = sm.fuse_region(_columns, strict=True)
    H = sm.hessian(lambda v: f(v, s))(x).numpy()
    Hr = sm.hessian(lambda v: _columns(v, s))(x).numpy()
    np.testing.assert_allclose(H, Hr, rtol=1e-12, atol=1e-12)


def test_nan_in_gives_nan_out():
    sm.init(arch="cpu", dtype="float64")
    ts = _inputs(seed=5)
    a = ts[0].numpy()
    a[2, 0] = np.nan
    ts[0] = sm.tensor(a)
    f = sm.fuse_region(_burgers, strict=True)
    loss, g = sm.value_and_grad(f, argnums=(0, 1))(*ts)
    assert np.isnan(loss.numpy())
    assert np.isnan(g[0].numpy()[2, 0]) and np.isnan(g[1].numpy()[2, 0])


def test_one_launch_forward_and_one_for_the_whole_gradient():
    """Counted by sciml.jit's record (every kernel launch of a call)."""
    sm.init(arch="cpu", dtype="float64")
    ts = _inputs(seed=6)
    f = sm.fuse_region(_burgers, strict=True)

    def launches(fn):
        j = sm.jit(fn)
        j(*ts)
        (plan,) = j.plans.values()
        return plan.n_kernels
    assert launches(f) == 1
    fused, unfused = (launches(sm.value_and_grad(g, argnums=(0, 1, 2, 3))) for g in (f, _burgers))
    assert fused <= 3 and unfused >= 20, (fused, unfused)  # (+ the seed's fill)


def test_unfusable_ops_run_unfused_or_raise_when_strict():
    sm.init(arch="cpu", dtype="float64")
    rng = np.random.default_rng(7)
    x, w = sm.tensor(rng.standard_normal((4, 3))), sm.tensor(rng.standard_normal((3, 2)))
    body = lambda a, b: ((a @ b) ** 2).mean()  # noqa: E731
    f = sm.fuse_region(body)
    assert f(x, w).numpy() == body(x, w).numpy()
    assert "op 'matmul'" in f.fallback and "cannot be fused" in f.fallback
    with pytest.raises(sm.RegionError, match=r"fuse_region\(<lambda>\): op 'matmul' on shapes \(4, 3\), \(3, 2\)"):
        sm.fuse_region(body, strict=True)(x, w)
    with pytest.raises(TypeError, match=r"argument 1 has type float; expected a Tensor"):
        f(x, 2.0)
    p = sm.tensor(rng.standard_normal(3))

    def captured(a):
        return (a[0] * p).sum()
    with pytest.raises(sm.RegionError, match="takes part in differentiation but is not an argument"):
        sm.grad(lambda q: sm.fuse_region(lambda a: (a[0] * q).sum(), strict=True)(x))(p)
    np.testing.assert_allclose(sm.fuse_region(captured, strict=True)(x).numpy(), captured(x).numpy(), rtol=1e-15)


def test_several_outputs_and_jit_replay():
    sm.init(arch="cpu", dtype="float64")
    ts = _inputs(seed=8)
    terms = sm.fuse_region(lambda u, ut: [(u[:NI] * ut[:NI]).mean(), (u[NI:] ** 2).sum()], strict=True)
    got = terms(ts[0], ts[2])
    want = [(ts[0][:NI] * ts[2][:NI]).mean(), (ts[0][NI:] ** 2).sum()]
    for a, b in zip(got, want):
        assert a.numpy() == b.numpy()
    f = sm.fuse_region(_burgers, strict=True)
    step = sm.jit(sm.value_and_grad(f, argnums=(0, 1, 2, 3)))
    for seed in (9, 10):
        xs = _inputs(seed=seed)
        (l1, g1), (l2, g2) = step(*xs), sm.value_and_grad(_burgers, argnums=(0, 1, 2, 3))(*xs)
        np.testing.assert_allclose(l1.numpy(), l2.numpy(), rtol=1e-14)
        for a, b in zip(g1, g2):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13, atol=1e-15)
    assert step.stats["replays"] == 1


def test_regions_are_traced_per_signature():
    sm.init(arch="cpu", dtype="float64")
    f = sm.fuse_region(lambda a: (a[1:] * a[:-1]).sum(), strict=True)
    for n in (3, 9):
        x = sm.tensor(np.arange(n, dtype=np.float64))
        assert float(f(x)) == float((x[1:] * x[:-1]).sum())
    assert len(f.regions) == 2 and all(isinstance(r, FR._Region) for r in f.regions.values())
