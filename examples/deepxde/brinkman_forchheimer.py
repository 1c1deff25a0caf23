"""DeepXDE's examples/pinn_inverse/brinkman_forchheimer.py in sciml: recover the effective
viscosity nu_e and the permeability K (true 1e-3 both, initial guesses 0.1) of
-nu_e/eps u'' + nu u/K = g on [0, 1] from 5 observations of u; u(0) = u(1) = 0 built into the
output (u = x (1 - x) N). Same network (1-20x3-1 tanh, Glorot uniform), 100 equispaced PDE
points (DeepXDE's `train_distribution="uniform"`: k/101, k = 1..100), Adam lr 1e-3, 30000
iterations; the error on 1001 equispaced points, as the twin.

    python examples/deepxde/brinkman_forchheimer.py
    SCIML_QUICK=1 python examples/deepxde/brinkman_forchheimer.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Interval, Parameter, PointData, Problem, Transformed, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 30000))
g, v, e, H = 1, 1e-3, 0.4, 1


def sol(x):
    r = (v * e / (1e-3 * 1e-3)) ** 0.5
    return g * 1e-3 / v * (1 - np.cosh(r * (x - H / 2)) / np.cosh(r * H / 2))


def pde(u, x, v_e, K):
    return -v_e / e * d(u, x, x) + v * u / K - g


ob_x = np.linspace(1 / 6, 1, 5, endpoint=False)[:, None]
X = np.linspace(0, 1, 1001)[:, None]
problem = Problem(Interval(0, 1), pde, conditions=[PointData(ob_x, sol(ob_x))], reference=(X, sol(X)),
                  parameters={"v_e": Parameter(0.1), "K": Parameter(0.1)})
net = Transformed(MLP([1, 20, 20, 20, 1], activation=sm.tanh, seed=SEED),
                  output=lambda x, y: x * (1 - x) * y)
result = solve(problem, net, points=np.linspace(0, 1, 101, endpoint=False)[1:, None],
               stages=[(Adam(lr=1e-3), STEPS)], dtype="float32")
print(f"v_e = {result.parameters['v_e']:.4g}, K = {result.parameters['K']:.4g} (true 1e-3); "
      f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
