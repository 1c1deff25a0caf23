"""The fused GEMM + Taylor layer kernels (sciml.kernels.taylor_gemm) against the BLAS GEMM + Taylor kernel path
(float64 to 1e-12, float32 close), the nested-autodiff path (generic), finite differences (first and second
order), NaN propagation, the same bits busy or idle, and their fallbacks."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import _common as C
from sciml.kernels import _vec as V
from sciml.kernels import taylor_gemm as TG
from sciml.pinn import fused, generic
from sciml.testing import check_grads
from sciml.testing import flatten_layers as _flat, pair_layers as _pairs, random_layers as _net


@pytest.fixture
def count(monkeypatch):
    """Counts the fused kernels' launches (forward, adjoint)."""
    n = {"fwd": 0, "bwd": 0}
    f, b = TG.layer_forward, TG.layer_backward
    monkeypatch.setattr(TG, "layer_forward", lambda *a, **k: n.__setitem__("fwd", n["fwd"] + 1) or f(*a, **k))
    monkeypatch.setattr(TG, "layer_backward", lambda *a, **k: n.__setitem__("bwd", n["bwd"] + 1) or b(*a, **k))
    return n


def _value_and_grads(layers, x, derivs, cot, on, bwd, monkeypatch):
    monkeypatch.setattr(TG, "ENABLED", [on])
    monkeypatch.setattr(TG, "BACKWARD", [bwd])

    def loss(x, *ps):
        r = fused.mlp_derivatives(_pairs(ps), sm.tanh, x, derivs)
        return sum(((r[k] * cot[i]).sum() for i, k in enumerate(derivs)), sm.tensor(0.0, x.dtype))
    args = (x, *_flat(layers))
    r = fused.mlp_derivatives(layers, sm.tanh, x, derivs)
    g = sm.grad(loss, argnums=tuple(range(len(args))))(*args)
    return [r[k].numpy() for k in derivs], [u.numpy() for u in g]


W2 = [(), (0,), (1,), (0, 0)]
W3 = [(), (0, 0), (1, 1), (0, 1)]


@pytest.mark.parametrize("derivs", [W2, W3], ids=["burgers", "poisson_mixed"])
def test_equal_blas_path_float64(count, monkeypatch, derivs):
    rng = np.random.default_rng(1)
    layers = _net([2, 8, 8, 8, 1], seed=2)     # multiples of 8 (float64 wide lanes: 8 on AVX-512, 4 on AVX2)
    x = sm.tensor(rng.uniform(-1.5, 1.5, (77, 2)))
    cot = [sm.tensor(rng.standard_normal((77, 1))) for _ in derivs]
    va, ga = _value_and_grads(layers, x, derivs, cot, False, False, monkeypatch)
    assert count == {"fwd": 0, "bwd": 0}
    if V.wide("float64") <= V.LANES["float64"]:
        pytest.skip("no wide vector lanes on this host: the fused kernels do not run")
    for bwd in (False, True):
        vb, gb = _value_and_grads(layers, x, derivs, cot, True, bwd, monkeypatch)
        for u, v in zip(va + ga, vb + gb):
            np.testing.assert_allclose(v, u, rtol=1e-12, atol=1e-12 * np.abs(u).max())
    assert count["fwd"] >= 6 and count["bwd"] == 2   # 3 layers forward (twice); the adjoint of 2 layers
    c = generic.mlp_derivatives(layers, sm.tanh, x, derivs)
    for u, k in zip(vb, derivs):
        np.testing.assert_allclose(u, c[k].numpy(), rtol=1e-10, atol=1e-10)


def test_float32_close_to_blas_path(count, monkeypatch):
    rng = np.random.default_rng(4)
    layers = _net([2, 16, 16, 16, 1], seed=5, dtype="float32")   # 16 float32 lanes on AVX-512
    x = sm.tensor(rng.uniform(-1, 1, (300, 2)), "float32")
    cot = [sm.tensor(rng.standard_normal((300, 1)), "float32") for _ in W2]
    va, ga = _value_and_grads(layers, x, W2, cot, False, False, monkeypatch)
    for bwd in (False, True):
        vb, gb = _value_and_grads(layers, x, W2, cot, True, bwd, monkeypatch)
        for u, v in zip(va + ga, vb + gb):
            np.testing.assert_allclose(v, u, rtol=1e-5, atol=1e-5 * np.abs(u).max())
    if V.wide("float32") > V.LANES["float32"]:
        assert count["fwd"] and count["bwd"]


@pytest.mark.parametrize("bwd", [False, True])
def test_finite_differences_first_and_second_order(count, monkeypatch, bwd):
    monkeypatch.setattr(TG, "BACKWARD", [bwd])
    rng = np.random.default_rng(6)
    layers = _net([2, 8, 8, 1], seed=7)
    x = sm.tensor(rng.uniform(-1, 1, (5, 2)))
    derivs = [(), (0,), (1,), (0, 0), (0, 1)]

    def f(x, *ps):
        r = fused.mlp_derivatives(_pairs(ps), sm.tanh, x, derivs)
        return sm.stack([r[k] for k in derivs], 0)
    check_grads(f, (x, *_flat(layers)), order=2)
    if V.wide("float64") > V.LANES["float64"]:
        assert count["fwd"] and bool(count["bwd"]) == bwd


def test_nan_in_nan_out(count, monkeypatch):
    monkeypatch.setattr(TG, "BACKWARD", [True])
    layers = _net([2, 16, 16, 1], seed=8, dtype="float32")
    X = np.random.default_rng(9).uniform(-1, 1, (40, 2)).astype(np.float32)
    X[3, 0] = np.nan
    x = sm.tensor(X, "float32")
    r = fused.mlp_derivatives(layers, sm.tanh, x, [(), (0,), (0, 0)])
    for k, v in r.items():
        v = v.numpy()
        assert np.isnan(v[3]).all() and np.isfinite(np.delete(v, 3, 0)).all(), k
    g = sm.grad(lambda *ps: fused.mlp_derivatives(_pairs(ps), sm.tanh, x, [(0, 0)])[(0, 0)].sum(),
                argnums=(0,))(*_flat(layers))[0].numpy()
    assert np.isnan(g).any()
    if V.wide("float32") > V.LANES["float32"]:
        assert count["fwd"] and count["bwd"]


@pytest.mark.parametrize("dt", ["float32"])
def test_same_bits_busy_or_not(monkeypatch, dt):
    """The serialized and the parallel compilation (``_common.busy()`` picks one) give the same bits."""
    monkeypatch.setattr(TG, "BACKWARD", [True])
    rng = np.random.default_rng(10)
    n = 4096
    layers = _net([2, 16, 16, 1], seed=11, dtype=dt)
    x = sm.tensor(rng.uniform(-1, 1, (n, 2)), dt)
    assert not C.launch_mode(n * 16 * 4)    # large enough for the parallel kernels when idle
    outs = []
    for force in (False, True):
        monkeypatch.setattr(C, "busy", lambda f=force: f)

        def loss(*ps):
            r = fused.mlp_derivatives(_pairs(ps), sm.tanh, x, W2)
            return sum(((r[k] * r[k]).sum() for k in W2), sm.tensor(0.0, dt))
        v, g = sm.value_and_grad(loss, argnums=(0, 1, 2, 3, 4, 5))(*_flat(layers))
        outs.append([v.numpy()] + [u.numpy() for u in g])
    for a, b in zip(*outs):
        assert a.tobytes() == b.tobytes()
    if V.wide(dt) > V.LANES[dt]:
        keys = [k for k in C._cache if isinstance(k, tuple) and k and k[0] == "taylor_gfwd" and k[2] == dt]
        assert {k[8] for k in keys} >= {True, False}   # both compilations ran


def test_fallbacks(count, monkeypatch):
    assert TG.lanes("tanh", 32, 20, "float32", 0, [0]) is None   # w not a multiple of the wide lanes
    assert TG.lanes("tanh", TG.MAX_WIDTH + 16, 32, "float32", 0, [0]) is None       # too wide to unroll
    assert TG.lanes("tanh", 32, 32, "float32", 0, [16]) is None                    # misaligned for wide lanes
    assert TG.lanes("gelu", 32, 32, "float32", 0, [0]) is None                     # libm activations: BLAS path
    assert TG.lanes("tanh", 32, 32, "float32", 8, [0]) is None                     # output layer wider than 4
    monkeypatch.setattr(TG, "BACKWARD", [False])
    assert TG.backward_lanes("tanh", 32, 32, "float32", [0]) is None
    # width 20 (the Burgers main job: its pinned bits) never takes the fused kernels
    rng = np.random.default_rng(12)
    layers = _net([2, 20, 20, 1], seed=13, dtype="float32")
    x = sm.tensor(rng.uniform(-1, 1, (64, 2)), "float32")
    fused.mlp_derivatives(layers, sm.tanh, x, W2)
    assert count == {"fwd": 0, "bwd": 0}
    buf = backend.aligned_empty(64 + 1, "float32")[1:]
    assert TG.lanes("tanh", 32, 32, "float32", 0, [C.address(buf)]) is None
