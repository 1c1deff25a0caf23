"""DeepXDE's examples/pinn_forward/Kovasznay_flow.py in sciml: the steady incompressible
Navier-Stokes equations (Re = 20) for (u, v, p) on [-0.5, 1] x [-0.5, 1.5], Kovasznay's exact
flow on the boundary (u, v) and at the outflow x = 1 (p). Same network (2-50x4-3 tanh, Glorot
normal), points (DeepXDE's: 2601 domain + 400 boundary Hammersley points, the PDE on all 3001,
u and v on the 400 boundary points, p on those of them at x = 1), Adam lr 1e-3 for 30000 iterations, then L-BFGS (DeepXDE's
defaults: 15000 iterations, history 100). The error: relative L2 of (u, v, p) together on a
101 x 101 grid, as the twin measures it.

    python examples/deepxde/kovasznay_flow.py
    SCIML_QUICK=1 python examples/deepxde/kovasznay_flow.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Problem, Rectangle, d, laplacian, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 30000))
LBFGS_STEPS = STEPS * 15000 // 30000
Re = 20
lam = Re / 2 - np.sqrt(Re ** 2 / 4 + 4 * np.pi ** 2)


def navier_stokes(u, v, p, x, y):
    return [u * d(u, x) + v * d(u, y) + d(p, x) - laplacian(u) / Re,
            u * d(v, x) + v * d(v, y) + d(p, y) - laplacian(v) / Re, d(u, x) + d(v, y)]


def exact(x, y):
    return np.stack([1 - np.exp(lam * x) * np.cos(2 * np.pi * y),
                     lam / (2 * np.pi) * np.exp(lam * x) * np.sin(2 * np.pi * y),
                     (1 - np.exp(2 * lam * x)) / 2], axis=-1)


X = np.stack(np.meshgrid(np.linspace(-0.5, 1, 101), np.linspace(-0.5, 1.5, 101)), -1).reshape(-1, 2)
problem = Problem(Rectangle((-0.5, -0.5), (1, 1.5)), navier_stokes, outputs=("u", "v", "p"),
                  reference=(X, exact(*X.T)),
                  conditions=[Dirichlet(lambda x, y: exact(x, y)[:, 0], component=0),
                              Dirichlet(lambda x, y: exact(x, y)[:, 1], component=1),
                              Dirichlet(lambda x, y: exact(x, y)[:, 2], on="right", component=2)])
problem, points = problem.deepxde_points(num_domain=2601, num_boundary=400)
net = MLP([2, 50, 50, 50, 50, 3], activation=sm.tanh, seed=SEED, init="glorot_normal")
result = solve(problem, net, points=points, dtype="float32",
               stages=[(Adam(lr=1e-3), STEPS), (LBFGS(history=100, max_iter=1000, gtol=1e-8), LBFGS_STEPS)])
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
