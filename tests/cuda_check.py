"""The CUDA pass (run by tests/test_cuda.py, one process per phase: ti.init is once per process).

    SCIML_ARCH=cuda python tests/cuda_check.py f32     # the Vulkan checks' content, on CUDA
    SCIML_ARCH=cuda python tests/cuda_check.py f64     # float64 ops + FD gradients, taichi_function
                                                       # gradients, a per-step simulation, a short
                                                       # Burgers solve
    SCIML_ARCH=cpu  python tests/cuda_check.py f32|f64 # the harness dry-run CI runs (no GPU needed)

Phase f32 runs tests/vulkan_check.py's own source with only its arch lines changed (anchors are
asserted, so an edit there that breaks them fails here instead of silently checking less): the
elementwise / reduction / GEMM / softmax / fuse values, first derivatives, the Hessian, ``sciml.jit``
replay and the optimizer kernels, against numpy. Prints "OK <arch> <phase>" and exits 0 on success;
any mismatch, exception or Taichi running on another arch than asked fails.
"""
import os
import sys
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
ARCH = os.environ.get("SCIML_ARCH", "cuda")

ANCHORS = [  # (text in vulkan_check.py, replacement)
    ('sm.init(arch="vulkan", dtype="float32", seed=0)', 'sm.init(arch=ARCH, dtype="float32", seed=0)'),
    ('used != "vulkan" or actual != ti.vulkan', 'used != ARCH or actual != getattr(ti, ARCH)'),
    ("assert not backend.on_host()", 'assert backend.on_host() == (ARCH == "cpu")'),
    ("assert isinstance(x._buf, ti.Ndarray), type(x._buf)",
     'assert isinstance(x._buf, ti.Ndarray) == (ARCH != "cpu"), type(x._buf)'),
]


def phase_f32():
    path = os.path.join(HERE, "vulkan_check.py")
    src = open(path).read()
    for old, new in ANCHORS:
        if old not in src:
            raise AssertionError(f"tests/vulkan_check.py no longer contains {old!r}: update cuda_check.ANCHORS")
        src = src.replace(old, new)
    src = src.replace('if __name__ == "__main__":', 'if False:').replace('print(f"OK vulkan:', 'print(f"OK {ARCH}:')
    env = {"__name__": "vulkan_check_on_" + ARCH, "__file__": path, "ARCH": ARCH}
    exec(compile(src, path, "exec"), env)  # noqa: S102 - the project's own check, arch lines swapped
    return env["main"]() == 0


def phase_f64():
    import taichi as ti

    import sciml as sm
    from sciml.testing import check_grads
    used = sm.init(arch=ARCH, dtype="float64", seed=0)
    actual = ti.lang.impl.current_cfg().arch
    assert used == ARCH and actual == getattr(ti, ARCH), f"asked for {ARCH}, Taichi runs on {actual}"
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7))
    x = sm.tensor(a)
    assert x.dtype == "float64"

    # float64 values and derivatives (first and second order against finite differences)
    np.testing.assert_allclose((sm.tanh(x) * x).sum(-1).numpy(), (np.tanh(a) * a).sum(-1), rtol=1e-12)
    np.testing.assert_allclose((x @ x.T).numpy(), a @ a.T, rtol=1e-12)
    np.testing.assert_allclose(sm.softmax(x, -1).numpy(), np.exp(a) / np.exp(a).sum(-1, keepdims=True), rtol=1e-12)
    W = sm.tensor(rng.standard_normal((7, 3)))
    check_grads(lambda u, w: sm.sin(u @ w) * u.sum(), (x, W), order=2)
    check_grads(lambda u: sm.logsumexp(sm.exp(-u * u), -1), (x,), order=2)

    # taichi_function: a user kernel with Taichi-autodiff gradients, against finite differences
    from sciml.autodiff.taichi_bridge import taichi_function

    @ti.kernel
    def mix(x: ti.types.ndarray(ndim=2), w: ti.types.ndarray(ndim=1), y: ti.types.ndarray(ndim=1)):
        for i in range(x.shape[0]):
            s = 0.0
            for j in ti.static(range(3)):
                s += x[i, j] * w[j]
            y[i] = ti.sin(s) * x[i, 0]
    f = taichi_function(mix, inputs={"x": (4, 3), "w": (3,)}, outputs={"y": (4,)})
    xs, ws = sm.tensor(rng.standard_normal((4, 3))), sm.tensor(rng.standard_normal(3))
    s = xs.numpy() @ ws.numpy()
    np.testing.assert_allclose(f(xs, ws).numpy(), np.sin(s) * xs.numpy()[:, 0], rtol=1e-12)
    check_grads(lambda u, v: f(u, v), (xs, ws), order=1, modes=("rev",))

    # a per-step simulation (several kernels, differentiated scratch) against its tape reference
    from sciml.physics import Simulation
    from tests.physics import _mpm1d as M
    xp, vp, params, ctrl, wx, wv, ref = M.reference_case()
    sim = Simulation(state_shape=(2 * M.N,), steps=len(ctrl), params_shape=(2,), control_shape=(1,),
                     step=[M.p2g, M.grid_op, M.g2p], scratch={"gm": (M.G,), "gmv": (M.G,), "gv": (M.G,)},
                     name="mpm1d", mode="per_step")
    g = lambda u, q, c: (sim(u, q, c) * sm.tensor(np.r_[wx, wv])).sum()  # noqa: E731
    loss, (gx, gq, gc) = sm.value_and_grad(g, argnums=(0, 1, 2))(sm.tensor(np.r_[xp, vp]), sm.tensor(params),
                                                                  sm.tensor(ctrl))
    np.testing.assert_allclose(float(loss), ref[0], rtol=1e-10)
    np.testing.assert_allclose(gx.numpy(), np.r_[ref[1], ref[2]], rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(gq.numpy(), ref[3], rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(gc.numpy()[:, 0], ref[4], rtol=1e-8, atol=1e-11)

    # a short Burgers solve: Adam then L-BFGS; the loss must fall and stay finite
    from sciml.models import MLP
    from sciml.optim import LBFGS, Adam
    from sciml.pinn import Dirichlet, Initial, Interval, Problem, TimeInterval, d, solve
    nu = 0.01 / np.pi
    problem = Problem(Interval(-1, 1) * TimeInterval(0, 1),
                      lambda u, x, t: d(u, t) + u * d(u, x) - nu * d(u, x, x),
                      conditions=[Dirichlet(0.0, on="boundary"), Initial(lambda x: -np.sin(np.pi * x))])
    net = MLP([2, 16, 16, 1], activation=sm.tanh, seed=0)
    res = solve(problem, net, points=200, stages=[(Adam(lr=3e-3), 30), (LBFGS(history=5), 10)],
                verbose=False, progress=False)
    hist = res.history["loss"]
    assert len(hist) >= 2 and np.all(np.isfinite(hist)), hist
    assert hist[-1] < 0.75 * hist[0], (hist[0], hist[-1])  # 40 steps: 0.49 -> 0.25 on CPU
    u = res.predict(np.array([[0.0, 0.0], [0.5, 0.0]]))
    u = u.numpy() if hasattr(u, "numpy") else np.asarray(u)
    assert np.all(np.isfinite(u)), u
    return True


if __name__ == "__main__":
    phase = sys.argv[1] if len(sys.argv) > 1 else "f32"
    try:
        ok = {"f32": phase_f32, "f64": phase_f64}[phase]()
    except Exception:
        traceback.print_exc()
        print(f"FAIL: exception on {ARCH} {phase}")
        sys.exit(1)
    if not ok:
        print(f"FAIL on {ARCH} {phase}")
        sys.exit(1)
    print(f"OK {ARCH} {phase}")
