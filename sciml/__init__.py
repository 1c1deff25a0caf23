"""sciml: differentiable programming for AI + science on Taichi kernels.

    >>> import sciml as sm
    >>> sm.hessian(lambda x: (sm.sin(x) * x).sum())(sm.tensor([0.3, 1.2]))
"""
from .runtime import ArchUnavailableError, arch, default_dtype, init, manual_seed
from .autodiff.taichi_bridge import TaichiFunction, taichi_function
from .autodiff import (Primitive, Tensor, arange, as_tensor, batched_jvp, enable_grad, eye, full, grad, hessian,
                       hvp, is_grad_enabled, jit, JitError, jacfwd, jacrev, jvp, linearize, linspace, no_grad, ones, ones_like, rand,
                       randn, stop_gradient, tensor, tree_leaves, tree_map, tree_structure, value_and_grad, vjp,
                       zeros, zeros_like)
from .autodiff.ops import (abs, add, astype, broadcast_to, clip, concat, cos, div, dot, equal, exp, floor, gelu,
                           greater, greater_equal, less, less_equal, log, log_softmax, logsumexp, matmul, max,
                           maximum, mean, min, minimum, moveaxis, mul, neg, not_equal, pow, reciprocal, relu,
                           reshape, scatter_add, sigmoid, sign, silu, sin, softmax, softplus, split, sqrt, square,
                           squeeze, stack, sub, sum, take, take_along_axis, tanh, transpose, unsqueeze, var,
                           where)

from .autodiff.ops import (arccos, arccosh, arcsin, arcsinh, arctan, arctanh, atan2, cosh, erf, erfc, expm1,
                           isfinite, isinf, isnan, log1p, sinh, tan)
from .autodiff.fuse import fuse
from .autodiff.ops.array import (all, any, argmax, argmin, argsort, cross, cumprod, cumsum, diag, diagonal, einsum,
                                 flip, kron, meshgrid, outer, pad, prod, repeat, roll, sort, std, tile, topk, trace)
from .graph import graph
from .serialization import load, save
from .autodiff.custom import checkpoint, custom_jvp, custom_vjp, remat
from .autodiff.control import fori_loop, scan, while_loop
from .autodiff.vmap import vmap
from . import fft, linalg, random, tree_util  # noqa: E402  (sm.linalg.solve, sm.random.normal, ...)
from .autodiff.ops._util import AxisError
from .autodiff.jit import ConcretizationError

__version__ = "0.1.0"
float32, float64, int32 = "float32", "float64", "int32"


def __getattr__(name):  # subpackages imported on first use (sciml.physics imports taichi at import time)
    if name in ("physics", "models", "optim", "data", "train", "pinn"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'sciml' has no attribute {name!r}")
from .autodiff.fuse_region import fuse_region, RegionError  # noqa: E402,F401  (one kernel for a loss: slices, ops, sums)
