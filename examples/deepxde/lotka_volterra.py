"""DeepXDE's examples/pinn_forward/Lotka_Volterra.py in sciml: the predator-prey system
r' = 20 (2 r - 8 r p), p' = 20 (4 r p - 1.06 p) (populations scaled by 200, time by 1/20) on
[0, 1], with r(0) = 0.5, p(0) = 0.075 built into the output and the feature sin(t) as the
network's input (DeepXDE's ``apply_feature_transform`` / ``apply_output_transform``, PyTorch
backend: one feature). Same network (1-64x6-2 tanh, Glorot normal), points (DeepXDE's: 3000
domain + 2 boundary Hammersley points, the ODE on all), Adam lr 1e-3 for 50000 iterations, then
L-BFGS (DeepXDE's defaults: 15000 iterations, history 100). The error: relative L2 of (r, p) at
100 times against SciPy's ``solve_ivp`` (the example's reference, here with rtol 1e-10 in both
libraries: at the example's default 1e-3 the reference itself is off by ~1e-3).

    python examples/deepxde/lotka_volterra.py
    SCIML_QUICK=1 python examples/deepxde/lotka_volterra.py
"""
import os

import numpy as np
import sciml as sm
from scipy import integrate
from sciml.models import MLP
from sciml.optim import LBFGS, Adam
from sciml.pinn import Problem, TimeInterval, Transformed, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 50000))
LBFGS_STEPS = STEPS * 15000 // 50000
ub, rb = 200, 20


def func(t, r):
    x, y = r
    return (1 / ub * rb * (2.0 * ub * x - 0.04 * ub * x * ub * y),
            1 / ub * rb * (0.02 * ub * x * ub * y - 1.06 * ub * y))


def ode(r, p, t):
    return [d(r, t) - 1 / ub * rb * (2.0 * ub * r - 0.04 * ub * r * ub * p),
            d(p, t) - 1 / ub * rb * (0.02 * r * ub * p * ub - 1.06 * p * ub)]


T = np.linspace(0, 1, 100)
true = integrate.solve_ivp(func, (0, 10), (100 / ub, 15 / ub), t_eval=T, rtol=1e-10, atol=1e-12).y.T
problem = Problem(TimeInterval(0, 1), ode, outputs=("r", "p"), reference=(T[:, None], true))
problem, points = problem.deepxde_points(3000, 2)
net = Transformed(MLP([1] + [64] * 6 + [2], activation=sm.tanh, seed=SEED, init="glorot_normal"),
                  features=sm.sin,
                  output=lambda t, y: sm.tanh(t) * y + np.array([100 / ub, 15 / ub]))
result = solve(problem, net, points=points, dtype="float32",
               stages=[(Adam(lr=1e-3), STEPS), (LBFGS(history=100, max_iter=1000, gtol=1e-8), LBFGS_STEPS)])
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
