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
