"""The wide vector kernels (8 or 16 lanes, issue 18; ``kernels/_vec.py``): the lane width read from the
host, the 64-byte-aligned host buffers they need, the per-call alignment check (32/64-byte aligned:
wide; 16-byte: the 4-lane kernels; anything else: scalar, never a crash), tails of 1, 7, 8, 9 and
1000003 elements, the same bits as the scalar kernels for the cheap maps, the float32 exp / sigmoid /
tanh forms against float64 numpy over a wide range and at the edge values, the whole-buffer sum, and
fused chains on lanes."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend as B
from sciml.kernels import _common as C
from sciml.kernels import _vec as V
from sciml.kernels import elementwise as E
from sciml.kernels import fused as KF
from sciml.kernels import reduce as R

TAILS = (1, 7, 8, 9, 17, 1000003)  # 17: one 64-byte vector of float32 (two of float64) and a tail
F32 = np.finfo(np.float32)


def _aligned(n, dt, offset=0):
    """A host buffer of n elements whose data starts ``offset`` bytes past a 64-byte boundary."""
    item = np.dtype(dt).itemsize
    raw = B._aligned(n + 64 // item, np.dtype(dt).type, np.zeros)
    k = offset // item
    return raw[k:k + n]


def _lanes_built(name, dt):
    # the lane count ends the key (binary_lanes / unary_lanes: followed by the chunked-kernel flag)
    return {k[-2] if isinstance(k[-1], bool) else k[-1]
            for k in C._cache if isinstance(k, tuple) and k and k[0] == name and dt in k}


@pytest.fixture
def small_vec(monkeypatch):
    """Vector kernels from one element on (the default starts at 4096), to test the short tails."""
    monkeypatch.setattr(E, "VEC_MIN_N", 1)
    monkeypatch.setattr(R, "SUM_WIDE_MIN", 1)


def test_host_width(monkeypatch):
    flags = open("/proc/cpuinfo").read() if __import__("os").path.exists("/proc/cpuinfo") else ""
    want = 16 if " avx512f" in flags else 8 if " avx2" in flags else 4
    monkeypatch.setattr(V, "_WIDTH", [])
    monkeypatch.delenv("SCIML_VEC_LANES", raising=False)
    assert V.host_width() == want
    assert V.wide("float64") == want // 2
    monkeypatch.setattr(V, "_WIDTH", [])
    monkeypatch.setenv("SCIML_VEC_LANES", "16")
    assert V.host_width() == 16
    monkeypatch.setattr(V, "_WIDTH", [])
    monkeypatch.setenv("SCIML_VEC_LANES", "12")
    with pytest.raises(ValueError, match="SCIML_VEC_LANES"):
        V.host_width()


def test_lanes_for_alignment():
    W = V.wide("float32")
    assert V.lanes_for((0, 64, 128), "float32") == W
    assert V.lanes_for((0, 16), "float32") == 4
    assert V.lanes_for((0, 4), "float32") is None
    assert V.lanes_for((32,), "float64") == (V.wide("float64") if W <= 8 else 2)


def test_backend_buffers_aligned():
    sm.init(arch="cpu")
    for n, dt in ((16384, "float32"), (100003, "float64"), (20000, "int32")):
        for buf in (B.empty(n, dt), B.zeros(n, dt), B.from_numpy(np.arange(n).reshape(-1, 1), dt)):
            assert C.address(buf) % 64 == 0 and buf.size == n and buf.dtype == B.NP_DTYPES[dt]
            assert buf.flags.writeable and buf.flags.c_contiguous
            assert not isinstance(buf.base, np.ndarray)  # sciml.jit: a root buffer, not a view
    assert not B.zeros(30000, "float32").any()
    np.testing.assert_array_equal(B.from_numpy(np.arange(40000.0).reshape(200, 200), "int32"), np.arange(40000))
    np.testing.assert_array_equal(B.from_numpy(np.tile([True, False], 20000), "bool")[:4], [1, 0, 1, 0])
    assert B.empty(100, "float32").base is None  # small buffers: plain numpy


def _special(n, dt, rng):
    a = rng.standard_normal(n).astype(dt) * 3
    sp = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 88.7, -87.0, 1e30, -1e30], dt)
    a[: min(n, sp.size)] = sp[: min(n, sp.size)]
    if n > 100:
        a[rng.integers(0, n, 20)] = np.nan
    return a


def _same_bits(a, b):
    u = "u4" if a.dtype == np.float32 else "u8"
    d = np.nonzero(a.view(u) != b.view(u))[0]
    assert not len(d), (d[:5], a[d[:5]], b[d[:5]])


def _scalar_then_vector(run, n, dt):
    outs = []
    old = E.VECTOR
    try:
        for vec in (False, True):
            E.VECTOR = vec
            o = _aligned(n, dt)
            o[:] = 7
            run(o)
            outs.append(o.copy())
    finally:
        E.VECTOR = old
    return outs


@pytest.mark.parametrize("dt", ("float32", "float64"))
@pytest.mark.parametrize("n", TAILS)
def test_cheap_maps_same_bits_wide(small_vec, dt, n):
    sm.init(arch="cpu")
    rng = np.random.default_rng(n)
    x, y = _aligned(n, dt), _aligned(n, dt)
    x[:], y[:] = _special(n, dt, rng), rng.standard_normal(n).astype(dt)
    ops = ("add", "mul", "sigmoid_grad") if n > 9 else ("add", "sub", "mul", "div", "maximum", "relu_grad")
    for op in ops:
        a, b = _scalar_then_vector(lambda o: E.binary(op, x, y, o, (n,), (n,), (n,), dt, dt), n, dt)
        _same_bits(a, b)
    for op in (("relu", "neg") if n > 9 else ("relu", "neg", "abs", "square", "reciprocal")):
        a, b = _scalar_then_vector(lambda o: E.unary(op, x, o, n, dt), n, dt)
        _same_bits(a, b)
    if n >= V.mem_lanes(dt) and V.wide(dt) > V.LANES[dt]:  # the load/store-bound maps: one 64-byte vector
        assert V.mem_lanes(dt) in _lanes_built("binary_lanes", dt)
        assert V.mem_lanes(dt) in _lanes_built("unary_lanes", dt)


@pytest.mark.parametrize("offset", (0, 4, 16, 32, 48))
def test_misaligned_operands_fall_back(offset):
    """Any offset: the right numbers and no crash; 16-byte multiples run 4 lanes, others scalar."""
    sm.init(arch="cpu")
    n, dt = 40009, "float32"
    rng = np.random.default_rng(offset)
    x, y, o = _aligned(n, dt, offset), _aligned(n, dt), _aligned(n, dt, 64 - offset if offset else 0)
    x[:], y[:] = rng.standard_normal(n), rng.standard_normal(n)
    E.binary("add", x, y, o, (n,), (n,), (n,), dt, dt)
    np.testing.assert_array_equal(o, x + y)
    E.unary("tanh", x, o, n, dt)
    np.testing.assert_allclose(o, np.tanh(x.astype(np.float64)), rtol=0, atol=5e-7)
    E.unary("exp", x, o, n, dt)
    np.testing.assert_allclose(o, np.exp(x.astype(np.float64)), rtol=3e-7)
    s = B.empty(1, dt)
    R.reduce("sum", x, s, 1, n, 1, dt)
    np.testing.assert_allclose(s[0], x.astype(np.float64).sum(), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("width", (8, 4))
def test_narrower_lanes_than_the_host_never_fault(monkeypatch, width):
    """SCIML_VEC_LANES below the host's width (8 on an AVX-512 host): the transcendental maps take two 8-lane
    vectors per iteration, which the JIT loads as one 64-byte zmm; on a buffer aligned to 32 bytes only that
    load faulted (a segfault, not an error). Now those maps need 64-byte alignment for it, else one vector."""
    sm.init(arch="cpu")
    monkeypatch.setattr(V, "_WIDTH", [width])
    C._cache.clear()
    try:
        n, dt = 40009, "float32"
        for off in (0, 16, 32, 48):
            x, o = _aligned(n, dt, off), _aligned(n, dt, off)
            x[:] = np.random.default_rng(off).uniform(-9, 9, n)
            for op, ref in (("tanh", np.tanh), ("exp", np.exp)):
                E.unary(op, x, o, n, dt)
                np.testing.assert_allclose(o, ref(x.astype(np.float64)), rtol=3e-7, atol=5e-7 if op == "tanh" else 0)
    finally:
        C._cache.clear()


def _ulps(got, ref):
    sp = 2.0 ** (np.floor(np.log2(np.abs(ref))) - 23)
    return np.abs(got.astype(np.float64) - ref) / sp


def test_exp_sigmoid_tanh_accuracy_wide():
    """float32 forms on the wide lanes against float64 numpy: every float32 in [-110, 95] sampled densely, and
    the edge values (NaN, +-inf, +-0, FLT_MAX, the overflow / underflow thresholds)."""
    sm.init(arch="cpu")
    xs = np.unique(np.concatenate([np.linspace(-110, 95, 400_003, dtype=np.float32),
                                   np.float32([88.72283, 88.72284, 88.7229, -87.33654, -87.3366, -103.97, 1e-7,
                                               -1e-7, 1e-38, F32.max, -F32.max, F32.tiny])]))
    edge = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0])
    x = np.concatenate([xs, edge])
    n = x.size
    xb, o = B.from_numpy(x, "float32"), B.empty(n, "float32")
    assert C.address(xb) % 64 == 0 and C.address(o) % 64 == 0
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        E.unary("exp", xb, o, n, "float32")
        ref = np.exp(x64)
        normal = (ref >= F32.tiny) & (ref <= F32.max)
        assert _ulps(o[normal], ref[normal]).max() <= 1.5  # numpy's own float32 exp: 2.4 ulp here
        assert np.all(np.isinf(o[ref > F32.max * (1 + 2 ** -24)]))
        assert np.all(o[ref < F32.tiny] < F32.tiny)  # 0, as Taichi flushes subnormals
        np.testing.assert_array_equal(o[-5:], [np.nan, np.inf, 0.0, 1.0, 1.0])

        E.unary("sigmoid", xb, o, n, "float32")
        ref = 1.0 / (1.0 + np.exp(-x64))
        normal = ref >= F32.tiny
        assert _ulps(o[normal], ref[normal]).max() <= 3
        np.testing.assert_array_equal(o[-5:], [np.nan, 1.0, 0.0, 0.5, 0.5])

        E.unary("tanh", xb, o, n, "float32")
        ref = np.tanh(x64)
        assert np.abs(o[:-5] - ref[:-5]).max() <= 5e-7
        small = (np.abs(x64) < 1e-3) & (x64 != 0)
        assert (np.abs(o[small] - ref[small]) / np.abs(ref[small])).max() <= 3e-7
        np.testing.assert_array_equal(o[-5:], [np.nan, 1.0, -1.0, 0.0, -0.0])
        assert np.signbit(o[-1])
    # the wide kernels ran (the transcendental maps: trans_vectors host vectors per iteration)
    assert V.wide("float32") * V.trans_vectors("float32") in _lanes_built("unary_lanes", "float32")


def test_transcendental_forms_take_fmas_on_the_host(monkeypatch):
    """float32 tanh / exp / sigmoid take their Horner steps as fused multiply-adds on an x64 host with FMA units
    (``elementwise.trans_fma``, fma_tile.py's bitcode): the results differ from the plain form (so the FMAs did
    run) by at most an ulp or two, tanh is at least as accurate, the vector body and the one-element path give
    the same bits (64-byte-aligned and misaligned buffers), and SCIML_TRANS_FMA=0's switch gives the plain form."""
    from sciml.kernels import fma_tile as FT
    sm.init(arch="cpu")
    if not (FT.available() and FT.host_has_fma()):
        pytest.skip("no x64 FMA host / bitcode")
    rng = np.random.default_rng(3)
    n = 200_003
    x = _aligned(n + 1, "float32")
    x[:] = np.concatenate([rng.uniform(-12, 12, n - 6), np.float32([np.nan, np.inf, -np.inf, 0, -0.0, 1e-6, 3])])
    x64 = x.astype(np.float64)
    got = {}
    for flag in (True, False):
        monkeypatch.setattr(E, "TRANS_FMA", [flag])
        C._cache.clear()
        assert E.trans_fma(V.wide("float32")) is flag and E.trans_fma(1) is flag
        for op in ("tanh", "exp", "sigmoid"):
            o, o1 = _aligned(n + 1, "float32"), _aligned(n + 1, "float32")
            with np.errstate(all="ignore"):
                E.unary(op, x, o, n + 1, "float32")          # the vector body (and its tail)
                E.unary(op, x[1:], o1[1:], n, "float32")     # 4 bytes past the boundary: one element at a time
            np.testing.assert_array_equal(o[1:], o1[1:], err_msg=op)
            got[op, flag] = o
    C._cache.clear()
    for op in ("tanh", "exp", "sigmoid"):
        a, b = got[op, True], got[op, False]
        np.testing.assert_array_equal(np.isnan(a), np.isnan(x))
        diff = a != b
        diff &= ~np.isnan(a)
        assert diff.any(), op  # the FMA form ran
        fin = np.isfinite(a) & np.isfinite(b) & (a != 0)
        if op == "tanh":  # absolute-error forms (< 4e-7 each, below): they differ by at most the sum
            assert np.abs(a[fin] - b[fin]).max() <= 7e-7
        else:
            assert (np.abs(a[fin] - b[fin]) / np.spacing(np.abs(b[fin]))).max() <= 2, op
    with np.errstate(all="ignore"):
        ref = np.tanh(x64)
    ok = ~np.isnan(ref)
    e_fma, e_plain = np.abs(got["tanh", True][ok] - ref[ok]).max(), np.abs(got["tanh", False][ok] - ref[ok]).max()
    assert e_fma <= e_plain and e_fma <= 3e-7


@pytest.mark.parametrize("n", TAILS)
def test_transcendental_tails(small_vec, n):
    sm.init(arch="cpu")
    rng = np.random.default_rng(n)
    x = _aligned(n, "float32")
    x[:] = _special(n, "float32", rng)
    o = _aligned(n, "float32")
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        for op, ref in (("exp", np.exp(x64)), ("sigmoid", 1 / (1 + np.exp(-x64))), ("tanh", np.tanh(x64))):
            E.unary(op, x, o, n, "float32")
            fin = np.isfinite(ref) & (np.abs(ref) >= F32.tiny) & (np.abs(ref) <= F32.max)
            tol = 5e-7 if op == "tanh" else 3e-7
            err = np.abs(o[fin] - ref[fin]) / (np.abs(ref[fin]) if op != "tanh" else 1)
            assert err.max(initial=0) <= tol, op
            np.testing.assert_array_equal(np.isnan(o), np.isnan(ref))


@pytest.mark.parametrize("dt", ("float32", "float64"))
def test_sum_wide(small_vec, dt):
    sm.init(arch="cpu")
    rng = np.random.default_rng(3)
    for n in TAILS + (4096, 300001):
        x = _aligned(n, dt)
        x[:] = rng.standard_normal(n)
        out = B.empty(1, dt)
        R.reduce("sum", x, out, 1, n, 1, dt)
        ref = x.astype(np.float64).sum()
        assert abs(out[0] - ref) <= (1e-6 if dt == "float32" else 1e-14) * np.abs(x).sum() + 1e-30, n
    x = _aligned(300001, dt)
    x[:] = rng.standard_normal(x.size)
    for vals, want in (((np.nan,), np.nan), ((np.inf,), np.inf), ((-np.inf,), -np.inf), ((np.inf, -np.inf), np.nan)):
        y = x.copy()
        for i, v in enumerate(vals):
            y[1000 + 150000 * i] = v
        yb, out = _aligned(y.size, dt), B.empty(1, dt)
        yb[:] = y
        R.reduce("sum", yb, out, 1, y.size, 1, dt)
        np.testing.assert_array_equal(out[0], want)
    # mean through the public op, whole buffer
    t = sm.tensor(x, dt)
    np.testing.assert_allclose(float(t.mean()), x.astype(np.float64).mean(), rtol=1e-5 if dt == "float32" else 1e-12)


@pytest.mark.parametrize("dt", ("float32", "float64"))
@pytest.mark.parametrize("n", (9, 1000003))
def test_fused_chains_on_lanes(small_vec, dt, n):
    sm.init(arch="cpu")
    rng = np.random.default_rng(n)
    an, bn, cn = (rng.standard_normal(n).astype(dt) for _ in range(3))
    an[:3] = [np.nan, np.inf, -0.0]
    a, b, c = (sm.tensor(v, dt) for v in (an, bn, cn))
    cheap = sm.fuse(lambda x, y, z: sm.maximum(x * 2.5, y) - sm.relu(z) * y + 1.0)
    got = cheap(a, b, c).numpy()
    with np.errstate(all="ignore"):
        want = (sm.maximum(a * 2.5, b) - sm.relu(c) * b + 1.0).numpy()
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dt).eps, atol=32 * np.finfo(dt).eps)  # fast math reassociates
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    if dt == "float32":
        f = sm.fuse(lambda x, y, z: sm.tanh(x * y + z) + sm.exp(y) * sm.sigmoid(z))
        got = f(a, b, c).numpy()
        x64, y64, z64 = (v.astype(np.float64) for v in (an, bn, cn))
        with np.errstate(all="ignore"):
            ref = np.tanh(x64 * y64 + z64) + np.exp(y64) / (1 + np.exp(-z64))
        fin = np.isfinite(ref)
        np.testing.assert_allclose(got[fin], ref[fin], rtol=2e-6, atol=2e-6)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    if n > 9 and V.wide(dt) > V.LANES[dt]:
        assert V.wide(dt) in _lanes_built("fused_lanes", dt)


def test_exact_compile_restores_fast_math():
    sm.init(arch="cpu")
    cfg = C.ti().lang.impl.current_cfg()
    assert cfg.fast_math and cfg.real_matrix_scalarize
    x = B.from_numpy(np.linspace(-3, 3, 50001), "float32")
    o = B.empty(x.size, "float32")
    E.unary("exp", x, o, x.size, "float32")
    assert cfg.fast_math and cfg.real_matrix_scalarize


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def test_jit_replays_the_wide_kernels_bit_for_bit():
    """sciml.jit traces with the wide kernels where the trace's buffers are aligned for them (every buffer made
    while tracing is 64-byte aligned, and so are a replay's fresh outputs); a replay whose input sits at another
    alignment gets an aligned copy (never a misaligned vector load). Replays give the eager bits, the
    whole-buffer sum included."""
    from sciml.autodiff.tensor import Tensor
    sm.init(arch="cpu")
    rng = np.random.default_rng(5)

    def f(x, y):
        return (sm.exp(x * 0.5) + sm.tanh(x) * y).sum(), x * y + x, sm.relu(y) - 1.0

    for n in (100003, 5003):  # large: 64-byte aligned sciml buffers; small (< 64 KB): plain numpy ones eagerly
        jf = sm.jit(f)
        ins = []
        for off in (0, 16, 0, 48, 32):  # the first traces; then inputs 16/48/32 bytes past a 64-byte boundary
            pair = []
            for _ in range(2):
                b = _aligned(n, "float32", off)
                b[:] = rng.standard_normal(n)
                pair.append(Tensor._make(b, (n,), "float32"))
            ins.append(pair)
        for x, y in ins:
            got, ref = jf(x, y), f(x, y)
            for g, r in zip(got, ref):
                np.testing.assert_array_equal(_bits(g.numpy()), _bits(r.numpy()))
        plan = next(iter(jf.plans.values()))
        needs = {b[6] for b in plan.binds if b[0] == "vec"}
        if V.wide("float32") > V.LANES["float32"]:
            assert max(needs) >= 32, needs  # wide kernels recorded on the inputs and fresh outputs
        assert C.address(jf(*ins[1])[1]._buf) % 64 == 0  # a fresh output of a replay


def test_optimizer_update_wide_members():
    """The grouped optimizer kernel gives each tensor the wide lanes when all its buffers are aligned for
    them (and 16-byte lanes otherwise), with the numbers of the scalar kernel."""
    from sciml.kernels import optim as K
    sm.init(arch="cpu")
    rng = np.random.default_rng(8)
    sizes, offsets = (20011, 16411, 300), (0, 16, 0)
    bufs, ref = [], []
    for n, off in zip(sizes, offsets):
        arrs = [_aligned(n, "float32", off) for _ in range(4)]
        for a in arrs:
            a[:] = rng.normal(size=n)
        arrs[3][:] = np.abs(arrs[3])
        bufs.append(arrs)
        ref.append([a.copy() for a in arrs])
    sc, plain = K.adam_scalars(0.01, 0.9, 0.999, 1e-8, 0.1, 0.001)
    K.update_many("adam", "float32", [(tuple(a), n) for a, n in zip(bufs, sizes)], sc, plain, (), cache={})
    old = K.VECTOR
    K.VECTOR = False
    try:
        for arrs, n in zip(ref, sizes):
            K.adam(*arrs, n, "float32", 0.01, 0.9, 0.999, 1e-8, 0.1, 0.001)
    finally:
        K.VECTOR = old
    for got, want in zip(bufs, ref):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)  # as tests/optim: last-bit rounding, amplified
    W = V.wide("float32")
    if W > 4:
        specs = [k[-1] for k in C._cache if isinstance(k, tuple) and k[:3] == ("optim_group", "adam", "float32")]
        assert any(W in s and 4 in s for s in specs), specs


def test_busy_host_detection(monkeypatch):
    """busy(): the 1-minute load average against the usable cores, re-read at most once a second."""
    monkeypatch.setattr(C, "_BUSY_ON", True)
    monkeypatch.setattr(C.os, "getloadavg", lambda: (C._CORES + 0.5, 0.0, 0.0))
    monkeypatch.setattr(C, "_busy", [0.0, False])
    assert C.busy()
    monkeypatch.setattr(C.os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert C.busy()  # cached for a second
    monkeypatch.setattr(C, "_busy", [0.0, True])
    assert not C.busy()
    monkeypatch.setattr(C, "_BUSY_ON", False)
    monkeypatch.setattr(C.os, "getloadavg", lambda: (1e3, 0.0, 0.0))
    monkeypatch.setattr(C, "_busy", [0.0, False])
    assert not C.busy()


@pytest.mark.parametrize("n", [5000, 9000, 16383])
def test_whole_buffer_sum_bits_do_not_depend_on_the_buffers_alignment(n):
    # the lane count orders the additions: a float32 sum must give the same bits wherever malloc put the data
    # (two identical PINN runs in one process once differed in the 7th digit through this)
    from sciml.kernels import reduce as Rd
    data = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    raw = np.empty(n + 32, np.float32)
    got = set()
    for k in range(16):
        x = raw[k:k + n]
        x[:] = data
        out = np.empty(1, np.float32)
        Rd.reduce("sum", x, out, 1, n, 1, "float32")
        got.add(out.tobytes())
    assert len(got) == 1


def test_large_tensor_sums_repeat_bit_for_bit():
    # from 64 KB sciml's own buffers are 64-byte aligned, so the wide sum always applies to them
    data = np.random.default_rng(1).standard_normal(40000).astype(np.float32)
    bits = {sm.sum(sm.tensor(data, dtype="float32") * 1.5).numpy().tobytes() for _ in range(12)}
    assert len(bits) == 1


def test_parallel_maps_run_chunks_as_tasks(monkeypatch):
    """A parallel launch of the load/store-bound maps (host not busy) runs the chunked kernel compiled without
    Taichi's one-block-per-thread split (_vec.DYNAMIC): the same bits as numpy, tails included, for the three
    modes; and the compile flags are restored afterwards."""
    sm.init(arch="cpu")
    monkeypatch.setattr(C, "busy", lambda: False)
    monkeypatch.setattr(V, "DYNAMIC", True)   # off by default (see _vec.DYNAMIC)
    cfg = C.ti().lang.impl.current_cfg()
    rng = np.random.default_rng(11)
    for dt in ("float32", "float64"):
        n = 600_011  # parallel (>= 2^18 cheap elements), several chunks and a tail
        x, y, o = (B.empty(n, dt) for _ in range(3))
        x[:], y[:] = rng.standard_normal(n), rng.standard_normal(n)
        x[:4] = (np.nan, np.inf, -0.0, 0.0)
        s = B.from_numpy(np.array([1.5]), dt)
        for op, ref in (("add", x + y), ("mul", x * y)):
            E.binary(op, x, y, o, (n,), (n,), (n,), dt, dt)
            np.testing.assert_array_equal(_bits(o), _bits(ref))
        # maximum: against the scalar kernel (both give +0 for max(-0, negative) under fast math; numpy -0)
        E.binary("maximum", x, y, o, (n,), (n,), (n,), dt, dt)
        ref = B.empty(n, dt)
        monkeypatch.setattr(E, "VECTOR", False)
        E.binary("maximum", x, y, ref, (n,), (n,), (n,), dt, dt)
        monkeypatch.setattr(E, "VECTOR", True)
        np.testing.assert_array_equal(_bits(o), _bits(ref))
        E.binary("sub", s, y, o, (1,), (n,), (n,), dt, dt)
        np.testing.assert_array_equal(_bits(o), _bits(s[0] - y))
        E.binary("div", x, s, o, (n,), (1,), (n,), dt, dt)
        np.testing.assert_array_equal(_bits(o), _bits(x / s[0]))
        E.unary("neg", x, o, n, dt)
        np.testing.assert_array_equal(_bits(o), _bits(-x))
        dyn = [k for k in C._cache if isinstance(k, tuple) and k and k[0] in ("binary_lanes", "unary_lanes")
               and dt in k and k[-1] is True]
        assert len(dyn) >= 4, dyn
    assert cfg.make_cpu_multithreading_loop and cfg.real_matrix_scalarize
