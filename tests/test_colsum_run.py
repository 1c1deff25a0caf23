"""kernels/colsum.run: column sums gathered with ``defer`` run two per launch (the device path's bias
and weight-gradient sums, pinn/fused.py), each summed in the same order as alone: the same bits."""
import numpy as np
import pytest

import sciml as sm  # noqa: F401
from sciml import backend
from sciml.kernels import colsum as CS


def _nd(x, dt):
    import taichi as ti
    b = ti.ndarray(backend.ti_dtype(dt), max(x.size, 1))
    b.from_numpy(x.ravel().astype(dt))
    return b


def _count_launches(monkeypatch):
    """The number of jobs of each colsum launch made while patched (1: colsum_k, 2: colsum2_k)."""
    import types
    seen = []
    real = CS.C

    def cached(key, build):
        k = real.cached(key, build)
        return lambda *a: (seen.append(2 if key[0] == "colsum2" else 1), k(*a))[1]
    monkeypatch.setattr(CS, "C", types.SimpleNamespace(cached=cached, ti=real.ti, arr=real.arr))
    return seen


def _jobs(rng, dt):
    """(kwargs list): plain, weighted + strided + offset, split (rows > SPLIT_MIN), split with plan_batch,
    accumulate; each with its own output buffer and workspace level."""
    out = []
    n, w = 3000, 5   # 3000 rows: split into chunks
    X = rng.standard_normal((3, n, w)).astype(dt)
    ones = np.ones(3 * n, dt)
    out.append(dict(x=X, batch=1, rows=40, cols=w, kw={}))
    out.append(dict(x=X, batch=2, rows=30, cols=4, kw=dict(weights=rng.standard_normal(60).astype(dt),
                                                         x_batch=7, row_stride=w, col_stride=1, x_off=3)))
    out.append(dict(x=X, batch=1, rows=n, cols=w, kw=dict(weights=ones, w_batch=n, plan_batch=3)))
    out.append(dict(x=X, batch=2, rows=n, cols=w, kw=dict(weights=ones, w_batch=n, plan_batch=3, x_off=n * w,
                                                         x_batch=n * w, accumulate=True)))
    out.append(dict(x=X, batch=3, rows=n, cols=w, kw=dict(accumulate=True)))
    return out


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_paired_column_sums_equal_single_ones_bit_for_bit(dt, monkeypatch):
    rng = np.random.default_rng(0)
    specs = _jobs(rng, dt)
    init = [rng.standard_normal(s["batch"] * s["cols"] + 4).astype(dt) for s in specs]
    alone = []
    for s, o0 in zip(specs, init):
        o = _nd(o0, dt)
        CS.colsum(_nd(s["x"], dt), o, s["batch"], s["rows"], s["cols"], dt, out_off=2,
                  **{k: (_nd(v, dt) if k == "weights" else v) for k, v in s["kw"].items()})
        alone.append(o.to_numpy())
    for order in (range(len(specs)), reversed(range(len(specs)))):
        jobs, outs = [], []
        for lvl, i in enumerate(order):
            s = specs[i]
            o = _nd(init[i], dt)
            outs.append((i, o))
            CS.colsum(_nd(s["x"], dt), o, s["batch"], s["rows"], s["cols"], dt, out_off=2, level=10 + 2 * lvl,
                      defer=jobs, **{k: (_nd(v, dt) if k == "weights" else v) for k, v in s["kw"].items()})
        assert len(jobs) == len(specs)
        launches = _count_launches(monkeypatch)
        CS.run(jobs, dt)
        monkeypatch.undo()
        # stage 1: 5 first launches paired -> 3; stage 2: the 3 split jobs' partial sums -> 2
        assert launches == [2, 2, 1, 2, 1], launches
        for i, o in outs:
            assert np.array_equal(o.to_numpy(), alone[i]), (dt, i)
    # against numpy (float64 sums; the plain job)
    s = specs[0]
    ref = init[0].astype(np.float64).copy()
    ref[2:2 + s["cols"]] = s["x"].reshape(-1)[:s["rows"] * s["cols"]].reshape(s["rows"], s["cols"]).astype(
        np.float64).sum(0)
    np.testing.assert_allclose(alone[0], ref, rtol=1e-5 if dt == "float32" else 1e-12, atol=1e-5)
    # the accumulating split job: out += the sums of batches 1 and 2 (x_off skips batch 0)
    s = specs[3]
    X = s["x"].astype(np.float64)
    want = init[3].astype(np.float64).copy()
    want[2:2 + 2 * s["cols"]] += X[1:3].sum(1).ravel()
    np.testing.assert_allclose(alone[3], want, rtol=1e-4 if dt == "float32" else 1e-12, atol=1e-3)


def test_a_deferred_sum_waits_for_run():
    dt = "float64"
    x = _nd(np.arange(12.0), dt)
    o = _nd(np.zeros(3), dt)
    jobs = []
    CS.colsum(x, o, 1, 4, 3, dt, defer=jobs)
    assert np.array_equal(o.to_numpy(), np.zeros(3)) and len(jobs) == 1
    CS.run(jobs, dt)
    assert np.array_equal(o.to_numpy(), np.arange(12.0).reshape(4, 3).sum(0))
