"""DeepXDE's examples/pinn_forward/Euler_beam.py in sciml: the cantilever beam u'''' = -1 on
[0, 1], u(0) = u'(0) = 0 (clamped), u''(1) = u'''(1) = 0 (free end, operator conditions);
u = -x^4/24 + x^3/6 - x^2/4. Fourth order. Same network (1-20x3-1 tanh, Glorot uniform), points
(DeepXDE's: 10 domain (Hammersley) + 2 boundary, the PDE on all), Adam lr 1e-3, 10000
iterations; the error on 1001 equispaced points, as the DeepXDE twin measures it.

    python examples/deepxde/euler_beam.py
    SCIML_QUICK=1 python examples/deepxde/euler_beam.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Dirichlet, Interval, Neumann, Operator, Problem, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 10000))


def func(x):
    return -x ** 4 / 24 + x ** 3 / 6 - x ** 2 / 4


X = np.linspace(0, 1, 1001)[:, None]
problem = Problem(Interval(0, 1), lambda u, x: d(u, x, x, x, x) + 1, reference=(X, func(X)),
                  conditions=[Dirichlet(0.0, on="left"), Neumann(0.0, on="left"),
                              Operator(lambda u, x: d(u, x, x), on="right", name="u_xx(1)"),
                              Operator(lambda u, x: d(u, x, x, x), on="right", name="u_xxx(1)")])
problem, points = problem.deepxde_points(num_domain=10, num_boundary=2)
net = MLP([1, 20, 20, 20, 1], activation=sm.tanh, seed=SEED)
result = solve(problem, net, points=points, stages=[(Adam(lr=1e-3), STEPS)], dtype="float32")
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
