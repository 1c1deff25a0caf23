"""Vulkan pass over the fused NN kernels (run in its own process by test_nn_fused.py): the LSTM layer (2 layers,
bidirectional) runs and differentiates (its kernels against numpy: vulkan_seq_check.py); Dropout masks equal to the plain-Python Threefry stream;
fused BatchNorm, LayerNorm (forward/backward) and the conv epilogue vs numpy. Exits non-zero naming the failing
check."""
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


def main():
    assert sm.init(arch="vulkan", dtype="float32", seed=0) == "vulkan"
    from sciml.models import LSTM
    f = np.float32
    m = LSTM(2, 3, num_layers=2, bidirectional=True, seed=0)
    out, (hn, cn) = m(sm.tensor(R.normal(size=(4, 2, 2)).astype(f)))
    assert out.shape == (4, 2, 6) and hn.shape == (4, 2, 3), (out.shape, hn.shape)
    gp = sm.grad(lambda p: (m.apply(p, sm.tensor(np.ones((4, 2, 2), f)))[0] ** 2).sum())(m.params())
    assert all(np.isfinite(v.numpy()).all() for v in gp.values())
    from sciml.models import Dropout
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_nn_fused import dropout_mask_ref
    d = Dropout(0.3, seed=12345678901)
    x = R.normal(size=(9, 7)).astype(f)
    for counter in range(2):
        want = x * dropout_mask_ref(12345678901, counter, 63, 0.3).reshape(9, 7)
        check(f"dropout mask {counter}", d(sm.tensor(x)), want, 1e-6)
    check("dropout counter", d.rng_state.numpy()[4:], [2, 0], 0)
    from sciml.models import BatchNorm2d
    bn = BatchNorm2d(3, momentum=0.2)
    wv, bv = R.normal(size=3), R.normal(size=3)
    bn.weight._assign(wv.astype(f))
    bn.bias._assign(bv.astype(f))
    x, gy = R.normal(size=(4, 3, 5, 2)), R.normal(size=(4, 3, 5, 2))
    mu, var = x.mean((0, 2, 3), keepdims=True), x.var((0, 2, 3), keepdims=True)
    xh = (x - mu) / np.sqrt(var + 1e-5)
    check("batch_norm forward", bn(sm.tensor(x.astype(f))), xh * wv.reshape(1, 3, 1, 1) + bv.reshape(1, 3, 1, 1))
    check("batch_norm running_var", bn.running_var, 0.8 + 0.2 * x.var((0, 2, 3), ddof=1))
    gp, gx = sm.grad(lambda p, x: (bn.apply(p, x) * sm.tensor(gy.astype(f))).sum(), argnums=(0, 1))(
        bn.params(), sm.tensor(x.astype(f)))
    m = x.size // 3
    gxh = gy * wv.reshape(1, 3, 1, 1)
    want = (gxh - gxh.mean((0, 2, 3), keepdims=True) - xh * (gxh * xh).mean((0, 2, 3), keepdims=True)) / \
        np.sqrt(var + 1e-5)
    check("batch_norm backward x", gx, want, 1e-3)
    check("batch_norm backward weight", gp["weight"], (gy * xh).sum((0, 2, 3)), 1e-3)
    check("batch_norm backward bias", gp["bias"], gy.sum((0, 2, 3)), 1e-3)
    assert m == 40
    from sciml.models._conv_fused import conv_epilogue
    y, bb, u = R.normal(size=(2 * 3 * 4, 5)), R.normal(size=5), R.normal(size=(2, 5, 3, 4))
    want = (y + bb).reshape(2, 3, 4, 5).transpose(0, 3, 1, 2)
    check("conv_epilogue forward", conv_epilogue(sm.tensor(y.astype(f)), sm.tensor(bb.astype(f)), (2, 3, 4)), want)
    gy, gbb = sm.vjp(lambda y, b: conv_epilogue(y, b, (2, 3, 4)), sm.tensor(y.astype(f)), sm.tensor(bb.astype(f)))[1](
        sm.tensor(u.astype(f)))
    check("conv_epilogue backward y", gy, u.transpose(0, 2, 3, 1).reshape(-1, 5))
    check("conv_epilogue backward b", gbb, u.sum((0, 2, 3)))
    from sciml.models._norm_fused import layer_norm
    x, w, b, gy = R.normal(size=(5, 8)), R.normal(size=8), R.normal(size=8), R.normal(size=(5, 8))
    xh = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    check("layer_norm forward", layer_norm(*(sm.tensor(a.astype(f)) for a in (x, w, b))), xh * w + b)
    gx, gw, gbn = sm.vjp(layer_norm, *(sm.tensor(a.astype(f)) for a in (x, w, b)))[1](sm.tensor(gy.astype(f)))
    gh = gy * w
    rs = 1 / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    check("layer_norm backward x", gx, rs * (gh - gh.mean(1, keepdims=True) - xh * (gh * xh).mean(1, keepdims=True)),
          1e-3)
    check("layer_norm backward w", gw, (gy * xh).sum(0), 1e-3)
    check("layer_norm backward b", gbn, gy.sum(0), 1e-3)
    x, w, b, gy = R.normal(size=(600, 8)), R.normal(size=8), R.normal(size=8), R.normal(size=(600, 8))
    xh = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)   # 600 rows: 3 device partials
    _, gw, gbn = sm.vjp(layer_norm, *(sm.tensor(a.astype(f)) for a in (x, w, b)))[1](sm.tensor(gy.astype(f)))
    check("layer_norm backward w, 600 rows", gw, (gy * xh).sum(0), 1e-3)
    check("layer_norm backward b, 600 rows", gbn, gy.sum(0), 1e-3)
    if fails:
        print("\n".join(fails))
        sys.exit(1)
    print("OK vulkan nn fused")


if __name__ == "__main__":
    main()
