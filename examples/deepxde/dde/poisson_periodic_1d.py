"""DeepXDE's examples/pinn_forward/Poisson_periodic_1d.py (PyTorch backend), as published;
iterations from SCIML_STEPS (default the example's 10000). Run by benchmarks/bench_deepxde.py."""
import os
import time

import deepxde as dde
import numpy as np
import torch

ITER = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 10000))
if "SCIML_SEED" in os.environ:   # the benchmark's --seeds: weights (and random points) seeded
    dde.config.set_random_seed(int(os.environ["SCIML_SEED"]))


def pde(x, y):
    dy_xx = dde.grad.hessian(y, x)
    return -dy_xx - np.pi ** 2 * torch.sin(np.pi * x)


def boundary_l(x, on_boundary):
    return on_boundary and dde.utils.isclose(x[0], -1)


def boundary_r(x, on_boundary):
    return on_boundary and dde.utils.isclose(x[0], 1)


def func(x):
    return np.sin(np.pi * x)


geom = dde.geometry.Interval(-1, 1)
bc1 = dde.icbc.DirichletBC(geom, func, boundary_l)
bc2 = dde.icbc.PeriodicBC(geom, 0, boundary_r)
data = dde.data.PDE(geom, pde, [bc1, bc2], 16, 2, solution=func, num_test=100)
net = dde.nn.FNN([1] + [50] * 3 + [1], "tanh", "Glorot uniform")
model = dde.Model(data, net)
model.compile("adam", lr=0.001, metrics=["l2 relative error"])
t0 = time.perf_counter()
losshistory, train_state = model.train(iterations=ITER, display_every=max(1, ITER // 10))
wall = time.perf_counter() - t0
x = np.linspace(-1, 1, 1001)[:, None]
err = np.linalg.norm(model.predict(x) - func(x)) / np.linalg.norm(func(x))
print(f"RESULT rel_l2={err:.6g} time={wall:.3f}")
