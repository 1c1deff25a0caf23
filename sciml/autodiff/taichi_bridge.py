"""Taichi kernels as differentiable sciml functions.

``taichi_function(kernel, inputs=..., outputs=...)`` turns a user's ``@ti.kernel`` over
ndarrays into a function of Tensors. Its forward runs the kernel; its VJP runs Taichi's
generated adjoint ``kernel.grad`` (reverse mode, first order only). Asking for a second
derivative (``grad(grad(f))``, ``hessian``, or forward mode, which sciml builds from a double
VJP when there is no JVP rule) raises ``NotImplementedError`` unless the user also gives a VJP
rule in sciml ops with :meth:`TaichiFunction.def_vjp`; then every order works.

Kernel convention: ``kernel(*inputs, *outputs, *constants)``, every array a ``ti.types.ndarray``
of the declared shape. Outputs start zeroed; the kernel must write them (``=`` or ``+=``) and
must never write its inputs. Taichi's reverse mode is silently wrong outside a narrow subset
(docs/physics.md, "Rules for kernels Taichi differentiates"): inputs never written, every value
written once and never overwritten after it was read, ``+=`` into shared outputs. Test every wrapped kernel
against finite differences (``sciml.testing.check_grads(f, args, order=1, modes=("rev",))``).

On Vulkan Taichi's ndarray autodiff returns zeros (taichi issue 8524), so the VJP raises a
clear error there unless a rule was given with ``def_vjp``.

Example:
    >>> import taichi as ti, sciml as sm
    >>> @ti.kernel
    ... def smooth(u: ti.types.ndarray(ndim=1), w: ti.types.ndarray(ndim=1), out: ti.types.ndarray(ndim=1)):
    ...     for i in range(u.shape[0]):
    ...         out[i] = ti.sin(u[i]) * w[0]
    >>> f = sm.taichi_function(smooth, inputs=[(8,), (1,)], outputs=[(8,)])
    >>> g = sm.grad(lambda u: f(u, sm.tensor([2.0])).sum())(sm.linspace(0, 1, 8))   # 2 cos(u)
"""
# No `from __future__ import annotations`: this file builds Taichi kernels (see _copy_kernels).
import inspect
import math

import numpy as np

from .. import backend, runtime
from .primitive import Primitive
from .tensor import Tensor, as_tensor

FIRST_ORDER_MSG = ("{name!r} is differentiated by Taichi, which is first order only; "
                   "give it a vjp rule in sciml ops.")
VULKAN_MSG = ("{name!r}: Taichi's autodiff returns all-zero ndarray gradients on Vulkan (taichi issue 8524), "
              "so sciml will not differentiate it there. Run on arch='cpu' (or 'cuda'), or give it a vjp rule "
              "in sciml ops with .def_vjp(...).")


_COPY = {}


def copy_kernels():
    """Serialized helpers between flat host arrays and shaped (grad) ndarrays, any ndim:
    ``load(src, a, ag)``: a = src, ag = 0; ``put(src, a)``: a = src; ``get(a, dst)``: dst = a.
    Cheaper than ``from_numpy`` / ``fill`` / ``to_numpy`` (parallel loops, +70-100 us each here)."""
    if _COPY:
        return _COPY
    ti = runtime.ensure_init()

    @ti.func
    def _index(a: ti.template(), f):
        nd = ti.static(len(a.shape))
        idx = ti.Vector([0] * nd)
        r = f
        for k in ti.static(range(nd)):
            idx[ti.static(nd - 1 - k)] = r % a.shape[ti.static(nd - 1 - k)]
            r = r // a.shape[ti.static(nd - 1 - k)]
        return idx

    @ti.kernel
    def load(src: ti.types.ndarray(ndim=1), a: ti.types.ndarray(), ag: ti.types.ndarray()):
        ti.loop_config(serialize=True)
        for f in range(src.shape[0]):
            i = _index(a, f)
            a[i] = src[f]
            ag[i] = 0

    @ti.kernel
    def put(src: ti.types.ndarray(ndim=1), a: ti.types.ndarray()):
        ti.loop_config(serialize=True)
        for f in range(src.shape[0]):
            a[_index(a, f)] = src[f]

    @ti.kernel
    def get(a: ti.types.ndarray(), dst: ti.types.ndarray(ndim=1)):
        ti.loop_config(serialize=True)
        for f in range(dst.shape[0]):
            dst[f] = a[_index(a, f)]

    _COPY.update(load=load, put=put, get=get)
    return _COPY


def _kernel_params(kernel):
    try:
        sig = inspect.signature(kernel)
    except (TypeError, ValueError):
        return None
    return list(sig.parameters.values())


def _norm_shapes(where, spec):
    if isinstance(spec, dict):
        return list(spec.keys()), list(spec.values())
    if spec is None:
        return [], []
    return None, list(spec)


class TaichiFunction:
    """A user's Taichi kernel as a differentiable function of Tensors. Build with :func:`taichi_function`."""

    def __init__(self, kernel, inputs, outputs, constants=(), name=None, validate=True):
        if not hasattr(kernel, "grad"):
            raise TypeError(f"taichi_function(kernel=...): got {type(kernel).__name__}; expected a @ti.kernel.")
        self.kernel = kernel
        func = getattr(getattr(kernel, "_primal", None), "func", None)
        self.name = name or getattr(func, "__name__", "taichi_kernel")
        in_names, self.in_shapes = _norm_shapes("inputs", inputs)
        out_names, self.out_specs = _norm_shapes("outputs", outputs)
        self.in_shapes = [tuple(int(d) for d in s) for s in self.in_shapes]
        self.constants = tuple(constants)
        self.validate = validate
        params = _kernel_params(kernel)
        n_arr = len(self.in_shapes) + len(self.out_specs)
        if params is not None:
            if len(params) != n_arr + len(self.constants):
                raise ValueError(
                    f"taichi_function({self.name!r}): the kernel takes {len(params)} arguments "
                    f"({', '.join(p.name for p in params)}); expected {len(self.in_shapes)} input(s) + "
                    f"{len(self.out_specs)} output(s) + {len(self.constants)} constant(s), in that order.")
            names = [p.name for p in params]
            self.in_names = in_names or names[:len(self.in_shapes)]
            self.out_names = out_names or names[len(self.in_shapes):n_arr]
            self._ndims = [getattr(p.annotation, "ndim", None) for p in params[:n_arr]]
        else:  # pragma: no cover - kernels always have a signature in taichi 1.7
            self.in_names = in_names or [f"input{i}" for i in range(len(self.in_shapes))]
            self.out_names = out_names or [f"output{i}" for i in range(len(self.out_specs))]
            self._ndims = [None] * n_arr
        for nm, s, nd in zip(self.in_names, self.in_shapes, self._ndims):
            if nd is not None and nd != len(s):
                raise ValueError(f"taichi_function({self.name!r}): input {nm!r} is declared with shape {s} but the "
                                 f"kernel annotates it ndarray(ndim={nd}).")
        self.user_vjp = None
        self.user_jvp = None
        self._grad_bufs = {}
        self.prim = Primitive(f"taichi:{self.name}", self._forward)
        self.prim.def_vjp(self._vjp)
        self.grad_prim = Primitive(f"taichi:{self.name}.grad", self._grad_forward)
        self.grad_prim.def_vjp(self._no_second_order)
        self.grad_prim.def_jvp(self._no_second_order)

    def __repr__(self):
        return f"TaichiFunction({self.name!r}, inputs={self.in_shapes}, outputs={self.out_specs})"

    __hash__ = object.__hash__

    # --- user rules ------------------------------------------------------------------------
    def def_vjp(self, rule):
        """Give a VJP rule in sciml ops: ``rule(g, *inputs, out) -> tuple of cotangents``.

        ``g`` and ``out`` are the output cotangent and the output (a tuple when there are several
        outputs). With a rule the function differentiates to any order, and on every arch.
        """
        self.user_vjp = rule
        return rule

    def def_jvp(self, rule):
        """Give a JVP rule in sciml ops: ``rule(tangents, *inputs, out) -> tangent(s) of the output(s)``."""
        self.user_jvp = rule
        self.prim.def_jvp(self._jvp)
        return rule

    # --- shapes ----------------------------------------------------------------------------
    def _out_shapes(self, in_shapes):
        out = []
        for nm, s in zip(self.out_names, self.out_specs):
            s = s(*in_shapes) if callable(s) else s
            out.append(tuple(int(d) for d in s))
        return out

    def _check_inputs(self, xs):
        if len(xs) != len(self.in_shapes):
            raise TypeError(f"{self.name}: got {len(xs)} argument(s); expected {len(self.in_shapes)} "
                            f"({', '.join(self.in_names)}).")
        out = []
        dtype = None
        for nm, want, x in zip(self.in_names, self.in_shapes, xs):
            x = as_tensor(x) if dtype is None else as_tensor(x, dtype)
            if x.dtype not in ("float32", "float64"):
                raise TypeError(f"{self.name}: input {nm!r} has dtype {x.dtype}; expected float32 or float64.")
            if dtype is None:
                dtype = x.dtype
            elif x.dtype != dtype:
                raise TypeError(f"{self.name}: input {nm!r} has dtype {x.dtype} but earlier inputs are {dtype}; "
                                "all inputs of a Taichi function share one float dtype.")
            if tuple(x.shape) != want:
                raise ValueError(f"{self.name}: input {nm!r} has shape {tuple(x.shape)}; expected {want}.")
            out.append(x)
        return out

    # --- call ------------------------------------------------------------------------------
    def __call__(self, *xs):
        xs = self._check_inputs(xs)
        flat = self.prim(*xs, fn=self)
        shapes = self._out_shapes([x.shape for x in xs])
        outs, start = [], 0
        for s in shapes:
            n = math.prod(s)
            piece = flat if len(shapes) == 1 else flat[start:start + n]
            outs.append(piece.reshape(s))
            start += n
        return outs[0] if len(outs) == 1 else tuple(outs)

    # --- forward ---------------------------------------------------------------------------
    def _forward(self, *xs, fn):
        dtype = xs[0].dtype if xs else runtime.default_dtype()
        out_shapes = self._out_shapes([x.shape for x in xs])
        total = sum(math.prod(s) for s in out_shapes)
        if backend.on_host():
            ins = [backend.to_numpy(x._buf, x.shape, dtype) for x in xs]
            ins = [np.array(a) if not a.flags.writeable else a for a in ins]  # read-only views -> copy
            before = [a.copy() for a in ins] if self.validate else None
            out = np.zeros(total, backend.NP_DTYPES[dtype])
            outs, start = [], 0
            for s in out_shapes:
                n = math.prod(s)
                outs.append(out[start:start + n].reshape(s))
                start += n
            self.kernel(*ins, *outs, *self.constants)
            if before is not None:
                for nm, a, b in zip(self.in_names, ins, before):
                    if not np.array_equal(a, b, equal_nan=True):
                        a[...] = b  # restore the caller's tensor
                        raise RuntimeError(
                            f"{self.name}: the kernel wrote its input {nm!r}. Kernels wrapped by taichi_function "
                            "must treat inputs as read-only (Taichi's autodiff is silently wrong otherwise); "
                            "write results into an output array instead.")
            return out, (total,), dtype
        ti = runtime.ensure_init()
        tdt = backend.ti_dtype(dtype)
        ins = []
        for x in xs:
            a = ti.ndarray(tdt, x.shape)
            a.from_numpy(backend.to_numpy(x._buf, x.shape, dtype))
            ins.append(a)
        outs = [ti.ndarray(tdt, s) for s in out_shapes]
        self.kernel(*ins, *outs, *self.constants)
        flat = np.concatenate([o.to_numpy().reshape(-1) for o in outs]) if outs else np.zeros(0)
        return backend.from_numpy(flat, dtype), (total,), dtype

    # --- reverse mode ----------------------------------------------------------------------
    def _split(self, t, shapes):
        outs, start = [], 0
        for s in shapes:
            n = math.prod(s)
            outs.append((t if len(shapes) == 1 else t[start:start + n]).reshape(s))
            start += n
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _vjp(self, g, *xs, out, fn):
        out_shapes = self._out_shapes([x.shape for x in xs])
        if self.user_vjp is not None:
            cots = self.user_vjp(self._split(g, out_shapes), *xs, out=self._split(out, out_shapes))
            return tuple(cots)
        if runtime.arch() == "vulkan":
            raise RuntimeError(VULKAN_MSG.format(name=self.name))
        flat = self.grad_prim(g, *xs, fn=self)
        cots, start = [], 0
        for x in xs:
            cots.append(flat[start:start + x.size].reshape(x.shape))
            start += x.size
        return tuple(cots)

    def _jvp(self, tangents, *xs, out, fn):
        out_shapes = self._out_shapes([x.shape for x in xs])
        t = self.user_jvp(tangents, *xs, out=self._split(out, out_shapes))
        if isinstance(t, (tuple, list)):
            from .ops import concat
            t = concat([ti.reshape(-1) for ti in t])
        return t.reshape(out.shape)

    def _grad_forward(self, g, *xs, fn):
        """Cotangents of all inputs, concatenated flat, from Taichi's ``kernel.grad``.

        The kernel is not re-run first: Taichi's adjoint recomputes what it needs from the inputs
        (so kernels must not read their outputs, as Taichi's autodiff rules require anyway)."""
        ti = runtime.ensure_init()
        K = copy_kernels()
        dtype = g.dtype
        npdt = backend.NP_DTYPES[dtype]
        out_shapes = self._out_shapes([x.shape for x in xs])
        key = (dtype, tuple(x.shape for x in xs), tuple(out_shapes))
        bufs = self._grad_bufs.get(key)
        if bufs is None:
            tdt = backend.ti_dtype(dtype)
            bufs = self._grad_bufs[key] = ([ti.ndarray(tdt, x.shape, needs_grad=True) for x in xs],
                                           [ti.ndarray(tdt, s, needs_grad=True) for s in out_shapes])
        ins, outs = bufs
        for x, a in zip(xs, ins):
            K["load"](np.ascontiguousarray(backend.to_numpy(x._buf, (x.size,), dtype)), a, a.grad)
        gflat = np.ascontiguousarray(backend.to_numpy(g._buf, (g.size,), dtype))
        start = 0
        for s, o in zip(out_shapes, outs):
            n = math.prod(s)
            K["put"](gflat[start:start + n], o.grad)
            start += n
        self.kernel.grad(*ins, *outs, *self.constants)
        flat = np.empty(sum(x.size for x in xs), npdt)
        start = 0
        for x, a in zip(xs, ins):
            K["get"](a.grad, flat[start:start + x.size])
            start += x.size
        return backend.from_numpy(flat, dtype) if not backend.on_host() else flat, (flat.size,), dtype

    def _no_second_order(self, *args, **kwargs):
        raise NotImplementedError(FIRST_ORDER_MSG.format(name=self.name))


def taichi_function(kernel=None, *, inputs, outputs, constants=(), name=None, validate=True):
    """Wrap a ``@ti.kernel`` over ndarrays as a differentiable function of Tensors.

    Args:
        kernel: a ``@ti.kernel`` taking ``(*inputs, *outputs, *constants)`` as ndarrays.
        inputs: shapes of the input arrays, a list of tuples or a dict ``{name: shape}``. Tensors
            passed to the function must have exactly these shapes and one float dtype.
        outputs: shapes of the output arrays (list or dict); an entry may be a callable of the input
            shapes. Outputs start zeroed and get the inputs' dtype.
        constants: extra arguments passed unchanged after the outputs (e.g. int32 index arrays as
            numpy arrays on CPU, ``ti.ndarray`` on device). Not differentiated.
        name: name used in errors (default: the kernel's function name).
        validate: on CPU, check after each forward that the kernel left its inputs unchanged
            (one copy of the inputs per call); set False in hot loops once the kernel is tested.

    Returns:
        A :class:`TaichiFunction` ``f``; ``f(*tensors)`` returns a Tensor (or a tuple for several
        outputs). First order through Taichi's ``kernel.grad``; ``f.def_vjp(rule)`` with a rule in
        sciml ops makes it differentiable to any order (and on Vulkan). Used without ``kernel`` it is
        a decorator: ``@taichi_function(inputs=..., outputs=...)`` above ``@ti.kernel``.

    Example:
        >>> f = sm.taichi_function(smooth, inputs={"u": (8,), "w": (1,)}, outputs={"out": (8,)})
        >>> y = f(sm.linspace(0, 1, 8), sm.tensor([2.0]))
    """
    def wrap(k):
        return TaichiFunction(k, inputs, outputs, constants, name, validate)
    return wrap if kernel is None else wrap(kernel)
