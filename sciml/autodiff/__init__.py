"""Tensor, primitives, the tape and the transforms (grad, vjp, jvp, jacrev, jacfwd, hessian, hvp)."""
from . import ops
from .primitive import Primitive, enable_grad, is_grad_enabled, no_grad
from .jit import JitError, jit
from .pytree import tree_leaves, tree_map, tree_structure
from .tensor import (Tensor, arange, as_tensor, eye, full, linspace, ones, ones_like, rand, randn, tensor, zeros,
                     zeros_like)
from .transforms import (batched_jvp, grad, hessian, hvp, jacfwd, jacrev, jvp, linearize, stop_gradient,
                         value_and_grad, vjp)
