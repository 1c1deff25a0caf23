"""Helmholtz Δu + k² u = f on [-1, 1]², u = 0 on the boundary, u = sin(πx) sin(4πy), with a
sin-activated network: the recipe `sciml solve helmholtz` runs (sciml/pinn/problems.py).
Relative L2 error ~8e-4 in float32.

    python examples/helmholtz.py               # ~1-2 minutes on 2 cores
    SCIML_QUICK=1 python examples/helmholtz.py # a few seconds (smoke test)
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Problem, Rectangle, laplacian, solve
from sciml.pinn.reference import helmholtz_sin

k, a1, a2 = 1.0, 1, 4
f_coef = k ** 2 - (a1 ** 2 + a2 ** 2) * np.pi ** 2


def residual(u, x, y):
    return laplacian(u) + k ** 2 * u - f_coef * sm.sin(a1 * np.pi * x) * sm.sin(a2 * np.pi * y)


problem = Problem(Rectangle((-1, -1), (1, 1)), residual, conditions=[Dirichlet(0.0, hard=True)],
                  reference=helmholtz_sin(k, a1, a2), name="helmholtz")
net = MLP([2, 50, 50, 50, 1], activation=sm.sin, seed=0)
adam, lbfgs = (20, 10) if os.environ.get("SCIML_QUICK") else (1500, 2000)
result = solve(problem, net, points={"interior": 4096, "boundary": 400}, dtype="float32",
               stages=[(Adam(lr=1e-3), adam), (LBFGS(history=50, max_iter=50), lbfgs)])
print(f"relative L2 error: {result.rel_l2:.2e} ({result.time:.0f} s)")
result.plot("helmholtz.png")
