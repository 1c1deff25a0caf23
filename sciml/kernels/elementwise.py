"""Elementwise kernels: unary maps, binary maps with numpy broadcasting, where, compare.

Broadcast modes (chosen in Python, see ``binary_mode``):
  "same"  x, y and out share one shape: a flat loop.
  "xs"/"ys"  x (or y) has one element.
  "xsuf"/"ysuf"  x (or y) equals the trailing dims of out: ``y[i % m]`` (bias adds).
  "gen"   anything else numpy allows: flat index -> multi-index through a cached metadata
          buffer ``[rank, shape..., strides_x..., strides_y...]`` (stride 0 = broadcast).
"""

import math
import os

from . import _common as C
from . import fma_tile as FT
from . import _vec as V
from . import _warm as W

_F32_TANH = (4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08,
             -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16,
             4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06)


_RATIO = []


def _tanh_ratio():
    """The float32 rational tanh p(x)/q(x) on x clamped to +-7.9 (Eigen/XLA), scalar or vector x."""
    if _RATIO:
        return _RATIO[0]
    ti = C.ti()
    a1, a3, a5, a7, a9, a11, a13, b0, b2, b4, b6 = _F32_TANH

    @ti.func
    def ratio(x):
        # clamp with ordered compares, not ti.min/ti.max (they return the other operand for NaN):
        # NaN passes through and gives NaN; +-inf clamp to +-1
        c = ti.cast(7.90531110763549805, ti.f32)  # typed: a f64 literal would make a f64 vector
        xc = ti.select(x > c, c, ti.select(x < -c, -c, x))
        x2 = xc * xc
        p = x2 * a13 + a11
        p = x2 * p + a9
        p = x2 * p + a7
        p = x2 * p + a5
        p = x2 * p + a3
        p = x2 * p + a1
        p = xc * p
        q = x2 * b6 + b4
        q = x2 * q + b2
        q = x2 * q + b0
        one = ti.cast(1, ti.f32)
        sat = ti.cast(9.0, ti.f32)  # float32 tanh rounds to +-1 beyond 8.7; p/q stops at +-0.99999976
        return ti.select(x > sat, one, ti.select(x < -sat, -one, p / q))
    _RATIO.append(ratio)
    return ratio


def _funcs(dtype):
    """Taichi funcs for each unary op; float32 tanh/sigmoid use the rational form
    (Eigen/XLA, abs. error 3e-7; 7x faster than ti.tanh here), float64 the exact one."""
    ti = C.ti()
    ratio = _tanh_ratio()

    @ti.func
    def tanh32(x):
        r = ratio(x)
        if ti.abs(x) < 0.0004:
            r = x
        return r

    fast = dtype == "float32"
    tanh_f = tanh32 if fast else ti.tanh

    @ti.func
    def sigmoid(x):
        r = x * 0  # typed as x: a bare 0.0 is default_fp (float32 in a float32 process) and rounds float64
        if ti.static(fast):
            r = 0.5 * tanh32(0.5 * x) + 0.5
        else:
            r = 1.0 / (1.0 + ti.exp(-x))
        return r


    @ti.func
    def relu(x):  # ordered compares: NaN -> NaN (ti.max(NaN, 0) is 0), -0 -> +0
        return ti.select(x > 0, x, ti.select(x <= 0, 0.0, x))

    from .special import funcs as special
    log1p = special(dtype)["log1p"]

    @ti.func
    def softplus(x):  # log1p: log(1 + e^-|x|) would round to 0 below e^-37 (float64)
        return relu(x) + log1p(ti.exp(-ti.abs(x)))

    @ti.func
    def sign(x):  # NaN -> NaN as numpy; +-0 -> +-0
        return ti.select(x > 0, 1.0, ti.select(x < 0, -1.0, x))

    @ti.func
    def step(x):  # Heaviside, 0 at 0 (relu's derivative, as in PyTorch); NaN -> NaN
        return ti.select(x > 0, 1.0, ti.select(x <= 0, 0.0, x))

    @ti.func
    def neg(x):
        return -x

    @ti.func
    def square(x):
        return x * x

    @ti.func
    def reciprocal(x):
        return 1.0 / x

    nonfinite = nan_test(dtype, "nonfinite")
    T = C.backend.ti_dtype(dtype)

    @ti.func
    def finite_or_zero(x):  # the shift of logsumexp / log_softmax (scipy): a non-finite max shifts by 0
        return ti.select(nonfinite(x), ti.cast(0, T), x)

    return dict(neg=neg, exp=ti.exp, sin=ti.sin, cos=ti.cos, tanh=tanh_f, sigmoid=sigmoid,
                relu=relu, softplus=softplus, sqrt=ti.sqrt, abs=ti.abs, square=square, sign=sign, step=step,
                reciprocal=reciprocal, floor=ti.floor, finite_or_zero=finite_or_zero, **special(dtype))


def nan_test(dtype, what="nan"):
    """A ti.func on the bits of x: ``isnan(x)`` (``what="nan"``), ``not isfinite(x)`` (``"nonfinite"``) or the
    sign bit (``"signbit"``).
    Taichi compiles with fast math, which folds ``x != x`` to False and ``|x| == inf`` too (and its ``!=``
    is an ordered compare anyway), so these are integer tests."""
    ti = C.ti()
    if dtype == "float64":
        I, mask, inf = ti.i64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000
    else:
        I, mask, inf = ti.i32, 0x7FFFFFFF, 0x7F800000
    F = C.backend.ti_dtype(dtype)
    nonfinite = what == "nonfinite"

    @ti.func
    def test(x):
        b = ti.bit_cast(ti.cast(x, F), I)
        m = b & I(mask)
        r = m > I(inf)
        if ti.static(nonfinite):
            r = m >= I(inf)
        elif ti.static(what == "signbit"):
            r = b < 0
        return r
    return test


UNARY = ("neg", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "softplus", "sqrt", "abs", "square",
         "sign", "step", "reciprocal", "floor", "finite_or_zero", "log1p", "expm1", "erf", "erfc", "sinh", "cosh",
         "tan", "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh")
CLASSIFY = ("isnan", "isinf", "isfinite")  # float -> bool, on the bits (fast math folds x != x)


VEC_OPS = ("tanh", "sigmoid")  # float32 rational forms: + - * / min max select only
VEC = 8  # lanes per iteration of the vectorised variant
VEC_MIN = 1 << 14  # below this the launch dominates: keep the plain kernel


CHEAP_UNARY = frozenset(("neg", "relu", "abs", "square", "sign", "step", "floor", "reciprocal"))
CHEAP_BINARY = frozenset(("add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
                          "relu_grad", "tanh_grad", "sigmoid_grad", "twice_mul"))


def unary(op: str, x, out, n: int, dtype: str):
    """out[i] = op(x[i]) for i < n."""
    serial = C.launch_mode(n, C.CHEAP if op in CHEAP_UNARY else 4)
    trans = op in VEC_TRANS and dtype == "float32" and VECTOR
    if (VECTOR and dtype in V.LANES and (op in VEC_UNARY or trans) and C.backend.on_host()
            and ((n >= VEC_MIN_N and _unary_lanes(op, x, out, n, dtype, serial))
                 or (trans and _unary_exact(op, x, out, n, serial)))):
        return
    if op in VEC_OPS and dtype == "float32" and n >= VEC_MIN and C.backend.on_host():  # VECTOR off: gathers
        k = C.cached(("unary_vec", op, serial), lambda: _build_unary_vec(op, serial))
        if k.fast is None:
            _first_call_vectorised(k, (x, out, n))
        else:
            k(x, out, n)
        return
    k = C.cached(("unary", op, dtype, serial), lambda: _build_unary(op, dtype, serial))
    k(x, out, n)


def classify(op: str, x, out, n: int, dtype: str):
    """out[i] = isnan | isinf | isfinite (x[i]) as uint8, from the bits of x[i]."""
    serial = C.launch_mode(n, C.CHEAP)
    k = C.cached(("classify", op, dtype, serial), lambda: _build_classify(op, dtype, serial))
    k(x, out, n)


def _build_classify(op, dtype, serial):
    ti = C.ti()
    A, B = C.arr(dtype), C.arr("bool")
    f64 = dtype == "float64"
    I, mask, inf = (ti.i64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000) if f64 else (ti.i32, 0x7FFFFFFF, 0x7F800000)

    @ti.kernel
    def k(x: A, out: B, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            m = ti.bit_cast(x[i], I) & I(mask)
            r = m < I(inf)  # isfinite
            if ti.static(op == "isnan"):
                r = m > I(inf)
            elif ti.static(op == "isinf"):
                r = m == I(inf)
            out[i] = ti.cast(r, ti.u8)
    return k


def _first_call_vectorised(k, args):
    """Compile ``k`` (its first call) with Taichi's ``real_matrix_scalarize`` off, so that its
    ``ti.Vector`` arithmetic becomes LLVM vector code (SSE-packed: 2.4x faster for the rational
    tanh at 1e6 here). The switch is process-wide in Taichi, so it is set only while this one
    kernel compiles: that code path aborts on vector ``ti.exp``/``ti.abs``, which other kernels use."""
    cfg = C.ti().lang.impl.current_cfg()
    prev = cfg.real_matrix_scalarize
    cfg.real_matrix_scalarize = False
    try:
        k(*args)
    finally:
        cfg.real_matrix_scalarize = prev


def _vec_funcs():
    ti = C.ti()
    ratio = _tanh_ratio()

    @ti.func
    def tanh_v(x):  # the rational tanh of _funcs, with select instead of abs/branch (scalar or vector x)
        return ti.select(x * x < 1.6e-7, x, ratio(x))

    @ti.func
    def sigmoid_v(x):
        return 0.5 * tanh_v(0.5 * x) + 0.5

    return dict(tanh=tanh_v, sigmoid=sigmoid_v)


_EXP = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_EXP_FUNCS: dict = {}
# float32 tanh / exp / sigmoid forms with fused multiply-adds on the host (``exp_funcs``); SCIML_TRANS_FMA=0: without
TRANS_FMA = [os.environ.get("SCIML_TRANS_FMA", "1") != "0"]


def trans_fma(lanes) -> bool:
    """Whether :func:`exp_funcs` (lanes) takes its Horner steps as FMAs: switched on (``TRANS_FMA``), Taichi's x64
    CPU arch with the bitcode and a host with FMA units (fma_tile.py), and a lane count the bitcode has."""
    return bool(TRANS_FMA[0] and lanes in FT.FMA_LANES and C.backend.on_host() and FT.available_once()
                and FT.host_has_fma())


def exp_funcs(lanes):
    """float32 ``exp`` and ``sigmoid`` on ``ti.Vector(lanes, f32)`` (or scalars: lanes=1) without libm: Cody-Waite
    reduction x = n ln2 + r, Cephes' degree-5 polynomial for e^r (max error 1.0 ulp against float64 over
    [-87, 88] with FMAs, 0.97 without; numpy's float32 exp: 2.4), times 2^n built in the exponent bits as two
    factors 2^(n//2) 2^(n-n//2) so that n may run from -150 to 128: results past FLT_MAX overflow to inf, below the
    smallest normal underflow to 0 (Taichi flushes subnormals); NaN stays NaN (ordered clamps, then NaN arithmetic).
    Kernels using these MUST compile without fast math (``_vec.cached(..., exact=True)``): fast math
    reassociates the two-constant reduction and costs ~60 ulp near |x| = 72.
    sigmoid(x) = 1 / (1 + exp(-x)): relative accuracy also where it is tiny (the rational-tanh form
    0.5 tanh(x/2) + 0.5 is 0 below x = -17).
    On Taichi's x64 CPU arch (:func:`trans_fma`) the Horner steps of all three are fused multiply-adds (fma_tile.py's
    bitcode: one rounding each; the scalar and the vector forms alike, so a buffer's alignment does not change the
    bits): tanh's max abs error 2.7e-7 (3.8e-7 without), and ~15-25 % less time per element (docs/perf.md, "FMA in
    the float32 transcendental forms"). Devices keep the separate multiplies and adds."""
    use = trans_fma(lanes)
    if (lanes, use) in _EXP_FUNCS:
        return _EXP_FUNCS[lanes, use]
    ti = C.ti()
    f = ti.f32
    c5, c4, c3, c2, c1, c0 = _EXP

    if use:  # one rounding per Horner step (fma_tile.py's bitcode; Taichi's JIT forms no FMA itself)
        @ti.func
        def mad(a, b, c):
            r = c * ti.cast(1, f)  # a fresh local for the result (the bitcode writes through its pointer)
            FT.fma(lanes, r, a, b, c)
            return r
    else:
        @ti.func
        def mad(a, b, c):
            return a * b + c

    if lanes > 1:
        @ti.func
        def k(c):  # the constant c as a local of the operands' shape (the FMA function takes L-lane locals)
            return ti.Vector([ti.cast(c, f)] * lanes, dt=f)
    else:
        @ti.func
        def k(c):
            return ti.cast(c, f)

    @ti.func
    def pow2(t):  # 2^n as two factors, from t = n + 1.5 * 2^23 (n in the low mantissa bits)
        i = ti.bit_cast(t, ti.i32) - 0x4B400000
        h = i >> 1
        return ti.bit_cast((h + 127) << 23, f), ti.bit_cast((i - h + 127) << 23, f)

    @ti.func
    def exp_v(x):
        hi, lo = ti.cast(89.0, f), ti.cast(-104.0, f)
        v = ti.select(x > hi, hi, ti.select(x < lo, lo, x))  # ordered: NaN passes through
        magic = ti.cast(12582912.0, f)  # 1.5 * 2^23: adding it rounds to an integer
        t = v * ti.cast(1.44269504088896341, f) + magic  # (not an FMA: the same n as the plain form)
        n = t - magic
        r = v - n * ti.cast(0.693359375, f)  # exact either way (the constant has 9 bits)
        r = mad(n, k(2.12194440e-4), r)
        p = mad(r, k(c5), k(c4))
        p = mad(p, r, k(c3))
        p = mad(p, r, k(c2))
        p = mad(p, r, k(c1))
        p = mad(p, r, k(c0))
        y = mad(p, r * r, r) + ti.cast(1.0, f)
        s1, s2 = t, t
        if ti.static(lanes == 1):
            s1, s2 = pow2(t)
        else:  # lane by lane: vector bit casts abort with real_matrix_scalarize off (groups of at most 16:
            # Taichi warns about static loops longer than its unrolling_limit, 32)
            for g in ti.static(range(0, lanes, 16)):
                for u in ti.static(range(g, min(g + 16, lanes))):
                    a, b = pow2(t[u])
                    s1[u] = a
                    s2[u] = b
        return y * s1 * s2

    @ti.func
    def sigmoid_v(x):
        one = ti.cast(1.0, f)
        return one / (one + exp_v(ti.cast(0.0, f) - x))

    a1, a3, a5, a7, a9, a11, a13, b0, b2, b4, b6 = _F32_TANH

    @ti.func
    def tanh_v(x):  # _tanh_ratio's rational form with every constant typed f32 (an untyped literal is f64
        # under sciml's float64 default: the vector turns f64 and the kernel crashes)
        c = ti.cast(7.90531110763549805, f)
        xc = ti.select(x > c, c, ti.select(x < -c, -c, x))
        x2 = xc * xc
        p = mad(x2, k(a13), k(a11))
        p = mad(x2, p, k(a9))
        p = mad(x2, p, k(a7))
        p = mad(x2, p, k(a5))
        p = mad(x2, p, k(a3))
        p = mad(x2, p, k(a1))
        p = xc * p
        q = mad(x2, k(b6), k(b4))
        q = mad(x2, q, k(b2))
        q = mad(x2, q, k(b0))
        one, sat = ti.cast(1, f), ti.cast(9.0, f)
        r = ti.select(x > sat, one, ti.select(x < -sat, -one, p / q))
        return ti.select(x2 < ti.cast(1.6e-7, f), x, r)  # x2 = x * x where this holds (|x| < 7.9), else >= 62

    _EXP_FUNCS[lanes, use] = d = dict(exp=exp_v, sigmoid=sigmoid_v, tanh=tanh_v)
    return d


def _build_unary_vec(op, serial):
    ti = C.ti()
    f = _vec_funcs()[op]
    A = C.arr("float32")
    V = ti.types.vector(VEC, ti.f32)

    @ti.kernel
    def k(x: A, out: A, n: ti.i32):
        ti.loop_config(serialize=serial)
        for b in range(n // VEC):
            v = V(0.0)
            for u in ti.static(range(VEC)):
                v[u] = x[b * VEC + u]
            r = f(v)
            for u in ti.static(range(VEC)):
                out[b * VEC + u] = r[u]
        for i in range((n // VEC) * VEC, n):  # the tail
            out[i] = f(x[i])
    return k


def _build_unary(op, dtype, serial):
    ti = C.ti()
    f = _funcs(dtype)[op]
    A = C.arr(dtype)

    @ti.kernel
    def k(x: A, out: A, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            out[i] = f(x[i])
    return k


def _binary_funcs(dtype=None):
    """Binary ti.funcs; ``dtype`` (the operands' dtype) matters only for ``ne`` (NaN test on floats)."""
    ti = C.ti()
    floating = dtype in ("float32", "float64")
    isnan = nan_test(dtype) if floating else None
    nonfinite = nan_test(dtype, "nonfinite") if floating else None
    signbit = nan_test(dtype, "signbit") if floating else None
    PI = C.backend.ti_dtype(dtype) if floating else None

    @ti.func
    def _pi(a):
        return PI(math.pi)

    @ti.func
    def add(a, b):
        return a + b

    @ti.func
    def sub(a, b):
        return a - b

    @ti.func
    def mul(a, b):
        return a * b

    @ti.func
    def div(a, b):
        return a / b

    @ti.func
    def pow_(a, b):
        # SPIR-V's pow is undefined for a < 0 (lavapipe gives NaN even for integral b), so take
        # |a|^b and restore the sign for odd integral exponents; non-integral b of a < 0 is NaN
        # on every arch, as in numpy.
        r = ti.pow(ti.abs(a), b)
        if a < 0:
            if b == ti.floor(b):
                if ti.abs(b - 2.0 * ti.floor(0.5 * b)) > 0.5:
                    r = -r
            elif ti.static(floating):
                if not nonfinite(a):  # a negative finite base to a non-integral power: NaN (IEEE: (-inf)**-2.5 = 0)
                    r = ti.pow(a, b)
            else:
                r = ti.pow(a, b)  # NaN
        if ti.static(floating):  # IEEE / numpy: x ** 0 = 1 ** y = 1 even for NaN; else NaN in, NaN out
            if isnan(a) or isnan(b):  # (lavapipe's pow gives 0 for a NaN operand)
                r = a + b
            if a == 0 and b < 0:  # 0 ** negative = inf (GLSL leaves it undefined: lavapipe gives 0)
                r = 1.0 / ti.abs(a)
            if b == 0 or a == 1:
                r = 1.0
        return r

    # NaN propagates as in numpy (ti.max/ti.min return the other operand): when neither ordered compare
    # holds, one operand is NaN and a + b is NaN. Ordered selects only: also valid on vectors.
    @ti.func
    def maximum(a, b):
        return ti.select(a < b, b, ti.select(a >= b, a, a + b))

    @ti.func
    def minimum(a, b):
        return ti.select(a > b, b, ti.select(a <= b, a, a + b))

    # the derivative weight of maximum(a, b) in a: 1 where a wins, 1/2 on a tie, 0 where b wins (PyTorch),
    # NaN where either is NaN
    @ti.func
    def max_weight(a, b):
        return ti.select(a > b, 1.0, ti.select(a == b, 0.5, ti.select(a < b, 0.0, a + b)))

    @ti.func
    def lt(a, b):
        return ti.cast(a < b, ti.u8)

    @ti.func
    def le(a, b):
        return ti.cast(a <= b, ti.u8)

    @ti.func
    def gt(a, b):
        return ti.cast(a > b, ti.u8)

    @ti.func
    def ge(a, b):
        return ti.cast(a >= b, ti.u8)

    @ti.func
    def eq(a, b):
        return ti.cast(a == b, ti.u8)

    @ti.func
    def ne(a, b):  # IEEE: true when either is NaN (Taichi's != is ordered, and fast math folds a != a)
        r = a != b
        if ti.static(floating):
            r = r or isnan(a) or isnan(b)
        return ti.cast(r, ti.u8)

    @ti.func
    def atan2(a, b):  # NaN in, NaN out (lavapipe's atan2 returns 0 or pi/2 for a NaN operand)
        r = ti.atan2(a, b)
        if ti.static(floating):
            if isnan(a) or isnan(b):
                r = a + b
            if a == 0 and b == 0:  # IEEE: +-0 or +-pi by the signs of the zeros (lavapipe: +-3 pi / 4)
                r = a * 0  # (typed as the operands; r = 0.0 / math.pi literals would be default_fp)
                if signbit(b):
                    r = _pi(a)
                if signbit(a):
                    r = -r
        return r

    @ti.func
    def ipow(a, b):  # integer power by squaring (b >= 0, checked by the caller)
        r = a * 0 + 1
        base = a
        e = b
        while e > 0:
            if e & 1:
                r *= base
            base *= base
            e >>= 1
        return r

    # derivative products: g * f'(x) of a unary op in one pass instead of two
    @ti.func
    def relu_grad(a, b):  # a * step(b): 0 for b <= 0 (PyTorch), NaN for NaN b
        return ti.select(b > 0, a, ti.select(b <= 0, a * 0, b))

    @ti.func
    def tanh_grad(a, b):  # a * (1 - b^2), b = tanh(x)
        return a * (1 - b * b)

    @ti.func
    def sigmoid_grad(a, b):  # a * b * (1 - b), b = sigmoid(x)
        return a * b * (1 - b)

    @ti.func
    def twice_mul(a, b):  # 2 a b: the derivative of square
        return 2 * a * b

    return dict(add=add, sub=sub, mul=mul, div=div, pow=pow_, maximum=maximum, minimum=minimum,
                lt=lt, le=le, gt=gt, ge=ge, eq=eq, ne=ne, relu_grad=relu_grad, tanh_grad=tanh_grad,
                sigmoid_grad=sigmoid_grad, twice_mul=twice_mul, max_weight=max_weight, atan2=atan2,
                ipow=ipow)


COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")


def binary_mode(xs: tuple, ys: tuple, outs: tuple) -> str:
    """Pick the cheapest broadcast mode for shapes x, y -> out (already validated)."""
    if xs == ys:
        return "same"
    nx, ny = math.prod(xs), math.prod(ys)
    if ny == 1 and xs == outs:
        return "ys"
    if nx == 1 and ys == outs:
        return "xs"
    if xs == outs and _is_suffix(ys, outs):
        return "ysuf"
    if ys == outs and _is_suffix(xs, outs):
        return "xsuf"
    return "gen"


def _is_suffix(small, big):
    s = tuple(small)
    while s and s[0] == 1:
        s = s[1:]
    return len(s) <= len(big) and tuple(big[len(big) - len(s):]) == s


def broadcast_meta(shapes, out_shape):
    """Metadata ``[rank, out_shape..., strides of each input...]`` (stride 0 on broadcast axes)."""
    r = len(out_shape)
    vals = [r, *out_shape]
    for s in shapes:
        s = (1,) * (r - len(s)) + tuple(s)
        strides, acc = [0] * r, 1
        for d in range(r - 1, -1, -1):
            strides[d] = 0 if s[d] == 1 else acc
            acc *= s[d]
        vals += strides
    return tuple(vals)


def binary(op: str, x, y, out, xs, ys, outs, dtype: str, out_dtype: str):
    """out = op(x, y) with numpy broadcasting; shapes already validated by the caller."""
    n = math.prod(outs)
    mode = binary_mode(xs, ys, outs)
    serial = C.launch_mode(n, C.CHEAP if op in CHEAP_BINARY else 4)
    if (op in VEC_BINARY and mode in ("same", "xs", "ys") and n >= VEC_MIN_N and VECTOR and out_dtype == dtype
            and dtype in V.LANES and C.backend.on_host()):
        if _binary_lanes(op, mode, x, y, out, n, dtype, serial):
            return
    k = C.cached(("binary", op, dtype, out_dtype, mode, serial),
                 lambda: _build_binary(op, dtype, out_dtype, mode, serial))
    if mode == "gen":
        from .. import backend
        k(x, y, out, n, backend.meta(broadcast_meta([xs, ys], outs)))
    else:
        k(x, y, out, n)


def binary_same(op: str, x, y, out, n: int, dtype: str, out_dtype: str):
    """out = op(x, y) for operands of one shape (n elements): :func:`binary`'s mode "same" without the mode
    analysis."""
    serial = C.launch_mode(n, C.CHEAP if op in CHEAP_BINARY else 4)
    if (n >= VEC_MIN_N and op in VEC_BINARY and VECTOR and out_dtype == dtype and dtype in V.LANES
            and C.backend.on_host() and _binary_lanes(op, "same", x, y, out, n, dtype, serial)):
        return
    k = C.cached(("binary", op, dtype, out_dtype, "same", serial),
                 lambda: _build_binary(op, dtype, out_dtype, "same", serial))
    k(x, y, out, n)


def _build_binary(op, dtype, out_dtype, mode, serial):
    ti = C.ti()
    f = _binary_funcs(dtype)[op]
    A, O, I = C.arr(dtype), C.arr(out_dtype), C.arr("int32")
    if mode == "gen":
        @ti.kernel
        def kg(x: A, y: A, out: O, n: ti.i32, meta: I):
            ti.loop_config(serialize=serial)
            for i in range(n):
                r = meta[0]
                rem, ox, oy = i, 0, 0
                for j in range(r):
                    d = r - 1 - j
                    s = meta[1 + d]
                    idx = rem % s
                    rem = rem // s
                    ox += idx * meta[1 + r + d]
                    oy += idx * meta[1 + 2 * r + d]
                out[i] = f(x[ox], y[oy])
        return kg

    @ti.kernel
    def k(x: A, y: A, out: O, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            if ti.static(mode == "same"):
                out[i] = f(x[i], y[i])
            elif ti.static(mode == "xs"):
                out[i] = f(x[0], y[i])
            elif ti.static(mode == "ys"):
                out[i] = f(x[i], y[0])
            elif ti.static(mode == "xsuf"):
                out[i] = f(x[i % x.shape[0]], y[i])
            else:
                out[i] = f(x[i], y[i % y.shape[0]])
    return k


# --- vector forms of the cheap maps and the float32 transcendentals (CPU; see _vec.py) ------------
# The flat loop runs on ti.Vector lanes (the host's wide lanes, 8 / 16 x f32, where every full-size
# buffer is 32 / 64-byte aligned, else 4 x f32 / 2 x f64) over the first h = n - n % lanes elements;
# the tail (< lanes elements, when there is one) is a second, serialized launch of the scalar kernel on
# views. Same ops as the scalar kernels: the same bits (tests/test_vec_elementwise.py, incl. +-0, inf,
# NaN). A tail computed inside the vector kernel (a scalar loop, or one zero-padded vector) was not
# always bit-equal: Taichi compiles with fast math, and LLVM reassociated sigmoid_grad's a * b * (1 - b)
# there when b was the one-element operand. Any full-size operand not 16-byte aligned (a view at an odd
# offset): the scalar kernel. Devices: the scalar kernels.
VECTOR = True  # False: the scalar kernels only (what devices run; benchmarks compare)
VEC_MIN_N = 1 << 12  # fewer: the scalar kernel (VecLaunch's call costs ~1.5 us more; equal at 4096 here)
VEC_BINARY = frozenset(("add", "sub", "mul", "div", "maximum", "minimum", "relu_grad", "tanh_grad", "sigmoid_grad",
                        "twice_mul"))
VEC_UNARY = frozenset(("neg", "relu", "abs", "square", "reciprocal"))
VEC_TRANS = frozenset(("tanh", "sigmoid", "exp"))  # float32 only: rational / polynomial forms, no libm
EXACT_UNARY = frozenset(("exp", "sigmoid"))  # compiled without fast math (see exp_funcs)


TAIL_FIT_MAX = 1 << 16  # below this many elements a size that the lanes do not divide takes narrower vectors


def _fit_lanes(L, n, dtype):
    """Lanes for ``n`` elements of a load/store-bound map: ``L`` itself, or below ``TAIL_FIT_MAX`` elements the
    widest of L/2, L/4, ... (down to 16-byte vectors) that divides ``n``, so that the map is ONE launch instead of
    the vector kernel plus a scalar launch for the ``n % L`` tail (a batched (100, 99) tangent: 9900 % 8 = 4).
    Where launches cost more than the arithmetic (small sizes, jit replays) that is one launch fewer per op;
    narrower vectors need no more alignment than ``L``'s. Same results (elementwise)."""
    if n % L == 0 or n >= TAIL_FIT_MAX:
        return L
    lo = V.LANES[dtype]
    k = L // 2
    while k >= lo:
        if n % k == 0:
            return k
        k //= 2
    return L


def _unary_vec_funcs(dtype, lanes=None):
    """Vector-safe forms of the cheap unary maps (no unary minus / ti.abs on vectors: they abort),
    checked bit for bit against the scalar ones incl. +-0, +-inf and NaN; with ``lanes``, also the
    float32 transcendental forms (tanh: the rational form; exp, sigmoid: :func:`exp_funcs`)."""
    ti = C.ti()
    if lanes is not None and dtype == "float32":
        d = dict(_unary_vec_funcs(dtype))
        d.update(exp_funcs(lanes))
        return d
    T = C.backend.ti_dtype(dtype)

    @ti.func
    def neg(x):
        return x * ti.cast(-1, T)

    @ti.func
    def relu(x):  # as the scalar relu: +0 for -0, NaN for NaN (ordered compares only)
        return ti.select(x > 0, x, ti.select(x <= 0, ti.cast(0, T), x))

    @ti.func
    def abs_(x):  # ti.abs: +0 for -0 (0 - x, not x * -1)
        return ti.select(x > 0, x, ti.cast(0, T) - x)

    @ti.func
    def square(x):
        return x * x

    @ti.func
    def reciprocal(x):
        return ti.cast(1, T) / x

    return dict(neg=neg, relu=relu, abs=abs_, square=square, reciprocal=reciprocal)


def _unary_lanes(op, x, out, n, dtype, serial):
    """The vector kernel of ``unary``; False (nothing done) if a buffer is misaligned."""
    if not (x.flags.c_contiguous and out.flags.c_contiguous):
        return False
    px, po = C.address(x), C.address(out)
    # compute-bound float32 forms: several host vectors per iteration where aligned for them (_vec.trans_lanes_for)
    L = V.trans_lanes_for((px, po), dtype) if op in VEC_TRANS else V.mem_lanes_for((px, po), dtype)
    if L is None:
        return False
    if op not in VEC_TRANS:
        L = _fit_lanes(L, n, dtype)
    big = not serial
    serial = serial or C.busy() or (big and W.cold())  # a lone large launch: serialized unless the pool is warm
    m = n // L
    dyn = not serial and V.DYNAMIC and op in VEC_UNARY
    k = V.cached(("unary_lanes", op, dtype, serial, L, dyn), lambda: _build_unary_lanes(op, dtype, serial, L, dyn),
                 L, exact=op in EXACT_UNARY, dynamic=dyn)
    if not m:
        pass  # shorter than one vector: the tail kernel below does it all
    elif k.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        k.fast((px, po), (m, m), (m,))
    else:
        k((x, out), (px, po), (m, m), (m,))
    h = m * L
    if h < n:
        if op in VEC_TRANS:  # the same float32 forms, one element at a time
            _unary_exact(op, x[h:n], out[h:n], n - h, True)
        else:
            k = C.cached(("unary", op, dtype, True), lambda: _build_unary(op, dtype, True))
            k(x[h:n], out[h:n], n - h)
    if big:
        W.done(not serial)
    return True


def _unary_exact(op, x, out, n, serial):
    """float32 tanh / sigmoid / exp on the host with the vector kernels' forms (:func:`exp_funcs`), one element
    per iteration, compiled without fast math: tails, small and misaligned buffers, so that these ops give
    the same function at every size. False if a buffer is not contiguous."""
    if not (x.flags.c_contiguous and out.flags.c_contiguous):
        return False
    ptrs = (C.address(x), C.address(out))
    big = not serial
    serial = serial or C.busy() or (big and W.cold())
    k = V.cached(("unary_exact", op, serial), lambda: _build_unary_exact(op, serial), 1, exact=True)
    if k.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        k.fast(ptrs, (n, n), (n,))
    else:
        k((x, out), ptrs, (n, n), (n,))
    if big:
        W.done(not serial)
    return True


def _build_unary_exact(op, serial):
    ti = C.ti()
    A = C.arr("float32")
    f = exp_funcs(1)[op]

    @ti.kernel
    def k(x: A, out: A, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            out[i] = f(x[i])
    return k


def _build_unary_lanes(op, dtype, serial, L, dyn=False):
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    VA = ti.types.ndarray(dtype=ti.types.vector(L, T), ndim=1)
    fv = _unary_vec_funcs(dtype, L if op in VEC_TRANS else None)[op]
    if dyn:  # chunks as tasks (kernels/_vec.py: DYNAMIC)
        ch = max(1, V.DYN_CHUNK // (L * (4 if dtype == "float32" else 8)))

        @ti.kernel
        def kd(x: VA, out: VA, m: ti.i32):
            ti.loop_config(block_dim=1)
            for c in range((m + ch - 1) // ch):
                for i in range(c * ch, ti.min(c * ch + ch, m)):
                    out[i] = fv(x[i])
        return kd

    @ti.kernel
    def k(x: VA, out: VA, m: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(m):
            out[i] = fv(x[i])
    return k


def _binary_lanes(op, mode, x, y, out, n, dtype, serial):
    """The vector kernel of ``binary`` for modes same/xs/ys; False (nothing done) if a full-size
    operand is misaligned. Kernel arguments: [the one-element operand (a scalar ndarray)], the
    full-size ones (vector ndarrays), m = n // lanes."""
    if mode == "same":
        full, front = (x, y, out), ()
    else:
        full, front = ((y, out), (x,)) if mode == "xs" else ((x, out), (y,))
    if not all(a.flags.c_contiguous for a in full):  # sciml's buffers are; a strided view is not
        return False
    ptrs = [C.address(a) for a in full]
    L = V.mem_lanes_for(ptrs, dtype)  # all load/store-bound: 64-byte vectors where aligned
    if L is None:
        return False
    L = _fit_lanes(L, n, dtype)
    big = not serial
    serial = serial or C.busy() or (big and W.cold())  # a lone large launch: serialized unless the pool is warm
    m = n // L
    nf, nv = len(front), len(full)
    dyn = not serial and V.DYNAMIC
    k = V.cached(("binary_lanes", op, dtype, mode, serial, L, dyn),
                 lambda: _build_binary_lanes(op, dtype, mode, serial, L, dyn), (1,) * nf + (L,) * nv, dynamic=dyn)
    if nf:
        ptrs.insert(0, C.address(front[0]))
    counts = (1,) * nf + (m,) * nv
    if not m:
        pass  # shorter than one vector: the tail kernel below does it all
    elif k.fast is not None and C.TRACE[0] is None:  # (sciml.jit records the call below)
        k.fast(ptrs, counts, (m,))
    else:
        k(front + full, ptrs, counts, (m,))
    h = m * L
    if h < n:  # the tail: the scalar kernel, serialized, on views
        k = C.cached(("binary", op, dtype, dtype, mode, True), lambda: _build_binary(op, dtype, dtype, mode, True))
        xt = x if mode == "xs" else x[h:n]
        yt = y if mode == "ys" else y[h:n]
        k(xt, yt, out[h:n], n - h)
    if big:
        W.done(not serial)
    return True


def _build_binary_lanes(op, dtype, mode, serial, L, dyn=False):
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    VT = ti.types.vector(L, T)
    VA = ti.types.ndarray(dtype=VT, ndim=1)
    S = C.arr(dtype)
    f = _binary_funcs()[op]
    xs = mode == "xs"
    if dyn:  # chunks as tasks (kernels/_vec.py: DYNAMIC); the same arithmetic per element
        ch = max(1, V.DYN_CHUNK // (L * (4 if dtype == "float32" else 8)))
        if mode == "same":
            @ti.kernel
            def kd(x: VA, y: VA, out: VA, m: ti.i32):
                ti.loop_config(block_dim=1)
                for c in range((m + ch - 1) // ch):
                    for i in range(c * ch, ti.min(c * ch + ch, m)):
                        out[i] = f(x[i], y[i])
            return kd

        @ti.kernel
        def kds(s: S, v: VA, out: VA, m: ti.i32):
            ti.loop_config(block_dim=1)
            for c in range((m + ch - 1) // ch):
                sv = VT(s[0])
                for i in range(c * ch, ti.min(c * ch + ch, m)):
                    if ti.static(xs):
                        out[i] = f(sv, v[i])
                    else:
                        out[i] = f(v[i], sv)
        return kds
    if mode == "same":
        @ti.kernel
        def k(x: VA, y: VA, out: VA, m: ti.i32):
            ti.loop_config(serialize=serial)
            for i in range(m):
                out[i] = f(x[i], y[i])
        return k

    @ti.kernel
    def ks(s: S, v: VA, out: VA, m: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(m):
            if ti.static(xs):
                out[i] = f(VT(s[0]), v[i])
            else:
                out[i] = f(v[i], VT(s[0]))
    return ks


def where(c, x, y, out, cs, xs, ys, outs, dtype: str):
    """out = c ? x : y with broadcasting (c is a uint8 buffer)."""
    from .. import backend
    n = math.prod(outs)
    serial = C.launch_mode(n, C.CHEAP)
    same = cs == xs == ys == outs
    k = C.cached(("where", dtype, same, serial), lambda: _build_where(dtype, same, serial))
    if same:
        k(c, x, y, out, n)
    else:
        k(c, x, y, out, n, backend.meta(broadcast_meta([cs, xs, ys], outs)))


def _build_where(dtype, same, serial):
    ti = C.ti()
    A, B, I = C.arr(dtype), C.arr("bool"), C.arr("int32")
    if same:
        @ti.kernel
        def k(c: B, x: A, y: A, out: A, n: ti.i32):
            ti.loop_config(serialize=serial)
            for i in range(n):
                out[i] = x[i] if c[i] != 0 else y[i]
        return k

    @ti.kernel
    def kg(c: B, x: A, y: A, out: A, n: ti.i32, meta: I):
        ti.loop_config(serialize=serial)
        for i in range(n):
            r = meta[0]
            rem, oc, ox, oy = i, 0, 0, 0
            for j in range(r):
                d = r - 1 - j
                s = meta[1 + d]
                idx = rem % s
                rem = rem // s
                oc += idx * meta[1 + r + d]
                ox += idx * meta[1 + 2 * r + d]
                oy += idx * meta[1 + 3 * r + d]
            out[i] = x[ox] if c[oc] != 0 else y[oy]
    return kg


def fill(out, value: float, n: int, dtype: str):
    """out[i] = value."""
    serial = C.launch_mode(n, C.CHEAP)
    k = C.cached(("fill", dtype, serial), lambda: _build_fill(dtype, serial))
    k(out, value, n)


def _build_fill(dtype, serial):
    ti = C.ti()
    A = C.arr(dtype)
    from .. import backend
    T = backend.ti_dtype(dtype)

    @ti.kernel
    def k(out: A, value: T, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            out[i] = value
    return k


def cast(x, out, n: int, src: str, dst: str):
    """out[i] = dst(x[i])."""
    serial = C.launch_mode(n, C.CHEAP)
    k = C.cached(("cast", src, dst, serial), lambda: _build_cast(src, dst, serial))
    k(x, out, n)


def _build_cast(src, dst, serial):
    ti = C.ti()
    from .. import backend
    A, O, T = C.arr(src), C.arr(dst), backend.ti_dtype(dst)

    @ti.kernel
    def k(x: A, out: O, n: ti.i32):
        ti.loop_config(serialize=serial)
        for i in range(n):
            out[i] = ti.cast(x[i], T)
    return k
