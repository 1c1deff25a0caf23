"""``sciml.fft``: discrete Fourier transforms with derivatives of every order, and complex values.

Complex values are :class:`Complex`: a pair of real Tensors (real part, imaginary part) registered as a
pytree node. Design choice (instead of complex64/complex128 Tensor dtypes): every kernel, derivative rule
and transform of sciml stays real; ``grad``, ``vmap``, ``jit`` and the optimizers take Complex values as
pytrees with no change, and derivatives are exact because complex arithmetic is composed from real ops.
The gradient of a real loss with respect to a Complex ``z`` is ``Complex(dL/dRe z, dL/dIm z)`` (PyTorch's
convention, the steepest-ascent direction; JAX returns its conjugate).

One primitive does the work: the complex DFT along the last axis, forward or inverse. Its forward calls
scipy.fft on CPU (as GEMM calls BLAS; replayed by ``sm.jit``) and Taichi kernels on devices (radix-2
Cooley-Tukey for power-of-two lengths, a direct O(n^2) DFT otherwise; ``kernels/fft.py``). The DFT is linear, so its rules are DFTs: the VJP of
``fft`` is ``n * ifft`` (the adjoint), its JVP is ``fft``. ``rfft`` is a slice of ``fft`` of a real input,
``irfft`` the real part of ``ifft`` of the Hermitian extension, and the 2-D / n-D transforms apply the 1-D
ones axis by axis, so all derivatives follow.

Example:
    >>> x = sm.tensor(np.sin(np.linspace(0, 6.28, 16, endpoint=False)))
    >>> X = sm.fft.rfft(x)                  # Complex, shape (9,)
    >>> sm.fft.irfft(X, 16)                 # x again
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import backend
from .autodiff.ops import concat, getitem, matmul as _matmul, moveaxis, reshape, sqrt, stack
from .autodiff.ops import sum as _sum, transpose as _transpose
from .autodiff.primitive import Primitive
from .autodiff.pytree import register_pytree_node
from .autodiff.tensor import Tensor, as_tensor, tensor, zeros
from .kernels import _common as C
from .kernels import fft as KF

__all__ = ["Complex", "complex", "real", "imag", "conj", "einsum", "matmul", "fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2",
           "irfft2", "fftn", "ifftn", "rfftn", "irfftn", "fftfreq", "rfftfreq", "use_scipy"]

_scipy = {"enabled": None}


def use_scipy(flag=None):
    """Route CPU FFTs to scipy.fft (None/True: the default on CPU) or to the Taichi DFT kernel (False).
    Returns the previous setting."""
    prev = _scipy["enabled"]
    _scipy["enabled"] = flag
    return prev


# --- Complex ----------------------------------------------------------------------------------------------
class Complex:
    """A complex array as two real Tensors of one shape and float dtype: ``re + i im``.

    Arithmetic (+, -, *, / with Complex, Tensors or numbers), ``conj``, ``abs``, ``real``, ``imag``,
    ``matmul`` (``@``), ``sum``, ``mean``, ``reshape``, ``transpose``, indexing and ``numpy()`` (a numpy complex
    array) are provided; build one with :func:`complex` (from parts or a numpy complex array).
    """
    __slots__ = ("re", "im")
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
        self.re, self.im = re, im

    @property
    def shape(self):
        return self.re.shape

    @property
    def ndim(self):
        return self.re.ndim

    @property
    def dtype(self):
        return {"float32": "complex64", "float64": "complex128"}[self.re.dtype]

    @property
    def size(self):
        return self.re.size

    @property
    def real(self):
        return self.re

    @property
    def imag(self):
        return self.im

    def numpy(self):
        return self.re.numpy() + 1j * self.im.numpy()

    def __repr__(self):
        return f"Complex({np.array2string(self.numpy(), precision=6, threshold=20)})"

    def conj(self):
        return Complex(self.re, -self.im)

    def __abs__(self):
        return sqrt(self.re * self.re + self.im * self.im)

    abs = __abs__

    def __neg__(self):
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
            return Complex(self.re * o, self.im * o)
        o = _as_complex(o, self)
        return Complex(self.re * o.re - self.im * o.im, self.re * o.im + self.im * o.re)

    __rmul__ = __mul__

    def __truediv__(self, o):
        if _is_real(o):
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
        return Complex(getitem(self.re, idx), getitem(self.im, idx))

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return Complex(reshape(self.re, shape), reshape(self.im, shape))

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else (axes or None)
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


def matmul(a, b):
    """Complex matrix product (three real GEMMs, Gauss's trick would trade accuracy: four are used)."""
    a, b = (a if isinstance(a, Complex) else Complex(as_tensor(a))), (b if isinstance(b, Complex) else
                                                                        Complex(as_tensor(b)))
    return Complex(_matmul(a.re, b.re) - _matmul(a.im, b.im), _matmul(a.re, b.im) + _matmul(a.im, b.re))


def einsum(subscripts, *operands):
    """Einstein summation over Complex (or real) operands, one or two of them (``sm.einsum`` on the real
    and imaginary parts: a product of two complex operands costs four real einsums)."""
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
    return Complex(_einsum(subscripts, a.re, b.re) - _einsum(subscripts, a.im, b.im),
                   _einsum(subscripts, a.re, b.im) + _einsum(subscripts, a.im, b.re))


# --- the DFT primitive ----------------------------------------------------------------------------------------
def _dft_forward(re, im, inverse):
    n = re.shape[-1]
    rows = re.size // n if n else 0
    out = backend.empty(2 * re.size, re.dtype)
    use = _scipy["enabled"]
    if use is None:
        use = backend.on_host()
    if re.size:
        if use:
            shapes = re.shape

            def call(rb, ib, ob):
                import scipy.fft as sf
                from .linalg import _read, _write
                z = _read(rb, shapes, re.dtype) + 1j * _read(ib, shapes, re.dtype)
                r = sf.ifft(z, axis=-1) if inverse else sf.fft(z, axis=-1)
                _write(ob, np.stack([r.real, r.imag]), re.dtype)
            C.host_call(call, re._buf, im._buf, out)
        else:
            KF.dft(re._buf, im._buf, out, rows, n, inverse, re.dtype)
    return out, (2,) + re.shape, re.dtype


_dft = Primitive("dft", _dft_forward)


def _split(p):
    return getitem(p, 0), getitem(p, 1)


@_dft.def_vjp
def _dft_vjp(g, re, im, out, inverse):
    n = re.shape[-1]
    gr, gi = _split(g)
    a = _dft(gr, gi, inverse=not inverse)  # F^H = n ifft; (F^{-1})^H = fft / n
    a = a * float(n) if not inverse else a * (1.0 / n)
    return _split(a)


@_dft.def_jvp
def _dft_jvp(ts, re, im, out, inverse):
    tr = ts[0] if ts[0] is not None else zeros(re.shape, re.dtype)
    ti_ = ts[1] if ts[1] is not None else zeros(im.shape, im.dtype)
    return _dft(tr, ti_, inverse=inverse)


@_dft.def_batched_jvp
def _dft_bjvp(ts, re, im, out, inverse):
    nb = (ts[0] if ts[0] is not None else ts[1]).shape[0]
    tr = ts[0] if ts[0] is not None else zeros((nb,) + re.shape, re.dtype)
    ti_ = ts[1] if ts[1] is not None else zeros((nb,) + im.shape, im.dtype)
    p = _dft(tr, ti_, inverse=inverse)        # (2, B, ...)
    return moveaxis(p, 0, 1)


def _on_axis(z, axis, fn):
    axis = int(axis) % z.ndim
    if axis == z.ndim - 1:
        return fn(z)
    zt = Complex(moveaxis(z.re, axis, -1), moveaxis(z.im, axis, -1))
    r = fn(zt)
    return Complex(moveaxis(r.re, -1, axis), moveaxis(r.im, -1, axis))


def _resize(z, n):
    """Crop or zero-pad the last axis to n (numpy's ``n`` argument)."""
    m = z.shape[-1]
    if n == m:
        return z
    if n < m:
        return z[..., :n]
    pad = zeros(z.shape[:-1] + (n - m,), z.re.dtype)
    return Complex(concat([z.re, pad], -1), concat([z.im, pad], -1))


def _norm_scale(norm, n, inverse):
    if norm in (None, "backward"):
        return 1.0
    if norm == "ortho":
        return math.sqrt(n) if inverse else 1.0 / math.sqrt(n)
    if norm == "forward":
        return float(n) if inverse else 1.0 / n
    raise ValueError(f"fft: norm={norm!r}; expected None, 'backward', 'ortho' or 'forward'.")


def _complex_in(name, x):
    if isinstance(x, Complex):
        return x
    if isinstance(x, np.ndarray) and np.iscomplexobj(x):
        return complex(x)
    x = as_tensor(x)
    if x.dtype not in ("float32", "float64"):
        from .runtime import default_dtype
        x = x.astype(default_dtype())
    if x.ndim == 0:
        raise ValueError(f"fft.{name}: x is 0-d; expected at least one axis.")
    return Complex(x)


def _c1(name, x, n, axis, norm, inverse):
    z = _complex_in(name, x)
    if n is not None and (not isinstance(n, numbers.Integral) or n < 1):
        raise ValueError(f"fft.{name}: n={n!r}; expected a positive int.")

    def f(zz):
        zz = _resize(zz, int(n) if n is not None else zz.shape[-1])
        p = _dft(zz.re, zz.im, inverse=inverse)
        r = Complex(*_split(p))
        s = _norm_scale(norm, zz.shape[-1], inverse)
        return r if s == 1.0 else r * s
    return _on_axis(z, axis, f)


def fft(x, n=None, axis=-1, norm=None):
    """1-D discrete Fourier transform along ``axis`` (numpy.fft.fft); returns Complex."""
    return _c1("fft", x, n, axis, norm, False)


def ifft(x, n=None, axis=-1, norm=None):
    """1-D inverse DFT along ``axis`` (numpy.fft.ifft); returns Complex."""
    return _c1("ifft", x, n, axis, norm, True)


def rfft(x, n=None, axis=-1, norm=None):
    """DFT of a real signal: the n//2 + 1 non-negative frequencies (numpy.fft.rfft)."""
    if isinstance(x, Complex) or (isinstance(x, np.ndarray) and np.iscomplexobj(x)):
        raise TypeError("fft.rfft: x is complex; expected a real Tensor (use fft).")
    x = as_tensor(x)
    if x.ndim == 0:
        raise ValueError("fft.rfft: x is 0-d; expected at least one axis.")
    axis = int(axis) % max(x.ndim, 1)
    nn = int(n) if n is not None else x.shape[axis]
    z = fft(x, nn, axis, norm)
    idx = (slice(None),) * axis + (slice(0, nn // 2 + 1),)
    return z[idx]


def irfft(x, n=None, axis=-1, norm=None):
    """Inverse of rfft: a real signal of length ``n`` (default 2 (m - 1)) from m non-negative frequencies."""
    z = _complex_in("irfft", x)
    axis = int(axis) % z.ndim
    m = z.shape[axis]
    nn = int(n) if n is not None else 2 * (m - 1)
    if nn < 1:
        raise ValueError(f"fft.irfft: output length {nn}; expected >= 1 (pass n=).")

    def f(zz):
        k = nn // 2 + 1
        zz = _resize(zz, k)                       # numpy crops or zero-pads the input to n//2 + 1
        tail = nn - k                             # Z_{n-j} = conj(Z_j) for j = 1..tail
        if tail > 0:
            mirror = zz[..., 1:tail + 1]
            mre = getitem(mirror.re, (Ellipsis, slice(None, None, -1)))
            mim = getitem(mirror.im, (Ellipsis, slice(None, None, -1)))
            full = Complex(concat([zz.re, mre], -1), concat([zz.im, -mim], -1))
        else:
            full = zz
        p = _dft(full.re, full.im, inverse=True)
        re = getitem(p, 0)
        s = _norm_scale(norm, nn, True)
        return Complex(re if s == 1.0 else re * s)
    return _on_axis(z, axis, f).re


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
