"""RNN/LSTM/GRU (+cells; layers, bidirectional, batch_first) and MultiheadAttention / TransformerEncoderLayer:
values vs numpy references written from PyTorch's documented equations (torch itself if installed),
derivatives vs finite differences."""
import math

import numpy as np
import pytest

import sciml as sm
from sciml.models import (GRU, LSTM, RNN, GRUCell, LSTMCell, MultiheadAttention, RNNCell, TransformerEncoderLayer)
from sciml.serialization import from_torch_state_dict
from sciml.testing import check_grads

R = np.random.default_rng(0)


def sig(x):
    return 1 / (1 + np.exp(-x))


def _step(kind, x, h, c, Wih, Whh, bih, bhh):
    gx, gh = x @ Wih.T + bih, h @ Whh.T + bhh
    H = h.shape[1]
    if kind == "RNN":
        return np.tanh(gx + gh), None
    if kind == "LSTM":
        g = gx + gh
        i, f, gg, o = sig(g[:, :H]), sig(g[:, H:2 * H]), np.tanh(g[:, 2 * H:3 * H]), sig(g[:, 3 * H:])
        c2 = f * c + i * gg
        return o * np.tanh(c2), c2
    r, z = sig(gx[:, :H] + gh[:, :H]), sig(gx[:, H:2 * H] + gh[:, H:2 * H])
    n = np.tanh(gx[:, 2 * H:] + r * gh[:, 2 * H:])
    return (1 - z) * n + z * h, None


def _ref(kind, net, x, L, D, H):
    sd = {k: v for k, v in net.state_dict().items()}
    T, B = x.shape[:2]
    inp, hs, cs = x, [], []
    for layer in range(L):
        outs = []
        for d in range(D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            h, c = np.zeros((B, H)), np.zeros((B, H))
            seq = [None] * T
            for t in (range(T - 1, -1, -1) if d else range(T)):
                h, c = _step(kind, inp[t], h, c, sd["weight_ih" + sfx], sd["weight_hh" + sfx], sd["bias_ih" + sfx],
                             sd["bias_hh" + sfx])
                seq[t] = h
            outs.append(np.stack(seq))
            hs.append(h)
            cs.append(c)
        inp = np.concatenate(outs, 2)
    return inp, np.stack(hs), (np.stack(cs) if kind == "LSTM" else None)


@pytest.mark.parametrize("cls, kind", [(RNN, "RNN"), (LSTM, "LSTM"), (GRU, "GRU")])
@pytest.mark.parametrize("layers, bidir", [(1, False), (2, True)])
def test_recurrent_matches_reference(cls, kind, layers, bidir):
    T, B, I_, H = 4, 3, 5, 6
    net = cls(I_, H, num_layers=layers, bidirectional=bidir, seed=0)
    x = R.standard_normal((T, B, I_))
    D = 2 if bidir else 1
    out_ref, h_ref, c_ref = _ref(kind, net, x, layers, D, H)
    out, state = net(sm.tensor(x))
    np.testing.assert_allclose(out.numpy(), out_ref, rtol=1e-10, atol=1e-12)
    h = state[0] if kind == "LSTM" else state
    np.testing.assert_allclose(h.numpy(), h_ref, rtol=1e-10, atol=1e-12)
    if kind == "LSTM":
        np.testing.assert_allclose(state[1].numpy(), c_ref, rtol=1e-10, atol=1e-12)
    # batch_first gives the same numbers, transposed
    net.batch_first = True
    out_bf, _ = net(sm.tensor(x.transpose(1, 0, 2)))
    np.testing.assert_allclose(out_bf.numpy(), out_ref.transpose(1, 0, 2), rtol=1e-10, atol=1e-12)
    assert all(abs(p.numpy()).max() <= 1 / math.sqrt(H) for p in net.parameters())
    assert out.shape == (T, B, D * H)


def test_cells_and_gradients():
    x = sm.tensor(R.standard_normal((2, 3)))
    h = sm.tensor(R.standard_normal((2, 4)))
    c = sm.tensor(R.standard_normal((2, 4)))
    for cell, kind in ((RNNCell(3, 4, seed=0), "RNN"), (GRUCell(3, 4, seed=1), "GRU"), (LSTMCell(3, 4, seed=2),
                                                                                          "LSTM")):
        sd = cell.state_dict()
        ref = _step(kind, x.numpy(), h.numpy(), c.numpy(), sd["weight_ih"], sd["weight_hh"], sd["bias_ih"],
                    sd["bias_hh"])
        got = cell(x, (h, c)) if kind == "LSTM" else cell(x, h)
        np.testing.assert_allclose((got[0] if kind == "LSTM" else got).numpy(), ref[0], rtol=1e-12)
        f = (lambda xx, hh: cell(xx, (hh, c))[1]) if kind == "LSTM" else (lambda xx, hh: cell(xx, hh))
        check_grads(f, (x, h), order=2)
    lstm = LSTM(2, 3, seed=0)
    xs = sm.tensor(R.standard_normal((3, 2, 2)))
    check_grads(lambda t: lstm(t)[0], (xs,), order=1)
    g = sm.grad(lambda p: (lstm.apply(p, xs)[0] ** 2).sum())(lstm.params())
    assert set(g) == {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
    (lstm(xs)[0] ** 2).sum().backward()
    np.testing.assert_allclose(lstm.weight_hh_l0.grad.numpy(), g["weight_hh_l0"].numpy(), rtol=1e-12)


def test_recurrent_errors():
    with pytest.raises(ValueError, match=r"LSTM\(input_size=3\): x has shape \(2, 4\)"):
        LSTM(3, 4)(sm.ones((2, 4)))
    with pytest.raises(ValueError, match=r"initial state h0 has shape \(1, 2, 5\); expected \(1, 2, 4\)"):
        GRU(3, 4)(sm.ones((5, 2, 3)), sm.zeros((1, 2, 5)))
    with pytest.raises(TypeError, match="hidden_size=2.5"):
        RNN(3, 2.5)


def _mha_ref(mha, q, k, v, mask=None):
    sd = mha.state_dict()
    E, h = mha.embed_dim, mha.num_heads
    d = E // h
    W, b = sd["in_proj_weight"], sd["in_proj_bias"]
    Q, K, V = q @ W[:E].T + b[:E], k @ W[E:2 * E].T + b[E:2 * E], v @ W[2 * E:].T + b[2 * E:]
    B, L, S = q.shape[0], q.shape[1], k.shape[1]
    Qh, Kh, Vh = (t.reshape(B, -1, h, d).transpose(0, 2, 1, 3) for t in (Q, K, V))
    s = Qh @ Kh.transpose(0, 1, 3, 2) / math.sqrt(d)
    if mask is not None:
        s = np.where(mask, -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o = (w @ Vh).transpose(0, 2, 1, 3).reshape(B, L, E)
    return o @ sd["out_proj.weight"] + sd["out_proj.bias"], w.mean(1)


def test_multihead_attention():
    mha = MultiheadAttention(8, 2, batch_first=True, seed=0)
    q, kv = R.standard_normal((2, 3, 8)), R.standard_normal((2, 5, 8))
    out, w = mha(sm.tensor(q), sm.tensor(kv), sm.tensor(kv))
    ro, rw = _mha_ref(mha, q, kv, kv)
    np.testing.assert_allclose(out.numpy(), ro, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.numpy(), rw, rtol=1e-10, atol=1e-12)
    causal = np.triu(np.ones((3, 5), bool), 1)
    out, _ = mha(sm.tensor(q), sm.tensor(kv), sm.tensor(kv), attn_mask=causal)
    np.testing.assert_allclose(out.numpy(), _mha_ref(mha, q, kv, kv, causal)[0], rtol=1e-10, atol=1e-12)
    kpm = np.zeros((2, 5), bool)
    kpm[1, 3:] = True
    out, _ = mha(sm.tensor(q), sm.tensor(kv), sm.tensor(kv), key_padding_mask=kpm)
    np.testing.assert_allclose(out.numpy(), _mha_ref(mha, q, kv, kv, kpm[:, None, None, :])[0], rtol=1e-10,
                               atol=1e-12)
    seq_first = MultiheadAttention(8, 2, seed=0)
    o2, _ = seq_first(*(sm.tensor(t.transpose(1, 0, 2)) for t in (q, kv, kv)))
    np.testing.assert_allclose(o2.numpy().transpose(1, 0, 2), ro, rtol=1e-10, atol=1e-12)
    x = sm.tensor(R.standard_normal((1, 3, 8)))
    check_grads(lambda t: mha(t, t, t)[0], (x,), order=2, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        MultiheadAttention(8, 3)


def test_transformer_encoder_layer():
    layer = TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, seed=0).eval()
    x = R.standard_normal((2, 4, 8))
    sd = layer.state_dict()

    def ln(t, w, b):
        mu, var = t.mean(-1, keepdims=True), t.var(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + 1e-5) * w + b
    sa = _mha_ref(layer.self_attn, x, x, x)[0]
    y = ln(x + sa, sd["norm1.weight"], sd["norm1.bias"])
    ff = np.maximum(y @ sd["linear1.weight"] + sd["linear1.bias"], 0) @ sd["linear2.weight"] + sd["linear2.bias"]
    ref = ln(y + ff, sd["norm2.weight"], sd["norm2.bias"])
    np.testing.assert_allclose(layer(sm.tensor(x)).numpy(), ref, rtol=1e-10, atol=1e-12)
    pre = TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.1, norm_first=True, activation="gelu", seed=1)
    out = pre(sm.tensor(x.transpose(1, 0, 2)))
    assert out.shape == (4, 2, 8) and np.all(np.isfinite(out.numpy()))
    (pre(sm.tensor(x.transpose(1, 0, 2))) ** 2).mean().backward()
    assert pre.linear1.weight.grad is not None and pre.self_attn.in_proj_weight.grad is not None


def test_against_torch():
    torch = pytest.importorskip("torch")
    tl = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    sl = LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    sl.load_state_dict(from_torch_state_dict(tl.state_dict(), sl))
    x = R.standard_normal((2, 5, 3))
    ref = tl(torch.tensor(x))[0].detach().numpy()
    np.testing.assert_allclose(sl(sm.tensor(x))[0].numpy(), ref, rtol=1e-10, atol=1e-12)
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    sm_ = MultiheadAttention(8, 2, batch_first=True)
    sm_.load_state_dict(from_torch_state_dict(tm.state_dict(), sm_))
    q = R.standard_normal((2, 3, 8))
    ref = tm(*(torch.tensor(q),) * 3)[0].detach().numpy()
    np.testing.assert_allclose(sm_(*(sm.tensor(q),) * 3)[0].numpy(), ref, rtol=1e-10, atol=1e-12)
