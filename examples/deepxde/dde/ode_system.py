"""DeepXDE's examples/pinn_forward/ode_system.py (PyTorch backend), as published;
iterations from SCIML_STEPS (default the example's 20000)."""
import os
import time

import deepxde as dde
import numpy as np

ITER = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 20000))
if "SCIML_SEED" in os.environ:   # the benchmark's --seeds: weights (and random points) seeded
    dde.config.set_random_seed(int(os.environ["SCIML_SEED"]))


def ode_system(x, y):
    y1, y2 = y[:, 0:1], y[:, 1:]
    dy1_x = dde.grad.jacobian(y, x, i=0)
    dy2_x = dde.grad.jacobian(y, x, i=1)
    return [dy1_x - y2, dy2_x + y1]


def boundary(_, on_initial):
    return on_initial


def func(x):
    return np.hstack((np.sin(x), np.cos(x)))


geom = dde.geometry.TimeDomain(0, 10)
ic1 = dde.icbc.IC(geom, lambda x: 0, boundary, component=0)
ic2 = dde.icbc.IC(geom, lambda x: 1, boundary, component=1)
data = dde.data.PDE(geom, ode_system, [ic1, ic2], 35, 2, solution=func, num_test=100)
net = dde.nn.FNN([1] + [50] * 3 + [2], "tanh", "Glorot uniform")
model = dde.Model(data, net)
model.compile("adam", lr=0.001, metrics=["l2 relative error"])
t0 = time.perf_counter()
model.train(iterations=ITER, display_every=max(1, ITER // 10))
wall = time.perf_counter() - t0
x = np.linspace(0, 10, 1001)[:, None]
err = np.linalg.norm(model.predict(x) - func(x)) / np.linalg.norm(func(x))
print(f"RESULT rel_l2={err:.6g} time={wall:.3f}")
