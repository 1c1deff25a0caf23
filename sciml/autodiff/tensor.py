"""Tensor: a flat buffer, a shape and a dtype, plus its place on the tape.

Tensors are immutable values (no in-place ops), as in JAX; ``x.grad`` and
``requires_grad_()`` exist for users coming from PyTorch.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import backend, runtime
from .primitive import leaf_node

DTYPES = ("float32", "float64", "int32", "bool")
_ALIASES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64", np.dtype(np.int32): "int32",
            np.dtype(np.int64): "int32", np.dtype(np.bool_): "bool", "float": None, "f32": "float32",
            "f64": "float64", "int": "int32", "int64": "int32", "float16": None}
ops = None  # set by sciml.autodiff.ops (method implementations)


def canonical_dtype(dtype) -> str:
    """'float32' | 'float64' | 'int32' | 'bool' from a name, numpy dtype or None (default float)."""
    if dtype is None:
        return runtime.default_dtype()
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        key = dtype if isinstance(dtype, str) and dtype in _ALIASES else np.dtype(dtype)
    except TypeError:
        key = None
    if key in _ALIASES and _ALIASES[key] is not None:
        return _ALIASES[key]
    if key == "float":
        return runtime.default_dtype()
    raise TypeError(f"dtype: got {dtype!r}; expected one of {', '.join(DTYPES)} (or the numpy equivalents).")


class Tensor:
    """An n-dimensional array whose operations run as Taichi kernels and can be differentiated.

    Make one with :func:`sciml.tensor`; read it back with ``.numpy()``, ``.item()`` or ``float(t)``.
    """
    __slots__ = ("_buf", "shape", "dtype", "_node", "_tangents", "grad", "__weakref__")
    __array_priority__ = 100  # so that numpy_array * tensor calls Tensor.__rmul__

    @classmethod
    def _make(cls, buf, shape, dtype, node=None, tangents=None):
        t = object.__new__(cls)
        t._buf, t.shape, t.dtype, t._node, t._tangents, t.grad = buf, shape, dtype, node, tangents, None
        return t

    def __init__(self, data, dtype=None):
        src = tensor(data, dtype)
        self._buf, self.shape, self.dtype = src._buf, src.shape, src.dtype
        self._node, self._tangents, self.grad = None, None, None

    # --- basic properties ---------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d Tensor")
        return self.shape[0]

    def numpy(self) -> np.ndarray:
        """The values as a new numpy array (a copy: later changes to either do not affect the other)."""
        return np.array(backend.to_numpy(self._buf, self.shape, self.dtype))

    def item(self):
        if self.size != 1:
            raise ValueError(f"item() needs a Tensor with one element, got shape {self.shape}.")
        return backend.to_numpy(self._buf, (1,), self.dtype)[0].item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __index__(self):  # a 0-d int32 Tensor works where Python wants an int (slices, range), as numpy's
        if self.dtype != "int32" or self.ndim:
            raise TypeError(f"only 0-d int32 Tensors can be used as a Python index, got dtype {self.dtype} and "
                            f"shape {self.shape}.")
        return int(self.item())

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        body = np.array2string(self.numpy(), separator=", ", precision=6, threshold=20, prefix="Tensor(")
        extra = "" if self.dtype == runtime.default_dtype() else f", dtype={self.dtype}"
        if self._node is not None:
            extra += ", requires_grad=True"
        return f"Tensor({body}{extra})"

    # --- autodiff state -----------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._node is not None

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        """Mark this tensor as a leaf whose ``.grad`` ``backward()`` fills (PyTorch style)."""
        if flag and self._node is None:
            self._node = leaf_node(self)
            _register_owner(self)
        elif not flag:
            self._node = None
        return self

    def detach(self) -> "Tensor":
        """The same values, cut from the tape and from every forward level."""
        return Tensor._make(self._buf, self.shape, self.dtype)

    def _strip(self, level) -> "Tensor":
        if not self._tangents:
            return self
        keep = {k: v for k, v in self._tangents.items() if k < level}
        return Tensor._make(self._buf, self.shape, self.dtype, self._node, keep or None)

    def backward(self, gradient=None, create_graph: bool = False):
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf with ``requires_grad``."""
        from .backward import _toposort, backward_to
        if gradient is None and self.size != 1:
            raise ValueError(f"backward() on a Tensor of shape {self.shape} needs `gradient` of that shape; "
                             "reduce it first (.sum(), .mean()) for a scalar loss.")
        if self._node is None:
            raise RuntimeError("backward(): this Tensor does not depend on any tensor with requires_grad=True.")
        topo = _toposort([self._node], (), leaves=True)  # one walk: the leaves and the sweep's order
        leaves = [n for n in topo[0] if n.prim is None]
        seed = None if gradient is None else as_tensor(gradient, self.dtype)
        grads = backward_to([self], [seed], leaves, create_graph=create_graph, _topo=topo)
        owners = _LEAF_OWNERS
        for n, g in zip(leaves, grads):
            if g is None:
                continue
            owner = owners.get(id(n))
            if owner is None:
                continue
            prev = owner.grad
            owner.grad = g if prev is None else prev + g

    def astype(self, dtype) -> "Tensor":
        return ops.astype(self, dtype)

    # --- operators (implemented in sciml.autodiff.ops) ------------------------------------
    def __add__(self, o): return ops.add(self, o)
    def __radd__(self, o): return ops.add(o, self)
    def __sub__(self, o): return ops.sub(self, o)
    def __rsub__(self, o): return ops.sub(o, self)
    def __mul__(self, o): return ops.mul(self, o)
    def __rmul__(self, o): return ops.mul(o, self)
    def __truediv__(self, o): return ops.div(self, o)
    def __rtruediv__(self, o): return ops.div(o, self)
    def __pow__(self, o): return ops.pow(self, o)
    def __rpow__(self, o): return ops.pow(o, self)
    def __matmul__(self, o): return ops.matmul(self, o)
    def __rmatmul__(self, o): return ops.matmul(o, self)
    def __neg__(self): return ops.neg(self)
    def __pos__(self): return self
    def __abs__(self): return ops.abs(self)
    def __lt__(self, o): return ops.less(self, o)
    def __le__(self, o): return ops.less_equal(self, o)
    def __gt__(self, o): return ops.greater(self, o)
    def __ge__(self, o): return ops.greater_equal(self, o)
    def __eq__(self, o): return ops.equal(self, o)
    def __ne__(self, o): return ops.not_equal(self, o)
    __hash__ = object.__hash__
    def __getitem__(self, idx): return ops.getitem(self, idx)

    @property
    def at(self):
        """Functional updates (JAX): ``x.at[idx].set(v)``, ``.add``, ``.multiply``, ``.min``, ``.max``, ``.get``
        return a new Tensor (``x`` is unchanged), differentiable in ``x`` and ``v``."""
        from .ops.indexing import _At
        return _At(self)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    @property
    def T(self): return ops.transpose(self)
    def transpose(self, *axes): return ops.transpose(self, axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else (axes or None))
    def reshape(self, *shape): return ops.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)
    def flatten(self): return ops.reshape(self, (-1,))
    def squeeze(self, axis=None): return ops.squeeze(self, axis)
    def unsqueeze(self, axis): return ops.unsqueeze(self, axis)
    def broadcast_to(self, shape): return ops.broadcast_to(self, shape)
    def sum(self, axis=None, keepdims=False): return ops.sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return ops.mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return ops.max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return ops.min(self, axis, keepdims)
    def exp(self): return ops.exp(self)
    def log(self): return ops.log(self)
    def sin(self): return ops.sin(self)
    def cos(self): return ops.cos(self)
    def tanh(self): return ops.tanh(self)
    def sqrt(self): return ops.sqrt(self)
    def abs(self): return ops.abs(self)
    def square(self): return ops.square(self)
    def clip(self, lo=None, hi=None): return ops.clip(self, lo, hi)


_LEAF_OWNERS: dict = {}  # id(leaf node) -> Tensor, for .backward() into .grad (weak via finalizer)


def _register_owner(t: Tensor):
    import weakref
    key = id(t._node)
    _LEAF_OWNERS[key] = t
    weakref.finalize(t._node, _LEAF_OWNERS.pop, key, None)


# --- construction -------------------------------------------------------------------------
def tensor(data, dtype=None) -> Tensor:
    """A Tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays or a Tensor).

    Args:
        data: array-like of any shape.
        dtype: "float32" | "float64" | "int32" | "bool"; default: float data -> the default float
            dtype (``sciml.init``), integer data -> int32, bool -> bool.
    Example:
        >>> sm.tensor([[1.0, 2.0], [3.0, 4.0]]).shape
        (2, 2)
    """
    if isinstance(data, Tensor):
        return data if dtype is None or canonical_dtype(dtype) == data.dtype else data.astype(dtype)
    try:
        a = np.asarray(data)
    except (ValueError, TypeError) as e:
        raise ValueError(f"sciml.tensor(data): could not make an array of {type(data).__name__} data ({e}); "
                         "expected numbers or equally long nested sequences of numbers.") from None
    if dtype is None:
        if a.dtype == np.bool_:
            dt = "bool"
        elif np.issubdtype(a.dtype, np.integer):
            dt = "int32"
        elif np.issubdtype(a.dtype, np.floating):
            dt = runtime.default_dtype()  # as in JAX: float data takes the default float dtype
        else:
            raise TypeError(f"sciml.tensor(data): got numpy dtype {a.dtype}; expected numbers (float, int or bool).")
    else:
        dt = canonical_dtype(dtype)
    if dt in ("float32", "float64") and a.dtype.kind not in "fiub":
        raise TypeError(f"sciml.tensor(data): got numpy dtype {a.dtype}; expected numbers.")
    if dt == "int32" and a.size and a.dtype.kind in "iuf":
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise ValueError("sciml.tensor(data): NaN or infinite values cannot be stored in dtype int32.")
        if a.max() > 2**31 - 1 or a.min() < -2**31:
            raise ValueError("sciml.tensor(data): integer values do not fit in int32.")
    if dt == "bool" and a.dtype != np.bool_:
        a = a.astype(np.bool_)  # nonzero -> True, as numpy's cast
    return Tensor._make(backend.from_numpy(a, dt), tuple(int(s) for s in a.shape), dt)


def as_tensor(x, dtype=None) -> Tensor:
    """``x`` if it already is a Tensor, else ``tensor(x, dtype)``."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, numbers.Number) and dtype is not None:
        return scalar(x, dtype)
    return tensor(x, dtype)


_scalars: dict = {}


def scalar(v, dtype: str) -> Tensor:
    """A cached 0-d constant (Python numbers inside expressions)."""
    f = float(v)
    key = (f, dtype, math.copysign(1.0, f))  # -0.0 == 0.0: the sign keeps them apart
    t = _scalars.get(key)
    if t is None:
        if len(_scalars) > 2048:
            _scalars.clear()
        t = _scalars[key] = tensor(np.asarray(v), dtype)
    return t


def _is_int(v) -> bool:
    if type(v) is int:  # noqa: E721 (the common case, without isinstance against ABCs: ~2 us here)
        return True
    return isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_int(name, arg, v, minimum=None):
    """``v`` as a Python int; a bool, float or anything else is a TypeError naming ``arg``."""
    if type(v) is int and minimum is None:  # noqa: E721
        return v
    if not _is_int(v):
        raise TypeError(f"{name}: {arg}={v!r} ({type(v).__name__}); expected an integer.")
    v = int(v)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name}: {arg}={v}; expected an integer >= {minimum}.")
    return v


def shape_tuple(name, shape, arg="shape"):
    """A shape as a tuple of non-negative ints from an int or a sequence of ints."""
    if type(shape) is tuple and all(type(s) is int and s >= 0 for s in shape):  # noqa: E721 (fast path)
        check_size(name, shape)
        return shape
    if _is_int(shape):
        shape = (shape,)
    elif isinstance(shape, np.ndarray) and shape.ndim == 1:
        shape = tuple(shape.tolist())
    elif not isinstance(shape, (tuple, list)):
        raise TypeError(f"{name}: {arg}={shape!r} ({type(shape).__name__}); expected an int or a tuple of ints.")
    out = []
    for s in shape:
        if not _is_int(s):
            raise TypeError(f"{name}: {arg}={tuple(shape)!r} holds {s!r} ({type(s).__name__}); "
                            "expected integers.")
        if s < 0:
            raise ValueError(f"{name}: {arg}={tuple(shape)!r} has a negative size {s}; expected sizes >= 0.")
        out.append(int(s))
    check_size(name, out)
    return tuple(out)


MAX_ELEMENTS = 2**31 - 1  # kernels index with int32


def check_size(name, shape):
    """A ValueError when ``shape`` holds more elements than a kernel can index."""
    n = math.prod(shape)
    if n > MAX_ELEMENTS:  # (plain ints: no overflow in Python)
        raise ValueError(f"{name}: shape {tuple(shape)} holds {n} elements; sciml kernels index with int32, so at "
                         f"most {MAX_ELEMENTS} elements per Tensor.")


def _shape_arg(shape, name="shape"):
    return shape_tuple(name, shape)


def _fill_value(name, value, dt):
    """``value`` as the Python number a fill kernel of dtype ``dt`` takes (numpy's casts; NaN, inf
    or out-of-range values for int32 are errors)."""
    if type(value) is float and dt in ("float32", "float64"):  # noqa: E721 (fast path)
        return value
    if isinstance(value, Tensor) and value.size == 1:
        value = value.item()
    elif isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: fill value {value!r} ({type(value).__name__}); expected a real number.")
    if dt == "bool":
        return int(bool(value))
    if dt == "int32":
        if not math.isfinite(value):
            raise ValueError(f"{name}: fill value {value} cannot be stored in dtype int32.")
        v = int(value)
        if not -2**31 <= v < 2**31:
            raise ValueError(f"{name}: fill value {value} does not fit in int32.")
        return v
    return float(value)


def full(shape, value, dtype=None) -> Tensor:
    """A Tensor of ``shape`` filled with ``value`` (a real number; dtype as in :func:`tensor`)."""
    from ..kernels import elementwise as E
    shape, dt = _shape_arg(shape, "full"), canonical_dtype(dtype)
    value = _fill_value("full", value, dt)
    n = math.prod(shape)
    if not n:
        return Tensor._make(backend.empty(0, dt), shape, dt)
    if value == 0:
        return Tensor._make(backend.zeros(n, dt), shape, dt)
    buf = backend.empty(n, dt)
    E.fill(buf, value, n, dt)
    return Tensor._make(buf, shape, dt)


def zeros(shape, dtype=None) -> Tensor:
    """A Tensor of zeros (shape: an int or a tuple of ints)."""
    shape, dt = _shape_arg(shape, "zeros"), canonical_dtype(dtype)
    return Tensor._make(backend.zeros(math.prod(shape), dt), shape, dt)


def ones(shape, dtype=None) -> Tensor:
    """A Tensor of ones (shape: an int or a tuple of ints)."""
    shape = _shape_arg(shape, "ones")
    return full(shape, 1, dtype)


def zeros_like(x: Tensor, dtype=None) -> Tensor:
    return zeros(as_tensor(x).shape, dtype or as_tensor(x).dtype)


def ones_like(x: Tensor, dtype=None) -> Tensor:
    return ones(as_tensor(x).shape, dtype or as_tensor(x).dtype)


def _real(name, arg, v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name}: {arg}={v!r} ({type(v).__name__}); expected a real number.")
    if not math.isfinite(v):
        raise ValueError(f"{name}: {arg}={v}; expected a finite number.")
    return v


def arange(start, stop=None, step=1, dtype=None) -> Tensor:
    """Like numpy.arange: int32 for integer arguments, the default float dtype otherwise."""
    start = _real("arange", "start", start)
    stop = None if stop is None else _real("arange", "stop", stop)
    step = _real("arange", "step", step)
    if step == 0:
        raise ValueError("arange: step=0; expected a nonzero step.")
    lo, hi = (0, start) if stop is None else (start, stop)
    n = max(0, math.ceil((hi - lo) / step))
    if n > 2**31 - 1:
        raise ValueError(f"arange: {n} elements; expected at most 2**31 - 1.")
    a = np.arange(start, stop, step) if stop is not None else np.arange(start, step=step)
    return tensor(a, dtype)


def linspace(start, stop, num=50, dtype=None) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive (numpy.linspace)."""
    start, stop = _real("linspace", "start", start), _real("linspace", "stop", stop)
    num = check_int("linspace", "num", num, 0)
    check_size("linspace", (num,))
    return tensor(np.linspace(start, stop, num), dtype or runtime.default_dtype())


def eye(n, m=None, dtype=None) -> Tensor:
    """The identity matrix of shape (n, m) (m defaults to n)."""
    n = check_int("eye", "n", n, 0)
    m = n if m is None else check_int("eye", "m", m, 0)
    check_size("eye", (n, m))
    return tensor(np.eye(n, m), dtype or runtime.default_dtype())


def _gen(seed, name="rand"):
    if seed is not None and (not isinstance(seed, (numbers.Integral, np.integer)) or isinstance(seed, bool)
                             or seed < 0):
        raise TypeError(f"{name}: seed={seed!r} ({type(seed).__name__}); expected a non-negative integer or None.")
    if seed is None:
        backend.traced_random("sciml.rand/randn from the default stream")
    return runtime.default_rng() if seed is None else np.random.default_rng(seed)


def _float_dtype(name, dtype):
    dt = canonical_dtype(dtype)
    if dt not in ("float32", "float64"):
        raise TypeError(f"{name}: dtype={dtype!r}; expected float32 or float64 (random draws are floats).")
    return dt


def rand(*shape, seed=None, dtype=None) -> Tensor:
    """Uniform [0, 1) samples. Random numbers come from numpy's PCG64 stream (seeded), so a seed
    gives the same values on every arch."""
    shape = _shape_arg(shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape,
                       "rand")
    return tensor(_gen(seed).random(shape), _float_dtype("rand", dtype))


def randn(*shape, seed=None, dtype=None) -> Tensor:
    """Standard normal samples (see :func:`rand` for seeding)."""
    shape = _shape_arg(shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape,
                       "randn")
    return tensor(_gen(seed, "randn").standard_normal(shape), _float_dtype("randn", dtype))
