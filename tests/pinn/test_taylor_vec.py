"""The vector-lane fused Taylor kernels (sciml.kernels.taylor_vec) against the scalar kernels, the nested-autodiff
path (generic) and finite differences (first and second order, float64), and their fallbacks."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import taylor as TK
from sciml.kernels import taylor_gemm as TG
from sciml.kernels import taylor_vec as TV
from sciml.pinn import fused, generic
from sciml.testing import check_grads
from sciml.testing import flatten_layers as _flat, pair_layers as _pairs, random_layers as _net


@pytest.fixture
def count(monkeypatch):
    """Counts the vector kernels' launches (forward, backward); taylor_gemm's fused layers off, so that these kernels
    are the ones that run (on an AVX2 host, or with SCIML_VEC_LANES=8, taylor_gemm takes the 4-wide float64 layers)."""
    monkeypatch.setattr(TG, "ENABLED", [False])
    n = {"fwd": 0, "bwd": 0}
    f, b = TV.layer_forward, TV.layer_backward
    monkeypatch.setattr(TV, "layer_forward", lambda *a, **k: n.__setitem__("fwd", n["fwd"] + 1) or f(*a, **k))
    monkeypatch.setattr(TV, "layer_backward", lambda *a, **k: n.__setitem__("bwd", n["bwd"] + 1) or b(*a, **k))
    return n


def _value_and_grads(layers, act, x, derivs, cot, vec, monkeypatch):
    monkeypatch.setattr(TK, "VEC", [vec])
    monkeypatch.setattr(TG, "ENABLED", [False])   # these layers' own kernels, not the fused GEMM ones

    def loss(x, *ps):
        r = fused.mlp_derivatives(_pairs(ps), act, x, derivs)
        return sum(((r[k] * cot[i]).sum() for i, k in enumerate(derivs)), sm.tensor(0.0, x.dtype))
    args = (x, *_flat(layers))
    r = fused.mlp_derivatives(layers, act, x, derivs)
    g = sm.grad(loss, argnums=tuple(range(len(args))))(*args)
    return [r[k].numpy() for k in derivs], [u.numpy() for u in g]


def test_vector_kernels_equal_scalar_kernels_float64(count, monkeypatch):
    # widths 8 and 16: 8 / 4 / 2 float64 lanes; a 3-wide output (fused output layer with o = 3), mixed pairs
    act = sm.tanh   # float64: ti.tanh lane by lane, the streams on vectors
    rng = np.random.default_rng(2)
    layers = _net([3, 8, 16, 3], seed=3)
    x = sm.tensor(rng.uniform(-1.5, 1.5, (37, 3)))
    derivs = [(), (1,), (0, 2), (2, 2), (0,), (0, 0)]
    cot = [sm.tensor(rng.standard_normal((37, 3))) for _ in derivs]
    va, ga = _value_and_grads(layers, act, x, derivs, cot, False, monkeypatch)
    assert count == {"fwd": 0, "bwd": 0}
    vb, gb = _value_and_grads(layers, act, x, derivs, cot, True, monkeypatch)
    assert count["fwd"] >= 4 and count["bwd"] == 2          # both layers, forward and adjoint, on lanes
    for u, v in zip(va + ga, vb + gb):
        np.testing.assert_allclose(v, u, rtol=1e-12, atol=1e-12)
    c = generic.mlp_derivatives(layers, act, x, derivs)
    for u, k in zip(vb, derivs):
        np.testing.assert_allclose(u, c[k].numpy(), rtol=1e-10, atol=1e-10)


def test_vector_kernels_float32_close_to_scalar(count, monkeypatch):
    # the W2 structure at the benchmark's width (16 float32 lanes on AVX-512, 8 on AVX2)
    rng = np.random.default_rng(4)
    layers = _net([2, 32, 32, 32, 1], seed=5, dtype="float32")
    x = sm.tensor(rng.uniform(-1, 1, (300, 2)), "float32")
    derivs = [(), (0,), (1,), (0, 0)]
    cot = [sm.tensor(rng.standard_normal((300, 1)), "float32") for _ in derivs]
    va, ga = _value_and_grads(layers, sm.tanh, x, derivs, cot, False, monkeypatch)
    vb, gb = _value_and_grads(layers, sm.tanh, x, derivs, cot, True, monkeypatch)
    assert count["fwd"] and count["bwd"]
    for u, v in zip(va + ga, vb + gb):
        np.testing.assert_allclose(v, u, rtol=1e-5, atol=1e-5 * np.abs(u).max())


def test_finite_differences_first_and_second_order_on_lanes(count):
    rng = np.random.default_rng(6)
    layers = _net([2, 4, 4, 1], seed=7)        # width 4: float64 lanes of 4 (or 2)
    x = sm.tensor(rng.uniform(-1, 1, (5, 2)))
    derivs = [(), (0,), (1,), (0, 0), (0, 1)]

    def f(x, *ps):
        r = fused.mlp_derivatives(_pairs(ps), sm.tanh, x, derivs)
        return sm.stack([r[k] for k in derivs], 0)
    check_grads(f, (x, *_flat(layers)), order=2)
    assert count["fwd"] and count["bwd"]


def test_nan_in_nan_out(count):
    layers = _net([2, 8, 8, 1], seed=8, dtype="float32")
    X = np.random.default_rng(9).uniform(-1, 1, (40, 2)).astype(np.float32)
    X[3, 0] = np.nan
    r = fused.mlp_derivatives(layers, sm.tanh, sm.tensor(X, "float32"), [(), (0,), (0, 0)])
    assert count["fwd"]
    for k, v in r.items():
        v = v.numpy()
        assert np.isnan(v[3]).all() and np.isfinite(np.delete(v, 3, 0)).all(), k


def test_fallbacks_to_scalar_kernels(count, monkeypatch):
    # odd widths have no lanes; misaligned buffers neither; SCIML_TAYLOR_VEC=0 (VEC off) runs the scalar kernels
    assert TV.lanes(5, "float64", [0]) is None
    assert TV.lanes(32, "float32", [8]) is None
    assert TV.lanes(32, "float32", [16]) == 4
    assert TV.lanes(32, "float32", [0]) in (4, 8, 16)
    assert TV.lanes(32, "int32", [0]) is None
    rng = np.random.default_rng(10)
    layers = _net([2, 5, 3, 1], seed=11)
    x = sm.tensor(rng.uniform(-1, 1, (9, 2)))
    a = fused.mlp_derivatives(layers, sm.tanh, x, [(), (0, 0)])
    assert count == {"fwd": 0, "bwd": 0}
    b = generic.mlp_derivatives(layers, sm.tanh, x, [(), (0, 0)])
    for k in a:
        np.testing.assert_allclose(a[k].numpy(), b[k].numpy(), rtol=1e-10, atol=1e-10)
    buf = backend.aligned_empty(64 + 1, "float64")[1:]      # 8 bytes off: no vector lanes
    assert TK._vec_lanes("tanh", 8, "float64", 1, buf) is None
    assert TK._vec_lanes("tanh", 8, "float64", 1, buf[7:]) is not None
    for act in (sm.softplus, sm.gelu):     # scalar kernels for the libm activations
        fused.mlp_derivatives(_net([2, 8, 8, 1], seed=12), act, x, [(), (0, 0)])
    assert count == {"fwd": 0, "bwd": 0}
