"""Elementwise primitives: unary maps, broadcasting binary maps, comparisons, where, astype."""
from __future__ import annotations

import math
import numbers

from ... import backend
from ...kernels import elementwise as E
from ...kernels import rows as KR
from ..backward import needs
from ..primitive import Primitive
from ..tensor import Tensor, as_tensor, canonical_dtype
from ._util import batch_size, broadcast_shapes, check_float, lift, operands


# --- unary -------------------------------------------------------------------------------
def _unary_forward(op):
    def forward(x):
        if x.dtype not in ("float32", "float64"):
            check_float(op, x)
        n = x.size
        out = backend.empty(n, x.dtype)
        if n:
            E.unary(op, x._buf, out, n, x.dtype)
        return out, x.shape, x.dtype
    return forward


def _unary(op, deriv, times=None):
    """A unary primitive whose Jacobian is diag(deriv(x, out)); deriv None = zero derivative.
    ``times(g, x, out)``, if given, computes g * deriv(x, out) in one kernel (a derivative product)."""
    prim = Primitive(op, _unary_forward(op))
    if deriv is None:
        prim.def_vjp(lambda g, x, out: (None,))
        prim.def_jvp(lambda ts, x, out: None)
    elif times is not None:
        prim.def_vjp(lambda g, x, out: (times(g, x, out),))
        prim.def_jvp(lambda ts, x, out: times(ts[0], x, out))
    else:
        prim.def_vjp(lambda g, x, out: (g * deriv(x, out),))
        prim.def_jvp(lambda ts, x, out: ts[0] * deriv(x, out))
    prim.def_batched_jvp(lambda ts, x, out: prim.jvp(ts, x, out=out))  # elementwise: (B,)+s * s broadcasts

    def fn(x):
        return prim(_as_float(op, x))
    fn.__name__ = op
    fn.primitive = prim
    return fn


def _as_float(name, x):
    x = as_tensor(x)
    if x.dtype not in ("float32", "float64"):
        if x.dtype in ("int32", "bool"):
            from ...runtime import default_dtype
            return x.astype(default_dtype())
        check_float(name, x)
    return x


neg = _unary("neg", None)
neg.primitive.def_vjp(lambda g, x, out: (-g,))
neg.primitive.def_jvp(lambda ts, x, out: -ts[0])
exp = _unary("exp", lambda x, out: out)
log = _unary("log", lambda x, out: reciprocal(x))
sin = _unary("sin", lambda x, out: cos(x))
cos = _unary("cos", lambda x, out: -sin(x))
tanh = _unary("tanh", lambda x, out: 1.0 - square(out), lambda g, x, out: tanh_grad(g, out))
sigmoid = _unary("sigmoid", lambda x, out: out * (1.0 - out), lambda g, x, out: sigmoid_grad(g, out))
relu = _unary("relu", lambda x, out: step(x), lambda g, x, out: relu_grad(g, x))
softplus = _unary("softplus", lambda x, out: sigmoid(x))
sqrt = _unary("sqrt", lambda x, out: 0.5 * reciprocal(out))
abs = _unary("abs", lambda x, out: sign(x))
square = _unary("square", lambda x, out: 2.0 * x, lambda g, x, out: twice_mul(g, x))
reciprocal = _unary("reciprocal", lambda x, out: -square(out))
sign = _unary("sign", None)
step = _unary("step", None)
floor = _unary("floor", None)
_TWO_RSQPI = 2.0 / math.sqrt(math.pi)
log1p = _unary("log1p", lambda x, out: reciprocal(1.0 + x))
expm1 = _unary("expm1", lambda x, out: exp(x))
erf = _unary("erf", lambda x, out: _TWO_RSQPI * exp(-square(x)))
erfc = _unary("erfc", lambda x, out: -_TWO_RSQPI * exp(-square(x)))
tan = _unary("tan", lambda x, out: 1.0 + square(out))
sinh = _unary("sinh", lambda x, out: cosh(x))
cosh = _unary("cosh", lambda x, out: sinh(x))
arcsin = _unary("arcsin", lambda x, out: reciprocal(sqrt(1.0 - square(x))))
arccos = _unary("arccos", lambda x, out: -reciprocal(sqrt(1.0 - square(x))))
arctan = _unary("arctan", lambda x, out: reciprocal(1.0 + square(x)))
arcsinh = _unary("arcsinh", lambda x, out: reciprocal(sqrt(square(x) + 1.0)))
arccosh = _unary("arccosh", lambda x, out: reciprocal(sqrt(square(x) - 1.0)))
arctanh = _unary("arctanh", lambda x, out: reciprocal(1.0 - square(x)))
_finite_or_zero = _unary("finite_or_zero", None)  # logsumexp's shift (internal)


def _classify(op):
    def forward(x):
        out = backend.empty(x.size, "bool")
        if x.size:
            E.classify(op, x._buf, out, x.size, x.dtype)
        return out, x.shape, "bool"
    prim = Primitive(op, forward, order=0)

    def fn(x):
        """numpy's ``{op}``: a bool Tensor, elementwise (integers are finite, never NaN or inf)."""
        x = as_tensor(x)
        if x.dtype not in ("float32", "float64"):
            from ...runtime import default_dtype
            x = x.astype(default_dtype())
        return prim(x)
    fn.__name__ = op
    fn.__doc__ = fn.__doc__.format(op=op)
    return fn


isnan, isinf, isfinite = _classify("isnan"), _classify("isinf"), _classify("isfinite")


# --- binary ------------------------------------------------------------------------------
def sum_to(g: Tensor, shape: tuple) -> Tensor:
    """Sum ``g`` over the axes that broadcasting added or stretched, giving ``shape``."""
    if g.shape == shape:
        return g
    from .reduce import sum as _sum
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    r = _sum(g, axes, keepdims=True) if axes else g
    return r.reshape(shape)


def _bcast(t, shape):
    if t.shape == shape:
        return t
    from .reduce import broadcast_to
    return broadcast_to(t, shape)


def _binary_forward(op, out_dtype=None):
    def forward(x, y):
        shape = x.shape
        if shape == y.shape:  # no broadcasting (the common case): straight to the flat kernel
            od = out_dtype or x.dtype
            n = math.prod(shape)
            out = backend.empty(n, od)
            if n:
                E.binary_same(op, x._buf, y._buf, out, n, x.dtype, od)
            return out, shape, od
        shape = broadcast_shapes(op, x.shape, y.shape)
        od = out_dtype or x.dtype
        n = math.prod(shape)
        out = backend.empty(n, od)
        if n:
            xb, xs, yb, ys = x._buf, x.shape, y._buf, y.shape
            if n >= _EXPAND_MIN and backend.on_host():
                mode = E.binary_mode(xs, ys, shape)
                if mode == "gen" and od == x.dtype and KR.general_binary(op, xb, yb, out, xs, ys, shape, x.dtype):
                    return out, shape, od
                if mode == "gen":
                    # e.g. (B, m, n) + (B, 1, n) of batched tangents: the general-broadcast kernel divides per
                    # axis per element; a row-wise one (above) or a row-wise broadcast of the operand(s) plus a
                    # same/suffix kernel is ~5x faster
                    yb, ys = _expand(y, shape)
                    mode = E.binary_mode(xs, ys, shape)
                    if mode == "gen":
                        xb, xs = _expand(x, shape)
                        mode = "same"
                if mode in ("ysuf", "xsuf") and od == x.dtype:  # (B,) + s op s: one row per iteration
                    inner = math.prod(ys if mode == "ysuf" else xs)
                    if KR.suffix_binary(op, xb, yb, out, n // inner, inner, mode == "ysuf", x.dtype):
                        return out, shape, od
            E.binary(op, xb, yb, out, xs, ys, shape, x.dtype, od)
        return out, shape, od
    return forward


_EXPAND_MIN = 1 << 12


def _expand(t, shape):
    from .reduce import _broadcast_forward
    if t.shape == shape:
        return t._buf, t.shape
    return _broadcast_forward(t, shape)[:2]


def _binary(op, vjp, jvp):
    prim = Primitive(op, _binary_forward(op))
    prim.def_vjp(lambda g, x, y, out: tuple(None if r is None or not needs(i) else sum_to(r, s.shape)
                                           for i, (r, s) in enumerate(zip(vjp(g, x, y, out), (x, y)))))
    prim.def_jvp(jvp)
    # batched: lift each (B,)+x.shape tangent to rank out.ndim + 1; the rule then broadcasts correctly
    # and _lin broadcasts the sum to (B,)+out.shape
    @prim.def_batched_jvp
    def _bjvp(ts, x, y, out):
        r = _pair_rule(op, ts, x, y)
        return r if r is not None else prim.jvp((lift(ts[0], out.ndim), lift(ts[1], out.ndim)), x, y, out=out)

    def fn(x, y):
        x, y = operands(op, x, y)
        return prim(x, y)
    fn.__name__ = op
    fn.primitive = prim
    return fn


def _pair_rule(op, ts, x, y):
    """Batched product rule in one kernel (ops/pair.py) when both tangents are present and nothing
    broadcasts; None otherwise (the composed rule runs)."""
    if ts[0] is None or ts[1] is None or op not in _PAIR_TERMS or x.shape != y.shape:
        return None
    from .pair import pair_sum
    op1, op2, q = _PAIR_TERMS[op]
    return pair_sum(op1, ts[0], y, op2, q(x, y), ts[1])


# op -> (op1, op2, q(x, y)): jvp = op1(t_x, y) + op2(q, t_y)
_PAIR_TERMS = {"mul": ("mul", "mul", lambda x, y: x),
               "twice_mul": ("twice_mul", "twice_mul", lambda x, y: x),
               "tanh_grad": ("tanh_grad", "twice_mul", lambda x, y: -(x * y)),
               "sigmoid_grad": ("sigmoid_grad", "mul", lambda x, y: x * (1.0 - 2.0 * y))}


def _lin(tx, ty, out, fx, fy):
    """Tangent sum fx(tx) + fy(ty), broadcast to out's shape; None terms are zero."""
    r = None
    if tx is not None:
        r = fx(tx)
    if ty is not None:
        r = fy(ty) if r is None else r + fy(ty)
    if r is None:
        return None
    # unbatched: rank(r) <= rank(out); batched (lifted tangents): rank(r) == rank(out) + 1
    return _bcast(r, out.shape if r.ndim <= len(out.shape) else r.shape[:1] + out.shape)


add = _binary("add", lambda g, x, y, out: (g, g),
              lambda ts, x, y, out: _lin(*ts, out, lambda t: t, lambda t: t))
add.primitive.def_shape(lambda x, y: (broadcast_shapes("add", x.shape, y.shape), x.dtype))
sub = _binary("sub", lambda g, x, y, out: (g, -g if needs(1) else None),
              lambda ts, x, y, out: _lin(*ts, out, lambda t: t, lambda t: -t))
mul = _binary("mul", lambda g, x, y, out: (g * y if needs(0) else None, g * x if needs(1) else None),
              lambda ts, x, y, out: _lin(*ts, out, lambda t: t * y, lambda t: x * t))
_div = _binary("div", lambda g, x, y, out: (g / y if needs(0) else None, -(g * out) / y if needs(1) else None),
               lambda ts, x, y, out: _lin(*ts, out, lambda t: t / y, lambda t: -(out * t) / y))


def div(x, y):
    """x / y elementwise: true division, as numpy (integer operands give the default float dtype)."""
    x, y = operands("div", x, y)
    if x.dtype not in ("float32", "float64"):
        from ...runtime import default_dtype
        x, y = x.astype(default_dtype()), y.astype(default_dtype())
    return _div(x, y)


div.primitive = _div.primitive


# derivative products g * f'(.) as one binary kernel each (one pass instead of f' then *); their
# own rules are sciml ops, so they differentiate to any order
relu_grad = _binary("relu_grad", lambda g, x, y, out: (relu_grad(g, y) if needs(0) else None, None),
                    lambda ts, x, y, out: _lin(ts[0], None, out, lambda t: relu_grad(t, y), None))
twice_mul = _binary("twice_mul", lambda g, x, y, out: (twice_mul(g, y) if needs(0) else None,
                                                       twice_mul(g, x) if needs(1) else None),
                    lambda ts, x, y, out: _lin(*ts, out, lambda t: twice_mul(t, y), lambda t: twice_mul(x, t)))
# tanh_grad(g, y) = g (1 - y^2): d/dg = 1 - y^2, d/dy = -2 g y
tanh_grad = _binary("tanh_grad", lambda g, x, y, out: (tanh_grad(g, y) if needs(0) else None,
                                                       -twice_mul(g * x, y) if needs(1) else None),
                    lambda ts, x, y, out: _lin(*ts, out, lambda t: tanh_grad(t, y), lambda t: twice_mul(-(x * y), t)))
# sigmoid_grad(g, y) = g y (1 - y): d/dg = y (1 - y), d/dy = g (1 - 2 y)
sigmoid_grad = _binary("sigmoid_grad", lambda g, x, y, out: (sigmoid_grad(g, y) if needs(0) else None,
                                                             g * x * (1.0 - 2.0 * y) if needs(1) else None),
                       lambda ts, x, y, out: _lin(*ts, out, lambda t: sigmoid_grad(t, y),
                                                  lambda t: x * (1.0 - 2.0 * y) * t))


def _pow_dx(x, y):
    """d/dx x**y = y x**(y-1), and 0 where y == 0 (PyTorch: also at x = 0, where 0 * 0**-1 would be NaN).
    The masked branch sees x = 1 there, so second derivatives stay finite too."""
    z = y == 0.0
    return where(z, 0.0, y * pow(where(z, 1.0, x), y - 1.0))


def _pow_dy(x, y, out):
    """d/dy x**y = x**y log(x), and 0 where x == 0 and y >= 0 (PyTorch); NaN for x < 0 (log of a negative)."""
    z = logical_and(equal(x, 0.0), greater_equal(y, 0.0))
    return where(z, 0.0, out * log(where(z, 1.0, x)))


def logical_and(a, b):
    return where(a, b, False)


_pow_b = _binary("pow", lambda g, x, y, out: (g * _pow_dx(x, y) if needs(0) else None,
                                             g * _pow_dy(x, y, out) if needs(1) else None),
                 lambda ts, x, y, out: _lin(*ts, out, lambda t: t * _pow_dx(x, y), lambda t: t * _pow_dy(x, y, out)))
# x ** c for a Python number c != 0 (the common x ** 3, x ** -0.5): the plain rule c x**(c-1), no masks
_pow_c = _binary("pow", lambda g, x, y, out: (g * (y * pow(x, y - 1.0)) if needs(0) else None, None),
                 lambda ts, x, y, out: _lin(ts[0], None, out, lambda t: t * (y * pow(x, y - 1.0)), None))
_ipow = Primitive("ipow", _binary_forward("ipow"), order=0)


def pow(x, y):
    """x ** y elementwise, as numpy: integer ** non-negative integer stays integer; ``x ** 2``, ``x ** 0.5``
    use square and sqrt. Derivatives follow PyTorch where numpy has none (see docs/CORE.md)."""
    if isinstance(y, numbers.Number) and not isinstance(y, bool) and isinstance(x, Tensor):
        if x.dtype in ("float32", "float64"):
            if y == 2:
                return square(x)
            if y == 1:
                return x
            if y == 0.5:
                return sqrt(x)
            if y == -1:
                return reciprocal(x)
            if y == 0:  # 1 everywhere (NaN ** 0 = 1, as numpy), zero derivative
                from ..tensor import ones_like
                return ones_like(x)
            if math.isfinite(y):
                return _pow_c(x, y)
    x, y = operands("pow", x, y)
    if x.dtype in ("int32", "bool"):
        x, y = x.astype("int32"), y.astype("int32")
        if y.size and int(min_value(y)) < 0:
            raise ValueError("pow: integers to negative integer powers are not allowed (as in numpy); "
                             "use a float base, e.g. x.astype('float32') ** y.")
        return _ipow(x, y)
    return _pow_b(x, y)


def min_value(y):
    """The smallest entry of an int Tensor (a host read: integer exponents are never differentiated)."""
    import numpy as np
    return np.min(y.numpy())


# derivative weight of maximum(a, b) in a (kernel max_weight): 1 where a wins, 1/2 on ties (PyTorch), 0 where
# b wins, NaN where a or b is NaN; piecewise constant, so no derivative of its own
_max_weight = Primitive("max_weight", _binary_forward("max_weight"), order=0)
maximum = _binary("maximum", lambda g, x, y, out: (g * _max_weight(x, y) if needs(0) else None,
                                                   g * _max_weight(y, x) if needs(1) else None),
                  lambda ts, x, y, out: _lin(*ts, out, lambda t: t * _max_weight(x, y),
                                             lambda t: t * _max_weight(y, x)))
minimum = _binary("minimum", lambda g, x, y, out: (g * _max_weight(y, x) if needs(0) else None,
                                                   g * _max_weight(x, y) if needs(1) else None),
                  lambda ts, x, y, out: _lin(*ts, out, lambda t: t * _max_weight(y, x),
                                             lambda t: t * _max_weight(x, y)))


def clip(x, lo=None, hi=None):
    """Clamp ``x`` to [lo, hi] (either may be None), as ``numpy.clip``: NaN stays NaN, lo > hi gives hi.
    The derivative is 1 on the closed interval [lo, hi], bounds included (PyTorch's clamp), 0 outside."""
    x = as_tensor(x)
    if lo is not None:
        x = where(less(x, lo), lo, x)
    if hi is not None:
        x = where(greater(x, hi), hi, x)
    return x


_atan2 = _binary("atan2", lambda g, x, y, out: (g * y / (square(x) + square(y)) if needs(0) else None,
                                               -(g * x) / (square(x) + square(y)) if needs(1) else None),
                lambda ts, x, y, out: _lin(*ts, out, lambda t: t * y / (square(x) + square(y)),
                                           lambda t: -(t * x) / (square(x) + square(y))))


def atan2(x, y):
    """arctan(x / y) elementwise in the quadrant of the point (y, x), as ``numpy.arctan2(x, y)``."""
    x, y = operands("atan2", x, y)
    if x.dtype not in ("float32", "float64"):
        from ...runtime import default_dtype
        x, y = x.astype(default_dtype()), y.astype(default_dtype())
    return _atan2(x, y)


atan2.primitive = _atan2.primitive


# --- comparisons, where ------------------------------------------------------------------
def _compare(op):
    prim = Primitive(op, _binary_forward(op, "bool"), order=0)

    def fn(x, y):
        x, y = operands(op, x, y)
        if x.dtype == "bool":
            x, y = x.astype("int32"), y.astype("int32")
        return prim(x, y)
    fn.__name__ = op
    return fn


less, less_equal = _compare("lt"), _compare("le")
greater, greater_equal = _compare("gt"), _compare("ge")
equal, not_equal = _compare("eq"), _compare("ne")


def _where_forward(c, x, y):
    shape = broadcast_shapes("where", c.shape, x.shape, y.shape)
    n = math.prod(shape)
    out = backend.empty(n, x.dtype)
    if n:
        E.where(c._buf, x._buf, y._buf, out, c.shape, x.shape, y.shape, shape, x.dtype)
    return out, shape, x.dtype


_where = Primitive("where", _where_forward)


@_where.def_vjp
def _where_vjp(g, c, x, y, out):
    z = _zero_like(g)
    return (None, sum_to(_where(c, g, z), x.shape) if needs(1) else None,
            sum_to(_where(c, z, g), y.shape) if needs(2) else None)


def _zero_like(g):
    from ..tensor import scalar
    return scalar(0.0, g.dtype)


@_where.def_jvp
def _where_jvp(ts, c, x, y, out):
    tx = ts[1] if ts[1] is not None else _zero_like(out)
    ty = ts[2] if ts[2] is not None else _zero_like(out)
    return _bcast(_where(c, tx, ty), out.shape)


@_where.def_batched_jvp
def _where_bjvp(ts, c, x, y, out):
    nb = batch_size(ts[1:])
    tx = lift(ts[1], out.ndim) if ts[1] is not None else _zero_like(out)
    ty = lift(ts[2], out.ndim) if ts[2] is not None else _zero_like(out)
    return _bcast(_where(c, tx, ty), (nb,) + out.shape)


def where(cond, x, y):
    """``x`` where ``cond`` is true, else ``y``, with numpy broadcasting over all three."""
    cond = as_tensor(cond)
    if cond.dtype != "bool":
        cond = not_equal(cond, 0)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        from ...runtime import default_dtype
        x = as_tensor(x, default_dtype())
    x, y = operands("where", x, y)
    return _where(cond, x, y)


# --- casts -------------------------------------------------------------------------------
def _astype_forward(x, dtype):
    out = backend.empty(x.size, dtype)
    if x.size:
        E.cast(x._buf, out, x.size, x.dtype, dtype)
    return out, x.shape, dtype


_astype = Primitive("astype", _astype_forward)
_astype.def_vjp(lambda g, x, out, dtype: (g.astype(x.dtype) if x.dtype in ("float32", "float64") else None,))
_astype.def_jvp(lambda ts, x, out, dtype: ts[0].astype(dtype) if dtype in ("float32", "float64") else None)
_astype.def_batched_jvp(_astype.jvp)


def astype(x, dtype):
    """``x`` converted to ``dtype`` ("float32" | "float64" | "int32" | "bool")."""
    dt = canonical_dtype(dtype)
    x = as_tensor(x)
    if dt == x.dtype:
        return x
    if dt == "bool":
        return not_equal(x, 0)
    return _astype(x, dtype=dt)
