"""Vulkan float32 pass over the fused Conv2d -> ReLU -> MaxPool2d epilogue, BatchNorm2d -> ReLU -> MaxPool2d and
Conv2d -> BatchNorm2d -> ReLU -> MaxPool2d and the channel-last unfold / fold
(run in its own process by test_conv_relu_pool_fused.py): forwards against numpy, adjoints against the composed
sciml rules on the same device. Exits non-zero naming the failing check."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import sciml as sm  # noqa: E402

R = np.random.default_rng(0)
fails = []


def check(name, got, want, tol=2e-4):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    want = want.numpy() if hasattr(want, "numpy") else np.asarray(want)
    try:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    except AssertionError as e:
        fails.append(f"{name}: {e}")


def main():
    arch = sys.argv[1] if len(sys.argv) > 1 else "vulkan"   # "cuda": the same pass on a GPU (device check)
    assert sm.init(arch=arch, dtype="float32", seed=0) == arch
    from sciml.models import max_pool2d
    from sciml.models._conv_fused import conv_epilogue_pool, conv_epilogue_pool_composed
    from sciml.models._norm_fused import batch_norm_composed, batch_norm_train
    f = np.float32
    N, H, W, O = 3, 4, 6, 8
    yv, bv = R.normal(size=(N * H * W, O)).astype(f), R.normal(size=O).astype(f)
    y, b = sm.tensor(yv), sm.tensor(bv)
    g = sm.tensor(R.normal(size=(N, O, H // 2, W // 2)).astype(f))
    for relu in (True, False):
        out, pull = sm.vjp(lambda y, b: conv_epilogue_pool(y, b, (N, H, W), relu, (2, 2)), y, b)
        _, pullc = sm.vjp(lambda y, b: conv_epilogue_pool_composed(y, b, (N, H, W), relu, (2, 2)), y, b)
        z = (yv.astype(float) + bv).reshape(N, H, W, O).transpose(0, 3, 1, 2)
        z = np.maximum(z, 0) if relu else z
        check(f"conv_epilogue_pool relu={relu} forward", out, z.reshape(N, O, H // 2, 2, W // 2, 2).max((3, 5)))
        for i, (a, e) in enumerate(zip(pull(g), pullc(g))):
            check(f"conv_epilogue_pool relu={relu} backward {i}", a, e)
    xv = R.normal(size=(N, O, H, W)).astype(f)
    x, w, bb = sm.tensor(xv), sm.tensor((R.normal(size=O) + 1.5).astype(f)), sm.tensor(R.normal(size=O).astype(f))
    out, pull = sm.vjp(lambda x, w, b: batch_norm_train(x, w, b, relu=True, pool=(2, 2)), x, w, bb)
    ref, pullc = sm.vjp(lambda x, w, b: max_pool2d(batch_norm_composed(x, w, b, 1e-5, True), 2), x, w, bb)
    xd = xv.astype(float)
    xn = (xd - xd.mean((0, 2, 3), keepdims=True)) / np.sqrt(xd.var((0, 2, 3), keepdims=True) + 1e-5)
    zn = np.maximum(xn * w.numpy()[None, :, None, None] + bb.numpy()[None, :, None, None], 0)
    check("batch_norm pool forward", out, zn.reshape(N, O, H // 2, 2, W // 2, 2).max((3, 5)))
    for i, (a, e) in enumerate(zip(pull(g), pullc(g))):
        check(f"batch_norm pool backward {i}", a, e, 1e-3)
    from sciml.models._conv_fused import conv_bn_pool, conv_bn_pool_composed
    args = (y, sm.tensor(bv[::-1].copy()), w, bb)
    out, pull = sm.vjp(lambda *a: conv_bn_pool(*a, (N, H, W), relu=True, k=(2, 2)), *args)
    ref, pullc = sm.vjp(lambda *a: conv_bn_pool_composed(*a, (N, H, W), 1e-5, True, (2, 2)), *args)
    check("conv_bn_pool forward", out, ref)
    for i, (a, e) in enumerate(zip(pull(g), pullc(g))):
        check(f"conv_bn_pool backward {i}", a, e, 1e-3)
    from sciml.models._conv_fused import fold_cl, unfold_cl
    xv = R.normal(size=(2, 4, 5, 6)).astype(f)
    u = unfold_cl(sm.tensor(xv), (3, 3, 1, 1, 1, 1))
    xp = np.pad(xv.astype(float), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.stack([np.stack([xp[:, :, i:i + 5, j:j + 6] for j in range(3)], -1) for i in range(3)], -2)
    check("unfold_cl forward", u, ref.transpose(0, 2, 3, 4, 5, 1))    # (N, Ho, Wo, kh, kw, C)
    c = R.normal(size=u.shape).astype(f)
    lhs = float((u.numpy().astype(float) * c).sum())
    rhs = float((xv.astype(float) * fold_cl(sm.tensor(c), (3, 3, 1, 1, 1, 1), xv.shape).numpy()).sum())
    check("fold_cl adjoint", lhs, rhs, 1e-3)
    if fails:
        print("\n".join(fails))
        sys.exit(1)
    print(f"OK {arch} conv pool")


if __name__ == "__main__":
    main()
