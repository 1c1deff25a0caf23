"""Burgers' equation u_t + u u_x = nu u_xx (nu = 0.01/pi), the classic PINN benchmark.

    python examples/burgers.py            # a few minutes on 2 cores
    python examples/burgers.py --quick    # a few seconds, for a smoke test
"""
import sys

import numpy as np

import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Initial, Interval, Problem, TimeInterval, d, solve
from sciml.pinn.reference import burgers_cole_hopf

quick = "--quick" in sys.argv
sm.init(dtype="float32")
nu = 0.01 / np.pi
domain = Interval(-1, 1) * TimeInterval(0, 1)


def residual(u, x, t):
    return d(u, t) + u * d(u, x) - nu * d(u, x, x)


# hard=True builds both conditions into the output: u = -sin(pi x) + t (1 - x^2) N(x, t)
problem = Problem(domain, residual,
                  conditions=[Dirichlet(0.0, on="boundary", hard=True),
                              Initial(lambda x: -np.sin(np.pi * x), hard=True)],
                  reference=burgers_cole_hopf(nu))
net = MLP([2, 32, 32, 32, 32, 1], activation=sm.tanh, seed=0)
steps = (20, 10) if quick else (1000, 10000)
result = solve(problem, net, points=4096,       # interior points, redrawn into the shock (RAD)
               stages=[(Adam(lr=1e-3), steps[0]), (LBFGS(history=50, max_iter=50), steps[1])],
               resample={"method": "rad", "every": 500, "until": sum(steps) - 3000})
print(f"relative L2 error: {result.rel_l2:.2e}  ({result.time:.0f} s)")
result.plot("burgers.png")
