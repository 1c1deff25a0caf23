"""``sciml.fft``: discrete Fourier transforms with derivatives of every order, and complex values.

Complex values are :class:`Complex`: a pair of real Tensors (real part, imaginary part) registered as a
pytree node. Design choice (instead of complex64/complex128 Tensor dtypes): every kernel, derivative rule
and transform of sciml stays real; ``grad``, ``vmap``, ``jit`` and the optimizers take Complex values as
pytrees with no change, and derivatives are exact because complex arithmetic is composed from real ops.
The gradient of a real loss with respect to a Complex ``z`` is ``Complex(dL/dRe z, dL/dIm z)`` (PyTorch's
convention, the steepest-ascent direction; JAX returns its conjugate).

A Complex made by a transform holds its values interleaved (one real Tensor of shape ``shape + (2,)``, numpy's
complex layout; ``z.packed``) and splits them into ``re`` / ``im`` only when those are asked for, so chains
of transforms and complex contractions (``rfft`` -> ``einsum`` -> ``irfft``, a spectral layer) move no data
between them. The primitives (``sciml/_dft.py``): the complex DFT along any axis, the real DFT truncated to its
lowest frequencies (``rfft(x, modes=m)``) and its inverse, and complex two-operand contractions (``einsum``,
``matmul``). Their forwards call scipy.fft / numpy on CPU (as GEMM calls BLAS; replayed by ``sm.jit``) and
Taichi kernels on devices (``kernels/fft.py``: radix-2 Cooley-Tukey for power-of-two lengths, direct sums
otherwise). Each is linear in each operand and its adjoint is another of them (the VJP of ``fft`` is an
unnormalised inverse DFT, of ``rfft`` an ``irfft`` with weights), so derivatives of every order follow.

Example:
    >>> x = sm.tensor(np.sin(np.linspace(0, 6.28, 16, endpoint=False)))
    >>> X = sm.fft.rfft(x)                  # Complex, shape (9,)
    >>> sm.fft.irfft(X, 16)                 # x again
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import _dft as D
from .autodiff.ops import concat, getitem, matmul as _matmul, reshape, sqrt, stack
from .autodiff.ops import sum as _sum, transpose as _transpose
from .autodiff.pytree import register_pytree_node
from .autodiff.tensor import Tensor, as_tensor, tensor, zeros

__all__ = ["Complex", "complex", "real", "imag", "conj", "angle", "einsum", "matmul", "fft", "ifft", "rfft", "irfft",
           "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn", "fftfreq", "rfftfreq", "use_scipy"]


def use_scipy(flag=None):
    """Route CPU FFTs and complex contractions to scipy.fft / numpy (None/True: the default on CPU) or to the
    Taichi kernels (False). Returns the previous setting."""
    prev = D._scipy["enabled"]
    D._scipy["enabled"] = flag
    return prev


# --- Complex ----------------------------------------------------------------------------------------------
class Complex:
    """A complex array as two real Tensors of one shape and float dtype: ``re + i im``.

    Arithmetic (+, -, *, / with Complex, Tensors or numbers), ``conj``, ``abs``, ``angle``, ``real``, ``imag``,
    ``matmul`` (``@``), ``sum``, ``mean``, ``reshape``, ``transpose``, indexing and ``numpy()`` (a numpy complex
    array) are provided; build one with :func:`complex` (from parts or a numpy complex array). ``packed`` is the
    interleaved form, a real Tensor of shape ``shape + (2,)`` (made on first use when built from parts; results of
    transforms hold only it, and make ``re`` / ``im`` on first use).
    """
    __slots__ = ("_re", "_im", "_z")
    __array_priority__ = 200

    def __init__(self, re, im=None):
        re = as_tensor(re)
        if re.dtype not in ("float32", "float64"):
            from .runtime import default_dtype
            re = re.astype(default_dtype())
        im = zeros(re.shape, re.dtype) if im is None else as_tensor(im, re.dtype)
        if im.dtype != re.dtype:
            raise TypeError(f"Complex: real part has dtype {re.dtype}, imaginary part {im.dtype}; expected one.")
        if im.shape != re.shape:
            from .autodiff.ops._util import broadcast_shapes
            from .autodiff.ops import broadcast_to
            s = broadcast_shapes("Complex", re.shape, im.shape)
            re, im = broadcast_to(re, s), broadcast_to(im, s)
        self._re, self._im, self._z = re, im, None

    @classmethod
    def from_packed(cls, z):
        """A Complex from its interleaved form: a real Tensor of shape ``shape + (2,)``."""
        z = as_tensor(z)
        if z.ndim == 0 or z.shape[-1] != 2 or z.dtype not in ("float32", "float64"):
            raise ValueError(f"Complex.from_packed: got shape {z.shape}, dtype {z.dtype}; expected a float Tensor "
                             "whose last axis has size 2 (real, imaginary).")
        c = object.__new__(cls)
        c._re = c._im = None
        c._z = z
        return c

    @property
    def re(self):
        if self._re is None:
            self._re = D.cpart(self._z, which=0)
        return self._re

    @property
    def im(self):
        if self._im is None:
            self._im = D.cpart(self._z, which=1)
        return self._im

    @property
    def packed(self):
        if self._z is None:
            self._z = D.cpack(self._re, self._im)
        return self._z

    @property
    def shape(self):
        return self._re.shape if self._re is not None else self._z.shape[:-1]

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def dtype(self):
        return {"float32": "complex64", "float64": "complex128"}[self._float_dtype]

    @property
    def _float_dtype(self):
        return (self._re if self._re is not None else self._z).dtype

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def real(self):
        return self.re

    @property
    def imag(self):
        return self.im

    def numpy(self):
        if self._z is not None:
            a = np.ascontiguousarray(self._z.numpy())
            return a.view(np.complex64 if a.dtype == np.float32 else np.complex128).reshape(self.shape)
        return self.re.numpy() + 1j * self.im.numpy()

    def __repr__(self):
        return f"Complex({np.array2string(self.numpy(), precision=6, threshold=20)})"

    def conj(self):
        if self._re is None:
            return Complex.from_packed(self._z * tensor(np.array([1.0, -1.0]), self._z.dtype))
        return Complex(self.re, -self.im)

    def __abs__(self):
        return sqrt(self.re * self.re + self.im * self.im)

    abs = __abs__

    def angle(self):
        """The argument atan2(im, re), in (-pi, pi] (numpy.angle); its derivative is undefined at 0."""
        from .autodiff.ops import atan2
        return atan2(self.im, self.re)

    def __neg__(self):
        if self._re is None:
            return Complex.from_packed(-self._z)
        return Complex(-self.re, -self.im)

    def __add__(self, o):
        o = _as_complex(o, self)
        return Complex(self.re + o.re, self.im + o.im)

    __radd__ = __add__

    def __sub__(self, o):
        o = _as_complex(o, self)
        return Complex(self.re - o.re, self.im - o.im)

    def __rsub__(self, o):
        return _as_complex(o, self) - self

    def __mul__(self, o):
        if _is_real(o):
            if self._re is None and not isinstance(o, Tensor):
                return Complex.from_packed(self._z * o)
            return Complex(self.re * o, self.im * o)
        o = _as_complex(o, self)
        return Complex(self.re * o.re - self.im * o.im, self.re * o.im + self.im * o.re)

    __rmul__ = __mul__

    def __truediv__(self, o):
        if _is_real(o):
            if self._re is None and not isinstance(o, Tensor):
                return Complex.from_packed(self._z / o)
            return Complex(self.re / o, self.im / o)
        o = _as_complex(o, self)
        d = o.re * o.re + o.im * o.im
        return Complex((self.re * o.re + self.im * o.im) / d, (self.im * o.re - self.re * o.im) / d)

    def __rtruediv__(self, o):
        return _as_complex(o, self) / self

    def __matmul__(self, o):
        return matmul(self, o)

    def __rmatmul__(self, o):
        return matmul(o, self)

    def __getitem__(self, idx):
        if self._re is None:
            return Complex.from_packed(getitem(self._z, (idx if isinstance(idx, tuple) else (idx,)) + (slice(None),)))
        return Complex(getitem(self.re, idx), getitem(self.im, idx))

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if self._re is None:
            shape = tuple(int(v) for v in shape)
            if -1 in shape:
                known = math.prod(v for v in shape if v != -1)
                shape = tuple(self.size // max(known, 1) if v == -1 else v for v in shape)
            return Complex.from_packed(reshape(self._z, shape + (2,)))
        return Complex(reshape(self.re, shape), reshape(self.im, shape))

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else (axes or None)
        if self._re is None:
            nd = self.ndim
            axes = tuple(range(nd))[::-1] if axes is None else tuple(int(a) % nd for a in axes)
            return Complex.from_packed(_transpose(self._z, axes + (nd,)))
        return Complex(_transpose(self.re, axes), _transpose(self.im, axes))

    @property
    def T(self):
        return self.transpose()

    def sum(self, axis=None, keepdims=False):
        return Complex(_sum(self.re, axis, keepdims), _sum(self.im, axis, keepdims))

    def mean(self, axis=None, keepdims=False):
        return Complex(self.re.mean(axis, keepdims), self.im.mean(axis, keepdims))


register_pytree_node(Complex, lambda z: ((z.re, z.im), None), lambda aux, ch: Complex(*ch))


def _is_real(o):
    return isinstance(o, Tensor) or (isinstance(o, numbers.Real) and not isinstance(o, bool))


def _as_complex(o, like):
    if isinstance(o, Complex):
        return o
    if isinstance(o, numbers.Complex) and not isinstance(o, numbers.Real):
        return Complex(tensor(np.asarray(o.real), like.re.dtype), tensor(np.asarray(o.imag), like.re.dtype))
    if isinstance(o, np.ndarray) and np.iscomplexobj(o):
        return complex(o, dtype=like.re.dtype)
    return Complex(as_tensor(o, like.re.dtype))


def complex(re, im=None, dtype=None):
    """A Complex from real and imaginary parts (Tensors, arrays, numbers) or from a numpy complex array."""
    if im is None and isinstance(re, np.ndarray) and np.iscomplexobj(re):
        return Complex(tensor(re.real, dtype), tensor(re.imag, dtype))
    return Complex(tensor(re, dtype) if not isinstance(re, Tensor) else re,
                   None if im is None else (tensor(im, dtype) if not isinstance(im, Tensor) else im))


def real(z):
    return z.re if isinstance(z, Complex) else as_tensor(z)


def imag(z):
    return z.im if isinstance(z, Complex) else zeros(as_tensor(z).shape, as_tensor(z).dtype)


def conj(z):
    return z.conj() if isinstance(z, Complex) else as_tensor(z)


def angle(z):
    """The argument of ``z`` in radians, in (-pi, pi] (numpy.angle): ``atan2(im, re)``; for a real Tensor 0 or pi.
    Its derivative is that of atan2 (undefined at 0: NaN there, as in JAX)."""
    if isinstance(z, Complex):
        return z.angle()
    x = as_tensor(z)
    return Complex(x).angle()


def matmul(a, b):
    """Complex matrix product: one complex GEMM when both operands are Complex matrices, else four real ones."""
    if isinstance(a, Complex) and isinstance(b, Complex) and a.ndim == 2 and b.ndim == 2:
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"fft.matmul: shapes {a.shape} and {b.shape} do not align.")
        return Complex.from_packed(D.ceinsum(a.packed, b.packed, spec="ij,jk->ik", ca=False, cb=False))
    a, b = (a if isinstance(a, Complex) else Complex(as_tensor(a))), (b if isinstance(b, Complex) else
                                                                        Complex(as_tensor(b)))
    return Complex(_matmul(a.re, b.re) - _matmul(a.im, b.im), _matmul(a.re, b.im) + _matmul(a.im, b.re))


def einsum(subscripts, *operands):
    """Einstein summation over Complex (or real) operands, one or two of them. Two Complex operands whose
    subscripts name every index in two of the three terms (a batched complex matrix product, as in spectral
    layers: ``"bki,kio->bko"``) contract in one primitive (one complex GEMM on CPU); otherwise ``sm.einsum``
    runs on the real and imaginary parts (a product of two complex operands costs four real einsums)."""
    from .autodiff.ops.array import einsum as _einsum
    if len(operands) == 1:
        z = operands[0] if isinstance(operands[0], Complex) else Complex(as_tensor(operands[0]))
        return Complex(_einsum(subscripts, z.re), _einsum(subscripts, z.im))
    if len(operands) != 2:
        raise ValueError(f"fft.einsum: got {len(operands)} operands; complex einsum takes one or two (chain calls "
                         "for more).")
    a, b = operands
    if not isinstance(a, Complex) and not isinstance(b, Complex):
        return Complex(_einsum(subscripts, a, b))
    if not isinstance(b, Complex):
        return Complex(_einsum(subscripts, a.re, b), _einsum(subscripts, a.im, b))
    if not isinstance(a, Complex):
        return Complex(_einsum(subscripts, a, b.re), _einsum(subscripts, a, b.im))
    simple = isinstance(subscripts, str) and D.parse_simple(subscripts, a.shape, b.shape)
    if simple and a._float_dtype == b._float_dtype:
        spec = f"{simple[0]},{simple[1]}->{simple[2]}"
        return Complex.from_packed(D.ceinsum(a.packed, b.packed, spec=spec, ca=False, cb=False))
    return Complex(_einsum(subscripts, a.re, b.re) - _einsum(subscripts, a.im, b.im),
                   _einsum(subscripts, a.re, b.im) + _einsum(subscripts, a.im, b.re))


# --- transforms ---------------------------------------------------------------------------------------------
def _take(x, axis, stop):
    """x[..., :stop, ...] along ``axis``."""
    return getitem(x, (slice(None),) * axis + (slice(0, stop),))


def _zpad(x, axis, n):
    """x zero-padded to length n along ``axis``."""
    pad = zeros(x.shape[:axis] + (n - x.shape[axis],) + x.shape[axis + 1:], x.dtype)
    return concat([x, pad], axis)


def _resize(x, axis, n):
    """Crop or zero-pad ``axis`` to n (numpy's ``n`` argument); x real, or packed complex (axis < ndim - 1)."""
    m = x.shape[axis]
    if n == m:
        return x
    return _take(x, axis, n) if n < m else _zpad(x, axis, n)


def _norm_scale(norm, n, inverse):
    """The factor numpy's ``norm`` puts on top of the usual 1 (forward) or 1/n (inverse)."""
    if norm in (None, "backward"):
        return 1.0
    if norm == "ortho":
        return math.sqrt(n) if inverse else 1.0 / math.sqrt(n)
    if norm == "forward":
        return float(n) if inverse else 1.0 / n
    raise ValueError(f"fft: norm={norm!r}; expected None, 'backward', 'ortho' or 'forward'.")


def _complex_in(name, x):
    if isinstance(x, Complex):
        if x.ndim == 0:
            raise ValueError(f"fft.{name}: x is 0-d; expected at least one axis.")
        return x
    if isinstance(x, np.ndarray) and np.iscomplexobj(x):
        x = complex(x)
        if x.ndim == 0:
            raise ValueError(f"fft.{name}: x is 0-d; expected at least one axis.")
        return x
    x = as_tensor(x)
    if x.dtype not in ("float32", "float64"):
        from .runtime import default_dtype
        x = x.astype(default_dtype())
    if x.ndim == 0:
        raise ValueError(f"fft.{name}: x is 0-d; expected at least one axis.")
    return Complex(x)


def _check_n(name, n, what="n"):
    if n is not None and (isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1):
        raise ValueError(f"fft.{name}: {what}={n!r}; expected a positive int.")


def _axis(name, axis, ndim):
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not -ndim <= axis < ndim:
        raise ValueError(f"fft.{name}: axis={axis!r} is out of range for an array with {ndim} axes.")
    return int(axis) % ndim


def _c1(name, x, n, axis, norm, inverse):
    z = _complex_in(name, x)
    _check_n(name, n)
    axis = _axis(name, axis, z.ndim)
    p = z.packed
    nn = int(n) if n is not None else p.shape[axis]
    p = _resize(p, axis, nn)
    s = _norm_scale(norm, nn, inverse) / (nn if inverse else 1)
    return Complex.from_packed(D.dft(p, axis=axis, inverse=inverse, scale=s))


def fft(x, n=None, axis=-1, norm=None):
    """1-D discrete Fourier transform along ``axis`` (numpy.fft.fft); returns Complex."""
    return _c1("fft", x, n, axis, norm, False)


def ifft(x, n=None, axis=-1, norm=None):
    """1-D inverse DFT along ``axis`` (numpy.fft.ifft); returns Complex."""
    return _c1("ifft", x, n, axis, norm, True)


def rfft(x, n=None, axis=-1, norm=None, *, modes=None):
    """DFT of a real signal: the n//2 + 1 non-negative frequencies (numpy.fft.rfft).

    ``modes`` (a sciml extension) keeps only the lowest ``modes`` of them, ``rfft(x)[..., :modes]`` along
    ``axis``, without computing or storing the rest (the truncation of Fourier neural operators)."""
    if isinstance(x, Complex) or (isinstance(x, np.ndarray) and np.iscomplexobj(x)):
        raise TypeError("fft.rfft: x is complex; expected a real Tensor (use fft).")
    x = as_tensor(x)
    if x.dtype not in ("float32", "float64"):
        from .runtime import default_dtype
        x = x.astype(default_dtype())
    if x.ndim == 0:
        raise ValueError("fft.rfft: x is 0-d; expected at least one axis.")
    _check_n("rfft", n)
    _check_n("rfft", modes, "modes")
    axis = _axis("rfft", axis, x.ndim)
    nn = int(n) if n is not None else x.shape[axis]
    x = _resize(x, axis, nn)
    m = nn // 2 + 1 if modes is None else min(int(modes), nn // 2 + 1)
    return Complex.from_packed(D.rdft(x, axis=axis, m=m, adj=False, scale=_norm_scale(norm, nn, False)))


def irfft(x, n=None, axis=-1, norm=None):
    """Inverse of rfft: a real signal of length ``n`` (default 2 (m - 1)) from m non-negative frequencies
    (fewer than n//2 + 1 count as zero-padded, as in numpy)."""
    z = _complex_in("irfft", x)
    _check_n("irfft", n)
    axis = _axis("irfft", axis, z.ndim)
    m = z.shape[axis]
    nn = int(n) if n is not None else 2 * (m - 1)
    if nn < 1:
        raise ValueError(f"fft.irfft: output length {nn}; expected >= 1 (pass n=).")
    p = z.packed
    if m > nn // 2 + 1:
        p = _take(p, axis, nn // 2 + 1)
    return D.irdft(p, axis=axis, n=nn, adj=False, scale=_norm_scale(norm, nn, True))


def _axes(name, x, axes, s):
    nd = x.ndim
    if axes is None:
        axes = tuple(range(nd)) if s is None else tuple(range(nd - len(s), nd))
    axes = tuple(int(a) % nd for a in axes)
    if s is not None and len(s) != len(axes):
        raise ValueError(f"fft.{name}: s={s!r} and axes={axes!r} have different lengths.")
    return axes, (list(s) if s is not None else [None] * len(axes))


def fftn(x, s=None, axes=None, norm=None):
    """n-D DFT over ``axes`` (default: all; numpy.fft.fftn)."""
    z = _complex_in("fftn", x)
    axes, s = _axes("fftn", z, axes, s)
    for a, n in zip(axes, s):
        z = fft(z, n, a, norm)
    return z


def ifftn(x, s=None, axes=None, norm=None):
    """n-D inverse DFT over ``axes`` (numpy.fft.ifftn)."""
    z = _complex_in("ifftn", x)
    axes, s = _axes("ifftn", z, axes, s)
    for a, n in zip(axes, s):
        z = ifft(z, n, a, norm)
    return z


def fft2(x, s=None, axes=(-2, -1), norm=None):
    """2-D DFT over the last two axes (numpy.fft.fft2)."""
    return fftn(x, s, axes, norm)


def ifft2(x, s=None, axes=(-2, -1), norm=None):
    """2-D inverse DFT over the last two axes (numpy.fft.ifft2)."""
    return ifftn(x, s, axes, norm)


def rfft2(x, s=None, axes=(-2, -1), norm=None):
    """2-D DFT of a real array: rfft over the last axis, fft over the other (numpy.fft.rfft2)."""
    return rfftn(x, s, axes, norm)


def rfftn(x, s=None, axes=None, norm=None):
    """n-D DFT of a real array: rfft over the last of ``axes``, fft over the others (numpy.fft.rfftn)."""
    x = as_tensor(x)
    axes, s = _axes("rfft2", x, axes, s)
    z = rfft(x, s[-1], axes[-1], norm)
    for a, n in zip(axes[:-1], s[:-1]):
        z = fft(z, n, a, norm)
    return z


def irfft2(x, s=None, axes=(-2, -1), norm=None):
    """Inverse of rfft2 (numpy.fft.irfft2)."""
    return irfftn(x, s, axes, norm)


def irfftn(x, s=None, axes=None, norm=None):
    """Inverse of rfftn (numpy.fft.irfftn)."""
    z = _complex_in("irfftn", x)
    axes, s = _axes("irfftn", z, axes, s)
    for a, n in zip(axes[:-1], s[:-1]):
        z = ifft(z, n, a, norm)
    return irfft(z, s[-1], axes[-1], norm)


def fftfreq(n, d=1.0, dtype=None):
    """Sample frequencies of an n-point DFT (numpy.fft.fftfreq)."""
    return tensor(np.fft.fftfreq(int(n), d), dtype)


def rfftfreq(n, d=1.0, dtype=None):
    """Non-negative sample frequencies of an n-point real DFT (numpy.fft.rfftfreq)."""
    return tensor(np.fft.rfftfreq(int(n), d), dtype)


_ = stack  # re-exported helpers stay importable for users building spectral layers
