"""Vulkan float32 pass over the fused conv-net / MLP kernels (run in its own process by test_nn_speed_fused.py):
max / average pooling forward and backward against numpy loops; the dense epilogue dropout(act(h + b)) against numpy
with the mask of the unfused Dropout kernel; the conv and batch-norm epilogues with ReLU; batch norm in eval mode; the fused squared error. Exits non-zero naming the failing check."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import sciml as sm  # noqa: E402

R = np.random.default_rng(0)
fails = []


def check(name, got, want, tol=2e-4):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    try:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    except AssertionError as e:
        fails.append(f"{name}: {e}")


def pool_ref(x, k, s, p, mode, g):
    """Pooling of x (N, C, H, W) and its adjoint applied to g, in float64 loops (ties: equal shares)."""
    N, Cc, H, W = x.shape
    fill = -np.inf if mode == "max" else 0.0
    xp = np.full((N, Cc, H + 2 * p, W + 2 * p), fill)
    xp[:, :, p:p + H, p:p + W] = x
    Ho, Wo = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    y, gx = np.zeros((N, Cc, Ho, Wo)), np.zeros_like(xp)
    for r in range(Ho):
        for c in range(Wo):
            win = xp[:, :, r * s:r * s + k, c * s:c * s + k]
            if mode == "max":
                m = win.max((2, 3), keepdims=True)
                hit = (win == m).astype(float)
                y[:, :, r, c] = m[:, :, 0, 0]
                gx[:, :, r * s:r * s + k, c * s:c * s + k] += hit / hit.sum((2, 3), keepdims=True) * \
                    g[:, :, r, c][:, :, None, None]
            else:
                y[:, :, r, c] = win.mean((2, 3))
                gx[:, :, r * s:r * s + k, c * s:c * s + k] += g[:, :, r, c][:, :, None, None] / (k * k)
    return y, gx[:, :, p:p + H, p:p + W]


def main():
    assert sm.init(arch="vulkan", dtype="float32", seed=0) == "vulkan"
    from sciml.models.conv import avg_pool2d, max_pool2d
    f = np.float32
    for k, s, p in ((2, 2, 0), (3, 1, 1)):
        x = R.integers(-3, 4, size=(2, 3, 7, 8)).astype(f)   # ties
        for mode, fn in (("max", max_pool2d), ("avg", avg_pool2d)):
            y, pull = sm.vjp(lambda x: fn(x, k, s, p), sm.tensor(x))
            g = R.normal(size=y.shape).astype(f)
            yr, gr = pool_ref(x.astype(float), k, s, p, mode, g.astype(float))
            check(f"{mode}_pool2d({k}, {s}, {p}) forward", y, yr)
            check(f"{mode}_pool2d({k}, {s}, {p}) backward", pull(sm.tensor(g))[0], gr)
    from sciml.models import Dropout
    from sciml.models._dense_fused import epilogue
    from sciml.models.norm import _dropout_mask
    h, b = R.normal(size=(6, 20)).astype(f), R.normal(size=20).astype(f)
    fns = {"identity": (lambda z: z, lambda z: np.ones_like(z)), "relu": (lambda z: np.maximum(z, 0), lambda z: z > 0),
           "tanh": (np.tanh, lambda z: 1 - np.tanh(z) ** 2),
           "sigmoid": (lambda z: 1 / (1 + np.exp(-z)), lambda z: np.exp(-z) / (1 + np.exp(-z)) ** 2),
           "silu": (lambda z: z / (1 + np.exp(-z)), lambda z: 1 / (1 + np.exp(-z)) + z * np.exp(-z) / (1 + np.exp(-z)) ** 2)}
    for act, (fv, fd) in fns.items():
        ref, st = Dropout(0.3, seed=9).rng_state, Dropout(0.3, seed=9).rng_state
        m = _dropout_mask(ref, shape=h.shape, dtype="float32", p=0.3).numpy().astype(float)
        y, pull = sm.vjp(lambda h, b: epilogue(h, b, act, 0.3, st), sm.tensor(h), sm.tensor(b))
        z = h.astype(float) + b
        check(f"epilogue {act} forward", y, fv(z) * m)
        check(f"epilogue {act} counter", st.numpy(), ref.numpy(), 0)
        g = R.normal(size=h.shape).astype(f)
        gh, gb = pull(sm.tensor(g))
        gz = g * m * fd(z)
        check(f"epilogue {act} backward h", gh, gz, 1e-3)
        check(f"epilogue {act} backward b", gb, gz.sum(0), 1e-3)
    from sciml.models._conv_fused import conv_epilogue
    from sciml.models._norm_fused import batch_norm_train
    y, bb, u = R.normal(size=(2 * 3 * 4, 5)), R.normal(size=5), R.normal(size=(2, 5, 3, 4))
    z = (y + bb).reshape(2, 3, 4, 5).transpose(0, 3, 1, 2)
    out, pull = sm.vjp(lambda y, b: conv_epilogue(y, b, (2, 3, 4), relu=True), sm.tensor(y.astype(f)),
                       sm.tensor(bb.astype(f)))
    check("conv_epilogue relu forward", out, np.maximum(z, 0))
    gy, gbb = pull(sm.tensor(u.astype(f)))
    ur = u * (z > 0)
    check("conv_epilogue relu backward y", gy, ur.transpose(0, 2, 3, 1).reshape(-1, 5))
    check("conv_epilogue relu backward b", gbb, ur.sum((0, 2, 3)))
    x, w, b, gy = R.normal(size=(4, 3, 5, 2)), R.normal(size=3), R.normal(size=3), R.normal(size=(4, 3, 5, 2))
    mu, var = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
    xh = (x - mu) / np.sqrt(var + 1e-5)
    zz = xh * w.reshape(1, 3, 1, 1) + b.reshape(1, 3, 1, 1)
    out, pull = sm.vjp(lambda x, w, b: batch_norm_train(x, w, b, relu=True), *(sm.tensor(a.astype(f)) for a in (x, w, b)))
    check("batch_norm relu forward", out, np.maximum(zz, 0))
    gx, gw, gbn = pull(sm.tensor(gy.astype(f)))
    ge = gy * (zz > 0)
    gxh = ge * w.reshape(1, 3, 1, 1)
    want = (gxh - gxh.mean((0, 2, 3), keepdims=True) - xh * (gxh * xh).mean((0, 2, 3), keepdims=True)) / \
        np.sqrt(var + 1e-5)
    check("batch_norm relu backward x", gx, want, 1e-3)
    check("batch_norm relu backward w", gw, (ge * xh).sum((0, 2, 3)), 1e-3)
    check("batch_norm relu backward b", gbn, ge.sum((0, 2, 3)), 1e-3)
    from sciml.models._norm_fused import batch_norm_eval
    rm, rv = R.normal(size=3), R.random(3) + 0.5
    want = np.maximum((x - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5) * w.reshape(1, 3, 1, 1) +
                      b.reshape(1, 3, 1, 1), 0)
    check("batch_norm eval relu forward", batch_norm_eval(*(sm.tensor(a.astype(f)) for a in (x, w, b, rm, rv)),
                                                          relu=True), want)
    from sciml.models._loss_fused import mse
    p, t = R.normal(size=(300, 2)).astype(f), R.normal(size=(300, 2)).astype(f)
    val, pull = sm.vjp(lambda p, t: mse(p, t), sm.tensor(p), sm.tensor(t))
    d = p.astype(float) - t
    check("mse forward", val, (d * d).mean())
    gp, gt = pull(sm.tensor(np.array(1.5, f)))
    check("mse backward pred", gp, 1.5 * 2 * d / d.size)
    check("mse backward target", gt, -1.5 * 2 * d / d.size)
    p, t = R.normal(size=(5000, 3)).astype(f), R.normal(size=(5000, 3)).astype(f)   # 4 partial sums of 4096
    d = p.astype(float) - t
    check("mse forward, partial sums", mse(sm.tensor(p), sm.tensor(t), "sum"), (d * d).sum(), tol=1e-5)
    if fails:
        print("\n".join(fails))
        sys.exit(1)
    print("OK vulkan nn cnn")


if __name__ == "__main__":
    main()
