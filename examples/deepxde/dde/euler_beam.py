"""DeepXDE's examples/pinn_forward/Euler_beam.py (PyTorch backend), as published without its
plotting; iterations from SCIML_STEPS (default the example's 10000); the error on 1001
equispaced points."""
import os
import time

import deepxde as dde
import numpy as np

ITER = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 10000))
if "SCIML_SEED" in os.environ:   # the benchmark's --seeds: weights (and random points) seeded
    dde.config.set_random_seed(int(os.environ["SCIML_SEED"]))


def ddy(x, y):
    return dde.grad.hessian(y, x)


def dddy(x, y):
    return dde.grad.jacobian(ddy(x, y), x)


def pde(x, y):
    dy_xx = ddy(x, y)
    dy_xxxx = dde.grad.hessian(dy_xx, x)
    return dy_xxxx + 1


def boundary_l(x, on_boundary):
    return on_boundary and dde.utils.isclose(x[0], 0)


def boundary_r(x, on_boundary):
    return on_boundary and dde.utils.isclose(x[0], 1)


def func(x):
    return -(x ** 4) / 24 + x ** 3 / 6 - x ** 2 / 4


geom = dde.geometry.Interval(0, 1)
bc1 = dde.icbc.DirichletBC(geom, lambda x: 0, boundary_l)
bc2 = dde.icbc.NeumannBC(geom, lambda x: 0, boundary_l)
bc3 = dde.icbc.OperatorBC(geom, lambda x, y, _: ddy(x, y), boundary_r)
bc4 = dde.icbc.OperatorBC(geom, lambda x, y, _: dddy(x, y), boundary_r)
data = dde.data.PDE(geom, pde, [bc1, bc2, bc3, bc4], num_domain=10, num_boundary=2,
                    solution=func, num_test=100)
net = dde.nn.FNN([1] + [20] * 3 + [1], "tanh", "Glorot uniform")
model = dde.Model(data, net)
model.compile("adam", lr=0.001, metrics=["l2 relative error"])
t0 = time.perf_counter()
model.train(iterations=ITER, display_every=max(1, ITER // 10))
wall = time.perf_counter() - t0
x = np.linspace(0, 1, 1001)[:, None]
err = np.linalg.norm(model.predict(x) - func(x)) / np.linalg.norm(func(x))
print(f"RESULT rel_l2={err:.6g} time={wall:.3f}")
