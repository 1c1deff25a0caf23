"""DeepXDE's examples/pinn_forward/Poisson_periodic_1d.py in sciml: -u'' = pi^2 sin(pi x) on
[-1, 1], u(-1) = sin(-pi) = 0, u periodic (u(-1) = u(1)); u = sin(pi x). Same network
(1-50x3-1 tanh, Glorot), points (DeepXDE's: 16 domain (Hammersley) + 2 boundary, the PDE on all 18),
Adam lr 1e-3, 10000 iterations.

    python examples/deepxde/poisson_periodic_1d.py
    SCIML_QUICK=1 python examples/deepxde/poisson_periodic_1d.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Dirichlet, Interval, Periodic, Problem, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 10000))


def pde(u, x):
    return -d(u, x, x) - np.pi ** 2 * sm.sin(np.pi * x)


problem = Problem(Interval(-1, 1), pde, reference=lambda p: np.sin(np.pi * p[:, 0]),
                  conditions=[Dirichlet(lambda x: np.sin(np.pi * x), on="left"), Periodic("x")])
problem, points = problem.deepxde_points(num_domain=16, num_boundary=2)   # PDE on all 18
net = MLP([1, 50, 50, 50, 1], activation=sm.tanh, seed=SEED)
result = solve(problem, net, points=points, stages=[(Adam(lr=1e-3), STEPS)], dtype="float32")
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.0f} s)")
