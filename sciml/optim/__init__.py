"""sciml.optim: composable gradient transforms, a stateful Optimizer shell, first-order optimizers
(fused in-place Taichi kernels) and learning-rate schedules. See sciml/optim/base.py."""
from . import schedules
from .base import Optimizer, Transform, chain, global_norm
from .first_order import SGD, Adagrad, Adam, AdamW, RMSprop
from .lbfgs import LBFGS, lbfgs
from .result import IterInfo, Result
