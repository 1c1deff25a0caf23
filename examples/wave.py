"""Wave equation u_tt = c² u_xx on [0, 1] x [0, 1]: a standing wave, u(x, 0) = sin(πx) and
u = 0 at x = 0, 1 built into the output, the initial velocity u_t(x, 0) = 0 as a penalty:
the recipe `sciml solve wave` runs (sciml/pinn/problems.py). Relative L2 error ~5e-5 in
float32.

    python examples/wave.py               # well under a minute on 2 cores
    SCIML_QUICK=1 python examples/wave.py # a few seconds (smoke test)
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Initial, Interval, Problem, TimeInterval, d, solve
from sciml.pinn.reference import wave_sin

c = 1.0


def residual(u, x, t):
    return d(u, t, t) - c ** 2 * d(u, x, x)


problem = Problem(Interval(0, 1) * TimeInterval(0, 1), residual, name="wave",
                  conditions=[Dirichlet(0.0, hard=True),
                              Initial(lambda x: np.sin(np.pi * x), hard=True),
                              Initial(0.0, derivative=1)],
                  reference=wave_sin(c))
net = MLP([2, 32, 32, 32, 1], activation=sm.tanh, seed=0)
adam, lbfgs = (20, 10) if os.environ.get("SCIML_QUICK") else (1000, 1500)
result = solve(problem, net, points={"interior": 2048, "boundary": 128, "initial": 128},
               dtype="float32",
               stages=[(Adam(lr=1e-3), adam), (LBFGS(history=50, max_iter=50), lbfgs)])
print(f"relative L2 error: {result.rel_l2:.2e} ({result.time:.0f} s)")
result.plot("wave.png")
