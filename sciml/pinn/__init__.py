"""sciml.pinn: physics-informed neural networks.

    >>> from sciml.pinn import Interval, TimeInterval, Dirichlet, Initial, Problem, solve, d

Geometry (geometry.py), samplers (sampling.py), reference solutions (reference.py),
differential operators (operators.py), conditions (conditions.py), problems (problem.py),
loss weights (weighting.py), the solver (solver.py) and plots (plot.py).
"""
from . import reference, sampling
from .geometry import Ball, Box, Disk, Interval, Polygon, Rectangle, TimeInterval
from .geometry_ops import Difference, Intersection, SpaceTime, Union
from .operators import d, div, grad, laplacian
from .conditions import Dirichlet, Initial, Neumann, Operator, Periodic, PointData, Robin
from .networks import Fields, Transformed
from .problem import Parameter, Problem
from .weighting import Fixed, GradNorm
from .solver import Result, solve

__all__ = ["Interval", "TimeInterval", "Rectangle", "Box", "Disk", "Ball", "Polygon", "Union",
           "Intersection", "Difference", "SpaceTime", "d", "grad", "div", "laplacian",
           "Dirichlet", "Neumann", "Robin", "Periodic", "Initial", "PointData", "Operator", "Parameter",
           "Fields", "Transformed",
           "Problem", "Fixed", "GradNorm", "solve", "Result", "reference", "sampling"]
