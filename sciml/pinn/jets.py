"""Truncated Taylor series (jets) of pointwise functions of the points, in sciml ops.

A :class:`JetTensor` is a Tensor (its value, ``(n, k)``) that also carries the input
derivatives of that value at each point: a dict multi-index -> ``(n, k)`` Tensor for every
multi-index of a set closed under taking sub-multi-indices (``spec``; ``()`` the value, absent
= zero). Running a user's function (an output transform ``g(x, y)``, a feature transform
``f(x)``, even a whole network's ``apply``) on JetTensors while :func:`recording` is active
routes every sciml primitive that sees a JetTensor to its jet rule here: linear ops act on
each coefficient, products follow Leibniz's rule, unary functions Faa di Bruno's formula (set
partitions of the multi-index, each block a coefficient of the argument). Every multi-index is
computed once (nested forward mode computes the 2^order products of a d^k along one direction).
The coefficients are ordinary Tensors, so reverse mode differentiates the result w.r.t.
whatever the jets were built from (the network's parameters).

A primitive without a jet rule raises :class:`Unsupported` (the caller falls back to nested
forward mode). Example:
    >>> xs = jets.variables(x, [(), (0,), (0, 0)])          # x with d/dx0 = e0
    >>> with jets.recording():
    ...     u = g(xs, jets.JetTensor.of(y_coeffs, xs.spec))
    >>> u.coeff((0, 0))                                     # d2 u / dx0^2, (n, k)
"""
from __future__ import annotations

import contextlib
import itertools
import math
from collections import Counter

import numpy as np

from ..autodiff import ops as O
from ..autodiff import primitive as P
from ..autodiff.tensor import Tensor, tensor, zeros


class Unsupported(Exception):
    """A primitive saw a JetTensor but has no jet rule here."""


class JetTensor(Tensor):
    """The value (this Tensor) and its input derivatives ``coeff(m)`` (None = zero; a Python
    float = that constant at every point, which costs no launches: x[:, a]'s d/dx_a is 1.0).
    ``_onehot``: for the jet of the points themselves (:func:`variables`), multi-index ->
    the row every row of that coefficient equals (a host constant, ``e_a``); else None."""
    __slots__ = ("_c", "spec", "_onehot")

    @classmethod
    def of(cls, coeffs, spec):
        """``coeffs``: dict multi-index -> Tensor (``()`` required); ``spec``: closed index set."""
        v = coeffs[()]
        if isinstance(v, JetTensor):
            v = v.value()
        j = cls._make(v._buf, v.shape, v.dtype, v._node, v._tangents)
        j._c = {m: t for m, t in coeffs.items() if t is not None and not (type(t) is float and t == 0.0)}
        j._c[()] = v
        j.spec = spec
        j._onehot = None
        return j

    def value(self):
        return self._c[()]

    def coeff(self, m):
        """The coefficient of multi-index m: a Tensor, a float (constant) or None (zero)."""
        return self._c.get(tuple(sorted(m)))

    def coeff_tensor(self, m):
        """The coefficient of m as an (n, k) Tensor (zeros for None), or None if it is zero."""
        c = self.coeff(m)
        return _mat(c, self.shape, self.dtype) if type(c) is float else c

    def __repr__(self):
        return f"JetTensor(shape={self.shape}, coeffs={sorted(self._c, key=len)})"


def closure(derivs):
    """The multi-indices needed to compute ``derivs`` by jets: every sub-multi-index, sorted."""
    out = {()}
    for m in derivs:
        m = tuple(sorted(m))
        for r in range(1, len(m) + 1):
            out |= {tuple(sorted(c)) for c in itertools.combinations(m, r)}
    return tuple(sorted(out, key=lambda m: (len(m), m)))


def variables(x, spec):
    """The points ``x`` (n, d) as a jet: d x / d x_a = e_a, higher coefficients zero."""
    spec = tuple(spec)
    c, rows = {(): x}, {}
    d = x.shape[1]
    for m in spec:
        if len(m) == 1:
            e = np.zeros((1, d))
            e[0, m[0]] = 1.0
            c[m] = O.broadcast_to(tensor(e, x.dtype), x.shape)
            rows[m] = e[0]
    j = JetTensor.of(c, spec)
    j._onehot = rows   # its column slices have constant coefficients (see _linear)
    return j


@contextlib.contextmanager
def recording():
    """Within: primitives applied to JetTensors run their jet rules."""
    prev = P.CALL_HOOK[0]

    def hook(prim, inputs, params):
        for a in inputs:
            if type(a) is JetTensor:
                return _rule(prim, inputs, params)
        return prev(prim, inputs, params) if prev is not None else P.apply(prim, inputs, params)
    P.CALL_HOOK[0] = hook
    try:
        yield
    finally:
        P.CALL_HOOK[0] = prev


# --- combinatorics (per multi-index, cached) ------------------------------------------------
_LEIBNIZ: dict = {}
_FAA: dict = {}


def _leibniz(m):
    """[(a, m - a, multiplicity)] over the sub-multi-indices a of m (D^m (fg) = sum c D^a f D^{m-a} g)."""
    r = _LEIBNIZ.get(m)
    if r is None:
        cnt = Counter()
        for mask in itertools.product((0, 1), repeat=len(m)):
            a = tuple(i for i, s in zip(m, mask) if s)
            b = tuple(i for i, s in zip(m, mask) if not s)
            cnt[(a, b)] += 1
        r = _LEIBNIZ[m] = sorted(((a, b, c) for (a, b), c in cnt.items()), key=lambda t: (len(t[0]), t))
    return r


def _partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for k in range(len(part)):
            yield part[:k] + [[first] + part[k]] + part[k + 1:]
        yield [[first]] + part


def faa_di_bruno(m):
    """[(j, blocks, multiplicity)]: D^m f(z) = sum mult * f^(j)(z) * prod_b D^b z (j = #blocks)."""
    r = _FAA.get(m)
    if r is None:
        cnt = Counter()
        for part in _partitions(list(range(len(m)))):
            blocks = tuple(sorted((tuple(sorted(m[i] for i in b)) for b in part), key=lambda b: (len(b), b)))
            cnt[blocks] += 1
        r = _FAA[m] = sorted(((len(b), b, c) for b, c in cnt.items()), key=lambda t: (t[0], t[1]))
    return r


# --- rules --------------------------------------------------------------------------------
def _is_jet(a):
    return type(a) is JetTensor


def _spec_of(inputs):
    for a in inputs:
        if _is_jet(a):
            return a.spec
    raise AssertionError


def _val(a):
    return a._c[()] if _is_jet(a) else a


def _c(a, m):
    return a._c.get(m) if _is_jet(a) else None


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    if type(a) is float and type(b) is float:
        return a + b
    if type(a) is float:
        a, b = b, a
    return a if type(b) is float and b == 0.0 else a + b


def _scale(t, c):
    if type(t) is float:
        return t * float(c)
    return t if c == 1 else (-t if c == -1 else t * float(c))


def _mul(p, q):
    if type(p) is float and type(q) is float:
        return p * q
    if type(p) is float:
        return _scale(q, p)
    if type(q) is float:
        return _scale(p, q)
    return p * q


def _mat(c, shape, dtype):
    """A float coefficient as a Tensor of ``shape``."""
    return tensor(np.full(shape, c), dtype) if type(c) is float else c


def _bcast(t, shape):
    return t if t is None or type(t) is float or t.shape == shape else O.broadcast_to(t, shape)


_SHAPE_ONLY = ("view", "take", "reshape", "broadcast_to", "astype")


def _row_constant(prim, params, shape, row):
    """The one value of ``prim`` (a shape-only primitive) applied to the contiguous ``shape``
    (n, d) Tensor whose every row is the host vector ``row``, as a float; None if the result
    may hold several values (or none). Decided from the structure alone, never by reading a
    Tensor: such a coefficient is a constant made by :func:`variables` (no autodiff node, the
    same values on every call), so the float is exact for every call, traced or replayed."""
    if len(shape) != 2 or not shape[0] or shape[1] != row.size:
        return None
    d = row.size
    if prim.name == "view":   # out = flat[off + sum_j i_j * stride_j]; flat[k] = row[k % d]
        meta = params["meta"]
        off, nd = int(meta[0]), int(meta[1])
        sizes, strides = meta[2:2 + nd], meta[2 + nd:2 + 2 * nd]
        if any(int(s) == 0 for s in sizes):
            return None
        res = {off % d}
        for size, st in zip(sizes, strides):   # i * st mod d repeats within d steps
            res = {(r + i * int(st)) % d for r in res for i in range(min(int(size), d))}
        vals = {float(row[k]) for k in res}
    else:   # reshape, broadcast_to, astype, take (of rows): the values of the rows, no others
        vals = {float(v) for v in row}
    return vals.pop() if len(vals) == 1 else None


def _linear(prim, inputs, params, data):
    """A primitive linear in the inputs at positions ``data`` (others fixed): per coefficient."""
    spec = _spec_of(inputs)
    out = {(): P.apply(prim, tuple(_val(a) for a in inputs), params)}
    rows = inputs[data[0]]._onehot if prim.name in _SHAPE_ONLY and _is_jet(inputs[data[0]]) else None
    for m in spec[1:]:
        cs = [_c(inputs[i], m) for i in data]
        if all(c is None for c in cs):
            continue
        if rows and m in rows and len(data) == 1 and type(cs[0]) is not float:
            u = _row_constant(prim, params, inputs[data[0]].shape, rows[m])
            if u is not None:   # a constant coefficient (x[:, a]'s d/dx_b is 1.0 or 0.0): no launch
                out[m] = u
                continue
        if len(cs) == 1 and type(cs[0]) is float and (prim.name in _SHAPE_ONLY or prim.name == "neg"):
            out[m] = -cs[0] if prim.name == "neg" else cs[0]   # a constant stays one
            continue
        args = list(_val(a) for a in inputs)
        for i, c in zip(data, cs):
            args[i] = zeros(inputs[i].shape, inputs[i].dtype) if c is None else _mat(c, inputs[i].shape,
                                                                                   inputs[i].dtype)
        out[m] = P.apply(prim, tuple(args), params)
    return JetTensor.of(out, spec)


def _addsub(prim, inputs, params, sign):
    a, b = inputs
    spec = _spec_of(inputs)
    v = P.apply(prim, (_val(a), _val(b)), params)
    out = {(): v}
    for m in spec[1:]:
        ca, cb = _bcast(_c(a, m), v.shape), _bcast(_c(b, m), v.shape)
        if cb is not None and sign < 0:
            cb = _scale(cb, -1)
        r = _add(ca, cb)
        if r is not None and type(r) is not float and r.shape != v.shape:
            r = O.broadcast_to(r, v.shape)
        if r is not None:
            out[m] = r
    return JetTensor.of(out, spec)


def _product(a, b, spec, op=None, value=None):
    """Leibniz's rule for a bilinear ``op`` (default elementwise mul)."""
    elementwise = op is None
    op = op or _mul
    out = {(): value if value is not None else op(_val(a), _val(b))}
    shape = out[()].shape
    for m in spec[1:]:
        acc = None
        for ia, ib, c in _leibniz(m):
            p = _val(a) if not ia else _c(a, ia)
            q = _val(b) if not ib else _c(b, ib)
            if p is None or q is None:
                continue
            if not elementwise:
                p, q = _mat(p, _val(a).shape, _val(a).dtype), _mat(q, _val(b).shape, _val(b).dtype)
            acc = _add(acc, _scale(op(p, q), c))
        if acc is not None:
            out[m] = _bcast(acc, shape)
    return JetTensor.of(out, spec)


def _compose(z, derivs, value, spec):
    """Faa di Bruno: f(z) with f^(j)(z0) = derivs(j) (Tensors, computed on demand)."""
    cache = {}

    def fj(j):
        if j not in cache:
            cache[j] = derivs(j)
        return cache[j]
    out = {(): value}
    for m in spec[1:]:
        acc = None
        for j, blocks, c in faa_di_bruno(m):
            prod = None
            for b in blocks:
                t = _c(z, b)
                if t is None:
                    prod = None
                    break
                prod = t if prod is None else _mul(prod, t)
            if prod is None:
                continue
            acc = _add(acc, _scale(_mul(fj(j), prod), c))
        if acc is not None:
            out[m] = acc
    return JetTensor.of(out, spec)


def _poly(coefs, t):
    """sum_k coefs[k] t^k (Horner), coefs from low to high degree."""
    coefs = [float(c) for c in coefs]
    while len(coefs) > 1 and coefs[-1] == 0.0:
        coefs.pop()
    acc = None
    for c in reversed(coefs):
        if acc is None:
            acc = t * 0.0 + c
        else:
            acc = acc * t
            if c:
                acc = acc + c
    return acc


def _poly_derivs(first, base):
    """Polynomials P_j (numpy coefficient arrays) with P_1 = first, P_{j+1} = P_j' * base."""
    P_ = [None, np.asarray(first, float)]
    for _ in range(8):
        P_.append(np.polynomial.polynomial.polymul(np.polynomial.polynomial.polyder(P_[-1]), base))
    return P_


_TANH = _poly_derivs([1.0, 0.0, -1.0], [1.0, 0.0, -1.0])        # in t = tanh z
_SIGMOID = _poly_derivs([0.0, 1.0, -1.0], [0.0, 1.0, -1.0])     # in p = sigmoid z


def _unary_derivs(name, z0, out0, prim, params):
    """j -> f^(j)(z0) for the unary primitive ``name``."""
    if name in ("exp",):
        return lambda j: out0
    if name == "expm1":
        return lambda j: out0 + 1.0
    if name in ("sin", "cos"):
        cyc = [O.sin(z0), O.cos(z0)]
        start = 0 if name == "sin" else 1

        def f(j):
            k = (start + j) % 4   # sin, cos, -sin, -cos
            t = cyc[k % 2]
            return -t if k >= 2 else t
        return f
    if name in ("sinh", "cosh"):
        other = O.cosh(z0) if name == "sinh" else O.sinh(z0)
        return lambda j: other if j % 2 else out0
    if name == "tanh":
        return lambda j: _poly(_TANH[j], out0)
    if name == "sigmoid":
        return lambda j: _poly(_SIGMOID[j], out0)
    if name == "softplus":
        p = O.sigmoid(z0)
        return lambda j: p if j == 1 else _poly(_SIGMOID[j - 1], p)
    if name in ("log", "log1p"):
        r = O.reciprocal(z0 if name == "log" else z0 + 1.0)
        return lambda j: _scale(r ** j if j > 1 else r, (-1) ** (j - 1) * math.factorial(j - 1))
    if name == "reciprocal":
        return lambda j: _scale(out0 ** (j + 1), (-1) ** j * math.factorial(j))
    if name == "sqrt":
        r = O.reciprocal(z0)
        return lambda j: _scale(out0 * (r ** j if j > 1 else r), math.prod(0.5 - i for i in range(j)))
    if name == "square":
        return lambda j: z0 * 2.0 if j == 1 else (z0 * 0.0 + 2.0 if j == 2 else z0 * 0.0)
    if name == "neg":
        return lambda j: z0 * 0.0 - 1.0 if j == 1 else z0 * 0.0

    def nested(j):   # any other unary primitive: nested forward mode on this one op
        from ..autodiff.tensor import ones_like
        from ..autodiff.transforms import jvp
        f = lambda z: P.apply(prim, (z,), params)  # noqa: E731
        for _ in range(j):
            f = (lambda g: lambda z: jvp(g, (z,), (ones_like(z),))[1])(f)
        return f(z0)
    return nested


_UNARY = {"exp", "expm1", "sin", "cos", "sinh", "cosh", "tanh", "sigmoid", "softplus", "log", "log1p",
          "reciprocal", "sqrt", "square", "erf", "erfc", "tan", "arctan", "arcsin", "arccos", "arcsinh",
          "arctanh", "arccosh", "gelu"}
_LINEAR1 = {"neg": (0,), "reshape": (0,), "broadcast_to": (0,), "view": (0,), "take": (0,), "sum": (0,),
            "astype": (0,), "where": (1, 2)}


def _rule(prim, inputs, params):
    name = prim.name
    spec = _spec_of(inputs)
    if name in _LINEAR1:
        data = _LINEAR1[name]
        if any(_is_jet(a) for i, a in enumerate(inputs) if i not in data):
            raise Unsupported(f"{name} of a jet in a non-linear position")
        return _linear(prim, inputs, params, data)
    if name == "concat":
        return _linear(prim, inputs, params, tuple(range(len(inputs))))
    if name in ("add", "sub"):
        return _addsub(prim, inputs, params, 1 if name == "add" else -1)
    if name == "mul":
        a, b = inputs
        return _product(a, b, spec, value=P.apply(prim, (_val(a), _val(b)), params))
    if name == "matmul":
        a, b = inputs
        if _is_jet(a) and _is_jet(b):
            return _product(a, b, spec, op=lambda p, q: P.apply(prim, (p, q), params))
        return _linear(prim, inputs, params, (0,) if _is_jet(a) else (1,))
    if name == "div":
        a, b = inputs
        if not _is_jet(b):
            return _linear(prim, inputs, params, (0,))
        rb = _unary(O.reciprocal.primitive, b, {})
        return _product(a, rb, spec) if _is_jet(a) else _product(JetTensor.of({(): a}, spec), rb, spec)
    if name == "pow":
        x, y = inputs
        if _is_jet(y):
            raise Unsupported("pow with an exponent that depends on the points")
        x0 = _val(x)
        v = P.apply(prim, (x0, y), params)

        def dj(j):
            c = y
            for i in range(1, j):
                c = c * (y - float(i))
            return c * O.pow(x0, y - float(j))
        return _compose(x, dj, v, spec)
    if name == "bias_act":   # act(h + b), MLP layers
        h, b = inputs
        if _is_jet(b):
            raise Unsupported("bias_act with a bias that depends on the points")
        h0 = _val(h)
        v = P.apply(prim, (h0, b), params)
        act = params.get("act")
        if act == "identity":
            return JetTensor.of({**h._c, (): v}, spec)
        fn = getattr(O, act, None)
        if fn is None or not hasattr(fn, "primitive"):
            raise Unsupported(f"bias_act with activation {act!r}")
        z0 = h0 + b
        return _compose(h, _unary_derivs(act, z0, v, fn.primitive, {}), v, spec)
    if name in _UNARY and len(inputs) == 1:
        return _unary(prim, inputs[0], params)
    raise Unsupported(f"no jet rule for the primitive {name!r}")


def _unary(prim, z, params):
    z0 = _val(z)
    v = P.apply(prim, (z0,), params)
    return _compose(z, _unary_derivs(prim.name, z0, v, prim, params), v, z.spec)


def run(fn, *args):
    """``fn(*args)`` with jet rules active; the result as a JetTensor (a constant result -> zero
    derivatives)."""
    spec = _spec_of(args)
    with recording():
        r = fn(*args)
    if not isinstance(r, Tensor):
        raise Unsupported(f"the function returned a {type(r).__name__}, not a Tensor")
    return r if _is_jet(r) else JetTensor.of({(): r}, spec)


__all__ = ["JetTensor", "Unsupported", "closure", "variables", "recording", "run", "faa_di_bruno"]
