"""Wave equation u_tt = c² u_xx on [0, 1] x [0, 1]: a standing wave, with the initial value
and the initial velocity u_t(x, 0) = 0 as two conditions.

    python examples/wave.py [--quick]
"""
import sys

import numpy as np

import sciml as sm
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Dirichlet, Initial, Interval, Problem, TimeInterval, d, solve
from sciml.pinn.reference import wave_sin

quick = "--quick" in sys.argv
c = 1.0


def residual(u, x, t):
    return d(u, t, t) - c ** 2 * d(u, x, x)


problem = Problem(Interval(0, 1) * TimeInterval(0, 1), residual,
                  conditions=[Dirichlet(0.0), Initial(lambda x: np.sin(np.pi * x)),
                              Initial(0.0, derivative=1)],
                  reference=wave_sin(c))
net = MLP([2, 32, 32, 32, 1], activation=sm.tanh, seed=0)
steps = (20, 10) if quick else (1000, 1500)
result = solve(problem, net, points=2048,
               stages=[(Adam(lr=1e-3), steps[0]), (LBFGS(history=50, max_iter=50), steps[1])])
print(f"relative L2 error: {result.rel_l2:.2e}  ({result.time:.0f} s)")
result.plot("wave.png")
