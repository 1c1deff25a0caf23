"""DeepXDE's examples/pinn_forward/Poisson_Robin_1d.py in sciml: u'' = 2 on [-1, 1],
u(-1) = 0, du/dn = u at x = 1 (u = (x + 1)^2). Same network (1-50x3-1 tanh, Glorot), points
(DeepXDE's: 16 domain (Hammersley) + 2 boundary, the PDE on all), Adam lr 1e-3, 10000 iterations.

    python examples/deepxde/poisson_robin_1d.py
    SCIML_QUICK=1 python examples/deepxde/poisson_robin_1d.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Dirichlet, Interval, Problem, Robin, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 10000))


def pde(u, x):
    return d(u, x, x) - 2


problem = Problem(Interval(-1, 1), pde, reference=lambda p: (p[:, 0] + 1) ** 2,
                  conditions=[Dirichlet(lambda x: (x + 1) ** 2, on="left"),
                              Robin(-1.0, 1.0, 0.0, on="right")])   # -u + du/dn = 0
problem, points = problem.deepxde_points(num_domain=16, num_boundary=2)
net = MLP([1, 50, 50, 50, 1], activation=sm.tanh, seed=SEED)
result = solve(problem, net, points=points, stages=[(Adam(lr=1e-3), STEPS)], dtype="float32")
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
