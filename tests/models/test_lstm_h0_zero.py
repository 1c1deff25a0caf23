"""A zero h0 (the default state of sciml.models.LSTM / GRU / RNN) on CPU: the first step's recurrent GEMM and
h0's rows of the dW_hh GEMM are skipped (kernels/rnn_seq.py, lstm_host.py). The values and every gradient (h0's
included) against the float64 composed recurrence and, in float64, against central differences; the skip is taken
for an all-zero h0 only (one nonzero entry runs the full sums)."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import linalg as LA
from sciml.kernels import lstm_host as LH
from sciml.models._rnn_fused import rnn_layer, rnn_layer_composed

pytestmark = pytest.mark.skipif(not backend.on_host(), reason="CPU path")


def _args(kind, T, B, I, H, h0, dtype):
    r = np.random.default_rng(T + B + I + H)
    ng = {"LSTM": 4, "GRU": 3}.get(kind, 1)
    nb = 2 * ng * H if kind == "GRU" else ng * H
    shapes = [(T, B, I), (ng * H, I), (nb,), (ng * H, H)]
    a = [0.5 * r.standard_normal(s) for s in shapes] + [h0]
    if kind == "LSTM":
        a.append(0.5 * r.standard_normal((B, H)))
    return [sm.tensor(v, dtype) for v in a]


@pytest.fixture
def dwhh_rows(monkeypatch):
    """The summed rows (k) of each dW_hh GEMM (dG^T hp: m = NG*H, n = H, the left operand transposed)."""
    seen, f = [], LA.matmul

    def spy(a, b, out, batch, m, n, k, ta, tb, *rest):
        if ta and not tb and m == n * spy.ng:
            seen.append(k)
        return f(a, b, out, batch, m, n, k, ta, tb, *rest)
    monkeypatch.setattr(LA, "matmul", spy)
    spy.ng = 4
    return seen, spy


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("I", [1, 3])
def test_zero_h0_lstm_float32_matches_float64(whole, I, dwhh_rows, monkeypatch):
    T, B, H = 7, 5, 32
    monkeypatch.setattr(LH, "ENABLED", whole)
    rows, _ = dwhh_rows
    u = np.random.default_rng(2).standard_normal(T * B * H + 2 * B * H)
    for h0 in (np.zeros((B, H)), np.eye(1, B * H, 37).reshape(B, H)):  # zero; one entry 1 (no skip)
        for rev in (False, True):
            kw = dict(kind="LSTM", reverse=rev, batch_first=rev)
            a32 = _args("LSTM", T, B, I, H, h0, "float32")
            del rows[:]
            P, pull = sm.vjp(lambda *t: rnn_layer(*t, **kw), *a32)
            got = [P.numpy()] + [g.numpy() for g in pull(sm.tensor(u, "float32"))]
            assert rows == [(T - 1) * B if not h0.any() else T * B]
            a64 = _args("LSTM", T, B, I, H, h0, "float64")
            P, pull = sm.vjp(lambda *t: rnn_layer_composed(*t, **kw), *a64)
            ref = [P.numpy()] + [g.numpy() for g in pull(sm.tensor(u))]
            for i, (g, r) in enumerate(zip(got, ref)):
                np.testing.assert_allclose(g, r, rtol=5e-4, atol=5e-4 * max(1.0, np.abs(r).max()),
                                           err_msg=f"{kw} h0 zero {not h0.any()} output {i}")


def test_zero_h0_whole_sequence_kernel_is_told(monkeypatch):
    seen, f = [], LH.forward

    def spy(*a):
        seen.append(a[-2])
        return f(*a)
    monkeypatch.setattr(LH, "forward", spy)
    T, B, I, H = 5, 4, 1, 32
    for h0 in (np.zeros((B, H)), np.full((B, H), 0.1)):
        rnn_layer(*_args("LSTM", T, B, I, H, h0, "float32"), kind="LSTM")
    assert seen == [True, False]


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN_TANH"])
def test_zero_h0_float64_against_central_differences(kind, dwhh_rows):
    T, B, I, H = 4, 3, 2, 5
    rows, spy = dwhh_rows
    spy.ng = {"LSTM": 4, "GRU": 3}.get(kind, 1)
    a = _args(kind, T, B, I, H, np.zeros((B, H)), "float64")
    kw = dict(kind=kind, reverse=kind == "GRU")
    rng = np.random.default_rng(5)
    n = rnn_layer(*a, **kw).size
    u = rng.standard_normal(n)
    P, pull = sm.vjp(lambda *t: rnn_layer(*t, **kw), *a)
    gs = [g.numpy() for g in pull(sm.tensor(u))]
    assert rows[-1] == (T - 1) * B
    vs = [rng.standard_normal(t.shape) for t in a]
    eps = 1e-6

    def f(s):
        return float(np.dot(u, rnn_layer(*[sm.tensor(t.numpy() + s * v) for t, v in zip(a, vs)], **kw).numpy()))
    fd = (f(eps) - f(-eps)) / (2 * eps)
    an = sum(float(np.sum(g * v)) for g, v in zip(gs, vs))
    assert abs(fd - an) <= 1e-6 * max(1.0, abs(an))
    # h0's own gradient, one entry at a time from zero
    for j in (0, B * H - 1):
        e = np.zeros(B * H)
        e[j] = 1.0
        vs = [np.zeros(t.shape) for t in a]
        vs[4] = e.reshape(B, H)
        fd = (f(eps) - f(-eps)) / (2 * eps)
        assert abs(fd - gs[4].reshape(-1)[j]) <= 1e-6 * max(1.0, abs(fd))
