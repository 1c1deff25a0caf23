"""DeepXDE's examples/pinn_inverse/Lorenz_inverse.py in sciml: recover C1, C2, C3 (true 10, 15,
8/3; initial guesses 1) of the Lorenz system y1' = C1 (y2 - y1), y2' = y1 (C2 - y3) - y2,
y3' = y1 y2 - C3 y3 on [0, 3] from DeepXDE's 25 observations (data/Lorenz.npz). Same network
(1-40x3-3 tanh, Glorot uniform), points (DeepXDE's: 400 domain (Hammersley) + 2 boundary + the
observation times as anchors, the ODE on all), Adam lr 1e-3 for 20000 iterations, then L-BFGS (DeepXDE's defaults:
15000 iterations, history 100). The error: against the trajectory with the true coefficients
(scipy, rtol 1e-10) on 301 equispaced times, as the twin measures it.

    python examples/deepxde/lorenz_inverse.py
    SCIML_QUICK=1 python examples/deepxde/lorenz_inverse.py
"""
import os

import numpy as np
import sciml as sm
from scipy.integrate import solve_ivp
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Initial, Parameter, PointData, Problem, TimeInterval, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 20000))
LBFGS_STEPS = STEPS * 15000 // 20000


def lorenz(y1, y2, y3, t, C1, C2, C3):
    return [d(y1, t) - C1 * (y2 - y1), d(y2, t) - y1 * (C2 - y3) + y2, d(y3, t) - y1 * y2 + C3 * y3]


data = np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "Lorenz.npz"))
T = np.linspace(0, 3, 301)
exact = solve_ivp(lambda t, y: [10 * (y[1] - y[0]), y[0] * (15 - y[2]) - y[1], y[0] * y[1] - 8 / 3 * y[2]],
                  (0, 3), [-8, 7, 27], t_eval=T, rtol=1e-10, atol=1e-10).y.T
problem = Problem(TimeInterval(0, 3), lorenz, outputs=("y1", "y2", "y3"), reference=(T[:, None], exact),
                  parameters={"C1": Parameter(1.0), "C2": Parameter(1.0), "C3": Parameter(1.0)},
                  conditions=[Initial(-8.0, component=0), Initial(7.0, component=1),
                              Initial(27.0, component=2), PointData(data["t"], data["y"])])
net = MLP([1, 40, 40, 40, 3], activation=sm.tanh, seed=SEED)
problem, points = problem.deepxde_points(num_domain=400, num_boundary=2, anchors=data["t"])
result = solve(problem, net, points=points, dtype="float32",
               stages=[(Adam(lr=1e-3), STEPS), (LBFGS(history=100, max_iter=1000, gtol=1e-8), LBFGS_STEPS)])
C = result.parameters
print(f"C1 = {C['C1']:.4f}, C2 = {C['C2']:.4f}, C3 = {C['C3']:.4f} (true 10, 15, 2.667); "
      f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
