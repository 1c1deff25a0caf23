"""Differentiable physics: simulations written as Taichi kernels, as functions of Tensors.

See docs/physics.md. ``Simulation`` is the general API; ``heat1d``, ``billiards`` and
``mass_spring`` are built-in simulators used by the examples and the W5 benchmark.
"""
import os

os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "0")  # importing sciml prints nothing

from .simulation import Simulation, SimulationCheckError  # noqa: E402
from .heat import heat1d  # noqa: E402
from .conduction import conduction1d  # noqa: E402
from .billiards import billiards  # noqa: E402
from .mass_spring import mass_spring, robot  # noqa: E402
from .controller import MLPController  # noqa: E402

__all__ = ["Simulation", "SimulationCheckError", "heat1d", "conduction1d", "billiards", "mass_spring", "robot",
           "MLPController"]
