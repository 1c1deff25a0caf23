"""Reference solutions for the classic PINN benchmarks, in closed form or by quadrature.

Each reference is a callable object: ``ref(points)`` takes points of shape ``(n, d)``
with columns in the problem's coordinate order (``ref.names``, e.g. ``('x', 't')``) and
returns the solution, shape ``(n,)``. It also has ``name``, ``domain`` (a sciml.pinn
geometry) and ``grid(n0, n1)`` for plots. Pure numpy.

Example:
    >>> ref = burgers_cole_hopf(0.01 / np.pi)
    >>> X, T, U = ref.grid(256, 100)               # each of shape (100, 256)
    >>> float(ref(np.array([[0.5, 0.0]]))[0])      # -sin(pi/2)
    -1.0
"""
import numpy as np

from .geometry import Interval, Rectangle, TimeInterval


class Reference:
    """Base of the reference solutions: input checking and plotting grids."""

    name = "reference"
    names = ()
    domain = None

    def __repr__(self):
        return self.name

    def _points(self, points):
        if hasattr(points, "numpy") and not isinstance(points, np.ndarray):
            points = points.numpy()
        x = np.asarray(points, dtype=np.float64)
        d = len(self.names)
        if x.ndim != 2 or x.shape[1] != d:
            raise ValueError(f"{self.name}: points has shape {np.shape(points)}; expected "
                             f"(n, {d}) with columns {self.names}.")
        return x

    def __call__(self, points):
        """Solution at ``points`` of shape ``(n, d)``; returns shape ``(n,)``."""
        return self._u(*self._points(points).T)

    def grid(self, n0=256, n1=100):
        """A regular grid over the domain's bounding box and the solution on it.

        Args:
            n0: points along the first coordinate (``x``).
            n1: points along the second coordinate (``t`` or ``y``).
        Returns:
            ``(X, Y, U)``, meshgrids (``indexing='xy'``) each of shape ``(n1, n0)``,
            so ``plt.pcolormesh(X, Y, U)`` draws the first coordinate horizontally.
        """
        lo, hi = self.domain.bbox
        X, Y = np.meshgrid(np.linspace(lo[0], hi[0], n0), np.linspace(lo[1], hi[1], n1))
        U = self(np.stack([X.ravel(), Y.ravel()], axis=1)).reshape(X.shape)
        return X, Y, U


def _positive(v, who, what):
    if isinstance(v, bool) or not (np.isscalar(v) and np.isreal(v) and np.isfinite(v) and v > 0):
        raise ValueError(f"{who}: {what} must be a positive number, got {v!r}.")
    return float(v)


class BurgersColeHopf(Reference):
    """Viscous Burgers, exact solution by the Cole–Hopf transformation.

        u_t + u u_x = nu u_xx,   x in [-1, 1], t in [0, 1],
        u(x, 0) = -sin(pi x),    u(-1, t) = u(1, t) = 0.

    With f(y) = exp(-cos(pi y) / (2 pi nu)) (Basdevant et al. 1986, Raissi et al. 2019),

        u(x, t) = -∫ sin(pi (x - eta)) f(x - eta) exp(-eta^2 / (4 nu t)) d eta
                  / ∫ f(x - eta) exp(-eta^2 / (4 nu t)) d eta,

    evaluated with eta = sqrt(4 nu t) z and Gauss–Hermite quadrature in z; the factor
    f, up to exp(1 / (2 pi nu)), is scaled by its maximum in log space so small nu does not
    overflow. At t = 0 the initial condition is returned exactly. For nu = 0.01/pi a shock
    forms at x = 0 (the inviscid one would at t = 1/pi, where max |u_x| = 34.2263); the
    steepest slope, max |u_x| = 152.00516, is reached at t = 1.6037/pi (Basdevant et al.
    1986, Table 1).

    Args:
        nu: viscosity, > 0.
        nodes: Gauss–Hermite nodes, 2..360 (numpy's hermgauss overflows beyond ~370).
            For nu = 0.01/pi, 64 nodes agree with 360 to 2e-10 on [-1, 1] x [0, 1] and
            128 to 1e-15; the default is 256.
    """

    names = ("x", "t")
    _CHUNK = 1 << 21   # point-node pairs per vectorised block

    def __init__(self, nu=0.01 / np.pi, nodes=256):
        self.nu = _positive(nu, "burgers_cole_hopf", "nu")
        if not (isinstance(nodes, (int, np.integer)) and 2 <= nodes <= 360):
            raise ValueError(f"burgers_cole_hopf: nodes must be an int in [2, 360], got "
                             f"{nodes!r} (numpy's hermgauss overflows beyond ~370 nodes).")
        self.name = f"burgers_cole_hopf(nu={self.nu:.6g})"
        self.domain = Interval(-1, 1) * TimeInterval(0, 1)
        z, w = np.polynomial.hermite.hermgauss(int(nodes))
        self._z, self._logw = z, np.log(w)

    @staticmethod
    def initial(x):
        """u(x, 0) = -sin(pi x) for x of any shape."""
        return -np.sin(np.pi * np.asarray(x, dtype=np.float64))

    def _u(self, x, t):
        if np.any(t < 0):
            raise ValueError(f"{self.name}: t must be >= 0, got min t = {t.min():g}.")
        u = self.initial(x)
        later = np.flatnonzero(t > 0)
        step = max(1, self._CHUNK // len(self._z))
        c = 1.0 / (2 * np.pi * self.nu)
        for s in range(0, len(later), step):
            i = later[s:s + step]
            y = x[i, None] - np.sqrt(4 * self.nu * t[i, None]) * self._z
            logf = -c * np.cos(np.pi * y) + self._logw
            e = np.exp(logf - logf.max(axis=1, keepdims=True))
            u[i] = -np.sum(np.sin(np.pi * y) * e, axis=1) / np.sum(e, axis=1)
        return u


class PoissonSin(Reference):
    """Manufactured Poisson problem on the unit square.

        -Δu = f   on [0, 1]^2,   u = 0 on the boundary (k integer),
        u = sin(k pi x) sin(k pi y),   f = 2 k^2 pi^2 sin(k pi x) sin(k pi y).

    Args:
        k: wave number.
    """

    names = ("x", "y")

    def __init__(self, k=1):
        self.k = _positive(k, "poisson_sin", "k")
        self.name = f"poisson_sin(k={self.k:g})"
        self.domain = Rectangle((0, 0), (1, 1))

    def _u(self, x, y):
        return np.sin(self.k * np.pi * x) * np.sin(self.k * np.pi * y)

    def source(self, points):
        """f = -Δu at ``points`` of shape ``(n, 2)``; returns shape ``(n,)``."""
        return 2 * (self.k * np.pi) ** 2 * self(points)


class HeatSin(Reference):
    """Heat equation with one Fourier mode.

        u_t = alpha u_xx   on x in [0, 1], t in [0, t1],
        u(x, 0) = sin(pi x),   u(0, t) = u(1, t) = 0,
        u = exp(-alpha pi^2 t) sin(pi x).

    Args:
        alpha: diffusivity, > 0.
        t1: final time.
    """

    names = ("x", "t")

    def __init__(self, alpha=0.1, t1=1.0):
        self.alpha = _positive(alpha, "heat_sin", "alpha")
        self.name = f"heat_sin(alpha={self.alpha:g})"
        self.domain = Interval(0, 1) * TimeInterval(0, _positive(t1, "heat_sin", "t1"))

    @staticmethod
    def initial(x):
        """u(x, 0) = sin(pi x)."""
        return np.sin(np.pi * np.asarray(x, dtype=np.float64))

    def _u(self, x, t):
        return np.exp(-self.alpha * np.pi ** 2 * t) * np.sin(np.pi * x)


class WaveSin(Reference):
    """1-D wave equation, standing waves.

        u_tt = c^2 u_xx   on x in [0, 1], t in [0, t1],
        u(0, t) = u(1, t) = 0,   u(x, 0) = sin(pi x) + a2 sin(k2 pi x),   u_t(x, 0) = 0,
        u = sin(pi x) cos(c pi t) + a2 sin(k2 pi x) cos(k2 c pi t).

    With ``c=2, a2=0.5, k2=4`` this is the benchmark of Wang, Yu & Perdikaris (2022).

    Args:
        c: wave speed, > 0.
        a2: amplitude of the optional second mode (default 0: one mode).
        k2: integer wave number of the second mode.
        t1: final time.
    """

    names = ("x", "t")

    def __init__(self, c=1.0, a2=0.0, k2=4, t1=1.0):
        self.c = _positive(c, "wave_sin", "c")
        self.a2, self.k2 = float(a2), float(k2)
        extra = f", a2={self.a2:g}, k2={self.k2:g}" if self.a2 else ""
        self.name = f"wave_sin(c={self.c:g}{extra})"
        self.domain = Interval(0, 1) * TimeInterval(0, _positive(t1, "wave_sin", "t1"))

    def initial(self, x):
        """u(x, 0); the initial velocity u_t(x, 0) is 0."""
        x = np.asarray(x, dtype=np.float64)
        return np.sin(np.pi * x) + self.a2 * np.sin(self.k2 * np.pi * x)

    def _u(self, x, t):
        c, k2 = self.c, self.k2
        return (np.sin(np.pi * x) * np.cos(c * np.pi * t)
                + self.a2 * np.sin(k2 * np.pi * x) * np.cos(k2 * c * np.pi * t))


class HelmholtzSin(Reference):
    """Manufactured Helmholtz problem.

        Δu + k^2 u = f   on [-1, 1]^2,   u = 0 on the boundary (a1, a2 integers),
        u = sin(a1 pi x) sin(a2 pi y),   f = (k^2 - (a1^2 + a2^2) pi^2) u.

    Args:
        k: wave number of the operator, > 0.
        a1: frequency in x.
        a2: frequency in y.
    """

    names = ("x", "y")

    def __init__(self, k=1.0, a1=1, a2=4):
        self.k = _positive(k, "helmholtz_sin", "k")
        self.a1, self.a2 = float(a1), float(a2)
        self.name = f"helmholtz_sin(k={self.k:g}, a1={self.a1:g}, a2={self.a2:g})"
        self.domain = Rectangle((-1, -1), (1, 1))

    def _u(self, x, y):
        return np.sin(self.a1 * np.pi * x) * np.sin(self.a2 * np.pi * y)

    def source(self, points):
        """f = Δu + k^2 u at ``points`` of shape ``(n, 2)``; returns shape ``(n,)``."""
        return (self.k ** 2 - (self.a1 ** 2 + self.a2 ** 2) * np.pi ** 2) * self(points)


def burgers_cole_hopf(nu=0.01 / np.pi, nodes=256):
    """Burgers reference u(x, t) on [-1, 1] x [0, 1]; see `BurgersColeHopf`."""
    return BurgersColeHopf(nu, nodes)


def poisson_sin(k=1):
    """Manufactured Poisson reference u(x, y) on [0, 1]^2; see `PoissonSin`."""
    return PoissonSin(k)


def heat_sin(alpha=0.1, t1=1.0):
    """Heat-equation reference u(x, t) on [0, 1] x [0, t1]; see `HeatSin`."""
    return HeatSin(alpha, t1)


def wave_sin(c=1.0, a2=0.0, k2=4, t1=1.0):
    """Wave-equation reference u(x, t) on [0, 1] x [0, t1]; see `WaveSin`."""
    return WaveSin(c, a2, k2, t1)


def helmholtz_sin(k=1.0, a1=1, a2=4):
    """Manufactured Helmholtz reference u(x, y) on [-1, 1]^2; see `HelmholtzSin`."""
    return HelmholtzSin(k, a1, a2)


__all__ = ["Reference", "BurgersColeHopf", "PoissonSin", "HeatSin", "WaveSin", "HelmholtzSin",
           "burgers_cole_hopf", "poisson_sin", "heat_sin", "wave_sin", "helmholtz_sin"]
