"""DeepXDE's examples/pinn_forward/Helmholtz_Neumann_2d_hole.py in sciml: -Δu - k0² u = f on a
square with a round hole, Neumann on the hole (on=hole), Dirichlet on the outer square;
u = sin(k0 x) sin(k0 y), k0 = 2π. Same network (2-350x3-1 sin, Glorot), points (DeepXDE's
counts and sampler: 225 domain and 240 boundary Hammersley points, the PDE on all; the pool
drawn as DeepXDE's CSG difference draws it: 240 on the square and 240 on the hole, shuffled,
the first 240 kept (about half on the hole: 118, 125, 118 for seeds 0, 1, 2), and the interior
re-drawn from the square until 225 lie outside the disk (181 distinct, 44 of them twice); with
seed=SEED the shuffle is the one DeepXDE makes after dde.config.set_random_seed(SEED), so both
libraries train on the same points), loss weights 1/10/100, Adam lr 1e-3, 5000 iterations.

    python examples/deepxde/helmholtz_neumann_2d_hole.py
    SCIML_QUICK=1 python examples/deepxde/helmholtz_neumann_2d_hole.py
"""
import os

import numpy as np
import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Dirichlet, Disk, Neumann, Problem, Rectangle, laplacian, solve

SEED = int(os.environ.get("SCIML_SEED", 0))   # the benchmark's --seeds
STEPS = int(os.environ.get("SCIML_STEPS", 5 if os.environ.get("SCIML_QUICK") else 5000))
k0, R = 2 * np.pi, 0.25


def pde(u, x, y):
    return -laplacian(u) - k0 ** 2 * u - k0 ** 2 * sm.sin(k0 * x) * sm.sin(k0 * y)


def func(x, y):
    return np.sin(k0 * x) * np.sin(k0 * y)


def dudn(x, y):   # the domain's outward normal on the hole points into it: -(x, y) / R
    return -(k0 * np.cos(k0 * x) * np.sin(k0 * y) * x + k0 * np.sin(k0 * x) * np.cos(k0 * y) * y) / R


outer, hole = Rectangle((-0.5, -0.5), (0.5, 0.5)), Disk((0, 0), R)
problem = Problem(outer - hole, pde, reference=lambda p: func(p[:, 0], p[:, 1]),
                  conditions=[Neumann(dudn, on=hole, weight=10), Dirichlet(func, on=outer, weight=100)])
problem, points = problem.deepxde_points(num_domain=225, num_boundary=240, seed=SEED)
net = MLP([2, 350, 350, 350, 1], activation=sm.sin, seed=SEED)
result = solve(problem, net, points=points, stages=[(Adam(lr=1e-3), STEPS)], dtype="float32")
print(f"relative L2 error {result.rel_l2:.2e} ({result.time:.1f} s)")
