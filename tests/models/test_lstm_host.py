"""The whole-sequence LSTM kernels on CPU in float32 (sciml/kernels/lstm_host.py): the same values and gradients as
the per-step path (rnn_seq.py's per-step GEMM + cell kernels), as the float64 composed recurrence, and as PyTorch's
LSTM in float32; both directions, both layouts, input size 1 (the rank-1 input term inside the kernel) and wider,
odd batch sizes and hidden sizes that leave partial register tiles, NaN propagation; second order (through the
composed rule) in float32."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import lstm_host as LH
from sciml.models import LSTM
from sciml.models._rnn_fused import rnn_layer, rnn_layer_composed

pytestmark = pytest.mark.skipif(not backend.on_host(), reason="CPU kernels")


def _args(T, B, I, H, seed, dtype="float32"):
    r = np.random.default_rng(seed)
    shapes = [(T, B, I), (4 * H, I), (4 * H,), (4 * H, H), (B, H), (B, H)]
    return [sm.tensor(0.5 * r.standard_normal(s), dtype) for s in shapes]


def _run(args, kw, u):
    P, pull = sm.vjp(lambda *t: rnn_layer(*t, kind="LSTM", **kw), *args)
    return [P.numpy()] + [g.numpy() for g in pull(u)]


def _close(got, step, ref, kw):
    for i, (g, s, r) in enumerate(zip(got, step, ref)):  # float32 rounding, sums in other orders
        tol = 5e-4 * max(1.0, np.abs(r).max())
        np.testing.assert_allclose(g, s, rtol=5e-4, atol=tol, err_msg=f"{kw} output {i} vs per-step")
        np.testing.assert_allclose(g, r, rtol=5e-4, atol=tol, err_msg=f"{kw} output {i} vs float64")


@pytest.fixture
def calls(monkeypatch):
    """Counts the whole-sequence kernels' runs (forward, backward) and records the lanes they ran with."""
    n = {"fwd": 0, "bwd": 0, "lanes": set()}
    f, b = LH.forward, LH.backward

    def fwd(*a):
        n["fwd"] += 1
        n["lanes"].add(a[-1])
        return f(*a)

    def bwd(*a):
        n["bwd"] += 1
        n["lanes"].add(a[-1])
        return b(*a)
    monkeypatch.setattr(LH, "forward", fwd)
    monkeypatch.setattr(LH, "backward", bwd)
    return n


# small buffers: 16-byte vectors; from 64 KB on (backend.ALIGN_MIN_BYTES) the host's wide vectors, whose register
# tiles (4 rows x 4 vectors on AVX-512) are left partial by B = 7, 9 and H / lanes = 10, 11
@pytest.mark.parametrize("T, B, I, H", [(6, 5, 1, 32), (3, 2, 3, 8), (16, 7, 1, 160), (10, 9, 2, 176)])
def test_whole_sequence_equals_per_step_and_float64(T, B, I, H, calls, monkeypatch):
    from sciml.kernels import _vec as V
    args = _args(T, B, I, H, seed=T + B + I + H)
    u = np.random.default_rng(1).standard_normal(T * B * H + 2 * B * H)
    for rev in (False, True):
        for bf in (False, True):
            kw = dict(reverse=rev, batch_first=bf)
            n0 = {k: calls[k] for k in ("fwd", "bwd")}
            got = _run(args, kw, sm.tensor(u, "float32"))
            assert calls["fwd"] == n0["fwd"] + 1 and calls["bwd"] == n0["bwd"] + 1  # the whole-sequence path ran
            monkeypatch.setattr(LH, "ENABLED", False)
            step = _run(args, kw, sm.tensor(u, "float32"))
            monkeypatch.setattr(LH, "ENABLED", True)
            assert calls["fwd"] == n0["fwd"] + 1
            ref = step
            if rev == bf:  # the float64 composed recurrence (two of the four layouts: its Python loop is slow)
                a64 = [sm.tensor(a.numpy().astype(np.float64)) for a in args]
                P, pull = sm.vjp(lambda *t: rnn_layer_composed(*t, kind="LSTM", **kw), *a64)
                ref = [P.numpy()] + [g.numpy() for g in pull(sm.tensor(u))]
            _close(got, step, ref, kw)
            if I == 1:  # no dx wanted (the dx GEMM skipped; dW_ih, db summed in the kernel)
                n1 = calls["bwd"]
                x = args[0]
                P, pull = sm.vjp(lambda *t: rnn_layer(x, *t, kind="LSTM", **kw), *args[1:])
                nodx = [P.numpy()] + [g.numpy() for g in pull(sm.tensor(u, "float32"))]
                assert calls["bwd"] == n1 + 1
                _close(nodx, [step[0]] + step[2:], [ref[0]] + ref[2:], kw)
    if (T + 1) * B * H * 4 >= backend.ALIGN_MIN_BYTES and H % V.host_width() == 0:
        assert calls["lanes"] == {V.host_width()}


def test_nan_propagates(calls):
    args = _args(4, 3, 1, 16, seed=3)
    x = args[0].numpy().copy()
    x[1, 0, 0] = np.nan
    P = rnn_layer(sm.tensor(x, "float32"), *args[1:], kind="LSTM").numpy()
    y = P[:4 * 3 * 16].reshape(4, 3, 16)
    assert calls["fwd"] == 1
    assert np.isnan(y[1:, 0]).all() and np.isfinite(y[0]).all() and np.isfinite(y[:, 1:]).all()
    u = np.zeros(P.shape, np.float32)
    u[:4 * 3 * 16] = 1.0
    g = sm.vjp(lambda *t: rnn_layer(*t, kind="LSTM"), *args)[1](sm.tensor(u, "float32"))
    gx = g[0].numpy()
    assert np.isfinite(gx).all() and calls["bwd"] == 1
    x0 = args[0].numpy().copy()
    x0[2, 1, 0] = np.nan  # a NaN in the input makes its gradients NaN
    g = sm.vjp(lambda *t: rnn_layer(*t, kind="LSTM"), sm.tensor(x0, "float32"), *args[1:])[1](sm.tensor(u, "float32"))
    assert np.isnan(g[1].numpy()).all() and np.isnan(g[0].numpy()[:3, 1]).all()


def test_second_order_through_the_composed_rule_float32(calls):
    args = _args(3, 2, 1, 16, seed=5)
    f = lambda *t: (rnn_layer(*t, kind="LSTM") ** 2).sum()  # noqa: E731
    g64 = lambda *t: (rnn_layer_composed(*t, kind="LSTM") ** 2).sum()  # noqa: E731
    hv = sm.grad(lambda w: (sm.grad(f, argnums=3)(*args[:3], w, *args[4:]) ** 2).sum())(args[3]).numpy()
    a64 = [sm.tensor(a.numpy().astype(np.float64)) for a in args]
    want = sm.grad(lambda w: (sm.grad(g64, argnums=3)(*a64[:3], w, *a64[4:]) ** 2).sum())(a64[3]).numpy()
    np.testing.assert_allclose(hv, want, rtol=2e-3, atol=2e-4)


@pytest.mark.parametrize("I, bidir, layers", [(1, False, 1), (3, True, 2)])
def test_matches_torch_float32(I, bidir, layers, calls):
    torch = pytest.importorskip("torch")
    from sciml.serialization import from_torch_state_dict
    r = np.random.default_rng(7)
    H, B, T = 32, 5, 9
    tl = torch.nn.LSTM(I, H, num_layers=layers, bidirectional=bidir, batch_first=True)
    m = LSTM(I, H, num_layers=layers, bidirectional=bidir, batch_first=True, dtype="float32")
    m.load_state_dict(from_torch_state_dict(tl.state_dict(), m))
    x = r.standard_normal((B, T, I)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    yt, (ht, ct) = tl(xt)
    ((yt ** 2).sum() + (ht ** 3).sum() + ct.sum()).backward()

    def loss(p, xx):
        yy, (hh, cc) = m.apply(p, xx)
        return (yy ** 2).sum() + (hh ** 3).sum() + cc.sum()
    y, (h, c) = m(sm.tensor(x, "float32"))
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(c.numpy(), ct.detach().numpy(), rtol=1e-4, atol=2e-5)
    gp, gx = sm.grad(loss, argnums=(0, 1))(m.params(), sm.tensor(x, "float32"))
    assert calls["fwd"] >= layers and calls["bwd"] >= layers
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=2e-4, atol=1e-4)
    for name, p in tl.named_parameters():
        np.testing.assert_allclose(gp[name].numpy(), p.grad.numpy(), rtol=2e-4, atol=2e-4, err_msg=name)


def test_under_jit_replays_as_eager(calls):
    r = np.random.default_rng(9)
    m = LSTM(1, 32, batch_first=True, dtype="float32", seed=3)
    x = sm.tensor(r.standard_normal((5, 6, 1)), "float32")
    loss = lambda p: (m.apply(p, x)[0][:, -1] ** 2).mean()  # noqa: E731
    jitted = sm.jit(sm.value_and_grad(loss), fallback="raise")
    eager = sm.value_and_grad(loss)
    p = m.params()
    for k in range(3):
        p = {n: v * (1.0 + 0.1 * k) for n, v in p.items()}
        (v1, g1), (v2, g2) = eager(p), jitted(p)
        np.testing.assert_allclose(v2.numpy(), v1.numpy(), rtol=1e-6)
        for n in g1:
            np.testing.assert_allclose(g2[n].numpy(), g1[n].numpy(), rtol=1e-5, atol=1e-7, err_msg=n)
    assert jitted.stats["replays"] >= 1 and calls["fwd"] >= 2


@pytest.mark.parametrize("rev", [False, True])
def test_fused_backward_equals_separate_cell_pass(rev, calls, monkeypatch):
    """FUSED_BWD (the cell adjoints of step t in the epilogue of the dh tiles of step t+1) against the separate
    pass per step, with partial register tiles (B = 7, H / 16 = 10) and dh0 wanted and not."""
    args = _args(16, 7, 1, 160, seed=11)
    u = np.random.default_rng(2).standard_normal(16 * 7 * 160 + 2 * 7 * 160)
    kw = dict(reverse=rev, batch_first=True)
    got = {}
    monkeypatch.setattr(LH, "FMA", False)  # the same tile arithmetic both ways (test_fma_tiles: FMA against it)
    for fused in (True, False):
        monkeypatch.setattr(LH, "FUSED_BWD", fused)
        got[fused] = _run(args, kw, sm.tensor(u, "float32"))
        P, pull = sm.vjp(lambda *t: rnn_layer(*t[:4], args[4], t[4], kind="LSTM", **kw), *args[:4], args[5])
        got[fused, "no dh0"] = [P.numpy()] + [g.numpy() for g in pull(sm.tensor(u, "float32"))]
    assert calls["bwd"] == 4
    for a, b in zip(got[True] + got[True, "no dh0"], got[False] + got[False, "no dh0"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(b).max()))


def test_host_buffers_are_reused_only_when_free():
    from sciml.kernels import rnn_seq as RS
    n = backend.ALIGN_MIN_BYTES // 4 * 3 + 16  # float32 elements: a size nothing else asks for
    a = RS.buf(n, "float32")
    b = RS.buf(n, "float32")
    assert a is not b  # a is held
    v = a[10:20]
    del a
    c = RS.buf(n, "float32")
    assert c is not v.base and c is not b  # a view keeps its buffer out of the pool
    first = id(v.base)
    del v
    d = RS.buf(n, "float32")
    assert id(d) == first and d.size == n and backend._address(d) % 64 == 0  # free again: handed out again
    # an output kept by the caller is not overwritten by the next call of the same shape
    m = LSTM(1, 32, batch_first=True, dtype="float32", seed=1)
    r = np.random.default_rng(4)
    x1, x2 = (sm.tensor(r.standard_normal((8, 70, 1)), "float32") for _ in range(2))
    y1 = m(x1)[0]
    keep = y1.numpy().copy()
    y2 = m(x2)[0]
    np.testing.assert_array_equal(y1.numpy(), keep)
    assert not np.array_equal(y2.numpy(), keep)


def test_host_buffer_pool_stays_under_its_cap(monkeypatch):
    from sciml.kernels import rnn_seq as RS
    monkeypatch.setattr(RS, "POOL_MAX_BYTES", 3 << 20)
    monkeypatch.setattr(RS, "_POOL", {})  # a fresh pool: other tests' buffers may still be held
    monkeypatch.setattr(RS, "_POOL_BYTES", [0])
    for k in range(12):  # 12 sizes of ~0.5 MB, each freed at once: the pool keeps at most 3 MB of them
        RS.buf(131072 + 16 * k, "float32")
        assert RS._POOL_BYTES[0] <= 3 << 20
    assert RS._POOL_BYTES[0] == sum(b.nbytes for lst in RS._POOL.values() for b in lst)


@pytest.mark.parametrize("I, rev", [(1, False), (2, True)])
def test_partial_tiles_ignore_what_they_read_past_the_edges(I, rev, calls, monkeypatch):
    """The register tiles read 4 rows of h / dG and 4 vectors of W_hh through views at one index: past B (B = 7)
    and past H / 16 (10 vectors) they read the next rows (the slot being written, or 3 rows of padding) and the
    next row of W_hh, and must use none of it. With every free pooled buffer filled with NaN before a second,
    identical call, the values and gradients come out bit for bit the same."""
    import gc
    from sciml.kernels import rnn_seq as RS
    monkeypatch.setattr(RS, "_POOL", {})  # this test's buffers only
    monkeypatch.setattr(RS, "_POOL_BYTES", [0])
    args = _args(16, 7, I, 160, seed=13)
    u = sm.tensor(np.random.default_rng(3).standard_normal(16 * 7 * 160 + 2 * 7 * 160), "float32")
    kw = dict(reverse=rev, batch_first=True)
    first = [np.array(a, copy=True) for a in _run(args, kw, u)]
    gc.collect()
    n = 0
    for lst in RS._POOL.values():
        for b in lst:
            b[:] = np.nan
            n += 1
    assert n >= 4  # the saved buffers (G, Hs, Cs, dG, ...) went back to the pool and are poisoned
    second = _run(args, kw, u)
    from sciml.kernels import _vec as V
    assert calls["fwd"] == 2 and calls["bwd"] == 2 and calls["lanes"] == {V.host_width()}
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
