"""Vulkan pass over the core ops (run as its own process by tests/test_vulkan.py: ti.init is once
per process). Checks values against numpy and first derivatives against float64 references
computed analytically in numpy, plus the exact Hessian of sum(sin(x) * x). Exits non-zero
(with the failing check named) on any mismatch, and if Taichi is not really on Vulkan."""
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sciml as sm  # noqa: E402
from sciml.autodiff.ops import linalg as LA  # noqa: E402

RTOL, ATOL = 2e-5, 2e-5
failures = []


def check(name, got, want, rtol=RTOL, atol=ATOL):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    want = np.asarray(want)
    try:
        assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    except AssertionError as e:
        failures.append(f"{name}: {e}")


def t(a):
    return sm.tensor(np.asarray(a, np.float32), "float32")


def main():
    used = sm.init(arch="vulkan", dtype="float32", seed=0)
    import taichi as ti
    actual = ti.lang.impl.current_cfg().arch
    if used != "vulkan" or actual != ti.vulkan:
        print(f"FAIL: asked for vulkan, Taichi runs on {actual} (sciml says {used!r})")
        return 1
    from sciml import backend
    assert not backend.on_host()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((7,)).astype(np.float32)
    x, y = t(a), t(b)
    assert isinstance(x._buf, ti.Ndarray), type(x._buf)

    # elementwise + broadcasting
    check("add bias", x + y, a + b)
    check("mul scalar", x * 2.5, a * 2.5)
    check("sub general", t(a[:, :1]) - t(a[:1, :]), a[:, :1] - a[:1, :])
    check("div", x / (y * y + 1.0), a / (b * b + 1))
    check("exp", sm.exp(x), np.exp(a))
    check("log", sm.log(sm.abs(x) + 1.0), np.log(np.abs(a) + 1))
    check("sin", sm.sin(x), np.sin(a))
    check("cos", sm.cos(x), np.cos(a))
    check("tanh", sm.tanh(x), np.tanh(a))
    check("sigmoid", sm.sigmoid(x), 1 / (1 + np.exp(-a)))
    check("relu", sm.relu(x), np.maximum(a, 0))
    check("softplus", sm.softplus(x), np.logaddexp(a, 0))
    check("sqrt", sm.sqrt(sm.abs(x)), np.sqrt(np.abs(a)))
    check("pow", sm.abs(x) ** 1.5, np.abs(a) ** 1.5)
    check("pow negative base", x ** 3.0, a ** 3.0, rtol=1e-5)
    check("maximum", sm.maximum(x, y), np.maximum(a, b))
    check("where", sm.where(x > 0, x, y), np.where(a > 0, a, b))
    check("compare", (x > y).astype("float32"), (a > b).astype(np.float32))
    # reductions
    check("sum", x.sum(), a.sum(), rtol=1e-5)
    check("sum axis0", x.sum(0), a.sum(0))
    check("mean keepdims", x.mean(-1, keepdims=True), a.mean(-1, keepdims=True))
    check("max axis", x.max(1), a.max(1))
    check("min", x.min(), a.min())
    big = rng.standard_normal(100_000).astype(np.float32)
    check("sum 1e5", t(big).sum(), big.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)
    b2 = big.reshape(2, -1)  # long rows: partial sums (one long loop per invocation goes wrong on lavapipe)
    check("sum rows 5e4", t(b2).sum(-1), b2.astype(np.float64).sum(-1), rtol=1e-4, atol=1e-3)
    check("max rows 5e4", t(b2).max(-1), b2.max(-1))
    l2 = b2[:, :5000].astype(np.float64)
    check("logsumexp long rows", sm.logsumexp(t(l2), -1), np.log(np.exp(l2).sum(-1)), rtol=1e-5)
    check("softmax long rows", sm.softmax(t(l2), -1), np.exp(l2) / np.exp(l2).sum(-1, keepdims=True), rtol=1e-4,
          atol=1e-8)
    kl = rng.standard_normal((3, 5000)).astype(np.float32)
    check("matmul long k", t(kl) @ t(kl.T), kl.astype(np.float64) @ kl.T, rtol=1e-4, atol=1e-2)
    # indexing and shape ops
    check("getitem", x[1:4, ::-2], a[1:4, ::-2])
    check("getitem int", x[-1], a[-1])
    idx = sm.tensor([4, 0, 4], "int32")
    check("take", x[idx], a[[4, 0, 4]])
    check("transpose", x.T, a.T)
    check("concat", sm.concat([x, x], 1), np.concatenate([a, a], 1))
    check("broadcast_to", sm.broadcast_to(y, (3, 7)), np.broadcast_to(b, (3, 7)))
    # matmul via the Taichi GEMM (the only path on Vulkan)
    LA.use_blas(None)
    m1, m2 = rng.standard_normal((13, 9)).astype(np.float32), rng.standard_normal((9, 6)).astype(np.float32)
    check("matmul ragged", t(m1) @ t(m2), m1 @ m2, rtol=1e-4, atol=1e-4)
    check("matmul T", sm.matmul(t(m1), t(m1), transpose_b=True), m1 @ m1.T, rtol=1e-4, atol=1e-4)
    bm = rng.standard_normal((2, 3, 4)).astype(np.float32)
    check("matmul batched", t(bm) @ t(bm.transpose(0, 2, 1)), bm @ bm.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
    m3 = rng.standard_normal((9, 13)).astype(np.float32)
    check("matmul2 (second GEMM accumulates)", LA._mm2(t(m1), t(m2), t(m3), t(m2), ta=False, tb=False, tc=True,
                                                         td=False), m1 @ m2 + m3.T @ m2, rtol=1e-4, atol=1e-4)
    # derivative products (VJP/JVP kernels of relu, tanh, sigmoid, square)
    from sciml.autodiff.ops import elementwise as EW
    check("relu_grad", EW.relu_grad(y, x), b * (a > 0))
    check("tanh_grad", EW.tanh_grad(y, x), b * (1 - a * a))
    check("sigmoid_grad", EW.sigmoid_grad(y, x), b * a * (1 - a))
    check("twice_mul", EW.twice_mul(y, x), 2 * b * a)
    # softmax family
    check("softmax", sm.softmax(x, -1), np.exp(a) / np.exp(a).sum(-1, keepdims=True))
    check("softmax axis0", sm.softmax(x, 0), np.exp(a) / np.exp(a).sum(0, keepdims=True))
    lse = np.log(np.exp(a).sum(-1))
    check("logsumexp", sm.logsumexp(x, -1), lse)
    check("log_softmax", sm.log_softmax(x), a - lse[:, None])

    # a fused chain: one generated kernel
    fz = sm.fuse(lambda p, q, r: sm.tanh(p * q + r))
    check("fuse tanh(a*b+c)", fz(x, x, x), np.tanh(a * a + a))
    g = sm.grad(lambda u: fz(u, x, 1.0).sum())(x)
    check("grad fused", g, (1 - np.tanh(a.astype(np.float64) ** 2 + 1) ** 2) * a)
    fz2 = sm.fuse(lambda p, q: sm.tanh(p * q) + sm.relu(q) * p)  # all-array: the backward is fused too
    g = sm.grad(lambda u: fz2(u, x).sum())(x)
    a64_ = a.astype(np.float64)
    check("grad fused backward", g, (1 - np.tanh(a64_ * a64_) ** 2) * a64_ + np.maximum(a64_, 0),
          rtol=1e-4, atol=1e-4)

    # first derivatives (our own rules, built from forward kernels: valid on Vulkan)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    g = sm.grad(lambda u: (sm.sin(u) * u).sum())(x)
    check("grad sin*x", g, np.cos(a64) * a64 + np.sin(a64))
    gx, gy = sm.grad(lambda u, v: (sm.tanh(u * v + 1.0)).sum(), argnums=(0, 1))(x, y)
    s = 1 - np.tanh(a64 * b64 + 1) ** 2
    check("grad tanh(u*v+1) u", gx, s * b64)
    check("grad tanh(u*v+1) v", gy, (s * a64).sum(0))
    g = sm.grad(lambda u: (sm.exp(u) / (1.0 + u * u)).mean())(x)
    check("grad exp/(1+x^2)", g, (np.exp(a64) * (1 + a64**2) - np.exp(a64) * 2 * a64) / (1 + a64**2) ** 2 / a.size)
    g = sm.grad(lambda u: (u.max(1) + u.sum(0).mean()).sum())(x)
    want = (a64 == a64.max(1, keepdims=True)).astype(np.float64) + 5.0 / 7
    check("grad max+sum", g, want)
    g = sm.grad(lambda u: (u[1:4, ::-2] ** 2).sum() + (u[idx] * 3.0).sum())(x)
    want = np.zeros_like(a64)
    want[1:4, ::-2] += 2 * a64[1:4, ::-2]
    np.add.at(want, [4, 0, 4], 3.0)
    check("grad indexing", g, want)
    W = rng.standard_normal((7, 3)).astype(np.float32)
    gw, gxx = sm.grad(lambda w, u: ((u @ w) ** 2).sum(), argnums=(0, 1))(t(W), x)
    check("grad matmul W", gw, 2 * a64.T @ (a64 @ W), rtol=1e-4, atol=1e-4)
    check("grad matmul x", gxx, 2 * (a64 @ W) @ W.T, rtol=1e-4, atol=1e-4)
    c = rng.standard_normal((5, 7))
    g = sm.grad(lambda u: (sm.softmax(u, -1) * t(c)).sum())(x)
    p = np.exp(a64) / np.exp(a64).sum(-1, keepdims=True)
    check("grad softmax", g, p * (c - (p * c).sum(-1, keepdims=True)))
    g = sm.grad(lambda u: sm.logsumexp(u, 0).sum())(x)
    check("grad logsumexp axis0", g, np.exp(a64) / np.exp(a64).sum(0, keepdims=True))
    # the Hessian from the issue, on vulkan
    xv = np.array([0.3, 1.2])
    H = sm.hessian(lambda u: (sm.sin(u) * u).sum())(t(xv))
    check("hessian sin(x)*x", H, np.diag(2 * np.cos(xv) - xv * np.sin(xv)), rtol=1e-5, atol=1e-6)
    v = t([0.5, -1.0])
    _, hv = sm.hvp(lambda u: (sm.sin(u) * u).sum(), (t(xv),), (v,))
    check("hvp", hv[0], np.diag(2 * np.cos(xv) - xv * np.sin(xv)) @ np.array([0.5, -1.0]), rtol=1e-5, atol=1e-6)

    # sciml.jit on the device: the replay (device ndarrays rebound per call) equals eager calls
    f = lambda u, w: (sm.tanh(u @ w) * u.sum()).sum()  # noqa: E731
    vg = sm.value_and_grad(f, argnums=(0, 1))
    j = sm.jit(vg, fallback=False)
    W = rng.standard_normal((7, 3)).astype(np.float32)
    j(x, t(W))
    for s in range(2):
        xs, Ws = t(rng.standard_normal((5, 7))), t(rng.standard_normal((7, 3)))
        (lj, (gj0, gj1)), (le, (ge0, ge1)) = j(xs, Ws), vg(xs, Ws)
        check(f"jit value {s}", lj, le.numpy())
        check(f"jit grad x {s}", gj0, ge0.numpy())
        check(f"jit grad W {s}", gj1, ge1.numpy())
    if j.stats != {"traces": 1, "replays": 2, "eager": 0}:
        failures.append(f"jit stats on vulkan: {j.stats}")

    # fused in-place optimizer kernels (the scalar device kernels; tests/optim covers the CPU paths)
    _check_optimizers(rng)

    if failures:
        print("FAIL on vulkan:\n  " + "\n  ".join(failures))
        return 1
    print(f"OK vulkan: all checks passed on {actual}")
    return 0


def _check_optimizers(rng):
    from sciml.models import Parameter
    from sciml.optim import SGD, Adagrad, Adam, AdamW, RMSprop
    n = 3001
    p0 = rng.standard_normal(n).astype(np.float32)
    gs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    for cls, kw in ((Adam, dict(lr=0.01)), (Adam, dict(lr=0.01, weight_decay=0.1, clip_norm=1.0)),
                    (AdamW, dict(lr=0.01, weight_decay=0.1)), (SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
                    (RMSprop, dict(lr=0.01, momentum=0.5)), (Adagrad, dict(lr=0.1))):
        p = Parameter(p0, dtype="float32")
        opt = cls([p], **kw)
        want, m, v, b = p0.astype(np.float64), 0.0, 0.0, 0.0
        for i, g32 in enumerate(gs, start=1):
            opt.step([t(g32)])
            g = g32.astype(np.float64)
            if kw.get("clip_norm"):
                g = g * min(1.0, kw["clip_norm"] / np.linalg.norm(g))
            lr, wd = kw["lr"], kw.get("weight_decay", 0.0)
            if cls is AdamW:
                want = want * (1 - lr * wd)
            else:
                g = g + wd * want
            if cls in (Adam, AdamW):
                m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
                want = want - lr * (m / (1 - 0.9 ** i)) / (np.sqrt(v / (1 - 0.999 ** i)) + 1e-8)
            elif cls is SGD:
                b = g if i == 1 else 0.9 * b + g
                want = want - lr * (g + 0.9 * b)
            elif cls is RMSprop:
                v = 0.99 * v + 0.01 * g * g
                b = 0.5 * b + g / (np.sqrt(v) + 1e-8)
                want = want - lr * b
            else:
                v = v + g * g
                want = want - lr * g / (np.sqrt(v) + 1e-10)
        check(f"optimizer {cls.__name__} {kw}", p, want, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        print("FAIL: exception on vulkan")
        sys.exit(1)
