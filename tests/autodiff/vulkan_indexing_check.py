"""Vulkan pass over indexing (run as its own process by test_validation.py: ti.init is once per process):
integer arrays on any axis, boolean masks, take_along_axis, x.at[...] updates and their first
derivatives against numpy, the bounds guard of the gather / scatter kernels, and int32 min.
Exits non-zero (naming the failing check) on any mismatch, or if Taichi is not really on Vulkan."""
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import sciml as sm  # noqa: E402

failures = []


def check(name, got, want):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    try:
        assert got.shape == np.shape(want), f"shape {got.shape} != {np.shape(want)}"
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    except AssertionError as e:
        failures.append(f"{name}: {e}")


def main():
    used = sm.init(arch="vulkan", dtype="float32", seed=0)
    import taichi as ti
    if used != "vulkan" or ti.lang.impl.current_cfg().arch != ti.vulkan:
        print(f"FAIL: asked for vulkan, Taichi runs on {ti.lang.impl.current_cfg().arch}")
        return 1
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = sm.tensor(a, "float32")
    check("array on axis 2", x[:, :, [3, 0, 3]], a[:, :, [3, 0, 3]])
    check("arrays apart", x[0, :, [1, 2]], a[0, :, [1, 2]])
    check("mask", x[a > 10], a[a > 10])
    check("mask tensor", x[sm.tensor(a[..., 0] > 5)], a[a[..., 0] > 5])
    idx = np.argsort(-a, axis=2)
    check("take_along_axis", sm.take_along_axis(x, idx, 2), np.take_along_axis(a, idx, 2))
    i = ([0, 1, 0], [2, 0, 2], [1, 1, 1])
    v = np.array([5.0, 6.0, 7.0], np.float32)
    for mode, ufunc in (("add", np.add), ("multiply", np.multiply), ("max", np.maximum), ("min", np.minimum)):
        want = a.copy()
        ufunc.at(want, i, v)
        check(f"at {mode}", getattr(x.at[i], mode)(sm.tensor(v, "float32")), want)
    want = a.copy()
    want[i] = v
    check("at set", x.at[i].set(sm.tensor(v, "float32")), want)
    g = sm.grad(lambda u: (u[:, :, [3, 0, 3]] ** 2).sum())(x)
    gw = np.zeros_like(a)
    np.add.at(gw, (slice(None), slice(None), [3, 0, 3]), 2 * a[:, :, [3, 0, 3]])
    check("grad of gather", g, gw)
    gv = sm.grad(lambda w: (x.at[i].multiply(w) * x).sum())(sm.tensor(v, "float32"))
    ai = a[i]  # entries 0 and 2 are the same element: its factor is w0 * w2
    check("grad of at multiply", gv, [ai[0] ** 2 * v[2], ai[1] ** 2, ai[2] ** 2 * v[0]])
    f = sm.jit(lambda u, j: sm.take(u, j), fallback=False)
    flat = sm.tensor(a.reshape(-1)[:5], "float32")
    f(flat, sm.tensor([0], "int32"))
    check("gather clamps", f(flat, sm.tensor([9], "int32")), [4.0])
    s = sm.jit(lambda u, j: sm.scatter_add(u, j, 3), fallback=False)
    three = sm.tensor([1.0, 2.0, 3.0], "float32")
    s(three, sm.tensor([0, 1, 2], "int32"))
    check("scatter drops", s(three, sm.tensor([0, 7, 2], "int32")), [1.0, 0.0, 3.0])
    check("int32 min", sm.min(sm.tensor([3, -2, 7], "int32")), -2)
    if failures:
        print("FAIL\n" + "\n".join(failures))
        return 1
    print("OK vulkan indexing")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
