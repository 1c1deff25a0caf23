"""rnn_layer's ``x_batch_first`` (x given (B, T, I); on CPU one host transposition inside the primitive instead of
a transpose op): the same values and gradients (dx included) as time-first x, in float32 on both LSTM paths and
for the GRU, against the float64 composed recurrence; second order through the composed rule; the models' first
layer reads batch-first x without a transpose op."""
import numpy as np
import pytest

import sciml as sm
from sciml.kernels import lstm_host as LH
from sciml.models import LSTM
from sciml.models._rnn_fused import rnn_layer, rnn_layer_composed


def _args(kind, T, B, I, H, dtype, seed=3):
    r = np.random.default_rng(seed)
    ng = {"LSTM": 4, "GRU": 3}[kind]
    nb = 2 * ng * H if kind == "GRU" else ng * H
    shapes = [(T, B, I), (ng * H, I), (nb,), (ng * H, H), (B, H)] + ([(B, H)] if kind == "LSTM" else [])
    return [0.5 * r.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("kind, I, whole", [("LSTM", 1, True), ("LSTM", 3, True), ("LSTM", 3, False),
                                             ("GRU", 2, False)])
def test_x_batch_first_equals_time_first(kind, I, whole, monkeypatch):
    monkeypatch.setattr(LH, "ENABLED", whole)
    T, B, H = 6, 5, 32
    a = _args(kind, T, B, I, H, "float32")
    nout = (T + (2 if kind == "LSTM" else 1)) * B * H
    u = np.random.default_rng(4).standard_normal(nout)
    for rev in (False, True):
        kw = dict(kind=kind, reverse=rev, batch_first=not rev)
        a_bf = [a[0].transpose(1, 0, 2)] + a[1:]
        P, pull = sm.vjp(lambda *t: rnn_layer(*t, x_batch_first=True, **kw), *[sm.tensor(v, "float32") for v in a_bf])
        got = [P.numpy()] + [g.numpy() for g in pull(sm.tensor(u, "float32"))]
        assert got[1].shape == (B, T, I)
        got[1] = got[1].transpose(1, 0, 2)
        P, pull = sm.vjp(lambda *t: rnn_layer_composed(*t, **kw), *[sm.tensor(v) for v in a])
        ref = [P.numpy()] + [g.numpy() for g in pull(sm.tensor(u))]
        for i, (g, r) in enumerate(zip(got, ref)):
            np.testing.assert_allclose(g, r, rtol=5e-4, atol=5e-4 * max(1.0, np.abs(r).max()), err_msg=f"{kw} {i}")


def test_x_batch_first_second_order_float64():
    T, B, I, H = 3, 2, 2, 4
    a = [sm.tensor(v) for v in _args("LSTM", T, B, I, H, "float64")]
    xb = sm.tensor(a[0].numpy().transpose(1, 0, 2))
    w = sm.tensor(np.random.default_rng(6).standard_normal((T + 2) * B * H))

    def f(x, W_hh, bf):
        return (rnn_layer(x, a[1], a[2], W_hh, a[4], a[5], x_batch_first=bf) * w).sum()
    gx = sm.grad(lambda x, W: (sm.grad(lambda x: f(x, W, True))(x) ** 2).sum(), argnums=1)(xb, a[3])
    ref = sm.grad(lambda x, W: (sm.grad(lambda x: f(x, W, False))(x) ** 2).sum(), argnums=1)(a[0], a[3])
    np.testing.assert_allclose(gx.numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)


def test_model_reads_batch_first_x_without_a_transpose(monkeypatch):
    from sciml.models import _rnn_fused, recurrent
    n, f = [0], recurrent.transpose

    def spy(*a, **k):
        n[0] += 1
        return f(*a, **k)
    monkeypatch.setattr(recurrent, "transpose", spy)
    monkeypatch.setattr(_rnn_fused, "transpose", spy)
    lstm = LSTM(1, 16, batch_first=True, seed=0)
    x = sm.tensor(np.random.default_rng(0).standard_normal((4, 7, 1)), "float32")
    out, (h, c) = lstm(x)
    assert out.shape == (4, 7, 16)
    np.testing.assert_allclose(out.numpy()[:, -1], h.numpy()[0], rtol=1e-6)
    assert n[0] == (0 if sm.backend.on_host() else 1)
    ref = LSTM(1, 16, batch_first=False, seed=0)(sm.tensor(x.numpy().transpose(1, 0, 2)))[0].numpy()
    np.testing.assert_allclose(out.numpy(), ref.transpose(1, 0, 2), rtol=1e-5, atol=1e-6)


def test_x_batch_first_under_jit_replays_new_inputs():
    """The host transposition (and dx's) is recorded by sciml.jit: replays read the new x."""
    r = np.random.default_rng(9)
    m = LSTM(3, 32, batch_first=True, dtype="float32", seed=3)

    def loss(p, x):
        return (m.apply(p, x)[0][:, -1] ** 2).mean()
    jitted = sm.jit(sm.value_and_grad(loss, argnums=(0, 1)), fallback="raise")
    eager = sm.value_and_grad(loss, argnums=(0, 1))
    p = m.params()
    for _ in range(3):
        x = sm.tensor(r.standard_normal((5, 6, 3)), "float32")
        (v1, (g1, gx1)), (v2, (g2, gx2)) = eager(p, x), jitted(p, x)
        np.testing.assert_allclose(v2.numpy(), v1.numpy(), rtol=1e-6)
        np.testing.assert_allclose(gx2.numpy(), gx1.numpy(), rtol=1e-5, atol=1e-7)
        for n in g1:
            np.testing.assert_allclose(g2[n].numpy(), g1[n].numpy(), rtol=1e-5, atol=1e-7, err_msg=n)
    assert jitted.stats["replays"] >= 2
