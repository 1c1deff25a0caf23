"""The fused multi-head attention primitive (sciml/models/_attn_fused.py, kernels/attention.py): fused ==
composed (values and VJPs, float64) for the packed and the separate layouts, with masks and dropout multipliers;
finite differences to second order; MultiheadAttention / TransformerEncoderLayer against PyTorch's outputs and
gradients; the float32 vector kernels == the scalar ones; NaN propagation; a Vulkan pass (vulkan_seq_check.py)."""
import os

import numpy as np
import pytest

import sciml as sm
from sciml.models import MultiheadAttention, TransformerEncoderLayer
from sciml.models._attn_fused import attention, attention_composed
from sciml.testing import check_grads

HERE = os.path.dirname(os.path.abspath(__file__))
R = np.random.default_rng(0)


def _at(tree, name):
    for k in name.split("."):
        tree = tree[k]
    return tree


def _same_grads(gp, tmod, smod):
    """sciml's parameter gradients == torch's (mapped to sciml's layouts like the state dict)."""
    from sciml.serialization import from_torch_state_dict
    want = from_torch_state_dict({n: p.grad for n, p in tmod.named_parameters()}, smod, strict=False)
    assert want
    for name, w in want.items():
        np.testing.assert_allclose(_at(gp, name).numpy(), w, rtol=1e-9, atol=1e-11, err_msg=name)


def _case(packed, has_mask, has_drop, B=2, L=3, S=4, E=8, h=2, dtype="float64", seed=0):
    r = np.random.default_rng(seed)
    if packed:
        ins = [sm.tensor(r.standard_normal((B, L, 3 * E)), dtype)]
        S = L
    else:
        ins = [sm.tensor(r.standard_normal(s), dtype) for s in ((B, L, E), (B, S, E), (B, S, E))]
    mask = sm.tensor(r.standard_normal((B, 1, L, S)), dtype) if has_mask else None
    drop = sm.tensor((r.random((B, h, L, S)) > 0.3) / 0.7, dtype) if has_drop else None
    return ins, mask, drop


def _fns(n, h, mask, drop, packed):
    extra = [t for t in (mask, drop) if t is not None]
    kw = dict(num_heads=h, packed=packed, has_mask=mask is not None, has_drop=drop is not None)

    def fused(*t):
        return attention(*t, num_heads=h, mask=mask, dropout=drop)

    def composed(*t):
        return attention_composed(*t, *extra, **kw)
    return fused, composed


@pytest.mark.parametrize("packed", [True, False])
def test_fused_equals_composed(packed):
    for has_mask in (False, True):
        for has_drop in (False, True):
            ins, mask, drop = _case(packed, has_mask, has_drop)
            fused, composed = _fns(len(ins), 2, mask, drop, packed)
            a, b = fused(*ins).numpy(), composed(*ins).numpy()
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
            u = sm.tensor(R.standard_normal(a.shape))
            for g, w in zip(sm.vjp(fused, *ins)[1](u), sm.vjp(composed, *ins)[1](u)):
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("packed", [True, False])
def test_derivatives_match_finite_differences_to_second_order(packed):
    ins, mask, _ = _case(packed, True, False, B=1, L=2, S=3, E=4, h=2, seed=1)
    fused, _ = _fns(len(ins), 2, mask, None, packed)
    check_grads(fused, tuple(ins), order=2)


def test_nan_propagates_and_masked_rows():
    ins, _, _ = _case(True, False, False)
    x = ins[0].numpy().copy()
    x[0, 1, 0] = np.nan                 # a query of batch 0: only its own row is NaN
    out = attention(sm.tensor(x), num_heads=2).numpy()
    assert np.isnan(out[0, 1, :4]).all() and np.isfinite(out[0, 0]).all() and np.isfinite(out[1]).all()
    mask = np.zeros((1, 1, 3, 3))
    mask[..., 1, :] = -np.inf          # a fully masked row is NaN, as the composed softmax gives
    out = attention(ins[0], num_heads=2, mask=sm.tensor(mask)).numpy()
    assert np.isnan(out[:, 1]).all() and np.isfinite(out[:, 0]).all()


def test_empty_sequence_is_a_clear_error():
    m = MultiheadAttention(8, 2, batch_first=True)
    with pytest.raises(ValueError, match=r"empty batch or sequence \(query \(2, 0, 8\)"):
        m(sm.zeros((2, 0, 8)), sm.zeros((2, 0, 8)), sm.zeros((2, 0, 8)))


def test_float32_vector_kernels_equal_scalar_kernels(monkeypatch):
    from sciml.kernels import attention as KA
    for packed in (True,):  # the layouts differ only in offsets and strides (both checked in float64 above)
        ins, mask, drop = _case(packed, True, True, B=3, L=5, S=6, E=32, h=2, dtype="float32", seed=3)
        fused, _ = _fns(len(ins), 2, mask, drop, packed)
        u = sm.tensor(R.standard_normal((3, 5, 32)), "float32")
        res = []
        for vec in (True, False):
            monkeypatch.setattr(KA, "VECTOR", vec)
            out, pull = sm.vjp(fused, *ins)
            res.append([out.numpy()] + [g.numpy() for g in pull(u)])
        for a, b in zip(*res):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_multihead_attention_matches_torch():
    torch = pytest.importorskip("torch")
    from sciml.serialization import from_torch_state_dict
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=True).double()
    m = MultiheadAttention(8, 2, batch_first=True)
    m.load_state_dict(from_torch_state_dict(tm.state_dict(), m))
    x, kv = R.standard_normal((2, 3, 8)), R.standard_normal((2, 4, 8))
    kpm = np.zeros((2, 4), bool)
    kpm[1, 2:] = True
    causal = np.triu(np.ones((3, 4), bool), 1)
    for self_attn in (True, False):
        xt = torch.tensor(x, requires_grad=True)
        kt = xt if self_attn else torch.tensor(kv, requires_grad=True)
        kw = {} if self_attn else dict(key_padding_mask=torch.tensor(kpm), attn_mask=torch.tensor(causal))
        yt, wt = tm(xt, kt, kt, **kw)
        ((yt ** 2).sum() + (wt ** 2).sum()).backward()
        skw = {} if self_attn else dict(key_padding_mask=kpm, attn_mask=causal)

        def loss(p, xx, kk):
            y, w = m.apply(p, xx, xx if self_attn else kk, xx if self_attn else kk, **skw)
            return (y ** 2).sum() + (w ** 2).sum()
        q_, kv_ = sm.tensor(x), sm.tensor(kv)
        y, w = m(q_, q_, q_) if self_attn else m(q_, kv_, kv_, **skw)
        np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(w.numpy(), wt.detach().numpy(), rtol=1e-10, atol=1e-12)
        gp, gx, gk = sm.grad(loss, argnums=(0, 1, 2))(m.params(), sm.tensor(x), sm.tensor(kv))
        np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-11)
        if not self_attn:
            np.testing.assert_allclose(gk.numpy(), kt.grad.numpy(), rtol=1e-9, atol=1e-11)
        _same_grads(gp, tm, m)
        tm.zero_grad()


def test_transformer_encoder_layer_matches_torch():
    torch = pytest.importorskip("torch")
    from sciml.serialization import from_torch_state_dict
    tl = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).double()
    sl = TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    sl.load_state_dict(from_torch_state_dict(tl.state_dict(), sl, strict=False), strict=False)
    x = R.standard_normal((2, 5, 8))
    xt = torch.tensor(x, requires_grad=True)
    (tl(xt) ** 2).sum().backward()
    np.testing.assert_allclose(sl(sm.tensor(x)).numpy(), tl(torch.tensor(x)).detach().numpy(), rtol=1e-10,
                               atol=1e-12)
    gp, gx = sm.grad(lambda p, xx: (sl.apply(p, xx) ** 2).sum(), argnums=(0, 1))(sl.params(), sm.tensor(x))
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-11)
    _same_grads(gp, tl, sl)


def test_attention_dropout_in_training_mode():
    m = MultiheadAttention(8, 2, dropout=0.5, batch_first=True, seed=0)
    x = sm.tensor(R.standard_normal((2, 3, 8)))
    a = m(x, x, x, need_weights=False)[0].numpy()
    b = m(x, x, x, need_weights=False)[0].numpy()
    assert not np.allclose(a, b)                     # a fresh mask per call
    m.eval()
    c, d = (m(x, x, x, need_weights=False)[0].numpy() for _ in range(2))
    np.testing.assert_array_equal(c, d)


def test_fused_seq_kernels_on_vulkan(tmp_path):
    from tests.models.test_rnn_fused import _run_vulkan
    from tests.models.vulkan_seq_check import write_cases
    cases = []
    for packed in (True, False):
        ins, mask, drop = _case(packed, not packed, True, B=2, L=3, S=5, E=8, h=2, seed=5)
        extra = [t.numpy() for t in (mask, drop) if t is not None]
        cases.append((f"attention_{packed}", "attention", dict(num_heads=2, mask=not packed, dropout=True),
                      [t.numpy() for t in ins], extra, R.standard_normal((2, 3, 8))))
    _run_vulkan(tmp_path, cases, write_cases)
