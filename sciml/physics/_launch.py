"""Raw launches of a user's step kernel and of its Taichi adjoint on numpy views (CPU).

The per-step path launches each step kernel T times forward and its ``.grad`` T times backward.
Taichi's own call costs 30-60 us of Python per launch (argument checks, template lookup), and
its ``kernel.grad`` cannot take numpy arrays at all (it passes a null gradient pointer). Here a
kernel is compiled once through Taichi (``ensure_compiled``: Taichi checks the annotations), then
each launch builds the compiled kernel's launch context directly, passing rows of the rollout's
history buffer zero-copy and, for the adjoint, gradient buffers as raw pointers (the same call
Taichi makes for a torch tensor with ``.grad``). Same technique as ``sciml.kernels._common.
FastLaunch``, extended to any ndim, gradient pointers and the step index.
"""
from __future__ import annotations

import inspect

import numpy as np

from ..kernels._common import address


class _NeedsGrad(np.ndarray):
    """A numpy view that Taichi compiles as ``needs_grad`` (it reads ``requires_grad``)."""
    requires_grad = True


def kernel_arguments(kernel):
    """``(names, annotations)`` of a ``@ti.kernel`` (wrapped or a FastLaunch)."""
    kernel = getattr(kernel, "kernel", kernel)  # FastLaunch
    prim = getattr(kernel, "_primal", None)
    if prim is None:
        raise TypeError(f"expected a @ti.kernel; got {type(kernel).__name__}")
    return [a.name for a in prim.arguments], [a.annotation for a in prim.arguments]


def takes_step_index(kernel) -> bool:
    """True if the kernel's last argument is a scalar integer (it receives the step index t)."""
    from taichi.types import primitive_types
    _, anns = kernel_arguments(kernel)
    return bool(anns) and id(anns[-1]) in primitive_types.integer_type_ids


def kernel_name(kernel) -> str:
    kernel = getattr(kernel, "kernel", kernel)
    f = getattr(getattr(kernel, "_primal", None), "func", None)
    return getattr(f, "__name__", None) or getattr(kernel, "__name__", "kernel")


def _element_dims(ann):
    from taichi.types import ndarray_type
    if not isinstance(ann, ndarray_type.NdarrayType):
        return None
    dt = ann.dtype
    return 0 if dt is None or not hasattr(dt, "ndim") else int(dt.ndim)


class RawKernel:
    """One compiled kernel (primal or adjoint) with a direct launcher.

    ``kinds``: per argument 'e' (numpy array, optionally with a gradient array), 'n' (ti.ndarray),
    'f' (float) or 'i' (int). Compiled on the first call with the first arguments' types."""

    def __init__(self, kernel, adjoint):
        from taichi.lang import impl
        wrapped = getattr(kernel, "kernel", kernel)
        self.k = wrapped._adjoint if adjoint else wrapped._primal
        self.adjoint = adjoint
        self.impl = impl
        self.names, self.anns = kernel_arguments(kernel)
        self.edims = [_element_dims(a) for a in self.anns]
        self.spec = None

    def _compile(self, args, grads):
        from taichi.lang._ndarray import Ndarray
        cargs, kinds = [], []
        for a, g, ed in zip(args, grads, self.edims):
            if isinstance(a, np.ndarray):
                if ed is None:
                    raise TypeError(f"argument is an array but the kernel annotates {self.anns[len(kinds)]}")
                cargs.append(a.view(_NeedsGrad) if (g is not None and self.adjoint) else a)
                kinds.append("e")
            elif isinstance(a, Ndarray):
                cargs.append(a)
                kinds.append("n")
            elif isinstance(a, (bool, np.bool_)):
                raise TypeError("a bool argument is not supported")
            elif isinstance(a, (int, np.integer)):
                cargs.append(int(a))
                kinds.append("i")
            else:
                cargs.append(float(a))
                kinds.append("f")
        key = self.k.ensure_compiled(*cargs)
        tk = self.k.compiled_kernels[key]
        prog = self.impl.get_runtime().prog
        self.spec = (tk.make_launch_context, prog.launch_kernel,
                     prog.compile_kernel(prog.config(), prog.get_device_caps(), tk), tuple(kinds))

    def __call__(self, args, grads):
        """Launch with ``args`` (arrays and scalars) and ``grads`` (None or a gradient array per arg)."""
        c = self.context(args, grads)
        self.spec[1](self.spec[2], c)

    def launcher(self):
        """``(launch, compiled)``: ``launch(compiled, ctx)`` runs a context made by :meth:`context`."""
        return self.spec[1], self.spec[2]

    def context(self, args, grads):
        """A launch context with these arguments set. It keeps raw addresses: the caller keeps the
        arrays alive; launching it again costs ~2 us here (a fresh Taichi call costs 30-60 us)."""
        if self.spec is None:
            self._compile(args, grads)
        mk, launch, ckd, kinds = self.spec
        c = mk()
        for i, (kind, a, g, ed) in enumerate(zip(kinds, args, grads, self.edims)):
            if kind == "e":
                shape = a.shape[:a.ndim - ed] if ed else a.shape
                c.set_arg_external_array_with_shape((i,), address(a), a.nbytes, shape,
                                                    address(g) if g is not None else 0)
            elif kind == "n":
                if a.grad is not None and self.adjoint:
                    c.set_arg_ndarray_with_grad((i,), a.arr, a.grad.arr)
                else:
                    c.set_arg_ndarray((i,), a.arr)
            elif kind == "f":
                c.set_arg_float((i,), float(a))
            else:
                c.set_arg_int((i,), int(a))
        return c


def signature_names(kernel):
    try:
        return list(inspect.signature(getattr(kernel, "kernel", kernel)).parameters)
    except (TypeError, ValueError):  # pragma: no cover
        return []
