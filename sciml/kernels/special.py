"""Taichi funcs of the special and inverse elementwise functions (log1p, expm1, erf, erfc, sinh, cosh,
tan, arcsin, arccos, arctan, arcsinh, arccosh, arctanh), accurate to a few ulp in float64 and float32.

Taichi compiles with fast math: LLVM reassociates ``(1 + x) - 1`` into ``x`` and folds ``x != x``, so
the classic cancellation tricks (Kahan's log1p / expm1) silently lose their accuracy here, and NaN
tests must not compare a value with itself. Instead each function uses a series or a Chebyshev
expansion where the direct formula would cancel, and the direct formula elsewhere; range checks use
ordered comparisons, so a NaN argument always reaches an arithmetic path that returns NaN.

erfc(x) = exp(-x^2) erfcx(x) for x >= 0.5, with erfcx as Chebyshev series on [0.5, 1.5], [1.5, 3],
[3, 6] and, in u = 1/x, on (0, 1/6]; the coefficients were computed with mpmath at 40 digits
(Chebyshev interpolation at 41 points, tail below 1e-18 dropped). Max relative error against mpmath,
float64: 4e-15 for x < 6, 6e-14 (the rounding of x^2 in exp(-x^2), as scipy's) up to the underflow.
"""
import math

from . import _common as C

# Chebyshev coefficients (a, b, c_0..c_k) of erfcx(x) on [a, b], and of sqrt(pi) x erfcx(x) in u = 1/x
_ERFCX = (
    (0.5, 1.5, (0.447795810680899, -0.14437117094579746, 0.02052348013327858, -0.0026459068473904633,
                0.0003148828357127584, -3.501741816305982e-05, 3.6716735606971222e-06, -3.654722598254305e-07,
                3.4721186358948525e-08, -3.162115483017617e-09, 2.7705635476511733e-10, -2.3425031428441204e-11,
                1.916171382436389e-12, -1.5198378406714607e-13, 1.1711473727725093e-14, -8.78250623357929e-16,
                6.41911560261423e-17, -4.578977398787957e-18)),
    (1.5, 3.0, (0.24053480758125906, -0.07002344166079719, 0.009600878679433074, -0.0012498980008193367,
                0.00015543814890469813, -1.855313555400582e-05, 2.133592307604103e-06, -2.371402766692384e-07,
                2.55413451244302e-08, -2.6717820267380714e-09, 2.7196732086441914e-10, -2.69849922254067e-11,
                2.6137310637536914e-12, -2.4745867372775445e-13, 2.292750085463851e-14, -2.0810401517313836e-15,
                1.8521975554736953e-16, -1.617904086716717e-17, 1.3880960917453333e-18)),
    (3.0, 6.0, (0.12902689965474168, -0.0420426781395118, 0.006698487121092753, -0.0010450916791743758,
                0.00015985899884949414, -2.3998261587238652e-05, 3.53906410506357e-06, -5.131303200649095e-07,
                7.320268611264974e-08, -1.0282193129248155e-08, 1.4229088707596404e-09, -1.9411157958365732e-10,
                2.611796346594898e-11, -3.4677962235781513e-12, 4.5456029570973385e-13, -5.884864531875017e-14,
                7.527649782554211e-15, -9.51743765070785e-16, 1.189783691087327e-16, -1.4711054785450403e-17,
                1.7996151024795913e-18, -2.178713234372413e-19)),
)
_TAIL = (0.0, 1.0 / 6.0, (0.9949415317372343, -0.006705576277012169, -0.00161838062978432, 3.23103930365349e-05,
                          3.41237563396705e-06, -1.806260729507761e-07, -8.87683852199511e-09, 1.1329735184964924e-09,
                          9.087099734569444e-12, -7.386268929551155e-12, 2.5452230635504495e-13,
                          4.4218919925126825e-14, -4.341921334351706e-15, -1.5993700045442334e-16,
                          5.090058787459716e-17, -1.4838179788925622e-18))

_LN2 = math.log(2.0)
_RSQPI = 1.0 / math.sqrt(math.pi)


def _trim(c, dtype):
    """Drop the tail a float32 result cannot see."""
    if dtype == "float64":
        return tuple(c)
    keep = [i for i, v in enumerate(c) if abs(v) > 1e-9 * abs(c[0])]
    return tuple(c[:keep[-1] + 1])


def _series(dtype):
    """Power-series coefficients (in z = x^2 where odd) of erf(x)/x, expm1, sinh(x)/x, log1p's atanh form."""
    f64 = dtype == "float64"
    erf = tuple(2.0 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(12 if f64 else 7))
    expm1 = tuple(1.0 / math.factorial(n) for n in range(1, 17 if f64 else 10))  # x * poly(x), |x| < 0.5
    sinh = tuple(1.0 / math.factorial(2 * k + 1) for k in range(10 if f64 else 6))  # x * poly(x^2), |x| < 1
    atanh = tuple(1.0 / (2 * k + 1) for k in range(18 if f64 else 9))  # s * poly(s^2), |s| <= 1/3
    return erf, expm1, sinh, atanh


_CACHE = {}


def funcs(dtype: str) -> dict:
    """name -> ti.func for ``dtype`` (scalar arguments)."""
    if dtype in _CACHE:
        return _CACHE[dtype]
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    s_erf, s_expm1, s_sinh, s_atanh = _series(dtype)
    pieces = tuple((a, b, _trim(c, dtype)) for a, b, c in _ERFCX)
    tail = _trim(_TAIL[2], dtype)
    big = 2.0 ** 28 if dtype == "float64" else 2.0 ** 12  # above: 1 + x^2 == x^2
    nan = math.nan
    from .elementwise import nan_test
    isnan = nan_test(dtype)
    near_overflow = 709.0 if dtype == "float64" else 88.0

    def horner(coefs):
        @ti.func
        def h(z):
            p = T(coefs[-1])
            for k in ti.static(range(len(coefs) - 2, -1, -1)):
                p = p * z + T(coefs[k])
            return p
        return h

    def clenshaw(a, b, coefs):
        @ti.func
        def f(x):
            t = (2.0 * x - T(a + b)) / T(b - a)
            b1 = ti.cast(0, T)
            b2 = ti.cast(0, T)
            for k in ti.static(range(len(coefs) - 1, 0, -1)):
                b1, b2 = 2.0 * t * b1 - b2 + T(coefs[k]), b1
            return t * b1 - b2 + T(coefs[0])
        return f

    p_erf, p_expm1, p_sinh, p_atanh = horner(s_erf), horner(s_expm1), horner(s_sinh), horner(s_atanh)
    c0, c1, c2 = (clenshaw(*p) for p in pieces)
    ct = clenshaw(_TAIL[0], _TAIL[1], tail)

    @ti.func
    def erfc_pos(x):  # x >= 0.5 (NaN: the tail branch, NaN)
        e = ti.cast(0, T)
        if x < 1.5:
            e = c0(x)
        elif x < 3.0:
            e = c1(x)
        elif x < 6.0:
            e = c2(x)
        else:
            u = 1.0 / x
            e = ct(u) * u * T(_RSQPI)
        return ti.exp(-(x * x)) * e

    @ti.func
    def erf(x):
        a = ti.abs(x)
        r = ti.cast(0, T)
        if a < 0.5:
            r = x * p_erf(x * x)
        else:
            r = 1.0 - erfc_pos(a)
            if x < 0:
                r = -r
        return r

    @ti.func
    def erfc(x):
        r = ti.cast(0, T)
        if ti.abs(x) < 0.5:
            r = 1.0 - x * p_erf(x * x)
        elif x > 0:
            r = erfc_pos(x)
        else:
            r = 2.0 - erfc_pos(-x)
        return r

    @ti.func
    def log1p(x):
        r = ti.cast(0, T)
        if ti.abs(x) < 0.5:
            s = x / (2.0 + x)
            r = 2.0 * s * p_atanh(s * s)
        else:
            r = ti.log(1.0 + x)  # exact 1 + x on [-1, -0.5]; no cancellation above 0.5
        return r

    @ti.func
    def expm1(x):
        r = ti.cast(0, T)
        if ti.abs(x) < 0.5:
            r = x * p_expm1(x)
        else:
            r = ti.exp(x) - 1.0
        return r

    @ti.func
    def _ep_em(a):  # (e^a / 2, e^-a / 2); near overflow e^(a - ln 2), as e^a alone would overflow first
        e = ti.exp(a)
        ep = 0.5 * e
        if a > near_overflow:  # (fast math rewrites (h/2) * h as (h * h) / 2: no square-root split here)
            ep = ti.exp(a - T(_LN2))
        return ep, 0.5 / e

    @ti.func
    def sinh(x):
        a = ti.abs(x)
        r = ti.cast(0, T)
        if a < 1.0:
            r = x * p_sinh(x * x)
        else:
            ep, em = _ep_em(a)
            r = ep - em
            if x < 0:
                r = -r
        return r

    @ti.func
    def cosh(x):
        ep, em = _ep_em(ti.abs(x))
        return ep + em

    @ti.func
    def tan(x):
        return ti.tan(x)

    @ti.func
    def arctan(x):  # NaN in, NaN out (lavapipe's atan2 gives 0 for NaN); a series near 0 (lavapipe: 2e-5 off)
        r = ti.atan2(x, ti.cast(1, T))
        if ti.abs(x) < 1e-3:
            z = x * x
            r = x - x * z * (T(1.0 / 3.0) - T(0.2) * z)
        return ti.select(isnan(x), x, r)

    # asin / acos through atan2 with exact 1 - x, 1 + x (Sterbenz): a few ulp on every arch (lavapipe's
    # asin is off by 4e-4 relative), NaN outside [-1, 1] (GLSL leaves that undefined)
    @ti.func
    def arcsin(x):
        r = ti.cast(nan, T)
        if ti.abs(x) < 1e-3:
            z = x * x
            r = x + x * z * (T(1.0 / 6.0) + T(0.075) * z)
        elif ti.abs(x) <= 1.0:
            r = ti.atan2(x, ti.sqrt((1.0 - x) * (1.0 + x)))
        return r

    @ti.func
    def arccos(x):
        r = ti.cast(nan, T)
        if ti.abs(x) <= 1.0:
            r = 2.0 * ti.atan2(ti.sqrt(1.0 - x), ti.sqrt(1.0 + x))
        return r

    @ti.func
    def log_device(x):  # GLSL's log has an absolute error of 2^-21 near 1: log1p(x - 1) there (exact x - 1)
        r = ti.log(x)
        if ti.abs(x - 1.0) < 0.5:
            r = log1p(x - 1.0)
        return r

    @ti.func
    def arcsinh(x):
        a = ti.abs(x)
        r = ti.cast(0, T)
        if a > big:
            r = ti.log(a) + T(_LN2)
        else:
            r = log1p(a + a * a / (1.0 + ti.sqrt(1.0 + a * a)))
        if x < 0:
            r = -r
        return r

    @ti.func
    def arccosh(x):
        r = ti.cast(nan, T)
        if x > big:
            r = ti.log(x) + _LN2
        elif x >= 2.0:
            r = ti.log(x + ti.sqrt(x * x - 1.0))
        elif x >= 1.0:
            t = x - 1.0  # exact (Sterbenz)
            r = log1p(t + ti.sqrt(2.0 * t + t * t))
        return r

    @ti.func
    def arctanh(x):
        a = ti.abs(x)
        r = 0.5 * log1p(2.0 * a / (1.0 - a))
        if x < 0:
            r = -r
        return r

    out = dict(log1p=log1p, expm1=expm1, erf=erf, erfc=erfc, sinh=sinh, cosh=cosh, tan=tan, arcsin=arcsin,
               arccos=arccos, arctan=arctan, arcsinh=arcsinh, arccosh=arccosh, arctanh=arctanh,
               log=ti.log if C.backend.on_host() else log_device)
    _CACHE[dtype] = out
    return out


NAMES = ("log1p", "expm1", "erf", "erfc", "sinh", "cosh", "tan", "arcsin", "arccos", "arctan", "arcsinh", "arccosh",
         "arctanh")
