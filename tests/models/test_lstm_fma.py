"""The FMA register tiles of the float32 CPU LSTM (sciml/kernels/fma_tile.py, linked as LLVM bitcode into
lstm_host.py's kernels): the tile function against numpy (both shapes, strides, an empty k range), the layer with
them against the Taichi tiles and the float64 composed recurrence (values and all gradients, both directions,
partial tiles), NaN propagation, and the shipped bitcode against its text."""
import shutil
import subprocess

import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import fma_tile as FT
from sciml.kernels import lstm_host as LH
from sciml.models._rnn_fused import rnn_layer, rnn_layer_composed

pytestmark = pytest.mark.skipif(not (backend.on_host() and FT.available()), reason="x86-64 CPU kernels")


def _aligned(n, r):
    b = np.empty(n + 16, np.float32)
    o = (-b.ctypes.data // 4) % 16
    a = b[o:o + n]
    a[:] = r.standard_normal(n)
    return a


_KERNELS = {}


def _tile_kernel(L, R, G):
    if (L, R, G) in _KERNELS:
        return _KERNELS[L, R, G]
    from sciml.kernels import _common as C
    from sciml.kernels import _vec as V
    ti = C.ti()
    VT = ti.types.vector(L, ti.f32)

    @ti.kernel
    def k(out: ti.types.ndarray(dtype=VT, ndim=1), wa: ti.i64, xa: ti.i64, n: ti.i32, s: ti.i32, xn: ti.i32,
          reps: ti.i32):
        ti.loop_config(serialize=True)
        for _ in range(1):
            for _rep in range(reps):
                accs = [ti.Vector([0.0] * L, dt=ti.f32) for _i in ti.static(range(R * G))]
                ws = [wa + ti.cast(g * L * 4, ti.i64) for g in ti.static(range(G))]  # block g: vector g of each row
                xs = [xa + ti.cast(r * xn * 4, ti.i64) for r in ti.static(range(R))]
                nn = n
                ss = s
                FT.call(L, R, G, ws, xs, nn, ss, accs)
                for i in ti.static(range(R * G)):
                    out[i] += accs[i]
    _KERNELS[L, R, G] = V.VecLaunch(k, L)  # compiled with real_matrix_scalarize off, as lstm_host.py's
    return _KERNELS[L, R, G]


@pytest.mark.parametrize("L, R, G", FT.SHAPES)
@pytest.mark.parametrize("n", [0, 1, 37])
def test_tile_function_against_numpy(L, R, G, n):
    r = np.random.default_rng(n + L)
    s = G + 3  # weight vectors s apart from one k to the next (the backward's layout): block g at vector g
    W = _aligned(max(n, 1) * s * L, r)
    X = _aligned(R * max(n, 1), r)
    out = _aligned(R * G * L, r)
    start = out.copy()
    _tile_kernel(L, R, G)([out], [out.ctypes.data], [R * G], [W.ctypes.data, X.ctypes.data, n, s, max(n, 1), 1])
    w = W.reshape(max(n, 1), s, L)[:n, :G]  # (k, g, lanes)
    x = X.reshape(R, max(n, 1))[:, :n]
    ref = start.reshape(R, G, L).astype(np.float64) + np.einsum("rk,kgl->rgl", x.astype(np.float64), w)
    np.testing.assert_allclose(out.reshape(R, G, L), ref, rtol=1e-5, atol=1e-5 * max(1, n))


@pytest.fixture
def used(monkeypatch):
    """The kernel keys the whole-sequence launches ran with (the last field: built with FMA tiles)."""
    seen = []
    f = LH._launch

    def spy(key, *a):
        seen.append(key)
        return f(key, *a)
    monkeypatch.setattr(LH, "_launch", spy)
    return seen


def _args(T, B, I, H, seed, dtype="float32"):
    r = np.random.default_rng(seed)
    shapes = [(T, B, I), (4 * H, I), (4 * H,), (4 * H, H), (B, H), (B, H)]
    scale = [1.0, 0.5, 0.5, 1.0 / np.sqrt(H), 0.5, 0.5]  # recurrent weights as nn.LSTM's init: no blow-up over T
    return [sm.tensor(c * r.standard_normal(s), dtype) for c, s in zip(scale, shapes)]


def _run(args, kw, u):
    P, pull = sm.vjp(lambda *t: rnn_layer(*t, kind="LSTM", **kw), *args)
    return [P.numpy()] + [g.numpy() for g in pull(u)]


# B = 7, 9 and H / 16 = 10, 11 leave partial register tiles; (20, 32, 1, 128) is the benchmark's layer, shorter
@pytest.mark.parametrize("T, B, I, H, rev", [(16, 7, 1, 160, False), (10, 9, 2, 176, True), (20, 32, 1, 128, False)])
def test_fma_tiles_match_taichi_tiles_and_float64(T, B, I, H, rev, used, monkeypatch):
    args = _args(T, B, I, H, seed=T + B + H)
    u = np.random.default_rng(1).standard_normal(T * B * H + 2 * B * H)
    kw = dict(reverse=rev, batch_first=True)
    got = {}
    for fma in (True, False):
        monkeypatch.setattr(LH, "FMA", fma)
        n = len(used)
        got[fma] = _run(args, kw, sm.tensor(u, "float32"))
        ran = used[n:]  # the FMA tiles wherever the wide vectors ran (4 lanes: the Taichi tiles)
        assert [k[1] for k in ran] == ["fwd", "bwdf"] and all(k[-1] == (fma and k[2] > 4) for k in ran), ran
    a64 = [sm.tensor(a.numpy().astype(np.float64)) for a in args]
    P, pull = sm.vjp(lambda *t: rnn_layer_composed(*t, kind="LSTM", **kw), *a64)
    ref = [P.numpy()] + [g.numpy() for g in pull(sm.tensor(u))]
    for i, r in enumerate(ref):
        sc = max(1.0, np.abs(r).max())
        e_fma = np.abs(got[True][i] - r).max() / sc
        e_ti = np.abs(got[False][i] - r).max() / sc
        assert e_fma < 2e-4, (i, e_fma)  # float32 rounding (the Taichi tiles: e_ti, same order)
        assert e_fma < 4 * e_ti + 2e-6, (i, e_fma, e_ti)


def test_fma_tiles_propagate_nan(monkeypatch):
    monkeypatch.setattr(LH, "FMA", True)
    args = _args(12, 8, 1, 128, seed=3)
    w = args[3].numpy().copy()
    w[5, 7] = np.nan  # one recurrent weight: every unit is NaN from the second step on (h feeds all gates)
    args[3] = sm.tensor(w, "float32")
    u = np.ones(12 * 8 * 128 + 2 * 8 * 128)
    out = _run(args, dict(reverse=False, batch_first=False), sm.tensor(u, "float32"))
    y = out[0][:12 * 8 * 128].reshape(12, 8, 128)
    assert np.isnan(y[0][:, 5]).all()  # step 0 (h0 != 0) reads the NaN weight for unit 5's input gate
    assert np.isnan(y[1:]).all()
    assert np.isnan(out[4]).any()  # dW_hh


def test_bitcode_text_is_versioned():
    """Taichi's offline cache keys a kernel by its IR, which names the tile function (with VERSION), not by the
    bitcode's contents: a changed text must come with a new VERSION."""
    import hashlib
    assert hashlib.sha256(FT.module_text().encode()).hexdigest()[:16] == FT.TEXT_SHA256, \
        "module_text() changed: bump fma_tile.VERSION, update TEXT_SHA256, run python -m sciml.kernels.fma_tile"


@pytest.mark.skipif(shutil.which("llvm-as") is None, reason="llvm-as not installed")
def test_shipped_bitcode_is_the_text(tmp_path):
    v = subprocess.run(["llvm-as", "--version"], capture_output=True, text=True).stdout
    if "version 14." not in v:
        pytest.skip("the shipped bitcode was written by llvm-as 14; other versions write other bytes")
    FT._write(str(tmp_path / "t.bc"))
    assert (tmp_path / "t.bc").read_bytes() == open(FT.PATH, "rb").read(), "run python -m sciml.kernels.fma_tile"


def _act_kernel(estrin):
    """out = (tanh(x), sigmoid(x), sigmoid(x), tanh(x), sigmoid(x)) of the kernels' rational forms (``_rational``,
    ``_gates``: the four gates with one division), on 16-lane vectors."""
    from sciml.kernels import _common as C
    from sciml.kernels import _vec as V
    ti = C.ti()
    prev = LH.ESTRIN
    LH.ESTRIN = estrin
    try:
        P, Q, tanh = LH._rational()
        gates = LH._gates(P, Q, ti.f32)
    finally:
        LH.ESTRIN = prev
    VT = ti.types.vector(16, ti.f32)

    @ti.kernel
    def k(x: ti.types.ndarray(dtype=VT, ndim=1), out: ti.types.ndarray(dtype=VT, ndim=1), n: ti.i32):
        ti.loop_config(serialize=True)
        for i in range(n):
            v = x[i]
            gi, gf, gg, go = gates(v, v, v, v)
            out[5 * i] = tanh(v)
            out[5 * i + 1] = gi
            out[5 * i + 2] = gf
            out[5 * i + 3] = gg
            out[5 * i + 4] = go
    return V.VecLaunch(k, 16)


def test_rational_tanh_and_gates_accuracy():
    """The cells' tanh and sigmoid (Estrin, and Horner as before) against numpy in float64: float32 rounding, NaN
    stays NaN, +-inf give +-1 / 1, 0 (to 4e-7)."""
    x = np.concatenate([np.linspace(-12, 12, 1 << 16), np.geomspace(1e-30, 1e-3, 256), -np.geomspace(1e-30, 1e-3, 256),
                        [0.0, np.inf, -np.inf, np.nan, 7.9, 7.91, -9.5, 20.0, 88.0, 89.0]])
    x = np.concatenate([x, np.zeros(-len(x) % 16)])
    xa = _aligned(len(x), np.random.default_rng(0))
    xa[:] = x
    x32 = xa.astype(np.float64)
    t = np.tanh(x32)
    s = 1 / (1 + np.exp(-x32))
    err = {}
    for estrin in (False, True):
        out = _aligned(5 * len(x), np.random.default_rng(0))
        n = len(x) // 16
        _act_kernel(estrin)([xa, out], [xa.ctypes.data, out.ctypes.data], [n, 5 * n], [n])
        o = out.reshape(n, 5, 16).transpose(1, 0, 2).reshape(5, -1).astype(np.float64)
        fin = ~np.isnan(x32)
        for j, ref in enumerate((t, s, s, t, s)):
            assert np.isnan(o[j][~fin]).all(), (estrin, j)
            err[estrin, j] = np.abs(o[j][fin] - ref[fin]).max()
            assert err[estrin, j] < 6e-7, (estrin, j, err[estrin, j])  # measured 1.8-4.2e-7: a few float32 ulps
        small = fin & (np.abs(x32) < 1e-3)  # relative accuracy where tanh is tiny
        np.testing.assert_allclose(o[0][small], t[small], rtol=3e-7, atol=0)
        for j, lo, hi in ((0, -1, 1), (1, 0, 1), (3, -1, 1)):  # the clamp: +-inf as +-7.9 (1 - P/Q ~ 2e-7)
            assert abs(o[j][x32 == np.inf][0] - hi) < 4e-7 and abs(o[j][x32 == -np.inf][0] - lo) < 4e-7
    for j in range(5):  # Estrin no worse than Horner beyond rounding
        assert err[True, j] <= 1.5 * err[False, j] + 1e-7, (j, err[True, j], err[False, j])


def test_fma_tiles_under_jit_replay_as_eager(used):
    """sciml.jit replays the recorded launches with new inputs: the tiles' operand addresses (kernel scalars) point
    into buffers made inside the layer (gate blocks, saved states, gate cotangents), which a replay reuses."""
    from sciml.models import LSTM
    r = np.random.default_rng(5)
    m = LSTM(1, 128, batch_first=True, dtype="float32", seed=4)

    def loss(p, x):
        return (m.apply(p, x)[0][:, -1] ** 2).mean()
    jitted = sm.jit(sm.value_and_grad(loss), fallback="raise")
    eager = sm.value_and_grad(loss)
    p = m.params()
    for k in range(3):
        p = {n: v * (1.0 + 0.1 * k) for n, v in p.items()}
        x = sm.tensor(r.standard_normal((8, 20, 1)), "float32")  # new data each call
        (v1, g1), (v2, g2) = eager(p, x), jitted(p, x)
        np.testing.assert_allclose(v2.numpy(), v1.numpy(), rtol=1e-6)
        for n in g1:
            np.testing.assert_allclose(g2[n].numpy(), g1[n].numpy(), rtol=1e-5, atol=1e-7, err_msg=n)
    assert jitted.stats["replays"] >= 1
    assert any(k[1] == "fwd" and k[-1] for k in used) and any(k[1] == "bwdf" and k[-1] for k in used)
