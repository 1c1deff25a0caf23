"""Vulkan pass over the NN kernels (run in its own process by test_nn_vulkan.py): fused bias+activation
and its adjoint, fused softmax cross-entropy, unfold/fold (conv, pooling), and the fused optimizer
kernels, against numpy references. Exits non-zero naming the failing check."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import sciml as sm  # noqa: E402

R = np.random.default_rng(0)
fails = []


def check(name, got, want, tol=2e-5):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    try:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    except AssertionError as e:
        fails.append(f"{name}: {e}")


def main():
    assert sm.init(arch="vulkan", dtype="float32", seed=0) == "vulkan"
    from sciml.autodiff.ops.conv import bias_act, softmax_cross_entropy
    from sciml.models import Conv2d, max_pool2d
    from sciml.optim import SGD, Adam
    from sciml.models import Parameter
    f = np.float32
    h, b, g = R.normal(size=(70, 40)).astype(f), R.normal(size=40).astype(f), R.normal(size=(70, 40)).astype(f)
    th, tb = sm.tensor(h), sm.tensor(b)
    z = h + b
    check("bias_act relu", bias_act(th, tb, "relu"), np.maximum(z, 0))
    gh, gb = sm.grad(lambda h, b: (bias_act(h, b, "tanh") * sm.tensor(g)).sum(), argnums=(0, 1))(th, tb)
    gz = g * (1 - np.tanh(z) ** 2)
    check("bias_act_vjp h", gh, gz, 1e-4)
    check("bias_act_vjp b", gb, gz.sum(0), 1e-4)
    x = R.normal(size=(50, 7)).astype(f)
    q = np.eye(7, dtype=f)[R.integers(0, 7, 50)]
    lsm = x - x.max(1, keepdims=True) - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True))
    check("xent", softmax_cross_entropy(sm.tensor(x), sm.tensor(q)), -(q * lsm).sum(1).mean())
    gx = sm.grad(lambda x: softmax_cross_entropy(x, sm.tensor(q)))(sm.tensor(x))
    check("xent_grad", gx, (np.exp(lsm) - q) / 50)
    conv = Conv2d(2, 3, 3, padding=1, seed=0, init="kaiming_uniform")
    im = R.normal(size=(2, 2, 5, 5)).astype(f)
    W = conv.weight.numpy()
    xp = np.pad(im, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 3, 5, 5), f)
    for i in range(5):
        for j in range(5):
            ref[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i:i + 3, j:j + 3], W)
    check("conv2d", conv(sm.tensor(im)), ref, 1e-4)
    gim = sm.grad(lambda t: conv(t).sum())(sm.tensor(im)).numpy()
    wsum = W.sum(0)
    gref = np.zeros_like(im)
    for i in range(5):
        for j in range(5):
            for a in range(3):
                for c in range(3):
                    if 0 <= i + a - 1 < 5 and 0 <= j + c - 1 < 5:
                        gref[:, :, i + a - 1, j + c - 1] += wsum[:, a, c]
    check("conv2d input grad (fold)", gim, gref, 1e-4)
    check("max_pool2d", max_pool2d(sm.tensor(im), 2, 1), np.max(np.stack(
        [im[:, :, a:a + 4, c:c + 4] for a in range(2) for c in range(2)]), 0))
    p0, gr = R.normal(size=100).astype(f), R.normal(size=100).astype(f)
    p = Parameter(p0)
    Adam([p], lr=0.1).step([sm.tensor(gr)])
    check("adam", p, p0 - 0.1 * np.sign(gr), 1e-4)
    p = Parameter(p0)
    SGD([p], lr=0.1, momentum=0.9, clip_norm=1.0).step([sm.tensor(gr)])
    check("sgd+clip", p, p0 - 0.1 * gr / np.linalg.norm(gr), 1e-4)
    p = Parameter(p0)
    SGD([p], lr=0.1).step([sm.tensor(gr)])          # no momentum buffer: the gradient stands in for it
    check("sgd plain", p, p0 - 0.1 * gr, 1e-5)
    from sciml.optim import RMSprop, Adagrad
    p = Parameter(p0)
    RMSprop([p], lr=0.01).step([sm.tensor(gr)])
    check("rmsprop", p, p0 - 0.01 * gr / (np.sqrt(0.01 * gr * gr) + 1e-8), 1e-4)
    p = Parameter(p0)
    Adagrad([p], lr=0.1).step([sm.tensor(gr)])
    check("adagrad", p, p0 - 0.1 * np.sign(gr), 1e-4)
    # issue 16 layers (composed of the ops above): dilated grouped conv, transposed conv, LSTM cell, Lion, elu
    from sciml.models import LSTMCell, conv2d, conv_transpose2d, elu
    from sciml.optim import Lion
    rng = R
    xg = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    wg = rng.standard_normal((2, 2, 2, 2)).astype(np.float32)
    refg = np.zeros((1, 2, 4, 4), np.float32)
    for o in range(2):
        g = o                                                     # 2 groups of 2 channels, one output each
        for i in range(4):
            for j in range(4):
                refg[0, o, i, j] = (xg[0, 2 * g:2 * g + 2, i:i + 3:2, j:j + 3:2] * wg[o]).sum()
    check("conv2d dilation 2, groups 2", conv2d(sm.tensor(xg), sm.tensor(wg), None, 1, 0, 2, 2), refg, 1e-4)
    xt = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    wt = rng.standard_normal((2, 1, 2, 2)).astype(np.float32)
    reft = np.zeros((1, 1, 4, 4), np.float32)
    for c in range(2):
        for i in range(2):
            for j in range(2):
                reft[0, 0, 2 * i:2 * i + 2, 2 * j:2 * j + 2] += xt[0, c, i, j] * wt[c, 0]
    check("conv_transpose2d stride 2", conv_transpose2d(sm.tensor(xt), sm.tensor(wt), None, 2), reft, 1e-4)
    cell = LSTMCell(3, 2, seed=0, dtype="float32")
    xc, hc, cc = (rng.standard_normal(s_).astype(np.float32) for s_ in ((2, 3), (2, 2), (2, 2)))
    sd = cell.state_dict()
    gates = xc @ sd["weight_ih"].T + sd["bias_ih"] + hc @ sd["weight_hh"].T + sd["bias_hh"]
    sg = 1 / (1 + np.exp(-gates))
    c2 = sg[:, 2:4] * cc + sg[:, 0:2] * np.tanh(gates[:, 4:6])
    check("lstm cell", cell(sm.tensor(xc), (sm.tensor(hc), sm.tensor(cc)))[0], sg[:, 6:8] * np.tanh(c2), 1e-5)
    p = Parameter(p0)
    Lion([p], lr=0.1).step([sm.tensor(gr)])
    check("lion", p, p0 - 0.1 * np.sign(gr), 1e-5)
    ev = np.array([-2.0, -0.5, 0.0, 3.0], np.float32)
    check("elu", elu(sm.tensor(ev)), np.where(ev > 0, ev, np.expm1(np.minimum(ev, 0))), 1e-6)
    if fails:
        print("FAIL\n" + "\n".join(fails))
        return 1
    print("OK vulkan nn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
