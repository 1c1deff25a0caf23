"""DeepXDE's examples/pinn_forward/Allen_Cahn.py in sciml: u_t = 0.001 u_xx + 5 (u - u^3) on
[-1, 1] x [0, 1], with the initial and boundary values built into the output (DeepXDE's
``apply_output_transform``: u = x^2 cos(pi x) + t (1 - x^2) N(x, t)), measured against DeepXDE's
reference solution (examples/deepxde/data/Allen_Cahn.mat, a 201 x 101 grid). Same network (2-20x3-1
tanh, Glorot normal), points (DeepXDE's: 8000 domain, 400 boundary, 800 initial Hammersley points,
the PDE on all), Adam lr 1e-3 for 40000 iterations, then L-BFGS (DeepXDE's defaults: 15000
iterations, history 100).

    python examples/deepxde/allen_cahn.py
    SCIML_QUICK=1 python examples/deepxde/allen_cahn.py
"""
import os

import numpy as np
import sciml as sm
from scipy.io import loadmat
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Interval, Problem, TimeInterval, Transformed, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 40000))
LBFGS_STEPS = STEPS * 15000 // 40000

data = loadmat(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "Allen_Cahn.mat"))
xx, tt = np.meshgrid(data["x"], data["t"])
X = np.stack([xx.ravel(), tt.ravel()], axis=1)


def pde(u, x, t):
    return d(u, t) - 0.001 * d(u, x, x) - 5 * (u - u ** 3)


def output_transform(x, y):
    return x[:, 0:1] ** 2 * sm.cos(np.pi * x[:, 0:1]) + x[:, 1:2] * (1 - x[:, 0:1] ** 2) * y


problem = Problem(Interval(-1, 1) * TimeInterval(0, 1), pde, reference=(X, data["u"].ravel()))
problem, points = problem.deepxde_points(8000, 400, 800)
net = Transformed(MLP([2, 20, 20, 20, 1], activation=sm.tanh, seed=SEED, init="glorot_normal"),
                  output=output_transform)
result = solve(problem, net, points=points, dtype="float32",
               stages=[(Adam(lr=1e-3), STEPS), (LBFGS(history=100, max_iter=1000, gtol=1e-8), LBFGS_STEPS)])
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
