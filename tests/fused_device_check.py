"""The fused PINN path's device mechanisms (pinn/fused.py) against the unfused composite in the same
process (run by tests/test_launch_budget.py with SCIML_ARCH=vulkan; prints "FUSED-DEVICE-OK"):
per-stream output buffers handed out by ``_block`` (a second request copies, any other block first
fills the stacked buffer), the adjoint's per-cotangent buffers, the blocks' cotangents gathered into
one buffer, paired column sums, and the paths that must not use them (second order, a jvp)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sciml as sm  # noqa: E402

sm.init(arch=os.environ.get("SCIML_ARCH", "vulkan"), dtype="float32", seed=0)
from sciml.models import MLP  # noqa: E402
from sciml.pinn import fused, generic  # noqa: E402

rng = np.random.default_rng(1)
for n in (37, 2600):   # 2600 points: the long sums split (partials + their sum)
    X = sm.tensor(rng.uniform(-1, 1, (n, 2)).astype(np.float32))
    ps = list(MLP([2, 16, 16, 16, 1], activation=sm.tanh, seed=3).parameters())
    derivs = [(), (0,), (1,), (0, 0), (0, 1), (1, 1)]

    def loss(path, *p):
        layers = [(p[2 * k], p[2 * k + 1]) for k in range(len(p) // 2)]
        if path == "fused":
            r = fused.mlp_derivatives(layers, sm.tanh, X, derivs)
        else:
            r = generic.mlp_derivatives(layers, sm.tanh, X, derivs)
        u, ux, uy, uxx, uxy, uyy = (r[m] for m in derivs)
        return ((uy + u * ux - 0.1 * uxx) ** 2).mean() + (uxy * uyy).mean() + (u[:5] ** 2).sum()
    args = tuple(range(len(ps)))
    vb, gb = sm.value_and_grad(lambda *p: loss("generic", *p), argnums=args)(*ps)   # the reference, once
    for rep in range(2):   # twice: the second step reuses pooled buffers and compiled kernels
        va, ga = sm.value_and_grad(lambda *p: loss("fused", *p), argnums=args)(*ps)
        assert abs(float(va) - float(vb)) <= 1e-4 * abs(float(vb)) + 1e-6, (n, float(va), float(vb))
        for a, b in zip(ga, gb):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-3, atol=2e-4 * np.abs(b.numpy()).max() + 1e-6)
    if n < 2600:   # second order at the size whose sums split (on lavapipe each costs ~30 s of launches)
        continue
    # second order through the fused primitive (its adjoint's rules, the recorded sweep): a Hessian-vector product
    v = [sm.tensor(rng.standard_normal(p.shape).astype(np.float32)) for p in ps]

    def hvp(path):
        g = lambda *p: sm.grad(lambda *q: loss(path, *q), argnums=args)(*p)  # noqa: E731
        return sm.jvp(g, tuple(ps), tuple(v))[1]
    for a, b in zip(hvp("fused"), hvp("generic")):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=5e-3, atol=5e-3 * np.abs(b.numpy()).max() + 1e-5)

# the stacked output's blocks: the part itself, then a copy of it; another block first fills the stacked buffer
def blocks(*p):
    layers = [(p[2 * k], p[2 * k + 1]) for k in range(len(p) // 2)]
    r = fused.mlp_derivatives(layers, sm.tanh, X, [(), (0,), (1, 1)])
    stacked = r[()]._node.inputs[0]
    S, m, o = stacked.shape
    want = np.concatenate([r[k].numpy().ravel() for k in [(), (0,)]])
    again = fused._block(stacked, off=0, shape=(m, o))
    assert again._buf is not r[()]._buf and np.array_equal(again.numpy(), r[()].numpy())
    odd = fused._block(stacked, off=3, shape=(m,))          # not a stream: the whole buffer is filled first
    assert np.array_equal(odd.numpy().ravel(), want[3:3 + m])
    assert np.array_equal(fused._block(stacked, off=m * o, shape=(m, o)).numpy(), r[(0,)].numpy())
    return (r[()] * r[(1, 1)]).sum() + (again * odd.reshape((m, o))).sum()


def blocks_ref(*p):
    layers = [(p[2 * k], p[2 * k + 1]) for k in range(len(p) // 2)]
    r = generic.mlp_derivatives(layers, sm.tanh, X, [(), (0,), (1, 1)])
    u = r[()]
    m = u.shape[0]
    flat = sm.concat([u.reshape((m,)), r[(0,)].reshape((m,))], 0)
    return (u * r[(1, 1)]).sum() + (u.reshape((m,)) * flat[3:3 + m]).sum()


for a, b in zip(sm.grad(blocks, argnums=tuple(range(len(ps))))(*ps), sm.grad(blocks_ref, argnums=tuple(range(len(ps))))(*ps)):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-3, atol=2e-4 * np.abs(b.numpy()).max() + 1e-6)
print("FUSED-DEVICE-OK", sm.arch())
