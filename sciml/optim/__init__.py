"""sciml.optim: composable gradient transforms, a stateful Optimizer shell, first-order optimizers
(fused in-place Taichi kernels) and learning-rate schedules. See sciml/optim/base.py."""
from . import schedules
from .base import Optimizer, Transform, chain, global_norm
from .first_order import SGD, Adagrad, Adam, Adamax, AdamW, Lion, NAdam, RAdam, RMSprop
from .transforms import (add_decayed_weights, clip_by_global_norm, identity, scale, scale_by_adagrad, scale_by_adam,
                         scale_by_lr, scale_by_rms, scale_by_schedule, trace, apply_updates)
from .plateau import EMA, ReduceLROnPlateau
from .aliases import adagrad, adam, adamw, rmsprop, sgd
from .lbfgs import LBFGS, lbfgs
from .adahessian import AdaHessian, adahessian
from .bfgs import BFGS, bfgs
from .least_squares import GaussNewton, LevenbergMarquardt, gauss_newton, levenberg_marquardt
from .newton import Newton, NewtonCG, newton, newton_cg
from .result import IterInfo, Result
