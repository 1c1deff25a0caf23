"""Results do not depend on the host's load ("reproducible from a seed", docs/perf.md "Reproducibility").

``_common.busy()`` (1-minute load average >= cores) switches CPU kernels between a serialized and a
parallel compilation. That choice may only pick between two paths that give the same bits: every kernel
whose choice reads ``busy()`` runs here with the answer forced both ways, on buffers large enough that an
idle host takes the parallel path, and the outputs are compared bit for bit; a short float32 Burgers solve
compares its loss history. (Before the fix, the fused Taylor output layer, compiled with fast math,
summed its units in a different order serialized and in parallel: the Burgers main job's rel. L2 moved
between 2.7e-5 and 3.8e-5 with the machine's load.)
"""
import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import _common as C
from sciml.kernels import elementwise as E
from sciml.kernels import optim as KO
from sciml.kernels import reduce as KR

DTYPES = ("float32", "float64")


def _bits(a):
    return np.ascontiguousarray(a).view("u4" if a.dtype == np.float32 else "u8")


def _same(a, b, what=""):
    d = np.nonzero(_bits(a) != _bits(b))[0]
    assert not len(d), f"{what}: {len(d)} of {a.size} differ, first {d[:4]}: {a[d[:4]]} vs {b[d[:4]]}"


def _buf(x):
    """A copy of ``x`` in a host buffer sciml allocates (64-byte aligned from backend.ALIGN_MIN_BYTES)."""
    b = backend.empty(x.size, x.dtype.name)
    b[:] = x
    return b


def _data(rng, n, dt, scale=1.0):
    a = (rng.standard_normal(n) * scale).astype(dt)
    a[::997] = np.nan
    a[5::1009] = -0.0
    return a


def _both(monkeypatch, run):
    """run() with busy() answering False (parallel on an idle host), then True (serialized)."""
    outs = []
    for force in (False, True):
        monkeypatch.setattr(C, "busy", lambda f=force: f)
        outs.append(run())
    return outs


def _built(prefix, serial_pos=None):
    """The kernel keys starting with ``prefix`` that were built (both paths must have run)."""
    return [k for k in C._cache if isinstance(k, tuple) and k and k[0] == prefix]


# --- the fused Taylor layer kernels (the PINN's hot path) --------------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("top", [False, True])
def test_taylor_vec_same_bits_busy_or_not(monkeypatch, dt, top):
    from sciml.kernels import taylor_vec as TV
    rng = np.random.default_rng(7)
    n, w, S = 4096, 20, 4            # Burgers' streams: u, u_x, u_t, u_xx on a 20-unit layer
    coords, pairs = (0, 1), ((0, 0),)
    Z0, H0, G0 = (_buf(_data(rng, S * n * w, dt)) for _ in range(3))
    b, WL, bL = (_buf(rng.standard_normal(k).astype(dt)) for k in (w, w, 1))   # no NaN: it would fill OUT
    GOUT = _buf(_data(rng, S * n, dt))
    L = TV.lanes(w, dt, [C.address(a) for a in (Z0, H0, G0)])
    assert L is not None and not C.launch_mode(n * w * S)   # the vector kernels, parallel when idle

    def run():
        Z, H, G, OUT = _buf(Z0), _buf(H0), _buf(G0), backend.empty(S * n, dt)
        OUT[:] = 0
        TV.layer_forward(L, "tanh", Z, b, b, H, coords, pairs, n, w, False, dt,
                         top=(WL, bL, OUT, 1) if top else None)
        TV.layer_backward(L, "tanh", Z, H, b, G, coords, pairs, n, w, False, dt,
                          top=(GOUT, WL, 1) if top else None)
        return H, OUT, G
    a, c = _both(monkeypatch, run)
    for x, y, nm in zip(a, c, ("H", "OUT", "G")):
        _same(x, y, nm)
    keys = [k for k in _built("taylor_vfwd") if k[2] == dt and k[3] == L]
    assert {k[7] for k in keys} >= {True, False}   # both compilations ran


@pytest.mark.parametrize("dt", DTYPES)
def test_taylor_vec_output_layer_same_bits_any_lanes(dt):
    """The lane count (the host's vector width and the buffers' alignment choose it) does not change the fused
    output layer's sum over the units: 4, 8 and 16 float32 lanes (2, 4, 8 float64) give the same bits."""
    from sciml.kernels import _vec as V
    from sciml.kernels import taylor_vec as TV
    rng = np.random.default_rng(9)
    n, S = 512, 4
    w = 16 if dt == "float32" else 8   # 4, 2 and 1 vectors of 4, 8, 16 float32 (2, 4, 8 float64) lanes
    coords, pairs = (0, 1), ((0, 0),)
    Z0, G0 = _buf(_data(rng, S * n * w, dt)), _buf(_data(rng, S * n * w, dt))
    b, WL = _buf(rng.standard_normal(w).astype(dt)), _buf(rng.standard_normal(w * 2).astype(dt))
    bL, GOUT = _buf(rng.standard_normal(2).astype(dt)), _buf(_data(rng, S * n * 2, dt))
    c = V.LANES[dt]
    outs = []
    for L in (c, 2 * c, 4 * c):     # every buffer here is 64-byte aligned: any of these lane counts may run
        Z, H, G, OUT = _buf(Z0), backend.empty(S * n * w, dt), _buf(G0), backend.empty(S * n * 2, dt)
        TV.layer_forward(L, "tanh", Z, b, b, H, coords, pairs, n, w, False, dt, top=(WL, bL, OUT, 2))
        TV.layer_backward(L, "tanh", Z, H, b, G, coords, pairs, n, w, False, dt, top=(GOUT, WL, 2))
        outs.append((L, H, OUT, G))
    for L, H, OUT, G in outs[1:]:
        for x, y, nm in zip((H, OUT, G), outs[0][1:], ("H", "OUT", "G")):
            _same(x, y, f"{nm} with {L} lanes vs {c}")


# --- the other kernels whose serial/parallel choice reads busy() ---------------------------------------
@pytest.mark.parametrize("dt", DTYPES)
def test_unary_lanes_same_bits_busy_or_not(monkeypatch, dt):
    rng = np.random.default_rng(1)
    n = 300_003                                   # parallel for the cheap ops when idle; a scalar tail
    x = _buf(_data(rng, n, dt, 3.0))
    xm = _buf(_data(rng, n + 1, dt, 3.0))[1:]      # misaligned: the scalar exact kernels (float32 tanh, ...)
    ops = sorted(E.VEC_UNARY | (E.VEC_TRANS if dt == "float32" else set()))
    for op in ops:
        for src in (x, xm):
            def run():
                out = backend.empty(n + 1, dt)[1:] if src is xm else backend.empty(n, dt)
                E.unary(op, src, out, n, dt)
                return out
            _same(*_both(monkeypatch, run), op + (" misaligned" if src is xm else ""))
    if dt == "float32":
        assert {k[2] for k in _built("unary_exact")} >= {True, False}


@pytest.mark.parametrize("dt", DTYPES)
def test_binary_lanes_same_bits_busy_or_not(monkeypatch, dt):
    rng = np.random.default_rng(2)
    n = 300_003
    x, y = _buf(_data(rng, n, dt)), _buf(_data(rng, n, dt))
    for op in sorted(E.VEC_BINARY):
        def run():
            out = backend.empty(n, dt)
            E.binary_same(op, x, y, out, n, dt, dt)
            return out
        _same(*_both(monkeypatch, run), op)


@pytest.mark.parametrize("dt", DTYPES)
def test_rows_same_bits_busy_or_not(monkeypatch, dt):
    """kernels/rows.py: transpose (tiles), broadcast gather, general binary, suffix binary, pair sum."""
    from sciml.kernels import rows as R
    rng = np.random.default_rng(9)
    B, m, k = 161, 64, 32
    x = _buf(_data(rng, B * m * k, dt))
    y, p = _buf(_data(rng, B * k, dt)), _buf(_data(rng, m * k, dt))
    runs = (lambda o: R.gather(x, o, x.size, (0, 3, B, k, m, m * k, 1, k), dt),
            lambda o: R.gather(p, o, x.size, (0, 3, B, m, k, 0, k, 1), dt),
            lambda o: R.general_binary("mul", x, y, o, (B, m, k), (B, 1, k), (B, m, k), dt),
            lambda o: R.suffix_binary("sigmoid_grad", x, p, o, B, m * k, True, dt),
            lambda o: R.pair_sum("tanh_grad", "twice_mul", x, p, p, x, o, B, m * k, dt))
    for i, f in enumerate(runs):
        def run(f=f):
            out = backend.empty(x.size, dt)
            assert f(out) is not False
            return out
        _same(*_both(monkeypatch, run), f"rows case {i}")


def test_fused_lanes_same_bits_busy_or_not(monkeypatch):
    from sciml.kernels import fused as KF
    rng = np.random.default_rng(3)
    n = 300_003
    dt = "float32"
    a, b = _buf(_data(rng, n, dt)), _buf(_data(rng, n, dt))
    chains = [[("mul", ("x0", "x0")), ("add", ("v0", "x1")), ("tanh", ("v1",))],       # tanh(a*a + b)
              [("sigmoid", ("x0",)), ("mul", ("v0", "s0")), ("div", ("v1", "x1"))],   # sigmoid(a) * s / b
              [("tanh", ("x0",)), ("tanh_grad", ("x1", "v0"))]]
    for stmts in chains:
        def run():
            out = backend.empty(n, dt)
            KF.run(stmts, [a, b], [0.7], out, n, dt)
            return out
        _same(*_both(monkeypatch, run), str(stmts))
    assert {k[3] for k in _built("fused_lanes")} >= {True, False}


@pytest.mark.parametrize("dt", DTYPES)
def test_adam_lanes_same_bits_busy_or_not(monkeypatch, dt):
    rng = np.random.default_rng(4)
    n = 200_003
    monkeypatch.setattr(KO, "VEC_SERIAL_BELOW", 1 << 16)   # the parallel vector update at a test's size
    p0, g, m0, v0 = (_buf(_data(rng, n, dt)) for _ in range(4))
    v0[:] = np.abs(v0)

    def run():
        p, m, v = _buf(p0), _buf(m0), _buf(v0)
        # step, b1, b2, eps, 1/sqrt(1 - b2^t), gradient scale, weight decay, keep (AdamW's 1 - lr wd)
        KO._run("adam", [p, g, m, v], n, dt, (1e-3 / 0.1, 0.9, 0.999, 1e-8, 1 / np.sqrt(0.001), 1.0, 0.0, 1.0))
        return np.concatenate([p, m, v])
    _same(*_both(monkeypatch, run), "adam")
    assert {k[3] for k in _built("optim_vec") if k[2] == dt} >= {True, False}


@pytest.mark.parametrize("dt", DTYPES)
def test_sum_same_bits_busy_or_not(monkeypatch, dt):
    rng = np.random.default_rng(5)
    r = 1_000_003
    x = _buf(rng.standard_normal(r).astype(dt))

    def run():
        out = np.zeros(1, dt)
        KR.reduce("sum", x, out, 1, r, 1, dt)
        return out
    _same(*_both(monkeypatch, run), "sum")


@pytest.mark.parametrize("with_gz", [False, True])
def test_dense_epilogue_vjp_same_bits_busy_or_not(monkeypatch, with_gz):
    """The dense layer's bias gradient (column sums) and activation gradient, serialized or in parallel."""
    from sciml.kernels import nn_dropout as ND
    rng = np.random.default_rng(6)
    rows, cols, dt = 8192, 64, "float32"
    n = rows * cols
    g, h = _buf(_data(rng, n, dt)), _buf(_data(rng, n, dt))
    b = _buf(_data(rng, cols, dt))
    for act in ("tanh", "relu"):
        def run():
            gz, gb = backend.empty(n, dt), np.zeros(cols, dt)
            ND.epilogue_vjp(act, g, h, b, None, gz if with_gz else None, gb, rows, cols, dt)
            return np.concatenate([gb] + ([gz] if with_gz else []))
        _same(*_both(monkeypatch, run), act)

        def run_d():
            d, gz, gb = _buf(h), backend.empty(n, dt), np.zeros(cols, dt)   # a stand-in for m act'(z)
            ND.epilogue_vjp(act, g, h, b, None, gz if with_gz else None, gb, rows, cols, dt, d=d)
            return np.concatenate([gb] + ([gz] if with_gz else []))
        _same(*_both(monkeypatch, run_d), act + " (saved derivative)")


def test_dense_epilogue_same_bits_busy_or_not(monkeypatch):
    from sciml.kernels import nn_dropout as ND
    rng = np.random.default_rng(8)
    rows, cols, dt = 8192, 64, "float32"
    n = rows * cols
    h, b = _buf(_data(rng, n, dt)), _buf(_data(rng, cols, dt))
    for act in ("tanh", "relu"):
        for p in (0.0, 0.25):
            def run():
                y, m, d = backend.empty(n, dt), backend.empty(n, dt), backend.empty(n, dt)
                state = np.array(ND.state_words(11), np.float64) if p else None   # as Dropout keeps it
                ND.epilogue(act, h, b, y, m if p else None, state, rows, cols, p, dt, "float64" if p else None, d)
                return np.concatenate([y, d, m] if p else [y, d])
            _same(*_both(monkeypatch, run), f"{act} p={p}")


# --- end to end: a short float32 Burgers solve ---------------------------------------------------------
def test_burgers_solve_same_bits_busy_or_not(monkeypatch):
    """The README main job's recipe, short: Adam then the self-scaled Broyden stage, on 1024 points
    (the fused Taylor kernels run in parallel when the host is idle). The loss histories of a run that
    sees an idle host and of one that sees a busy host agree bit for bit."""
    from sciml.pinn import problems
    setup = problems.get("burgers")

    def run():
        r = setup.run(steps=(50, 8), points={"interior": 1024, "boundary": 64, "initial": 64}, seed=0,
                      dtype="float32", progress=False, log_every=5)
        return np.asarray(r.history["loss"], np.float64), r.rel_l2
    (la, ea), (lb, eb) = _both(monkeypatch, run)
    assert len(la) == len(lb) and len(la) > 10
    _same(la, lb, "loss history")
    assert ea == eb


# Every caller of busy() and the test above that forces it both ways: a new caller needs a test here.
COVERED = {"optim.py": "test_adam_lanes", "reduce.py": "test_sum", "taylor_vec.py": "test_taylor_vec_same_bits",
           "fused.py": "test_fused_lanes", "nn_dropout.py": "test_dense_epilogue", "elementwise.py": "test_unary_lanes",
           "rows.py": "test_rows_same_bits",
           "blas.py": None}   # blas: SCIML_BUSY_BLAS=1 only, documented as load-dependent (docs/perf.md)


def test_every_busy_caller_is_covered():
    import pathlib
    import re
    root = pathlib.Path(C.__file__).resolve().parents[1]
    callers = set()
    for f in root.rglob("*.py"):
        for line in f.read_text().splitlines():
            code = line.split("#", 1)[0]
            if re.search(r"\b_?busy\(\)", code) and "def busy" not in code:
                callers.add(f.name)
    assert callers, "busy() callers not found"
    missing = callers - set(COVERED)
    assert not missing, f"busy() read in {sorted(missing)}: add a same-bits test (busy forced both ways) here"
    names = set(globals())
    for mod, test in COVERED.items():
        assert test is None or any(n.startswith(test) for n in names), (mod, test)


def test_scatter_add_is_sequential_on_cpu_at_any_size():
    """A repeated row's sum in index order, as numpy's unbuffered ``np.add.at``, bit for bit, above the
    size where a parallel loop of atomic adds used to run (kernels/index.py ``scatter_add_rows``)."""
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 300, 40_000).astype(np.int32)    # 40,000 x 8 = 320,000 elements, ~133 adds per row
    vals = rng.standard_normal((40_000, 8)).astype(np.float32)
    want = np.zeros((300, 8), np.float32)
    np.add.at(want, idx, vals)
    for _ in range(2):
        got = sm.scatter_add(sm.tensor(vals, dtype="float32"), idx, rows=300).numpy()
        assert np.array_equal(got, want)


def test_layer_norm_backward_and_cross_entropy_total_same_bits_serial_or_parallel():
    """The column sums of layer norm's weight gradients and cross-entropy's total are summed in row order
    (no atomic adds from parallel rows): the parallel compilation gives the serial one's bits, every run."""
    from sciml.kernels import conv as KC
    from sciml.kernels import norm as KN
    rng = np.random.default_rng(1)
    R, D = 4096, 96   # 393,216 elements: above the size where these loops run parallel
    x, g = (rng.standard_normal(R * D).astype(np.float32) for _ in range(2))
    w = rng.standard_normal(D).astype(np.float32)
    mean, rstd = x.reshape(R, D).mean(1), 1 / np.sqrt(x.reshape(R, D).var(1) + 1e-5)
    outs = []
    for serial in (True, False, False):
        gx, gw, gb = np.zeros(R * D, np.float32), np.zeros(D, np.float32), np.zeros(D, np.float32)
        rc = 1024   # four partials per column (the CPU's chunk is 4096 rows: R = 4096 would be one)
        KN._build_ln_bwd("float32", serial, True)(x, g, w, mean.astype(np.float32), rstd.astype(np.float32),
                                                  gx, gw, gb, C.scratch(2 * 4 * D, "float32"), R, D, rc, 4)
        outs.append((gx, gw, gb))
    for o in outs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(outs[0], o))
    xh = (x.reshape(R, D) - mean[:, None]) * rstd[:, None]
    np.testing.assert_allclose(outs[0][1], (g.reshape(R, D) * xh).sum(0), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(outs[0][2], g.reshape(R, D).sum(0), rtol=1e-3, atol=1e-3)
    q = np.zeros((R, D), np.float32)
    q[np.arange(R), rng.integers(0, D, R)] = 1
    totals = []
    for serial in (True, False, False):
        rowloss, total = np.zeros(R, np.float32), np.zeros(1, np.float32)
        KC._build_xent("float32", serial)(x, q.ravel(), rowloss, total, R, D, 1.0 / R)
        totals.append(total[0])
    assert totals[0] == totals[1] == totals[2]
    xs = x.reshape(R, D).astype(np.float64)
    ref = (np.log(np.exp(xs - xs.max(1, keepdims=True)).sum(1)) + xs.max(1) - (q * xs).sum(1)).mean()
    np.testing.assert_allclose(totals[0], ref, rtol=1e-5)
