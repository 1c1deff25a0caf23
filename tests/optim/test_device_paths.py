"""The device paths of the optimizers and the solver (issue 18 item 4), run on the CPU in float64
(the generated kernels take numpy buffers too) against the host paths, and on Vulkan in float32
(tests/optim/device_check.py, its own process)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from sciml.kernels import optim as KO

HERE = os.path.dirname(os.path.abspath(__file__))


def _items(kind, rng, sizes):
    na = len(KO._ARRAYS[kind])
    return [[rng.standard_normal(n) if j < 2 else rng.random(n) for j in range(na)]  # slots >= 0
            for n in sizes]


@pytest.mark.parametrize("kind,scalars,plain,flags", [
    ("adam", KO.adam_scalars(1e-2, 0.9, 0.999, 1e-8, 0.1, 0.001)[0], True, ()),
    ("adam", KO.adam_scalars(1e-2, 0.9, 0.999, 1e-8, 0.1, 0.001, 0.5, 0.01, 1e-3)[0], False, ()),
    ("sgd", (0.1, 0.9, 0.1, 0.7, 0.01), False, KO.sgd_flags(0.9, False, True)),
])
def test_grouped_device_update_equals_the_per_tensor_kernels(kind, scalars, plain, flags):
    """_update_device (one launch per group of tensors, one element per thread) gives the
    per-tensor scalar kernel's results (to the last bits LLVM's contraction may round differently),
    over more tensors than one group holds."""
    rng = np.random.default_rng(0)
    sizes = [1, 3, 0, 64, 1000, 5] * 3
    a, b = _items(kind, rng, sizes), None
    b = [[x.copy() for x in arrs] for arrs in a]
    KO._update_device(kind, "float64", [(arrs, n) for arrs, n in zip(a, sizes)], scalars, plain, flags)
    old = KO.VECTOR
    KO.VECTOR = False
    try:
        for arrs, n in zip(b, sizes):
            if n:
                KO._run(kind, arrs, n, "float64", scalars, plain, flags)
    finally:
        KO.VECTOR = old
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-15)
    assert not np.array_equal(a[4][0], _items(kind, np.random.default_rng(0), sizes)[4][0])  # it did update


def test_gather_scalars_copies_first_elements_at_an_offset():
    rng = np.random.default_rng(1)
    bufs = [rng.standard_normal(3) for _ in range(KO.GATHER_MAX + 3)]
    out = np.full(40, -7.0)
    KO.gather_scalars(out, 4, bufs, "float64")
    assert np.array_equal(out[4:4 + len(bufs)], [b[0] for b in bufs])
    assert (out[:4] == -7).all() and (out[4 + len(bufs):] == -7).all()


def _two_loop_np(g, S, Y, rho, slots, gamma):
    q = -g.copy()
    al = {}
    for r in reversed(slots):
        al[r] = rho[r] * S[r] @ q
        q -= al[r] * Y[r]
    if slots:
        q *= gamma
    for r in slots:
        b = rho[r] * Y[r] @ q
        q += (al[r] - b) * S[r]
    return q


def test_device_lbfgs_kernels_match_numpy_in_float64():
    """The device L-BFGS pieces (two-loop recursion in one launch, pair update with the acceptance
    rule and ring order on the device, trial dot products, split / join of leaves) on CPU buffers."""
    from sciml.kernels import lbfgs as KL
    rng = np.random.default_rng(2)
    m, n = 3, 50
    S, Y = np.zeros(m * n), np.zeros(m * n)
    st, ist, alpha, R = np.zeros(m + 1), np.zeros(m + 2, np.int32), np.zeros(2 * m), np.zeros(KL.RN)
    slots, rho, gamma = [], np.zeros(m), 1.0
    x, g = rng.standard_normal(n), rng.standard_normal(n)
    for it in range(6):   # fills the history, then replaces the oldest; one rejected pair
        x_new = x + 0.1 * rng.standard_normal(n)
        g_new = g + 0.5 * (x_new - x) + 0.01 * rng.standard_normal(n)
        if it == 4:
            g_new = g - (x_new - x)          # s.y < 0: rejected
        KL.lbfgs_push(x_new, x, g_new, g, S, Y, st, ist, R, m, n, "float64")
        s, y = x_new - x, g_new - g
        used = len(slots)
        slot = slots[0] if used == m else next(k for k in range(used, used + m) if k % m not in slots) % m
        np.testing.assert_allclose(S[slot * n:(slot + 1) * n], s, rtol=1e-15)
        np.testing.assert_allclose(R[[KL.R_SY, KL.R_YY, KL.R_SINF]], [s @ y, y @ y, np.abs(s).max()], rtol=1e-12)
        if s @ y > 1e-10 * (y @ y):
            slots = slots[1:] + [slot] if used == m else slots + [slot]
            rho[slot], gamma = 1 / (s @ y), (s @ y) / (y @ y)
        assert R[KL.R_ACCEPT] == (1.0 if it != 4 else 0.0)
        assert list(ist[:ist[m]]) == slots and ist[m] == len(slots)
        d = np.empty(n)
        KL.lbfgs_direction(g_new, S, Y, st, ist, alpha, d, R, m, n, "float64")
        ref = _two_loop_np(g_new, S.reshape(m, n), Y.reshape(m, n), rho, slots, gamma)
        np.testing.assert_allclose(d, ref, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(R[[KL.R_USED, KL.R_GTD, KL.R_DINF]], [len(slots), g_new @ ref, np.abs(ref).max()],
                                   rtol=1e-10)
        x, g = x_new, g_new
    KL.lbfgs_reset(ist, m)
    d = np.empty(n)
    KL.lbfgs_direction(g, S, Y, st, ist, alpha, d, R, m, n, "float64")
    assert np.array_equal(d, -g) and R[KL.R_USED] == 0
    for used, gtd in ((2.0, -1.0), (2.0, 0.5), (0.0, -1.0), (2.0, np.nan)):   # the first trial point
        R[[KL.R_USED, KL.R_GTD]] = used, gtd
        ist[m] = 2
        d0 = rng.standard_normal(n)
        d, xt = d0.copy(), np.empty(n)
        KL.lbfgs_trial(x, g, d, xt, ist, R, 0.7, 0.3, m, n, "float64")
        desc = used > 0 and gtd < 0
        np.testing.assert_allclose(d, d0 if desc else -g, rtol=0, atol=0)
        np.testing.assert_allclose(xt, x + (0.7 if desc else 0.3) * d, rtol=1e-15)
        assert ist[m] == (2 if desc or used == 0 else 0)
    f = np.array([3.5])
    KL.eval_dots(x, g, f, R, n, "float64")
    np.testing.assert_allclose(R[[KL.R_F, KL.R_AB, KL.R_BB, KL.R_BMAX]], [3.5, x @ g, g @ g, np.abs(g).max()],
                               rtol=1e-12)
    sizes = [3, 1, 7, 0, 5]
    flat = rng.standard_normal(sum(sizes))
    pieces = [np.zeros(k) for k in sizes]
    KL.split(flat, pieces, sizes, "float64")
    assert np.array_equal(np.concatenate(pieces), flat)
    back = np.zeros(sum(sizes))
    KL.join(pieces, back, sizes, "float64")
    assert np.array_equal(back, flat)


def test_device_paths_on_vulkan():
    """Vulkan (float32): the grouped Adam update, the solver's scalar gather, the device L-BFGS
    kernels against numpy, and lbfgs / LBFGS (state dict round trip) on Rosenbrock."""
    from tests.test_vulkan import _vulkan_available
    if not _vulkan_available():
        if os.environ.get("SCIML_REQUIRE_VULKAN"):
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    root = os.path.dirname(os.path.dirname(HERE))
    env = dict(os.environ, SCIML_ARCH="vulkan", PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "device_check.py")], capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0 and "OK vulkan" in r.stdout, (r.stdout + r.stderr)[-4000:]


@pytest.mark.parametrize("opts", [dict(max_iter=40, gtol=1e-9), dict(max_iter=40, xtol=1e-3, gtol=0.0),
                                  dict(max_iter=5), dict(max_iter=40, max_eval=11)])
def test_device_lbfgs_loop_takes_the_host_loops_decisions(opts):
    """``_run_device`` (one read per iteration: the first trial point is chosen on the device, the
    xtol test waits for the next read) forced on CPU buffers in float64 against the host loop
    ``_run``: same stop reason, iterations, evaluations and result (Rosenbrock, extended)."""
    import sciml as sm
    import importlib
    L = importlib.import_module("sciml.optim.lbfgs")

    def rosen(x):
        a, b = x[1:], x[:-1]
        return (100.0 * (a - b * b) ** 2 + (1.0 - b) ** 2).sum()

    x0 = np.array([-1.2, 1.0, -0.5, 0.8, 1.3])
    o = L._options("lbfgs", 3, opts.get("max_iter", 40), opts.get("max_eval"), opts.get("gtol", 1e-5), 1e-12,
                   opts.get("xtol", 1e-12), 1.0, 1e-4, 0.9, 25)
    ref = L._run(L.Flat(rosen, sm.tensor(x0, "float64"), "lbfgs"), o, None, None)[0]
    prob = L.Flat(rosen, sm.tensor(x0, "float64"), "lbfgs")
    hist = L._History(3, prob.n, prob.dtype)
    hist.st, hist.ist, hist.alpha2 = np.zeros(4), np.zeros(5, np.int32), np.zeros(6)
    got = L._run_device(prob, o, None, hist)[0]
    assert (got.reason, got.iterations, got.nfev, got.ngev) == (ref.reason, ref.iterations, ref.nfev, ref.ngev), \
        (got, ref)
    # The device path's dot products are Taichi reductions, the host loop's numpy: their summation
    # orders differ with the host's vector width (AVX-512 vs AVX2), so near the minimum (loss ~5e-9,
    # from ~25 at x0) the two losses agree to ~1e-14 absolute, not to rtol 1e-9.
    np.testing.assert_allclose(got.loss, ref.loss, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(got.params.numpy()), np.asarray(ref.params.numpy()), rtol=1e-7, atol=1e-10)
