"""Poisson -Δu = 2 π² sin(πx) sin(πy) on [0, 1]², u = 0 on the boundary (u = sin(πx) sin(πy)):
the recipe `sciml solve poisson --dtype float64` runs (sciml/pinn/problems.py). Relative L2
error ~3e-6 in float64.

    python examples/poisson.py               # ~1 minute on 2 cores
    SCIML_QUICK=1 python examples/poisson.py # a few seconds (smoke test)
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Problem, Rectangle, laplacian, solve
from sciml.pinn.reference import poisson_sin


def residual(u, x, y):
    return -laplacian(u) - 2 * np.pi ** 2 * sm.sin(np.pi * x) * sm.sin(np.pi * y)


# hard=True: u = x (1 - x) y (1 - y) N(x, y) / (1/16) vanishes on the boundary exactly
problem = Problem(Rectangle((0, 0), (1, 1)), residual, conditions=[Dirichlet(0.0, hard=True)],
                  reference=poisson_sin(1), name="poisson")
net = MLP([2, 32, 32, 32, 1], activation=sm.tanh, seed=0)
adam, lbfgs = (20, 10) if os.environ.get("SCIML_QUICK") else (1000, 2000)
result = solve(problem, net, points={"interior": 2048, "boundary": 256}, dtype="float64",
               stages=[(Adam(lr=1e-3), adam), (LBFGS(history=50, max_iter=50), lbfgs)])
print(f"relative L2 error: {result.rel_l2:.2e} ({result.time:.0f} s)")
result.plot("poisson.png")
