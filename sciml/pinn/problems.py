"""Built-in PINN problems with their default networks, points and training stages: what
``sciml solve burgers|poisson|heat|wave|helmholtz`` runs. Each builder returns a
:class:`Setup`; ``setup.run()`` trains and returns the solver's Result. Dirichlet and initial
values are enforced hard (built into the output) wherever the domain allows.

Example:
    >>> s = problems.get("poisson")
    >>> result = s.run(steps=(2000, 1000))
"""
import copy

import numpy as np

from ..autodiff import ops as _sm
from .conditions import Dirichlet, Initial
from .geometry import Interval, Rectangle, TimeInterval
from .operators import d, laplacian
from .problem import Problem
from . import reference as R


class Setup:
    """A problem with default settings.

    Attributes:
        problem: the :class:`Problem`.
        sizes: MLP widths, e.g. ``[2, 32, 32, 32, 32, 1]``.
        activation: name of the activation (``'tanh'``, ``'sin'``).
        points: the ``points`` argument of ``solve``.
        steps: default ``(adam_steps, lbfgs_steps)``.
        lr: Adam learning rate.
        resample: the ``resample`` argument of ``solve``.
        optimizer: the second stage (``'lbfgs'``, ``'bfgs'``, ``'ssbfgs'``, ``'ssbroyden'``, ``'lm'``).
        loss_transform: ``solve(loss_transform=...)`` of the second stage (None, ``'sqrt'``, ``'log'``).
        recipes: dict dtype -> Setup: a different default recipe for that dtype, used by
            :meth:`for_dtype` and ``sciml solve --dtype`` (no built-in problem has one now).
    """

    def __init__(self, problem, sizes, activation, points, steps, lr=1e-3, resample=None,
                 weights=None, optimizer="lbfgs", loss_transform=None, recipes=None, chunk=50):
        self.problem, self.sizes, self.activation = problem, list(sizes), activation
        self.points, self.steps, self.lr = points, tuple(steps), lr
        self.resample, self.weights = resample, weights
        self.optimizer, self.loss_transform = optimizer, loss_transform
        self.recipes, self.chunk = dict(recipes or {}), int(chunk)

    def for_dtype(self, dtype):
        """The setup to use for ``dtype`` (its recipe if it has one, else itself)."""
        return self.recipes.get(str(dtype), self)

    def net(self, sizes=None, seed=0):
        from ..models import MLP
        from .. import models
        act = getattr(models, self.activation)
        return MLP(sizes or self.sizes, activation=act, seed=seed)

    def stages(self, steps=None, optimizer=None):
        from ..optim import LBFGS, Adam
        adam, second = steps or self.steps
        optimizer = optimizer or self.optimizer
        out = [(Adam(lr=self.lr), int(adam))] if adam else []
        m = self.chunk
        if second:
            if optimizer == "lbfgs":
                out.append((LBFGS(history=50, max_iter=m), int(second)))
            elif optimizer in ("bfgs", "ssbfgs", "ssbroyden"):
                from ..optim import BFGS
                kw = {"self_scaling": True} if optimizer == "bfgs" else {"update": optimizer}
                out.append((BFGS(max_iter=m, max_eval=4 * m, **kw), int(second)))
            elif optimizer in ("lm", "levenberg_marquardt"):
                from ..optim import LevenbergMarquardt
                out.append((LevenbergMarquardt(max_iter=5), int(second)))
            else:
                raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}.")
        return out

    def run(self, steps=None, points=None, seed=0, dtype=None, sizes=None, optimizer=None,
            **kw):
        from .solver import solve
        net = self.net(sizes, seed)
        kw.setdefault("loss_transform", self.loss_transform)
        res = kw.pop("resample", self.resample)
        if isinstance(res, dict) and "tail" in res:   # no resampling in the last `tail` steps
            res = dict(res)
            total = sum(n for _, n in self.stages(steps, optimizer))
            res["until"] = max(0, total - res.pop("tail"))
        kw["resample"] = res
        kw.setdefault("weights", self.weights)
        return solve(self.problem, net, points=points or self.points,
                     stages=self.stages(steps, optimizer), seed=seed, dtype=dtype, **kw)


OPTIMIZERS = ("lbfgs", "bfgs", "ssbfgs", "ssbroyden", "lm")


def burgers(nu=0.01 / np.pi, hard=True, interior=8192):
    """u_t + u u_x = nu u_xx on [-1, 1] x [0, 1], u(x, 0) = -sin(pi x), u(+-1, t) = 0.

    With ``hard=True`` (default) the initial and boundary conditions are built into the
    output, u = -sin(pi x) + t (1 - x^2) N(x, t), so only the PDE residual is trained. One
    recipe for float32 and float64 (after Urban, Stefanou & Pons 2024; see RECIPE below):
    Adam, then the self-scaled Broyden update on sqrt(L), the interior points redrawn by RAD
    every 500 steps (into the shock) with the inverse Hessian kept across the redraws.
    """
    def residual(u, x, t):
        return d(u, t) + u * d(u, x) - nu * d(u, x, x)
    pb = Problem(Interval(-1, 1) * TimeInterval(0, 1), residual,
                 conditions=[Dirichlet(0.0, hard=hard),
                             Initial(lambda x: -np.sin(np.pi * x), hard=hard)],
                 reference=R.burgers_cole_hopf(nu), name="burgers")
    recipe = copy.deepcopy(RECIPE)
    recipe["points"]["interior"] = interior
    return Setup(pb, **recipe)


# The Burgers recipe (float32 and float64): a compact tanh net (921 parameters), the dense
# self-scaled Broyden update (its inverse Hessian kept across resamplings), the loss
# modification sqrt(L), RAD every 500 steps. It replaced Adam 1000 + L-BFGS 10000 on a
# 2-32x4-1 net, whose float32 end point moved with the BLAS's rounding (6.7e-4 to 2.4e-3);
# measured in float32 over seeds and BLAS libraries in docs/pinn.md.
RECIPE = dict(sizes=[2, 20, 20, 20, 1], activation="tanh",
              points={"interior": 8192, "boundary": 128, "initial": 128}, steps=(2000, 4000),
              resample={"method": "rad", "every": 500, "restart": False},
              optimizer="ssbroyden", loss_transform="sqrt", chunk=100)


def poisson(k=1):
    """-Δu = 2 k² π² sin(kπx) sin(kπy) on [0, 1]², u = 0 on the boundary."""
    ref = R.poisson_sin(k)
    c = 2 * (k * np.pi) ** 2

    def residual(u, x, y):
        return -laplacian(u) - c * _sm.sin(k * np.pi * x) * _sm.sin(k * np.pi * y)
    pb = Problem(Rectangle((0, 0), (1, 1)), residual, conditions=[Dirichlet(0.0, hard=True)],
                 reference=ref, name="poisson")
    return Setup(pb, [2, 32, 32, 32, 1], "tanh", {"interior": 2048, "boundary": 256},
                 (1000, 2000))


def heat(alpha=0.1):
    """u_t = alpha u_xx on [0, 1] x [0, 1], u(x, 0) = sin(pi x), u(0, t) = u(1, t) = 0."""
    def residual(u, x, t):
        return d(u, t) - alpha * d(u, x, x)
    pb = Problem(Interval(0, 1) * TimeInterval(0, 1), residual,
                 conditions=[Dirichlet(0.0, hard=True),
                             Initial(lambda x: np.sin(np.pi * x), hard=True)],
                 reference=R.heat_sin(alpha), name="heat")
    return Setup(pb, [2, 32, 32, 32, 1], "tanh", {"interior": 2048, "boundary": 128,
                                                   "initial": 128}, (1000, 1000))


def wave(c=1.0):
    """u_tt = c² u_xx on [0, 1] x [0, 1], u(x, 0) = sin(pi x), u_t(x, 0) = 0, u = 0 at x = 0, 1."""
    def residual(u, x, t):
        return d(u, t, t) - c ** 2 * d(u, x, x)
    pb = Problem(Interval(0, 1) * TimeInterval(0, 1), residual,
                 conditions=[Dirichlet(0.0, hard=True),
                             Initial(lambda x: np.sin(np.pi * x), hard=True),
                             Initial(0.0, derivative=1)],
                 reference=R.wave_sin(c), name="wave")
    return Setup(pb, [2, 32, 32, 32, 1], "tanh", {"interior": 2048, "boundary": 128,
                                                   "initial": 128}, (1000, 1500))


def helmholtz(k=1.0, a1=1, a2=4):
    """Δu + k² u = f on [-1, 1]², u = 0 on the boundary, u = sin(a1 π x) sin(a2 π y)."""
    ref = R.helmholtz_sin(k, a1, a2)
    c = k ** 2 - (a1 ** 2 + a2 ** 2) * np.pi ** 2

    def residual(u, x, y):
        return laplacian(u) + k ** 2 * u - c * _sm.sin(a1 * np.pi * x) * _sm.sin(a2 * np.pi * y)
    pb = Problem(Rectangle((-1, -1), (1, 1)), residual, conditions=[Dirichlet(0.0, hard=True)],
                 reference=ref, name="helmholtz")
    return Setup(pb, [2, 50, 50, 50, 1], "sin", {"interior": 4096, "boundary": 400},
                 (1500, 2000))


PROBLEMS = {"burgers": burgers, "poisson": poisson, "heat": heat, "wave": wave,
            "helmholtz": helmholtz}


def get(name, **kw):
    """The :class:`Setup` of a built-in problem by name."""
    if name not in PROBLEMS:
        raise ValueError(f"unknown problem {name!r}; expected one of {', '.join(PROBLEMS)}.")
    return PROBLEMS[name](**kw)


__all__ = ["Setup", "get", "PROBLEMS", "burgers", "poisson", "heat", "wave", "helmholtz"]
