"""DeepXDE's examples/pinn_inverse/elliptic_inverse_field.py in sciml: recover the source field
q(x) of -u'' + q = 0 on [-1, 1] from 100 observations of u (true u = sin(pi x), q = -pi^2 sin(pi x)),
with u = sin(pi x) on the boundary. Same networks (DeepXDE's PFNN [1, [20, 20] x 3, 2]: one 1-20-20-20-1
tanh network per field, Glorot uniform), points (DeepXDE's: 200 domain + 2 boundary, the observations
as anchors, the PDE on all), loss weights 1 / 100 / 1000 (PDE / boundary / data), Adam lr 1e-4 for
20000 iterations. The errors: relative L2 of u (the table's column) and of q on 500 uniform points,
as the twin measures them.

    python examples/deepxde/elliptic_inverse_field.py
    SCIML_QUICK=1 python examples/deepxde/elliptic_inverse_field.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Dirichlet, Fields, Interval, PointData, Problem, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 20000))


def pde(u, q, x):
    return -d(u, x, x) + q


ob_x = np.linspace(-1, 1, 100)[:, None]
X = np.linspace(-1, 1, 500)[:, None]
problem = Problem(Interval(-1, 1), pde, outputs=("u", "q"), reference=(X, np.sin(np.pi * X)),
                  conditions=[Dirichlet(lambda x: np.sin(np.pi * x), component="u", weight=100),
                              PointData(ob_x, np.sin(np.pi * ob_x), component="u", weight=1000)])
problem, points = problem.deepxde_points(200, 2, anchors=ob_x, seed=SEED)
net = Fields(*(MLP([1, 20, 20, 20, 1], activation=sm.tanh, seed=SEED + i) for i in range(2)))
result = solve(problem, net, points=points, stages=[(Adam(lr=1e-4), STEPS)], dtype="float32")
q_true = -np.pi ** 2 * np.sin(np.pi * X)
q_err = np.linalg.norm(result.predict(X)[:, 1:] - q_true) / np.linalg.norm(q_true)
print(f"q_err = {q_err:.3e}; relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
