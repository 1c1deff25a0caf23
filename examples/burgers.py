"""Burgers' equation u_t + u u_x = nu u_xx (nu = 0.01/pi): the README's PINN, the recipe
`sciml solve burgers` runs (sciml/pinn/problems.py). Relative L2 error in float32: 6.7e-4
and 8.0e-4 on earlier machines, 2.4e-3 (348 s) on 2026-11-25's: the float32 trajectory over
10000 L-BFGS steps depends on rounding (see docs/pinn.md).

    python examples/burgers.py               # 2-6 minutes on 2 cores
    SCIML_QUICK=1 python examples/burgers.py # a few seconds (smoke test)
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam, LBFGS
from sciml.pinn import Interval, TimeInterval, Dirichlet, Initial, Problem, solve, d
from sciml.pinn.reference import burgers_cole_hopf

nu = 0.01 / np.pi
domain = Interval(-1, 1) * TimeInterval(0, 1)

def residual(u, x, t):
    return d(u, t) + u * d(u, x) - nu * d(u, x, x)

# hard=True builds both conditions into the output: u = -sin(pi x) + t (1 - x^2) N(x, t)
problem = Problem(domain, residual, reference=burgers_cole_hopf(nu),
                  conditions=[Dirichlet(0.0, hard=True), Initial(lambda x: -np.sin(np.pi * x), hard=True)])
net = MLP([2, 32, 32, 32, 32, 1], activation=sm.tanh, seed=0)
adam, lbfgs = (20, 10) if os.environ.get("SCIML_QUICK") else (1000, 10000)
result = solve(problem, net, points=4096, dtype="float32",   # points redrawn into the shock (RAD)
               stages=[(Adam(lr=1e-3), adam), (LBFGS(history=50, max_iter=50), lbfgs)],
               resample={"method": "rad", "every": 500, "until": adam + lbfgs - 3000})
print(f"relative L2 error: {result.rel_l2:.2e} ({result.time:.0f} s)")
result.plot("burgers.png")
