"""DeepXDE's examples/pinn_inverse/brinkman_forchheimer.py (PyTorch backend), as published
without its plots; iterations from SCIML_STEPS (default the example's 30000); the error on 1001
equispaced points."""
import os
import time

import deepxde as dde
import numpy as np

ITER = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 30000))
if "SCIML_SEED" in os.environ:   # the benchmark's --seeds: weights (and random points) seeded
    dde.config.set_random_seed(int(os.environ["SCIML_SEED"]))
g = 1
v = 1e-3
e = 0.4
H = 1
v_e = dde.Variable(0.1)
K = dde.Variable(0.1)


def sol(x):
    r = (v * e / (1e-3 * 1e-3)) ** (0.5)
    return g * 1e-3 / v * (1 - np.cosh(r * (x - H / 2)) / np.cosh(r * H / 2))


def gen_traindata(num):
    xvals = np.linspace(1 / (num + 1), 1, num, endpoint=False)
    yvals = sol(xvals)
    return np.reshape(xvals, (-1, 1)), np.reshape(yvals, (-1, 1))


def pde(x, y):
    du_xx = dde.grad.hessian(y, x)
    return -v_e / e * du_xx + v * y / K - g


def output_transform(x, y):
    return x * (1 - x) * y


geom = dde.geometry.Interval(0, 1)
ob_x, ob_u = gen_traindata(5)
observe_u = dde.icbc.PointSetBC(ob_x, ob_u, component=0)
data = dde.data.PDE(geom, pde, solution=sol, bcs=[observe_u], num_domain=100, num_boundary=0,
                    train_distribution="uniform", num_test=500)
net = dde.nn.FNN([1] + [20] * 3 + [1], "tanh", "Glorot uniform")
net.apply_output_transform(output_transform)
model = dde.Model(data, net)
model.compile("adam", lr=0.001, metrics=["l2 relative error"], external_trainable_variables=[v_e, K])
t0 = time.perf_counter()
model.train(iterations=ITER, display_every=max(1, ITER // 10))
wall = time.perf_counter() - t0
x = np.linspace(0, 1, 1001)[:, None]
err = np.linalg.norm(model.predict(x) - sol(x)) / np.linalg.norm(sol(x))
print(f"RESULT v_e={float(v_e.detach()):.6g} K={float(K.detach()):.6g} rel_l2={err:.6g} time={wall:.3f}")
