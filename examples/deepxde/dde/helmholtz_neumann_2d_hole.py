"""DeepXDE's examples/pinn_forward/Helmholtz_Neumann_2d_hole.py (PyTorch backend), as published
without its plotting; iterations from SCIML_STEPS (default the example's 5000)."""
import os
import time

import deepxde as dde
import numpy as np
import torch

ITER = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 5000))
if "SCIML_SEED" in os.environ:   # the benchmark's --seeds: weights (and random points) seeded
    dde.config.set_random_seed(int(os.environ["SCIML_SEED"]))
n, length, R = 1, 1, 1 / 4
precision_train, precision_test = 15, 30
weight_inner, weight_outer = 10, 100
k0 = 2 * np.pi * n
wave_len = 1 / n


def pde(x, y):
    dy_xx = dde.grad.hessian(y, x, i=0, j=0)
    dy_yy = dde.grad.hessian(y, x, i=1, j=1)
    f = k0 ** 2 * torch.sin(k0 * x[:, 0:1]) * torch.sin(k0 * x[:, 1:2])
    return -dy_xx - dy_yy - k0 ** 2 * y - f


def func(x):
    return np.sin(k0 * x[:, 0:1]) * np.sin(k0 * x[:, 1:2])


def neumann(x):
    grad = np.array([k0 * np.cos(k0 * x[:, 0:1]) * np.sin(k0 * x[:, 1:2]),
                     k0 * np.sin(k0 * x[:, 0:1]) * np.cos(k0 * x[:, 1:2])])
    normal = -inner.boundary_normal(x)
    normal = np.array([normal]).T
    return np.sum(grad * normal, axis=0)


outer = dde.geometry.Rectangle([-length / 2, -length / 2], [length / 2, length / 2])
inner = dde.geometry.Disk([0, 0], R)


def boundary_outer(x, on_boundary):
    return on_boundary and outer.on_boundary(x)


def boundary_inner(x, on_boundary):
    return on_boundary and inner.on_boundary(x)


geom = outer - inner
nx_train = int(1 / (wave_len / precision_train))
nx_test = int(1 / (wave_len / precision_test))
bc_inner = dde.icbc.NeumannBC(geom, neumann, boundary_inner)
bc_outer = dde.icbc.DirichletBC(geom, func, boundary_outer)
data = dde.data.PDE(geom, pde, [bc_inner, bc_outer], num_domain=nx_train ** 2,
                    num_boundary=16 * nx_train, solution=func, num_test=nx_test ** 2)
net = dde.nn.FNN([2] + [350] * 3 + [1], "sin", "Glorot uniform")
model = dde.Model(data, net)
model.compile("adam", lr=1e-3, metrics=["l2 relative error"], loss_weights=[1, weight_inner, weight_outer])
t0 = time.perf_counter()
model.train(iterations=ITER, display_every=max(1, ITER // 10))
wall = time.perf_counter() - t0
x = geom.random_points(4096)
err = np.linalg.norm(model.predict(x) - func(x)) / np.linalg.norm(func(x))
print(f"RESULT rel_l2={err:.6g} time={wall:.3f}")
