"""Vulkan pass over the fused sequence kernels (run in its own process by test_rnn_fused.py and
test_attention_fused.py): the fused recurrent layer (LSTM, GRU, RNN) against a numpy forward reference and
its backward against the composed ops' on the same device; the fused attention likewise
(SCIML_SEQ_CHECK = rnn (default) | attention | all). Exits non-zero naming the failing check."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import sciml as sm  # noqa: E402

R = np.random.default_rng(0)
fails = []


def check(name, got, want, tol=2e-4):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    try:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    except AssertionError as e:
        fails.append(f"{name}: {e}")


def sig(x):
    return 1 / (1 + np.exp(-x))


def rnn_ref(kind, x, W, b, U, h0, c0, reverse, batch_first):
    T, B, _ = x.shape
    H = h0.shape[1]
    h, c, ys = h0, c0, [None] * T
    for s in range(T):
        t = T - 1 - s if reverse else s
        g = x[t] @ W.T
        gh = h @ U.T
        if kind == "LSTM":
            a = g + gh + b
            i, f, gg, o = sig(a[:, :H]), sig(a[:, H:2 * H]), np.tanh(a[:, 2 * H:3 * H]), sig(a[:, 3 * H:])
            c = f * c + i * gg
            h = o * np.tanh(c)
        elif kind == "GRU":
            g, gh = g + b[:3 * H], gh + b[3 * H:]
            r, z = sig(g[:, :H] + gh[:, :H]), sig(g[:, H:2 * H] + gh[:, H:2 * H])
            n = np.tanh(g[:, 2 * H:] + r * gh[:, 2 * H:])
            h = (1 - z) * n + z * h
        else:
            a = g + gh + b
            h = np.tanh(a) if kind == "RNN_TANH" else np.maximum(a, 0)
        ys[t] = h
    y = np.stack(ys, 1 if batch_first else 0)
    parts = [y.ravel(), h.ravel()] + ([c.ravel()] if kind == "LSTM" else [])
    return np.concatenate(parts)


def check_rnn():
    from sciml.models._rnn_fused import rnn_layer, rnn_layer_composed
    f = np.float32
    T, B, I, H = 5, 3, 2, 8
    for kind, ng in (("LSTM", 4), ("GRU", 3), ("RNN_TANH", 1), ("RNN_RELU", 1)):
        shapes = [(T, B, I), (ng * H, I), ((2 if kind == "GRU" else 1) * ng * H,), (ng * H, H), (B, H)]
        if kind == "LSTM":
            shapes.append((B, H))
        a = [0.6 * R.standard_normal(s) for s in shapes]
        args = [sm.tensor(v.astype(f)) for v in a]
        for rev, bf in ((False, True), (True, False)):
            kw = dict(kind=kind, reverse=rev, batch_first=bf)
            P = rnn_layer(*args, **kw)
            check(f"{kind} rev={rev} forward", P, rnn_ref(kind, *a, *([None] if kind != "LSTM" else []), rev, bf))
            u = sm.tensor(R.standard_normal(P.shape).astype(f))
            got = sm.vjp(lambda *t: rnn_layer(*t, **kw), *args)[1](u)
            want = sm.vjp(lambda *t: rnn_layer_composed(*t, **kw), *args)[1](u)
            for i, (g, w) in enumerate(zip(got, want)):
                check(f"{kind} rev={rev} backward {i}", g, w.numpy(), 1e-3)


def attn_ref(q, k, v, h, mask, drop):
    B, L, E = q.shape
    S, d = k.shape[1], E // h
    qh, kh, vh = (t.reshape(B, -1, h, d).transpose(0, 2, 1, 3) for t in (q, k, v))
    s = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(d) + mask
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return ((w * drop) @ vh).transpose(0, 2, 1, 3).reshape(B, L, E)


def check_attention():
    from sciml.models._attn_fused import attention, attention_composed
    f = np.float32
    B, L, S, E, h = 2, 3, 5, 8, 2
    q, k, v = R.standard_normal((B, L, E)), R.standard_normal((B, S, E)), R.standard_normal((B, S, E))
    mask, drop = R.standard_normal((B, 1, L, S)), (R.random((B, h, L, S)) > 0.3) / 0.7
    T = [sm.tensor(a.astype(f)) for a in (q, k, v, mask, drop)]
    check("attention forward", attention(*T[:3], num_heads=h, mask=T[3], dropout=T[4]), attn_ref(q, k, v, h, mask, drop))
    u = sm.tensor(R.standard_normal((B, L, E)).astype(f))
    kw = dict(num_heads=h, packed=False, has_mask=True, has_drop=True)
    got = sm.vjp(lambda *t: attention(*t, num_heads=h, mask=T[3], dropout=T[4]), *T[:3])[1](u)
    want = sm.vjp(lambda *t: attention_composed(*t, T[3], T[4], **kw), *T[:3])[1](u)
    for i, (g, w) in enumerate(zip(got, want)):
        check(f"attention backward {i}", g, w.numpy(), 1e-3)
    qkv = R.standard_normal((B, L, 3 * E))
    P = sm.tensor(qkv.astype(f))
    check("attention packed forward", attention(P, num_heads=h),
          attn_ref(qkv[..., :E], qkv[..., E:2 * E], qkv[..., 2 * E:], h, 0.0, 1.0))
    got = sm.vjp(lambda t: attention(t, num_heads=h), P)[1](u)[0]
    want = sm.vjp(lambda t: attention_composed(t, num_heads=h, packed=True, has_mask=False, has_drop=False), P)[1](u)[0]
    check("attention packed backward", got, want.numpy(), 1e-3)


def main():
    assert sm.init(arch="vulkan", dtype="float32", seed=0) == "vulkan"
    what = os.environ.get("SCIML_SEQ_CHECK", "rnn")
    if what in ("rnn", "all"):
        check_rnn()
    if what in ("attention", "all"):
        check_attention()
    if fails:
        print("\n".join(fails))
        sys.exit(1)
    print("OK vulkan seq")


if __name__ == "__main__":
    main()
