"""Poisson -Δu = 2 π² sin(πx) sin(πy) on [0, 1]², u = 0 on the boundary (u = sin(πx) sin(πy)).

    python examples/poisson.py [--quick]
"""
import sys

import numpy as np

import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Problem, Rectangle, laplacian, solve
from sciml.pinn.reference import poisson_sin

quick = "--quick" in sys.argv
sm.init(dtype="float64")


def residual(u, x, y):
    return -laplacian(u) - 2 * np.pi ** 2 * sm.sin(np.pi * x) * sm.sin(np.pi * y)


problem = Problem(Rectangle((0, 0), (1, 1)), residual, conditions=[Dirichlet(0.0)],
                  reference=poisson_sin(1))
net = MLP([2, 32, 32, 32, 1], activation=sm.tanh, seed=0)
steps = (20, 10) if quick else (1000, 2000)
result = solve(problem, net, points={"interior": 2048, "boundary": 256},
               stages=[(Adam(lr=1e-3), steps[0]), (LBFGS(history=50, max_iter=50), steps[1])])
print(f"relative L2 error: {result.rel_l2:.2e}  ({result.time:.0f} s)")
result.plot("poisson.png")
