"""Seeded point samplers on the unit hypercube and residual-adaptive resampling.

Every sampler returns a float64 array of shape ``(n, d)`` in ``[0, 1)^d`` (``grid`` with
``endpoint=True`` reaches 1). Geometries map these points onto their domains. Randomness
comes only from the ``rng`` argument: a ``np.random.Generator`` or an int seed, so a seed
makes a run repeatable; there is no global random state.

Dependencies: numpy, and scipy, an allowed dependency of sciml, for two things only: the
Sobol' sequence (``scipy.stats.qmc``) and the inverse normal CDF used for spheres in four or
more dimensions (``scipy.special.ndtri``). Everything else works without scipy.

Example:
    >>> from sciml.pinn import sampling
    >>> sampling.sobol(8, 2, rng=0).shape
    (8, 2)
"""
import numbers
import warnings

import numpy as np

METHODS = ("uniform", "lhs", "sobol", "hammersley", "grid")
_ALIASES = {"latin_hypercube": "lhs", "latin": "lhs", "random": "uniform", "pseudo": "uniform",
            "hammersly": "hammersley", "Hammersley": "hammersley", "LHS": "lhs", "Sobol": "sobol"}

_NO_SCIPY = ("sobol() needs scipy (scipy.stats.qmc.Sobol), which is not installed. "
             "Install it with `pip install scipy`, or use method='lhs' or 'uniform'.")


def as_rng(rng, who="sampler"):
    """Turn an int seed or a Generator into a ``np.random.Generator``.

    Args:
        rng: ``np.random.Generator`` (used as is) or an int seed.
        who: name of the caller, for the error message.
    Returns:
        A ``np.random.Generator``.
    Raises:
        TypeError: if ``rng`` is None or another type (sciml has no global random state).
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    if rng is None:
        raise TypeError(f"{who} needs rng: a np.random.Generator or an int seed, got None "
                        "(sciml has no global random state; pass e.g. rng=0).")
    raise TypeError(f"{who}: rng must be a np.random.Generator or an int seed, "
                    f"got {type(rng).__name__}.")


def check_count(n, what="n"):
    """Validate a point count: a non-negative int. Returns it as an int."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{what} must be a non-negative int, got {n!r} ({type(n).__name__}).")
    if n < 0:
        raise ValueError(f"{what} must be a non-negative int, got {n}.")
    return int(n)


def _check_dim(d):
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 0:
        raise ValueError(f"d must be a non-negative int (the dimension), got {d!r}.")
    return int(d)


def check_method(method):
    """Normalise a sampling method name; raise ValueError naming the choices."""
    name = _ALIASES.get(method, method)
    if name not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}.")
    return name


def uniform(n, d, rng):
    """Independent uniform points on ``[0, 1)^d``.

    Args:
        n: number of points.
        d: dimension.
        rng: ``np.random.Generator`` or int seed.
    Returns:
        Array of shape ``(n, d)``.
    Example:
        >>> uniform(4, 3, rng=0).shape
        (4, 3)
    """
    n, d = check_count(n), _check_dim(d)
    return as_rng(rng, "uniform()").random((n, d))


def latin_hypercube(n, d, rng):
    """Latin hypercube sample: in every coordinate each of the ``n`` strata
    ``[k/n, (k+1)/n)`` holds exactly one point (McKay, Beckman & Conover 1979).

    Args:
        n: number of points.
        d: dimension.
        rng: ``np.random.Generator`` or int seed.
    Returns:
        Array of shape ``(n, d)``, in random order.
    Example:
        >>> np.sort(np.floor(latin_hypercube(5, 2, rng=0) * 5), axis=0)[:, 0]
        array([0., 1., 2., 3., 4.])
    """
    n, d = check_count(n), _check_dim(d)
    rng = as_rng(rng, "latin_hypercube()")
    strata = np.stack([rng.permutation(n) for _ in range(d)], axis=1) if n else np.zeros((0, d))
    return (strata + rng.random((n, d))) / max(n, 1)


def _sobol_engine(d, rng):
    try:
        from scipy.stats import qmc
    except ImportError as exc:  # pragma: no cover - scipy is installed in CI
        raise ImportError(_NO_SCIPY) from exc
    seed = int(as_rng(rng, "sobol()").integers(0, 2**63 - 1))
    try:
        return qmc.Sobol(d, scramble=True, rng=np.random.default_rng(seed))
    except TypeError:  # scipy < 1.15 names the argument `seed`
        return qmc.Sobol(d, scramble=True, seed=np.random.default_rng(seed))


def _sobol_draw(engine, n):
    with warnings.catch_warnings():   # "balance properties need n = 2^m": documented instead
        warnings.simplefilter("ignore", UserWarning)
        return engine.random(n)


def sobol(n, d, rng):
    """Scrambled Sobol' points (Owen scrambling, seeded from ``rng``), via scipy.

    The balance properties hold for ``n`` a power of two: then in every coordinate each
    stratum ``[k/n, (k+1)/n)`` holds exactly one point. Other ``n`` take the first ``n``
    points of the sequence.

    Args:
        n: number of points (best a power of two).
        d: dimension, ``1 <= d <= 21201``.
        rng: ``np.random.Generator`` or int seed; seeds the scrambling.
    Returns:
        Array of shape ``(n, d)``.
    Raises:
        ImportError: if scipy is missing, saying how to install it.
    Example:
        >>> sobol(8, 2, rng=0).shape
        (8, 2)
    """
    n, d = check_count(n), _check_dim(d)
    if d == 0:
        as_rng(rng, "sobol()")
        return np.zeros((n, 0))
    return _sobol_draw(_sobol_engine(d, rng), n) if n else np.zeros((0, d))


_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71)


def radical_inverse(k, base):
    """Van der Corput radical inverse of the integers ``k`` (array) in ``base``: the digits
    of ``k`` mirrored about the radix point (``radical_inverse([1, 2, 3], 2)`` = 0.5, 0.25,
    0.75)."""
    k = np.asarray(k, dtype=np.int64).copy()
    out, f = np.zeros(k.shape), 1.0 / base
    while np.any(k > 0):
        out += f * (k % base)
        k //= base
        f /= base
    return out


def halton(n, d, rng=None, start=1):
    """Halton points ``k = start, ..., start + n - 1``: column ``j`` is the radical inverse
    of ``k`` in the ``j``-th prime. Deterministic (``rng`` is accepted and unused)."""
    n, d = check_count(n), _check_dim(d)
    if d > len(_PRIMES):
        raise ValueError(f"halton(): d={d} is more than the {len(_PRIMES)} dimensions supported.")
    k = np.arange(start, start + n)
    return np.stack([radical_inverse(k, b) for b in _PRIMES[:d]], axis=1) if d else np.zeros((n, 0))


def hammersley(n, d, rng=None):
    """The Hammersley set, exactly as DeepXDE's default ``train_distribution="Hammersley"``
    draws it (via scikit-optimize): in one dimension the van der Corput points of
    ``k = 1, ..., n`` in base 2 (for ``n = 2^m - 1`` the regular grid ``k / 2^m``); in ``d >= 2``
    the first ``d - 1`` columns are Halton (primes 2, 3, 5, ...) and the last is the regular
    ``k / (n + 1)``, ``k = 1, ..., n``. No point lies on a face of the cube.

    Deterministic: every draw of ``n`` points is the same set (``rng`` is accepted and
    unused), so with residual-adaptive resampling the candidate set repeats; a rejection
    sampler (non-box domains) continues the Halton sequence instead (see :func:`stream`).

    Args:
        n: number of points.
        d: dimension (at most 20).
        rng: ignored (for the common signature).
    Returns:
        Array of shape ``(n, d)`` in ``(0, 1)^d``.
    Example:
        >>> hammersley(4, 1)[:, 0]
        array([0.5  , 0.25 , 0.75 , 0.125])
        >>> hammersley(3, 2)
        array([[0.5 , 0.25],
               [0.25, 0.5 ],
               [0.75, 0.75]])
    """
    n, d = check_count(n), _check_dim(d)
    if d <= 1:
        return halton(n, d)
    return np.concatenate([halton(n, d - 1), (np.arange(1, n + 1) / (n + 1))[:, None]], axis=1)


def _grid_counts(n, extents):
    """Points per axis so that a regular grid over a box with side lengths ``extents``
    (shape ``(d,)``) has about ``n`` points with about equal spacing on every axis."""
    ext = np.asarray(extents, dtype=float)
    if n == 0:
        return [0] * len(ext)
    if len(ext) == 0:
        return []
    pos = ext > 0
    h = (np.prod(ext[pos]) / n) ** (1.0 / max(pos.sum(), 1)) if pos.any() else 1.0
    return [max(1, int(round(e / h))) if p else 1 for e, p in zip(ext, pos)]


def grid(n, d, *, extents=None, endpoint=False):
    """Regular grid of about ``n`` points on ``[0, 1]^d``.

    Args:
        n: wanted number of points; the result has ``prod(counts)`` points, close to ``n``.
        d: dimension.
        extents: optional side lengths, shape ``(d,)``, of the box the grid will be mapped
            onto, so that the spacing is about equal on every axis after mapping.
        endpoint: if False (default), cell centres ``(k + 1/2)/m``, never on the faces of
            the cube; if True, ``linspace(0, 1, m)`` including both ends.
    Returns:
        Array of shape ``(N, d)`` with ``N`` close to ``n``, in C (row-major) order.
    Example:
        >>> grid(4, 2)
        array([[0.25, 0.25],
               [0.25, 0.75],
               [0.75, 0.25],
               [0.75, 0.75]])
    """
    n, d = check_count(n), _check_dim(d)
    if d == 0:
        return np.zeros((n, 0))
    if extents is None:
        extents = np.ones(d)
    if len(extents) != d:
        raise ValueError(f"grid(): extents has {len(extents)} entries; expected d={d}.")
    counts = _grid_counts(n, extents)
    if n == 0:
        return np.zeros((0, d))
    axes = [np.linspace(0.0, 1.0, m) if endpoint and m > 1 else (np.arange(m) + 0.5) / m
            for m in counts]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([a.ravel() for a in mesh], axis=1)


def sample(method, n, d, rng=None):
    """Dispatch to a sampler by name: ``"uniform"``, ``"lhs"``, ``"sobol"``, ``"hammersley"``
    or ``"grid"``.

    Args:
        method: sampler name (``"latin_hypercube"`` is accepted for ``"lhs"``).
        n: number of points (approximate for ``"grid"``).
        d: dimension.
        rng: ``np.random.Generator`` or int seed; unused by ``"grid"`` and ``"hammersley"``.
    Returns:
        Array of shape ``(n, d)`` on the unit cube.
    """
    method = check_method(method)
    if method == "grid":
        return grid(n, d)
    return {"uniform": uniform, "lhs": latin_hypercube, "sobol": sobol,
            "hammersley": hammersley}[method](n, d, rng)


def stream(method, d, rng):
    """A source of unit-cube points drawn in batches, for rejection sampling.

    ``"sobol"`` continues one scrambled sequence across batches (so accepted points stay
    low-discrepancy), ``"hammersley"`` continues the Halton sequence (the Hammersley set's
    last column needs the count in advance); ``"uniform"`` and ``"lhs"`` draw a fresh sample
    per batch.

    Args:
        method: ``"uniform"``, ``"lhs"`` or ``"sobol"`` (a grid is not a stream).
        d: dimension.
        rng: ``np.random.Generator`` or int seed.
    Returns:
        A function ``draw(m)`` returning an array of shape ``(m, d)``.
    """
    method = check_method(method)
    rng = as_rng(rng, f"{method} sampler")
    if method == "grid":
        raise ValueError("stream(): method='grid' is not a stream; use grid().")
    if method == "sobol":
        engine = _sobol_engine(d, rng)
        return lambda m: _sobol_draw(engine, m)
    if method == "lhs":
        return lambda m: latin_hypercube(m, d, rng)
    if method == "hammersley":
        nxt = [1]

        def draw(m):
            nxt[0] += m
            return halton(m, d, start=nxt[0] - m)
        return draw
    return lambda m: rng.random((m, d))


def _check_residual(candidates, residual_abs, who):
    cand = np.asarray(candidates)
    r = np.asarray(residual_abs, dtype=float)
    if cand.ndim == 0:
        raise ValueError(f"{who}: candidates must be an array of shape (m, d) or (m,), "
                         "got a scalar.")
    if r.ndim == 2 and r.shape[1] == 1:
        r = r[:, 0]
    if r.ndim != 1 or r.shape[0] != cand.shape[0]:
        raise ValueError(f"{who}: residual_abs has shape {np.shape(residual_abs)}; expected "
                         f"({cand.shape[0]},) or ({cand.shape[0]}, 1), one value per candidate "
                         f"(candidates has shape {cand.shape}).")
    if not np.all(np.isfinite(r)):
        raise ValueError(f"{who}: residual_abs has {int(np.sum(~np.isfinite(r)))} non-finite "
                         "values; the residual has diverged (NaN/inf).")
    return cand, np.abs(r)


def rar_add(candidates, residual_abs, k):
    """Residual-based adaptive refinement (RAR, Lu et al. 2021): the ``k`` candidates with
    the largest residual, to add to the training set.

    Args:
        candidates: candidate points, shape ``(m, d)``.
        residual_abs: residual magnitude at each candidate, shape ``(m,)`` or ``(m, 1)``.
        k: number of points to return, ``0 <= k <= m``.
    Returns:
        Array of shape ``(k, d)``, largest residual first.
    Example:
        >>> rar_add(np.array([[0.], [1.], [2.]]), np.array([0.1, 3.0, 2.0]), 2)
        array([[1.],
               [2.]])
    """
    cand, r = _check_residual(candidates, residual_abs, "rar_add()")
    k = check_count(k, "rar_add(): k")
    if k > len(r):
        raise ValueError(f"rar_add(): k={k} but there are only {len(r)} candidates.")
    if k == 0:
        return cand[:0]
    top = np.argpartition(-r, k - 1)[:k]
    return cand[top[np.argsort(-r[top], kind="stable")]]


def rad_resample(candidates, residual_abs, n, rng, k=1.0, c=1.0):
    """Residual-based adaptive distribution (RAD, Wu et al. 2023): draw ``n`` of the
    candidates without replacement with probability

        p(x) ∝ |r(x)|^k / mean(|r|^k) + c.

    Large ``k`` concentrates the points where the residual is large; large ``c`` tends
    to uniform sampling (``k=0`` or ``c -> inf``: uniform; ``c=0``: pure residual).

    Args:
        candidates: candidate points, shape ``(m, d)``.
        residual_abs: residual magnitude at each candidate, shape ``(m,)`` or ``(m, 1)``.
        n: number of points to draw, ``0 <= n <= m``.
        rng: ``np.random.Generator`` or int seed.
        k: exponent, ``k >= 0``.
        c: uniform floor, ``c >= 0``. With ``c = 0`` and fewer than ``n`` non-zero
            residuals, the rest is drawn uniformly from the zero-residual candidates.
    Returns:
        Array of shape ``(n, d)``.
    Example:
        >>> pts = rad_resample(np.random.default_rng(0).random((100, 2)), np.ones(100), 10, rng=0)
        >>> pts.shape
        (10, 2)
    """
    cand, r = _check_residual(candidates, residual_abs, "rad_resample()")
    n = check_count(n, "rad_resample(): n")
    rng = as_rng(rng, "rad_resample()")
    if n > len(r):
        raise ValueError(f"rad_resample(): n={n} but there are only {len(r)} candidates "
                         "(sampling is without replacement).")
    if not (k >= 0 and c >= 0):
        raise ValueError(f"rad_resample(): need k >= 0 and c >= 0, got k={k}, c={c}.")
    rk = r ** k
    mean = rk.mean() if len(rk) else 0.0
    p = (rk / mean if mean > 0 else np.zeros_like(rk)) + c
    if not p.sum() > 0:    # c = 0 and every residual zero: nothing to prefer
        p = np.ones_like(p)
    p = p / p.sum()
    if n > np.count_nonzero(p):   # c = 0, fewer non-zero residuals than n: fill uniformly
        p = p + (p == 0) * 1e-12
        p = p / p.sum()
    return cand[rng.choice(len(r), size=n, replace=False, p=p)]


def unit_sphere(u):
    """Map unit-cube points to unit vectors, uniformly distributed on the sphere.

    Area-preserving (so stratification carries over) for spheres in 1, 2 and 3 dimensions.

    Args:
        u: shape ``(n, k)``; ``k = 1`` gives the circle, ``k = 2`` the 2-sphere in R^3,
            ``k >= 4`` the sphere in R^k (normalised Gaussians via the inverse normal CDF).
    Returns:
        Array of shape ``(n, D)`` with ``D = 2, 3, k`` respectively.
    """
    k = u.shape[1]
    if k == 1:
        a = 2 * np.pi * u[:, 0]
        return np.stack([np.cos(a), np.sin(a)], axis=1)
    if k == 2:
        z = 1 - 2 * u[:, 0]
        s = np.sqrt(np.clip(1 - z * z, 0, None))
        a = 2 * np.pi * u[:, 1]
        return np.stack([s * np.cos(a), s * np.sin(a), z], axis=1)
    from scipy.special import ndtri
    g = ndtri(np.clip(u, 1e-12, 1 - 1e-12))
    norm = np.linalg.norm(g, axis=1, keepdims=True)
    g[norm[:, 0] == 0, 0] = 1.0     # the cube's centre maps to no direction: pick e_1
    return g / np.where(norm > 0, norm, 1.0)


def sphere_dims(d):
    """Unit-cube dimensions ``unit_sphere`` needs for the sphere in R^d (d >= 2)."""
    return {2: 1, 3: 2}.get(d, d)


__all__ = ["METHODS", "as_rng", "uniform", "latin_hypercube", "sobol", "hammersley", "halton",
           "radical_inverse", "grid", "sample",
           "stream", "rar_add", "rad_resample", "unit_sphere", "sphere_dims"]
