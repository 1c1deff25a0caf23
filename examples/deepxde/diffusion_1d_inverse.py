"""DeepXDE's examples/pinn_inverse/diffusion_1d_inverse.py in sciml: recover C in
u_t = C u_xx - e^{-t} (sin(pi x) - pi^2 sin(pi x)) on [-1, 1] x [0, 1] from 10 observations
at t = 1 (true C = 1, initial guess 2). Same network (2-32x3-1 tanh, Glorot), points
(DeepXDE's: 40 domain, 20 boundary, 10 initial, the observations as anchors, the PDE on all), Adam lr 1e-3.

    python examples/deepxde/diffusion_1d_inverse.py      # DeepXDE's 50000 iterations
    SCIML_QUICK=1 python examples/deepxde/diffusion_1d_inverse.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import (Dirichlet, Initial, Interval, Parameter, PointData, Problem,
                        TimeInterval, d, solve)

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 50000))


def func(x, t):
    return np.sin(np.pi * x) * np.exp(-t)


def pde(u, x, t, C):
    return d(u, t) - C * d(u, x, x) + sm.exp(-t) * (sm.sin(np.pi * x) - np.pi ** 2 * sm.sin(np.pi * x))


observe_x = np.stack([np.linspace(-1, 1, 10), np.ones(10)], axis=1)
problem = Problem(Interval(-1, 1) * TimeInterval(0, 1), pde, parameters={"C": Parameter(2.0)},
                  conditions=[Dirichlet(func), Initial(lambda x: np.sin(np.pi * x)),
                              PointData(observe_x, func(*observe_x.T))],
                  reference=lambda p: func(p[:, 0], p[:, 1]))
net = MLP([2, 32, 32, 32, 1], activation=sm.tanh, seed=SEED)
problem, points = problem.deepxde_points(40, 20, 10, anchors=observe_x, seed=SEED)   # PDE on all
result = solve(problem, net, points=points, stages=[(Adam(lr=1e-3), STEPS)], dtype="float32")
print(f"C = {result.parameters['C']:.4f} (true 1); relative L2 error {result.rel_l2:.2e} "
      f"({result.time:.0f} s)")
