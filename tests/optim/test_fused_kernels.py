"""The fused optimizer kernels' CPU paths (sciml/kernels/optim.py): the 16-byte vector kernels
(float32 x4, float64 x2) with a scalar tail, the scalar fallback for misaligned buffers and small
tensors: every optimizer variant against numpy's textbook formulas, in both dtypes."""
import numpy as np
import pytest

import sciml as sm
from sciml.kernels import optim as K
from sciml.models import Parameter
from sciml.optim import SGD, Adagrad, Adam, AdamW, RMSprop
from textbook import textbook  # noqa: E402  (tests/optim is on sys.path: no __init__.py)


_ref = textbook

CASES = [
    (SGD, "sgd", dict(lr=0.1)),
    (SGD, "sgd", dict(lr=0.1, momentum=0.9, dampening=0.1)),
    (SGD, "sgd", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (Adam, "adam", dict(lr=0.01)),
    (Adam, "adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)),
    (AdamW, "adamw", dict(lr=0.01, weight_decay=0.1)),
    (RMSprop, "rmsprop", dict(lr=0.01)),
    (RMSprop, "rmsprop", dict(lr=0.01, momentum=0.5, weight_decay=0.01)),
    (Adagrad, "adagrad", dict(lr=0.1, weight_decay=0.01)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [5, 64, 1003, 4096])  # scalar only; vector (+ tail: 1003 % 4 = 3)
@pytest.mark.parametrize("cls,kind,kw", CASES, ids=lambda c: c.__name__ if isinstance(c, type) else str(c))
def test_vector_and_scalar_paths_match_textbook(cls, kind, kw, n, dtype):
    rng = np.random.default_rng(n)
    p0 = rng.normal(size=n)
    gs = [rng.normal(size=n) for _ in range(3)]
    p = Parameter(p0, dtype=dtype)
    opt = cls([p], **kw)
    for g in gs:
        opt.step([sm.tensor(g, dtype)])
    want = _ref(kind, kw, p0.astype(dtype), [g.astype(dtype) for g in gs])
    tol = dict(rtol=1e-12, atol=1e-13) if dtype == "float64" else dict(rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(p.numpy(), want, **tol)


def test_clipping_on_the_vector_path():
    rng = np.random.default_rng(1)
    p0, g = rng.normal(size=1001), rng.normal(size=1001)
    p = Parameter(p0)
    Adam([p], lr=0.01, clip_norm=0.5).step([sm.tensor(g)])
    want = _ref("adam", dict(lr=0.01, _gscale=0.5 / np.linalg.norm(g)), p0, [g])
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_misaligned_buffers_take_the_scalar_kernel(dtype):
    """A buffer that is a view at an odd element offset is not 16-byte aligned: same results."""
    rng = np.random.default_rng(2)
    n = 999
    npd = np.dtype(dtype)
    base = [rng.normal(size=n + 1).astype(npd) for _ in range(4)]
    views = [a[1:] for a in base]                                  # misaligned by one element
    assert any(v.ctypes.data % 16 for v in views)
    aligned = [np.array(v) for v in views]                         # fresh (aligned) copies
    aligned[3] = np.abs(aligned[3]); views[3][:] = np.abs(views[3])  # v >= 0
    for bufs in (views, aligned):
        K.adam(*bufs, n, dtype, 0.01, 0.9, 0.999, 1e-8, 0.1, 0.001)
    for a, b in zip(views, aligned):  # LLVM may contract/reassociate the two forms differently: last-bit diffs
        np.testing.assert_allclose(a, b, **(dict(rtol=1e-5, atol=1e-7) if dtype == "float32" else dict(rtol=1e-13)))


@pytest.mark.parametrize("cls,kind,kw", [CASES[2], CASES[4], CASES[5], CASES[7], CASES[8]],
                         ids=["sgd", "adam", "adamw", "rmsprop", "adagrad"])
def test_grouped_launch_over_many_tensors_and_dtypes(cls, kind, kw):
    """11 parameters (more than one group of 8; small, tails, two dtypes) in one optimizer."""
    rng = np.random.default_rng(3)
    sizes = [3, 64, 65, 100, 1000, 1027, 64, 256, 5, 4099, 130]
    dts = ["float32" if i % 3 else "float64" for i in range(len(sizes))]
    p0 = [rng.normal(size=n) for n in sizes]
    gs = [[rng.normal(size=n) for n in sizes] for _ in range(3)]
    ps = [Parameter(a, dtype=d) for a, d in zip(p0, dts)]
    opt = cls(ps, **kw)
    for g in gs:
        opt.step([sm.tensor(x, d) for x, d in zip(g, dts)])
    for i, (p, d) in enumerate(zip(ps, dts)):
        want = _ref(kind, kw, p0[i].astype(d), [g[i].astype(d) for g in gs])
        tol = dict(rtol=1e-12, atol=1e-13) if d == "float64" else dict(rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(p.numpy(), want, **tol)


def test_update_many_mixes_vector_tail_small_and_misaligned_members():
    rng = np.random.default_rng(4)
    sizes = [300, 7, 1001, 256]
    bufs, ref = [], []
    for i, n in enumerate(sizes):
        arrs = [rng.normal(size=n + 1).astype(np.float32) for _ in range(4)]
        arrs[3] = np.abs(arrs[3])
        arrs = [a[1:] if i == 2 else a[:n] for a in arrs]        # tensor 2 misaligned (one element off)
        bufs.append(arrs)
        ref.append([a.copy() for a in arrs])
    sc, plain = K.adam_scalars(0.01, 0.9, 0.999, 1e-8, 0.1, 0.001)
    K.update_many("adam", "float32", [(tuple(a), n) for a, n in zip(bufs, sizes)], sc, plain, (), cache={})
    for arrs, n in zip(ref, sizes):
        K.VECTOR = False
        try:
            K.adam(*arrs, n, "float32", 0.01, 0.9, 0.999, 1e-8, 0.1, 0.001)
        finally:
            K.VECTOR = True
    for got, want in zip(bufs, ref):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_parallel_vector_path(monkeypatch, dtype):
    """Tensors at or above VEC_SERIAL_BELOW run the parallel (blocked) vector kernel on their own."""
    monkeypatch.setattr(K, "VEC_SERIAL_BELOW", 1000)
    rng = np.random.default_rng(5)
    p0, gs = rng.normal(size=5003), [rng.normal(size=5003) for _ in range(2)]
    p = Parameter(p0, dtype=dtype)
    opt = Adam([p, Parameter(np.ones(10), dtype=dtype)], lr=0.01)
    for g in gs:
        opt.step([sm.tensor(g, dtype), sm.ones(10, dtype=dtype)])
    want = _ref("adam", dict(lr=0.01), p0.astype(dtype), [g.astype(dtype) for g in gs])
    tol = dict(rtol=1e-12, atol=1e-13) if dtype == "float64" else dict(rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(p.numpy(), want, **tol)
