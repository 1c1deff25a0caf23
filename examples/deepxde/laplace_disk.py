"""DeepXDE's examples/pinn_forward/Laplace_disk.py in sciml: Laplace's equation on the unit disk
in polar coordinates, r u_r + r^2 u_rr + u_thth = 0 on [0, 1] x [0, 2 pi], u(1, th) = cos th;
u = r cos th. The network sees the features (r sin th, r cos th), so it is periodic in th. Same
network (2-20x3-1 tanh, Glorot normal), points (DeepXDE's: 2540 domain (Hammersley) + 80
boundary, those on r = 1 carry the condition, the PDE holds on all), Adam lr 1e-3, 15000
iterations; the error on a 101 x 101 (r, th) grid, as the twin measures it.

    python examples/deepxde/laplace_disk.py
    SCIML_QUICK=1 python examples/deepxde/laplace_disk.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Dirichlet, Problem, Rectangle, Transformed, d, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 15000))


def pde(u, r, th):
    return r * d(u, r) + r ** 2 * d(u, r, r) + d(u, th, th)


X = np.stack(np.meshgrid(np.linspace(0, 1, 101), np.linspace(0, 2 * np.pi, 101)), -1).reshape(-1, 2)
problem = Problem(Rectangle((0, 0), (1, 2 * np.pi), names=("r", "th")), pde,
                  conditions=[Dirichlet(lambda r, th: np.cos(th), on="right")],
                  reference=(X, X[:, 0] * np.cos(X[:, 1])))
problem, points = problem.deepxde_points(num_domain=2540, num_boundary=80, seed=SEED)
net = Transformed(MLP([2, 20, 20, 20, 1], activation=sm.tanh, seed=SEED, init="glorot_normal"),
                  features=lambda x: sm.concat([x[:, 0:1] * sm.sin(x[:, 1:2]),
                                                x[:, 0:1] * sm.cos(x[:, 1:2])], axis=1))
result = solve(problem, net, points=points, stages=[(Adam(lr=1e-3), STEPS)], dtype="float32")
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
