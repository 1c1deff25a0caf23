"""Heat equation u_t = α u_xx on [0, 1] x [0, 1], u(x, 0) = sin(πx), u = 0 at x = 0, 1:
the recipe `sciml solve heat` runs (sciml/pinn/problems.py). Relative L2 error 2e-5 to 3e-5
in float32 (1.9e-5 and 3.2e-5 measured on two machines).

    python examples/heat.py               # well under a minute on 2 cores
    SCIML_QUICK=1 python examples/heat.py # a few seconds (smoke test)
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Initial, Interval, Problem, TimeInterval, d, solve
from sciml.pinn.reference import heat_sin

alpha = 0.1


def residual(u, x, t):
    return d(u, t) - alpha * d(u, x, x)


# both conditions built into the output: u = sin(pi x) + t x (1 - x) N(x, t) / (1/4)
problem = Problem(Interval(0, 1) * TimeInterval(0, 1), residual, name="heat",
                  conditions=[Dirichlet(0.0, hard=True),
                              Initial(lambda x: np.sin(np.pi * x), hard=True)],
                  reference=heat_sin(alpha))
net = MLP([2, 32, 32, 32, 1], activation=sm.tanh, seed=0)
adam, lbfgs = (20, 10) if os.environ.get("SCIML_QUICK") else (1000, 1000)
result = solve(problem, net, points={"interior": 2048, "boundary": 128, "initial": 128},
               dtype="float32",
               stages=[(Adam(lr=1e-3), adam), (LBFGS(history=50, max_iter=50), lbfgs)])
print(f"relative L2 error: {result.rel_l2:.2e} ({result.time:.0f} s)")
result.plot("heat.png")
