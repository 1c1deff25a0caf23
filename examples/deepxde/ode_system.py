"""DeepXDE's examples/pinn_forward/ode_system.py in sciml: y1' = y2, y2' = -y1 on [0, 10],
y1(0) = 0, y2(0) = 1 (y1 = sin t, y2 = cos t). Same network (1-50x3-2 tanh, Glorot), points
(DeepXDE's: 35 domain (Hammersley) + 2 boundary, the ODE on all), Adam lr 1e-3, 20000 iterations.

    python examples/deepxde/ode_system.py
    SCIML_QUICK=1 python examples/deepxde/ode_system.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Initial, Problem, TimeInterval, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 20000))


def ode(y1, y2, t):
    return [d(y1, t) - y2, d(y2, t) + y1]


problem = Problem(TimeInterval(0, 10), ode, outputs=("y1", "y2"),
                  conditions=[Initial(0.0, component=0), Initial(1.0, component=1)],
                  reference=lambda p: np.hstack([np.sin(p), np.cos(p)]))
problem, points = problem.deepxde_points(num_domain=35, num_boundary=2)
net = MLP([1, 50, 50, 50, 2], activation=sm.tanh, seed=SEED)
result = solve(problem, net, points=points, stages=[(Adam(lr=1e-3), STEPS)], dtype="float32")
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
