"""CPU GEMM backends and the launch policy, measured in one process.

(1) The 8 GEMMs of one W1 training step (MLP 784-512-512-10, batch 256, float32: forward,
weight gradients and input gradients, with the transposes the backward uses) through
``sciml.kernels.linalg.matmul`` with MKL and numpy's OpenBLAS through ctypes (``kernels/blas.py``;
whichever is installed) and with numpy's matmul, plus
PyTorch's ``@`` on the same arrays when torch is installed.
(2) A cheap elementwise op (relu) and a transcendental one (tanh) through sciml at sizes around
the serial/parallel switch of ``kernels._common.launch_mode``, each forced serial and forced
parallel: the numbers the policy's thresholds come from.
(3) The cheap elementwise kernels (add, mul, relu_grad, tanh_grad, relu) at 131072 and 328704
float32 elements (the W4 HVP's sizes) and a (321, 1024) row-wise suffix multiply, with the
16-byte vector kernels (``kernels.elementwise.VECTOR``) and with the scalar ones, in interleaved
rounds (the policy's serial/parallel choice in both).

    python -m benchmarks.bench_blas [--repeat 60]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _arch  # noqa: E402
from benchmarks import peers  # noqa: E402

B = 256
# (m, n, k, ta, tb) of out = op(a) @ op(b): forward x@W1, h@W2, h@W3; backward dW3, dh2, dW2, dh1, dW1
W1_GEMMS = [(B, 512, 784, False, False), (B, 512, 512, False, False), (B, 10, 512, False, False),
            (512, 10, B, True, False), (B, 512, 10, False, True), (512, 512, B, True, False),
            (B, 512, 512, False, True), (784, 512, B, True, False)]


def gemm_rows(repeat, rounds=5):
    import sciml as sm
    from sciml.kernels import blas, linalg
    sm.init(arch=_arch.ARCH, dtype="float32")
    rng = np.random.default_rng(0)
    bufs = [(rng.standard_normal(m * k).astype(np.float32), rng.standard_normal(k * n).astype(np.float32),
             np.empty(m * n, np.float32), m, n, k, ta, tb) for m, n, k, ta, tb in W1_GEMMS]
    flops = sum(2 * m * n * k for m, n, k, _, _ in W1_GEMMS)

    def run():
        for a, b, o, m, n, k, ta, tb in bufs:
            linalg.matmul(a, b, o, 1, m, n, k, ta, tb, "float32", True)
    blas.lib()  # the selection first (SCIML_BLAS), so that loading the others below does not change it
    cases = []  # (row name, function to time, the blas library to select or "none")
    for name, lib in (("mkl", blas.load("mkl")), ("openblas", blas.load("openblas")), ("numpy", None)):
        if name == "numpy" or lib is not None:
            cases.append((f"sciml/W1_gemms_{name}", run, lib))
    if peers.available("torch"):
        import torch
        ts = []
        for a, b, o, m, n, k, ta, tb in bufs:
            A = torch.from_numpy(a).reshape((k, m) if ta else (m, k))
            Bm = torch.from_numpy(b).reshape((n, k) if tb else (k, n))
            ts.append((A.T if ta else A, Bm.T if tb else Bm))

        def trun():
            for A, Bm in ts:
                A @ Bm
        cases.append(("torch/W1_gemms", trun, "none"))
    samples = {name: [] for name, _, _ in cases}
    for _ in range(rounds):  # interleaved rounds: every backend sees the same machine load
        for name, fn, lib in cases:
            saved = dict(blas._state)
            if lib != "none":
                blas._state.update(lib=lib, checked=True)
            try:
                samples[name] += peers.timeit_samples(fn, 3, max(1, repeat // rounds))
            finally:
                blas._state.update(saved)
    return [peers.make_result(name, samples[name], gflops=flops / np.median(samples[name]) / 1e9)
            for name, _, _ in cases]


def launch_rows(repeat):
    import sciml as sm
    from sciml.kernels import _common as C
    sm.init(arch=_arch.ARCH, dtype="float32")
    rng = np.random.default_rng(0)
    res = []
    for op in ("relu", "tanh"):
        f = getattr(sm, op)
        for n in (1 << 14, 1 << 16, 1 << 17, 1 << 18, 1 << 20):
            x = sm.tensor(rng.standard_normal(n).astype(np.float32))
            for mode, work in (("serial", 1 << 40), ("parallel", 0)):
                old = C.SERIAL_WORK
                C.SERIAL_WORK = work
                try:
                    s = peers.timeit_samples(lambda: f(x), 5, repeat)
                finally:
                    C.SERIAL_WORK = old
                res.append(peers.make_result(f"sciml/{op}_{n}_{mode}", s, n=n))
            chosen = "serial" if C.launch_mode(n, C.CHEAP if op == "relu" else 4) else "parallel"
            res[-1]["policy"] = res[-2]["policy"] = chosen
    return res


def vector_rows(repeat, rounds=5):
    import sciml as sm
    from sciml.kernels import elementwise as E
    from sciml.kernels import rows as R
    sm.init(arch=_arch.ARCH, dtype="float32")
    rng = np.random.default_rng(0)
    cases = []
    for n in (131072, 328704):
        x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        o = np.empty(n, np.float32)
        for op in ("add", "mul", "relu_grad", "tanh_grad"):
            cases.append((f"{op}_{n}", n, lambda op=op, x=x, y=y, o=o, n=n:
                          E.binary(op, x, y, o, (n,), (n,), (n,), "float32", "float32")))
        cases.append((f"relu_{n}", n, lambda x=x, o=o, n=n: E.unary("relu", x, o, n, "float32")))
    rows, inner = 321, 1024
    xb, ys = rng.standard_normal(rows * inner).astype(np.float32), rng.standard_normal(inner).astype(np.float32)
    ob = np.empty(rows * inner, np.float32)
    cases.append((f"suffix_mul_{rows}x{inner}", rows * inner,
                  lambda: R.suffix_binary("mul", xb, ys, ob, rows, inner, True, "float32")))
    res = []
    old = E.VECTOR
    try:
        for name, n, fn in cases:
            samples = {True: [], False: []}
            for _ in range(rounds):  # interleaved: both variants see the same load
                for vec in (False, True):
                    E.VECTOR = vec
                    samples[vec] += peers.timeit_samples(fn, 3, max(1, repeat // rounds))
            for vec in (True, False):
                res.append(peers.make_result(f"sciml/{name}_{'vector' if vec else 'scalar'}", samples[vec], n=n))
            res[-2]["speedup_median"] = res[-1]["median_s"] / res[-2]["median_s"]
    finally:
        E.VECTOR = old
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=60)
    _arch.add_argument(ap)
    a = ap.parse_args(argv)
    _arch.use(a.arch)
    from sciml.kernels import blas
    res = gemm_rows(a.repeat)
    print(peers.format_table(res, f"W1's 8 GEMMs, float32 (sciml BLAS: {blas.name()})"))
    print()
    print(peers.format_table(launch_rows(a.repeat), "launch policy: serial vs parallel CPU loops (policy = "
                                                    "what sciml picks)"))
    print()
    print(peers.format_table(vector_rows(a.repeat), "cheap elementwise kernels, float32: 16-byte vector vs scalar "
                                                    "(interleaved rounds)"))
    return res


if __name__ == "__main__":
    main()
