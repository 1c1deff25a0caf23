"""kernels/_warm.py: a lone large CPU map or sum runs serialized unless Taichi's pool is warm; bursts go parallel.

The rule is checked on a fake clock (no wall-clock limits); the kernels it switches give the same bits either way
(also tests/test_determinism.py, which forces the load rule both ways)."""
import numpy as np
import pytest

from sciml import backend
from sciml.kernels import _common as C
from sciml.kernels import _warm as W
from sciml.kernels import elementwise as E
from sciml.kernels import reduce as KR


class Clock:
    """A fake clock; ``step`` > 0: it advances by that much at every reading (launches take time)."""
    def __init__(self):
        self.t = 100.0
        self.step = 0.0

    def __call__(self):
        self.t += self.step
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(W, "clock", c)
    monkeypatch.setattr(W, "ON", True)
    monkeypatch.setattr(C, "busy", lambda: False)
    W.reset()
    yield c
    W.reset()


def test_rule_lone_launches_serial_bursts_parallel(clock):
    """Back-to-back serialized launches of 0.3 ms: once the burst has spent BUY_S serialized, the next goes parallel,
    and so do the following ones; a lone launch after a pause is serialized again."""
    got = []
    k = int(W.BUY_S / 300e-6) + 4
    for _ in range(k):  # back to back: 10 us between a launch's end and the next start
        s = W.cold()
        clock.t += 300e-6 if s else 150e-6  # the launch
        W.done(not s)
        got.append(s)
        clock.t += 10e-6
    nser = got.index(False)
    assert abs(nser * 300e-6 - W.BUY_S) <= 300e-6 and not any(got[nser:]), got
    clock.t += 0.5 * W.WARM_S  # still warm: parallel even alone
    assert not W.cold()
    W.done(True)
    clock.t += 2e-3  # numpy work in between: cold again, and a new burst
    assert W.cold()
    clock.t += 300e-6
    W.done(False)
    clock.t += 2e-3  # short batches (a benchmark's 2 ms of calls) between pauses never reach BUY_S
    for _ in range(3):
        for _ in range(int(0.6 * W.BUY_S / 300e-6)):
            assert W.cold()
            clock.t += 300e-6
            W.done(False)
        clock.t += 2e-3


def test_rule_off(clock, monkeypatch):
    monkeypatch.setattr(W, "ON", False)
    assert not W.cold()


@pytest.mark.parametrize("dt", ("float32", "float64"))
def test_maps_and_sum_take_both_paths_same_bits(clock, dt, monkeypatch):
    """A lone large add / sum / float32 tanh runs the serialized kernel, a long burst the parallel one:
    the same bits as each other and as numpy (add) / the serialized sum."""
    n = 300_003  # parallel by size for the cheap maps; a scalar tail
    rng = np.random.default_rng(3)
    x, y = backend.empty(n, dt), backend.empty(n, dt)
    x[:] = rng.standard_normal(n)
    y[:] = rng.standard_normal(n)
    x[::997] = np.nan
    outs = {"add": [], "sum": [], "tanh": []}
    ran = []  # (the launch's function, parallel) for each large launch
    done = W.done

    def record(parallel):
        import sys
        ran.append((sys._getframe(1).f_code.co_name, parallel))
        done(parallel)
    monkeypatch.setattr(W, "done", record)
    clock.step = 100e-6  # each launch lasts 100 us, 100 us between launches: one burst
    for i in range(int(W.BUY_S / 100e-6) // 2 + 3):
        o = backend.empty(n, dt)
        E.binary_same("add", x, y, o, n, dt, dt)
        outs["add"].append(o)
        s = np.zeros(1, dt)
        KR.reduce("sum", y, s, 1, n, 1, dt)
        outs["sum"].append(s)
        if dt == "float32":
            t = backend.empty(n, dt)
            E.unary("tanh", x, t, n, dt)
            outs["tanh"].append(t)
    for what, v in outs.items():
        for a in v[1:]:
            assert np.array_equal(a.view(np.uint8), v[0].view(np.uint8)), what
    np.testing.assert_array_equal(outs["add"][0], x + y)
    funcs = ("_binary_lanes", "_sum_flat") + (("_unary_lanes",) if dt == "float32" else ())
    for fn in funcs:
        p = [par for f, par in ran if f == fn]
        assert p[0] is False and p[-1] is True, (fn, p)  # serialized first, parallel once the burst paid off


def test_transcendental_maps_several_vectors_per_iteration_same_bits(monkeypatch):
    """float32 tanh / exp / sigmoid run trans_vectors() host vectors per iteration (kernels/_vec.py): the same bits
    as one vector per iteration, tails and specials included; tanh within 4e-7 of float64's and of numpy's float32
    tanh."""
    from sciml.kernels import _vec as V
    n = 70_000 + 37
    rng = np.random.default_rng(4)
    x = backend.empty(n, "float32")
    x[:] = rng.standard_normal(n) * 5
    sp = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 7.9, 7.91, 8.9, 9.0, 9.1, -9.1, 88.7, 89.5, -103.9,
          -104.5]
    x[:len(sp)] = sp
    x[-len(sp):] = sp
    got = {}
    for vecs in (None, 1):
        if vecs is not None:
            monkeypatch.setattr(V, "trans_vectors", lambda dtype, v=vecs: v)
        for op in ("tanh", "exp", "sigmoid"):
            o = backend.empty(n, "float32")
            E.unary(op, x, o, n, "float32")
            got.setdefault(op, []).append(o)
    for op, (a, b) in got.items():
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), op
    if V.trans_vectors("float32") > 1 and V.wide("float32") > V.LANES["float32"]:
        L = V.wide("float32") * V.trans_vectors("float32")
        assert any(k[0] == "unary_lanes" and k[1] == "tanh" and k[4] == L for k in C._cache if isinstance(k, tuple))
    t = got["tanh"][0]
    assert np.isnan(t[0]) and np.isnan(t[1]) and t[2] == 1 and t[3] == -1 and np.isnan(t[-len(sp)])
    fin = np.isfinite(x)
    err = np.abs(t[fin].astype(np.float64) - np.tanh(x[fin].astype(np.float64)))
    assert err.max() <= 4e-7, err.max()  # measured 3.9e-7 on [-10, 10] (Eigen's 13/6 rational form, unchanged)
    assert np.abs(t[fin] - np.tanh(x[fin])).max() <= 4e-7  # numpy's float32 tanh: 3.6e-7 measured


def test_rule_stays_out_while_jit_traces(clock, monkeypatch):
    from sciml import backend as B
    assert W.cold()  # a lone launch, not tracing
    W.reset()
    monkeypatch.setattr(B, "TRACE", [object()])  # the list object _warm reads is backend's own
    monkeypatch.setattr(W, "TRACE", B.TRACE)
    assert not W.cold()
