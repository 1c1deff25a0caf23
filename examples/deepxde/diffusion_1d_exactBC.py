"""DeepXDE's examples/pinn_forward/diffusion_1d_exactBC.py in sciml: u_t = u_xx - e^{-t}
(sin(pi x) - pi^2 sin(pi x)) on [-1, 1] x [0, 1], initial and boundary values built into the
output by an output transform. Same network (2-32x3-1
tanh, Glorot), DeepXDE's 40 domain points (Hammersley), Adam lr 1e-3, 10000 iterations.

    python examples/deepxde/diffusion_1d_exactBC.py
    SCIML_QUICK=1 python examples/deepxde/diffusion_1d_exactBC.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Interval, Problem, TimeInterval, Transformed, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 10000))


def pde(u, x, t):
    return d(u, t) - d(u, x, x) + sm.exp(-t) * (sm.sin(np.pi * x) - np.pi ** 2 * sm.sin(np.pi * x))


problem = Problem(Interval(-1, 1) * TimeInterval(0, 1), pde,
                  reference=lambda p: np.sin(np.pi * p[:, 0]) * np.exp(-p[:, 1]))
points = problem.deepxde_points(num_domain=40)[1]   # DeepXDE's 40 Hammersley points
net = Transformed(MLP([2, 32, 32, 32, 1], activation=sm.tanh, seed=SEED),
                  output=lambda x, y: x[:, 1:2] * (1 - x[:, 0:1] ** 2) * y + sm.sin(np.pi * x[:, 0:1]))
result = solve(problem, net, points=points, stages=[(Adam(lr=1e-3), STEPS)], dtype="float32")
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
