"""Kernel cache and launch policy shared by the kernel modules."""
from .. import backend, runtime

SERIAL_BELOW = 1 << 16  # elements; below this a CPU loop runs serialized
BLOCK = 64  # elements per parallel iteration on CPU (one wake-up per row, not per element)

_cache: dict = {}


def cached(key, build):
    """Return the kernel for ``key``, building it with ``build()`` on first use."""
    k = _cache.get(key)
    if k is None:
        k = _cache[key] = build()
    return k


def launch_mode(n: int) -> bool:
    """True if a loop over ``n`` elements should run serialized (CPU and small)."""
    return backend.on_host() and n < SERIAL_BELOW


def ti():
    return runtime.ensure_init()


def arr(dtype: str):
    """The Taichi ndarray annotation of a flat buffer of ``dtype``."""
    t = ti()
    return t.types.ndarray(dtype=backend.ti_dtype(dtype), ndim=1)
