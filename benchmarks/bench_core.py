"""Core performance: per-op overhead, elementwise/fused/reduction throughput, matmul GFLOP/s,
hvp and Hessian of a small MLP; sciml (arch=cpu, float32) vs numpy, PyTorch and JAX (where
installed), in one process, one table.

    python -m benchmarks.bench_core [--quick]

Timings are medians of repeated batches (benchmarks.peers.timeit); the machine is shared and
noisy, so read ratios, not digits. Whether OPENBLAS_CORETYPE was set is printed in the header.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _arch  # noqa: E402
from benchmarks import peers  # noqa: E402
from benchmarks.peers import common as PC  # noqa: E402

MM_SHAPES = ((256, 784, 512), (512, 512, 512), (1024, 1024, 1024), (10000, 32, 32), (41600, 32, 32))


def med(fn, repeat=15, target=2e-3):
    """Seconds per call: the fastest of ``repeat`` batches (~target s each). The machine is shared
    (load average printed in the header); contention only ever adds time, so the minimum is the
    most reproducible statistic for every framework alike."""
    return best(fn, repeat, target)


def best(fn, repeat=15, target=2e-3):
    """Min over batches: per-call overhead on a shared machine (noise only adds time)."""
    return min(peers.timeit_samples(fn, 2, repeat, peers.autonumber(fn, target_s=target)))


def race(fns, rounds=5, target=2e-3):
    """Seconds per call for each entry of ``fns`` (name -> fn or None): the fastest batch over
    ``rounds`` rounds in which every entry runs once, interleaved, so that all entries see the
    same machine load and their ratios stay meaningful on a busy machine."""
    fns = {k: f for k, f in fns.items() if f is not None}
    nums = {k: peers.autonumber(f, target_s=target) for k, f in fns.items()}
    out = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            out[k] = min(out[k], min(peers.timeit_samples(f, 1, 3, nums[k])))
    return out


def race_median(fns, rounds=15, target=2e-3):
    """Seconds per call for each entry of ``fns``: the MEDIAN over ``rounds`` interleaved rounds (each
    round times one batch of every entry, the order rotating by one each round), so that every entry
    sees the same load and a stall hits one batch, not the statistic. Also the min-max range."""
    fns = {k: f for k, f in fns.items() if f is not None}
    nums = {k: peers.autonumber(f, target_s=target) for k, f in fns.items()}
    for k, f in fns.items():
        f()
    got = {k: [] for k in fns}
    keys = list(fns)
    pc = time.perf_counter
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            f, num = fns[k], nums[k]
            t0 = pc()
            for _ in range(num):
                f()
            got[k].append((pc() - t0) / num)
    return {k: (statistics.median(v), min(v), max(v)) for k, v in got.items()}


def single_ops(sm, T, rounds, n=1_000_000):
    """Issue 18 item 2: single ops and fused chains at n float32 elements against numpy, medians of
    interleaved rounds (race_median). sigmoid's numpy twin is 1 / (1 + exp(-x)) (numpy has none)."""
    rng = np.random.default_rng(0)
    an, bn, cn = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    a, b, c = (sm.tensor(v, "float32") for v in (an, bn, cn))
    f3 = sm.fuse(lambda x, y, z: sm.tanh(x * y + z))
    fp = sm.fuse(lambda x, y, z: (x * y + z) * x - y * z)
    fq = sm.fuse(lambda x: sm.tanh(x * x + x))
    cases = [
        ("add", lambda: a + b, lambda: an + bn),
        ("mul", lambda: a * b, lambda: an * bn),
        ("sum", lambda: a.sum(), lambda: an.sum()),
        ("mean", lambda: a.mean(), lambda: an.mean()),
        ("tanh", lambda: sm.tanh(a), lambda: np.tanh(an)),
        ("exp", lambda: sm.exp(a), lambda: np.exp(an)),
        ("sigmoid", lambda: sm.sigmoid(a), lambda: 1 / (1 + np.exp(-an))),
        ("tanh(x*x+x), 3 ops", lambda: sm.tanh(a * a + a), lambda: np.tanh(an * an + an)),
        ("tanh(x*x+x), sm.fuse", lambda: fq(a), lambda: np.tanh(an * an + an)),
        ("tanh(a*b+c), sm.fuse", lambda: f3(a, b, c), lambda: np.tanh(an * bn + cn)),
        ("(a*b+c)*a-b*c, sm.fuse", lambda: fp(a, b, c), lambda: (an * bn + cn) * an - bn * cn),
    ]
    try:  # the same ops with the warm-pool rule flipped (kernels/_warm.py): its A/B in the same rounds
        from sciml.kernels import _warm as W

        def flipped(f):
            def g():
                W.ON = not on
                try:
                    return f()
                finally:
                    W.ON = on
            return g
        on = W.ON
        cases += [(f"{nm}, SCIML_POOL_WARM={0 if on else 1}", flipped(fs), fnp) for nm, fs, fnp in cases
                  if nm in ("add", "sum", "tanh")]
    except ImportError:  # a tree from before the rule
        pass
    fns = {}
    for name, fs, fnp in cases:
        fns[(name, "s")], fns[(name, "n")] = fs, fnp
    t = race_median(fns, rounds=rounds)
    tag = f"1e{int(round(math.log10(n)))}"
    for name, _, _ in cases:
        (ms, lo, hi), (mn, nlo, _) = t[(name, "s")], t[(name, "n")]
        group = "fused" if "fuse" in name else "single op"
        T.add(group, f"{name} n={tag}", ms, mn,
              note=f"{mn / ms:.2f}x numpy speed (median of {rounds} interleaved rounds); fastest rounds "
                   f"{lo * 1e6:.0f} vs {nlo * 1e6:.0f} us: {nlo / lo:.2f}x")


def breakdown(sm, T, rounds, n=1_000_000):
    """Where one ``a + a`` at n float32 elements spends its time, part by part, each timed in interleaved rounds
    (medians; one call per timed batch after ~1 ms of numpy work, as in the single-op rows, plus a warm variant):
    the Python layers (the op minus its kernel call at n = 16), the output allocation (``backend.empty``) and the
    minor page faults per call (getrusage), the kernel alone on a preallocated output serialized and on Taichi's
    pool (cold: after the numpy work; warm: right after another launch), the read-back (``.numpy()``: a view on
    CPU, there is no device sync), and numpy's ``an + an`` / ``np.add(an, an, out=)`` for scale. Thread CPU time is
    given for the one-thread parts (robust to other load on the machine)."""
    import resource

    from sciml import backend
    from sciml.kernels import _common as C
    from sciml.kernels import elementwise as E
    try:
        from sciml.kernels import _warm as W
    except ImportError:  # a tree from before the warm-pool rule
        class W:
            ON = False
    an = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    a = sm.tensor(an, "float32")
    x = a._buf
    o = backend.empty(n, "float32")
    onp = np.empty(n, np.float32)
    s16 = sm.tensor(an[:16], "float32")
    o16 = backend.empty(16, "float32")
    junk = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    prev = (C.busy, W.ON)

    def kern(serial, warm=False):
        def f():
            C.busy = (lambda: True) if serial else (lambda: False)
            W.ON = False
            if warm:
                E.binary_same("add", x, x, o, n, "float32", "float32")
            t0, c0 = time.perf_counter(), time.thread_time()
            E.binary_same("add", x, x, o, n, "float32", "float32")
            return time.perf_counter() - t0, time.thread_time() - c0
        return f

    def timed(g):
        def f():
            t0, c0 = time.perf_counter(), time.thread_time()
            g()
            return time.perf_counter() - t0, time.thread_time() - c0
        return f

    def restore(f):
        def g():
            try:
                return f()
            finally:
                C.busy, W.ON = prev
        return g
    parts = {
        "a + a (default policy)": restore(timed(lambda: a + a)),
        "a + a at n=16 (Python layers + launch)": timed(lambda: s16 + s16),
        "kernel alone at n=16 (launch)": timed(lambda: E.binary_same("add", s16._buf, s16._buf, o16, 16, "float32",
                                                                         "float32")),
        "backend.empty(n) (output allocation)": timed(lambda: backend.empty(n, "float32")),
        "kernel, serialized, preallocated output": restore(kern(True)),
        "kernel, Taichi's pool, cold": restore(kern(False)),
        "kernel, Taichi's pool, warm": restore(kern(False, True)),
        "a.numpy() (read-back: a copy by design; no device sync on CPU)": timed(lambda: a.numpy()),
        "numpy an + an": timed(lambda: an + an),
        "numpy np.add(an, an, out=)": timed(lambda: np.add(an, an, out=onp)),
    }
    for f in parts.values():
        f()
    got = {k: [] for k in parts}
    keys = list(parts)
    flt0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            junk * 1.5  # ~1 ms of numpy work between timed calls: Taichi's pool goes idle as in the single-op rows
            got[k].append(parts[k]())
    flt = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - flt0) / (rounds * len(keys))
    for k in keys:
        wall = statistics.median(v[0] for v in got[k])
        cpu = statistics.median(v[1] for v in got[k])
        T.add("a + a parts", f"{k}, n={n if 'n=16' not in k else 16}", wall,
              note=f"thread CPU {cpu * 1e6:.1f} us (median of {rounds} interleaved rounds)"
              + (f"; minor page faults per call over all parts: {flt:.2f}" if k.startswith("backend.empty") else ""))


class Table:
    def __init__(self):
        self.rows = []

    def add(self, group, what, sciml_s=None, numpy_s=None, torch_s=None, jax_s=None, unit="us", note=""):
        self.rows.append((group, what, sciml_s, numpy_s, torch_s, jax_s, unit, note))

    def show(self):
        def f(v, unit):
            if v is None:
                return "-"
            if unit == "us":
                return f"{v * 1e6:.1f}"
            if unit == "ms":
                return f"{v * 1e3:.2f}"
            return f"{v:.1f}"
        hdr = ("group", "what", "sciml", "numpy", "torch", "jax", "unit", "note")
        body = [(g, w, f(s, u), f(n, u), f(t, u), f(j, u), u if u != "GF" else "GFLOP/s", note)
                for g, w, s, n, t, j, u, note in self.rows]
        widths = [max(len(str(r[i])) for r in [hdr] + body) for i in range(len(hdr))]
        line = "| " + " | ".join(h.ljust(w) for h, w in zip(hdr, widths)) + " |"
        print(line)
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        for r in body:
            print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")


def overhead(sm, T, repeat):
    from sciml.kernels import _common as C
    from sciml.kernels import elementwise as E
    n = 16
    a, b = sm.tensor(np.ones(n, np.float32)), sm.tensor(np.ones(n, np.float32))
    out = np.empty(n, np.float32)
    serial = C.launch_mode(n)
    k = C.cached(("binary", "add", "float32", "float32", "same", serial),
                 lambda: E._build_binary("add", "float32", "float32", "same", serial))
    k(a._buf, b._buf, out, n)
    ar = sm.tensor(np.ones(n, np.float32)).requires_grad_()
    tt = None
    if peers.available("torch"):
        import torch
        ta, tb = torch.ones(n), torch.ones(n)
        tt = lambda: ta + tb  # noqa: E731
    t = race({"taichi": lambda: k.kernel(a._buf, b._buf, out, n), "fast": lambda: k(a._buf, b._buf, out, n),
              "plain": lambda: a + b, "tape": lambda: ar + b, "tanh": lambda: sm.tanh(a),
              "np": lambda: np.add(a._buf, b._buf), "torch": tt}, rounds=max(5, repeat))
    t_taichi, t_fast, t_plain, t_tape, t_tanh, t_np = (t[x] for x in ("taichi", "fast", "plain", "tape", "tanh", "np"))
    tt = t.get("torch")
    T.add("per-op", "Taichi kernel call, add n=16 (3 numpy args)", t_taichi, note="Taichi's own Python call path")
    T.add("per-op", "same kernel via sciml FastLaunch", t_fast, note="sets compiled-kernel args directly")
    T.add("per-op", "sciml a + b, not on tape", t_plain, t_np, tt,
          note=f"sciml overhead over FastLaunch {1e6 * (t_plain - t_fast):+.1f} us, "
               f"over Taichi's call {1e6 * (t_plain - t_taichi):+.1f} us")
    T.add("per-op", "sciml a + b, recorded on tape", t_tape,
          note=f"overhead over FastLaunch {1e6 * (t_tape - t_fast):+.1f} us")
    T.add("per-op", "sciml tanh(a), not on tape", t_tanh)


def elementwise(sm, T, repeat, sizes):
    rng = np.random.default_rng(0)
    torch = None
    if peers.available("torch"):
        import torch
    for n in sizes:
        tag = f"1e{int(round(math.log10(n)))}"
        an, bn, cn = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
        a, b, c = (sm.tensor(v, "float32") for v in (an, bn, cn))
        x2, a2 = sm.tensor(an.reshape(-1, 100), "float32"), an.reshape(-1, 100)
        ta = tb = tc = None
        if torch is not None:
            ta, tb, tc = (torch.from_numpy(v) for v in (an, bn, cn))
        fz = sm.fuse(lambda x, y, z: sm.tanh(x * y + z))
        fz(a, b, c)
        fp = sm.fuse(lambda x, y, z: (x * y + z) * x - y * z)
        fp(a, b, c)
        have = ta is not None
        t = race({"add": lambda: a + b, "add_np": lambda: an + bn, "add_t": (lambda: ta + tb) if have else None,
                  "ch": lambda: sm.tanh(a * b + c), "ch_f": lambda: fz(a, b, c),
                  "ch_np": lambda: np.tanh(an * bn + cn), "ch_t": (lambda: torch.tanh(ta * tb + tc)) if have else None,
                  "po": lambda: (a * b + c) * a - b * c, "po_f": lambda: fp(a, b, c),
                  "po_np": lambda: (an * bn + cn) * an - bn * cn,
                  "po_t": (lambda: (ta * tb + tc) * ta - tb * tc) if have else None,
                  "tanh": lambda: sm.tanh(a), "tanh_np": lambda: np.tanh(an),
                  "tanh_t": (lambda: torch.tanh(ta)) if have else None,
                  "sum": lambda: a.sum(), "sum_np": lambda: an.sum(), "sum_t": (lambda: ta.sum()) if have else None,
                  "rows": lambda: x2.sum(1), "rows_np": lambda: a2.sum(1)}, rounds=max(3, repeat // 3))
        T.add("elementwise", f"add n={tag}", t["add"], t["add_np"], t.get("add_t"),
              note=f"{t['add_np'] / t['add']:.2f}x numpy speed")
        T.add("elementwise", f"tanh n={tag}", t["tanh"], t["tanh_np"], t.get("tanh_t"),
              note=f"{t['tanh_np'] / t['tanh']:.2f}x numpy speed")
        T.add("elementwise", f"tanh(a*b+c) n={tag}, unfused", t["ch"], t["ch_np"], t.get("ch_t"),
              note=f"{t['ch_np'] / t['ch']:.2f}x numpy speed")
        T.add("elementwise", f"tanh(a*b+c) n={tag}, sm.fuse", t["ch_f"], t["ch_np"], t.get("ch_t"),
              note=f"{t['ch_np'] / t['ch_f']:.2f}x numpy speed")
        T.add("elementwise", f"(a*b+c)*a-b*c n={tag}, unfused", t["po"], t["po_np"], t.get("po_t"),
              note=f"{t['po_np'] / t['po']:.2f}x numpy speed")
        T.add("elementwise", f"(a*b+c)*a-b*c n={tag}, sm.fuse", t["po_f"], t["po_np"], t.get("po_t"),
              note=f"{t['po_np'] / t['po_f']:.2f}x numpy speed")
        T.add("reduction", f"sum n={tag}", t["sum"], t["sum_np"], t.get("sum_t"),
              note=f"{t['sum_np'] / t['sum']:.2f}x numpy speed")
        T.add("reduction", f"sum over rows of 100, n={tag}", t["rows"], t["rows_np"],
              note=f"{t['rows_np'] / t['rows']:.2f}x numpy speed")


def matmul(sm, T, repeat, shapes):
    from sciml.autodiff.ops import linalg as LA
    rng = np.random.default_rng(1)
    torch = None
    if peers.available("torch"):
        import torch
    for (m, k, n) in shapes:
        an = rng.standard_normal((m, k)).astype(np.float32)
        bn = rng.standard_normal((k, n)).astype(np.float32)
        a, b = sm.tensor(an, "float32"), sm.tensor(bn, "float32")
        fl = 2.0 * m * n * k
        A = B = None
        if torch is not None:
            A, B = torch.from_numpy(an), torch.from_numpy(bn)

        def taichi_gemm():
            prev = LA.use_blas(False)
            try:
                return a @ b
            finally:
                LA.use_blas(prev)
        t = race({"at": lambda: a @ b, "ti": taichi_gemm, "np": lambda: an @ bn,
                  "t": (lambda: A @ B) if A is not None else None}, rounds=max(15, repeat), target=2e-3)
        gf = {key: fl / v / 1e9 for key, v in t.items()}
        T.add("matmul", f"({m}x{k})@({k}x{n}) Taichi GEMM kernel", gf["ti"], gf["np"], gf.get("t"), unit="GF",
              note=f"{gf['ti'] / gf['np']:.2f}x numpy")
        T.add("matmul", f"({m}x{k})@({k}x{n}) `@` (CPU: BLAS)", gf["at"], gf["np"], gf.get("t"), unit="GF",
              note=f"{gf['at'] / gf['np']:.2f}x numpy")


def _small_mlp(sm, theta, x, y, sizes):
    k, h = 0, x
    for li, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
        W = theta[k:k + i * o].reshape(i, o)
        k += i * o
        bb = theta[k:k + o]
        k += o
        h = h @ W + bb
        if li < len(sizes) - 2:
            h = sm.tanh(h)
    e = h - y
    return (e * e).mean()


def curvature(sm, T, repeat):
    d = PC.w4b_inputs(0, np.float32)
    sizes = d["sizes"]
    x, y = sm.tensor(d["x"], "float32"), sm.tensor(d["y"], "float32")
    th = sm.tensor(d["theta"], "float32")
    v = sm.tensor(np.random.default_rng(3).standard_normal(th.size).astype(np.float32), "float32")
    f = lambda t: _small_mlp(sm, t, x, y, sizes)  # noqa: E731
    r = max(3, repeat // 3)
    s_hvp = med(lambda: sm.hvp(f, (th,), (v,)), r, 5e-3)
    H = sm.hessian(f)(th)
    t0 = time.perf_counter()
    sm.hessian(f)(th)
    s_h = time.perf_counter() - t0
    # check against torch
    t_hvp = t_h = j_hvp = j_h = None
    note = ""
    if peers.available("torch"):
        import torch
        from torch.func import grad, hessian, jvp

        def tf(t):
            k, h = 0, torch.from_numpy(d["x"])
            for li, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
                W = t[k:k + i * o].view(i, o)
                k += i * o
                bb = t[k:k + o]
                k += o
                h = h @ W + bb
                if li < len(sizes) - 2:
                    h = torch.tanh(h)
            e = h - torch.from_numpy(d["y"])
            return (e * e).mean()
        tth, tv = torch.from_numpy(d["theta"]), torch.from_numpy(v.numpy())
        t_hvp = med(lambda: jvp(grad(tf), (tth,), (tv,)), r, 5e-3)
        hf = hessian(tf)
        Ht = hf(tth)
        t_h = med(lambda: hf(tth), r, 5e-3)
        err = float(np.abs(H.numpy() - Ht.numpy()).max() / np.abs(Ht.numpy()).max())
        note = f"max rel. diff vs torch.func Hessian {err:.1e} (float32)"
    if peers.available("jax"):
        jp = peers.load_peer("jax")
        if jp is not None:
            import jax
            import jax.numpy as jnp

            def jf(t):
                k, h = 0, jnp.asarray(d["x"])
                for li, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
                    W = t[k:k + i * o].reshape(i, o)
                    k += i * o
                    h = h @ W + t[k:k + o]
                    k += o
                    if li < len(sizes) - 2:
                        h = jnp.tanh(h)
                e = h - jnp.asarray(d["y"])
                return (e * e).mean()
            jth, jv = jnp.asarray(d["theta"]), jnp.asarray(v.numpy())
            hv = jax.jit(lambda t, u: jax.jvp(jax.grad(jf), (t,), (u,))[1])
            hv(jth, jv).block_until_ready()
            j_hvp = med(lambda: hv(jth, jv).block_until_ready(), r, 5e-3)
            hj = jax.jit(jax.hessian(jf))
            hj(jth).block_until_ready()
            j_h = med(lambda: hj(jth).block_until_ready(), r, 5e-3)
    T.add("curvature", f"hvp, 1-16-16-1 tanh MLP MSE ({th.size} params)", s_hvp, None, t_hvp, j_hvp, unit="ms",
          note="torch.func jvp(grad); jax.jit")
    T.add("curvature", f"hessian ({th.size}x{th.size}), same loss", s_h, None, t_h, j_h, unit="ms",
          note="sm.hessian = jacfwd(jacrev), one run; " + note)


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats, skip 1024^2")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--only", choices=("single", "matmul", "breakdown"), help="one group: the single ops / fused "
                   "chains at 1e6 (issue 18), the GEMM shapes, or where one 1e6 `a + a` spends its time")
    p.add_argument("--rounds", type=int, default=21, help="interleaved rounds of the single-op group")
    _arch.add_argument(p)
    args = p.parse_args(argv)
    _arch.use(args.arch)
    import sciml as sm
    sm.init(arch=_arch.ARCH, dtype="float32")
    import taichi as ti
    repeat = 5 if args.quick else args.repeat
    T = Table()
    load0 = os.getloadavg()[0]
    if args.only in (None, "single"):
        single_ops(sm, T, args.rounds)
    if args.only == "breakdown":
        breakdown(sm, T, args.rounds)
    if args.only is None:
        overhead(sm, T, repeat)
        elementwise(sm, T, repeat, (10_000, 1_000_000))
    if args.only in (None, "matmul"):
        matmul(sm, T, repeat, MM_SHAPES[:2] + MM_SHAPES[3:] if args.quick else MM_SHAPES)
    if args.only is None:
        curvature(sm, T, repeat)
    env = peers.env_info()
    from sciml.kernels import _vec
    print(f"vector lanes: {getattr(_vec, 'host_width', lambda: 4)()} x float32 (host: {_cpu_name()}); load average at the start "
          f"{load0:.1f}")
    print(f"sciml core benchmark: arch={_arch.ARCH} float32, taichi {'.'.join(map(str, ti.__version__))}, "
          f"numpy {np.__version__}, torch {env.get('torch', '-')}, jax {env.get('jax', '-')}, "
          f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"OPENBLAS_CORETYPE={'unset' if env['OPENBLAS_CORETYPE'] is None else env['OPENBLAS_CORETYPE']}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (shared machine); times: fastest batch per call; "
          "matmul: GFLOP/s (higher is better)")
    T.show()
    return 0


if __name__ == "__main__":
    sys.exit(main())
