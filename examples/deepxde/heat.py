"""DeepXDE's examples/pinn_forward/heat.py in sciml: u_t = 0.4 u_xx on [0, 1] x [0, 1], u = 0 at
x = 0, 1, u(x, 0) = sin(pi x); u = exp(-0.4 pi^2 t) sin(pi x). Same network (2-20x3-1 tanh,
Glorot normal), points (DeepXDE's: 2540 domain (Hammersley), 80 boundary, 160 initial, the PDE
on all), Adam lr 1e-3 for 20000 iterations, then L-BFGS (DeepXDE's defaults: 15000
iterations, history 100); the error on the example's 256 x 201 test grid, as the twin measures
it.

    python examples/deepxde/heat.py
    SCIML_QUICK=1 python examples/deepxde/heat.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Initial, Interval, Problem, TimeInterval, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 20000))
LBFGS_STEPS = STEPS * 15000 // 20000

X = np.stack(np.meshgrid(np.linspace(0, 1, 256), np.linspace(0, 1, 201)), -1).reshape(-1, 2)
problem = Problem(Interval(0, 1) * TimeInterval(0, 1), lambda u, x, t: d(u, t) - 0.4 * d(u, x, x),
                  conditions=[Dirichlet(0.0), Initial(lambda x: np.sin(np.pi * x))],
                  reference=(X, np.exp(-0.4 * np.pi ** 2 * X[:, 1]) * np.sin(np.pi * X[:, 0])))
problem, points = problem.deepxde_points(num_domain=2540, num_boundary=80, num_initial=160, seed=SEED)
net = MLP([2, 20, 20, 20, 1], activation=sm.tanh, seed=SEED, init="glorot_normal")
result = solve(problem, net, points=points, dtype="float32",
               stages=[(Adam(lr=1e-3), STEPS), (LBFGS(history=100, max_iter=1000, gtol=1e-8), LBFGS_STEPS)])
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
