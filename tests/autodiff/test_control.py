"""scan / fori_loop / while_loop (sciml/autodiff/control.py): values, derivatives to second order, jit replay."""
import numpy as np
import pytest

import sciml as sm
from sciml.testing import check_grads

XS = sm.tensor([0.5, -1.0, 2.0, 0.25], "float64")


def test_scan_values_and_reverse():
    c, ys = sm.scan(lambda c, x: (c + x, c * x), sm.tensor(1.0, "float64"), XS)
    x = XS.numpy()
    cs = np.concatenate([[1.0], 1.0 + np.cumsum(x)[:-1]])
    np.testing.assert_allclose(ys.numpy(), cs * x)
    np.testing.assert_allclose(float(c), 1.0 + x.sum())
    c, ys = sm.scan(lambda c, x: (c * 2.0 + x, c), sm.tensor(0.0, "float64"), XS, reverse=True)
    acc, want = 0.0, [0.0] * 4
    for i in range(3, -1, -1):
        want[i] = acc
        acc = acc * 2 + x[i]
    np.testing.assert_allclose(ys.numpy(), want)
    np.testing.assert_allclose(float(c), acc)
    c, ys = sm.scan(lambda c, _: ({"a": c["a"] * 0.5}, None), {"a": sm.tensor(8.0)}, length=3)
    assert ys is None and float(c["a"]) == 1.0


def test_scan_derivatives_second_order():
    def f(h0, xs, w):
        def step(h, x):
            h = sm.tanh(w * h + x)
            return h, h * h
        return sm.scan(step, h0, xs)[1]
    check_grads(f, (sm.tensor(0.3, "float64"), XS, sm.tensor(0.7, "float64")), order=2)


def test_fori_and_while_loops():
    f = lambda x: sm.fori_loop(0, 5, lambda i, v: v * x + float(i), sm.tensor(1.0, "float64"))
    check_grads(f, (sm.tensor(0.9, "float64"),), order=2)
    v = sm.while_loop(lambda v: v < 100.0, lambda v: v * 3.0, sm.tensor(1.0))
    assert float(v) == 243.0


def test_jit_replays_scan():
    def rollout(u0, k):
        return sm.scan(lambda u, _: (u + 0.1 * (sm.roll(u, 1) - 2.0 * u + sm.roll(u, -1)) * k, u.sum()), u0,
                       length=20)
    g = sm.jit(lambda u0, k: rollout(u0, k)[0])
    for s in range(2):
        u0 = sm.tensor(np.random.default_rng(s).standard_normal(16), "float64")
        np.testing.assert_allclose(g(u0, sm.tensor(1.0, "float64")).numpy(),
                                   rollout(u0, sm.tensor(1.0, "float64"))[0].numpy(), rtol=1e-12)
    assert g.stats["replays"] == 1


def test_errors():
    with pytest.raises(TypeError, match="Python int"):
        sm.fori_loop(0, sm.tensor(3), lambda i, v: v, sm.tensor(1.0))
    with pytest.raises(ValueError, match="leading sizes"):
        sm.scan(lambda c, x: (c, x), sm.tensor(0.0), (sm.ones(3), sm.ones(4)))
    with pytest.raises(TypeError, match="structure of the carry"):
        sm.scan(lambda c, x: ((c, c), x), sm.tensor(0.0), sm.ones(3))
    with pytest.raises(ValueError, match="length="):
        sm.scan(lambda c, x: (c, x), sm.tensor(0.0))
