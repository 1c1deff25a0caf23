"""Helmholtz Δu + k² u = f on [-1, 1]², u = 0 on the boundary, u = sin(πx) sin(4πy);
a sin-activated network and gradient-norm-balanced loss weights.

    python examples/helmholtz.py [--quick]
"""
import sys

import numpy as np

import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, GradNorm, Problem, Rectangle, laplacian, solve
from sciml.pinn.reference import helmholtz_sin

quick = "--quick" in sys.argv
k, a1, a2 = 1.0, 1, 4
f_coef = k ** 2 - (a1 ** 2 + a2 ** 2) * np.pi ** 2


def residual(u, x, y):
    return laplacian(u) + k ** 2 * u - f_coef * sm.sin(a1 * np.pi * x) * sm.sin(a2 * np.pi * y)


problem = Problem(Rectangle((-1, -1), (1, 1)), residual, conditions=[Dirichlet(0.0)],
                  reference=helmholtz_sin(k, a1, a2))
net = MLP([2, 50, 50, 50, 1], activation=sm.sin, seed=0)
steps = (20, 10) if quick else (1500, 2000)
result = solve(problem, net, points={"interior": 4096, "boundary": 400},
               weights=GradNorm(every=100),
               stages=[(Adam(lr=1e-3), steps[0]), (LBFGS(history=50, max_iter=50), steps[1])])
print(f"relative L2 error: {result.rel_l2:.2e}  ({result.time:.0f} s)")
result.plot("helmholtz.png")
