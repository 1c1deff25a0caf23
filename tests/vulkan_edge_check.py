"""The edge-value tables of tests/test_edge_values.py on Vulkan (float32), in their own process (run by
tests/test_edge_values.py::test_edge_values_on_vulkan: ti.init is once per process). Prints one line per
failing check and exits non-zero on any, or if Taichi is not really on Vulkan; prints "OK vulkan-edge".

Vulkan differs from the CPU in one documented way (docs/CORE.md, "Numerical conventions"): sin, cos and
tan of huge arguments (|x| > 1e4) follow the device's precision, so the huge values are left out there."""
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import sciml as sm  # noqa: E402


def main():
    used = sm.init(arch="vulkan", dtype="float32", seed=0)
    import taichi as ti
    actual = ti.lang.impl.current_cfg().arch
    if used != "vulkan" or actual != ti.vulkan:
        print(f"FAIL: asked for vulkan, Taichi runs on {actual} (sciml says {used!r})")
        return 1
    import test_edge_values as T
    T.DEVICE[0] = True
    dt = "float32"
    checks = [(f"unary value {n}", lambda n=n: T.unary_values(n, dt)) for n in sorted(T.UNARY)]
    checks += [(f"unary derivative {n}", lambda n=n: T.unary_derivatives(n, dt, order=1))
               for n in sorted(T.UNARY) if T.UNARY[n][2] is not None]
    checks += [(f"binary {n}", lambda n=n: T.binary_values(n, dt)) for n in sorted(T.BINARY)]
    checks += [(f"compare {n}", lambda n=n: T.compare_values(n, dt)) for n in sorted(T.COMPARE)]
    checks += [("maximum/minimum derivatives", lambda: T.extremum_derivatives(dt)),
               ("softmax rows", lambda: T.rows_values(dt)), ("reductions", lambda: T.reduction_values(dt))]
    failed = 0
    for name, fn in checks:
        try:
            with np.errstate(all="ignore"):
                fn()
        except Exception as e:  # noqa: BLE001 - report every failing check, not just the first
            failed += 1
            msg = str(e).strip().splitlines()
            print(f"FAIL {name}: {type(e).__name__}: {' | '.join(msg[:6])}")
            if not isinstance(e, AssertionError):
                traceback.print_exc()
    if failed:
        print(f"{failed} of {len(checks)} vulkan edge checks failed")
        return 1
    print(f"OK vulkan-edge ({len(checks)} checks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
