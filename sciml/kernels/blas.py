"""CPU dense GEMM through Intel oneMKL's CBLAS, when it is installed (the ``mkl`` wheel).

Measured here (2-core Zen 5, float32, the 8 GEMMs of the W1 step; `python -m benchmarks.bench_blas`):
numpy's bundled OpenBLAS 3.8 ms, MKL 2.6 ms (the same library PyTorch links). Dense
GEMM is the one place sciml may route around Taichi on CPU; everything else stays a kernel.

Selection: env ``SCIML_BLAS`` = ``auto`` (default: MKL if found, else numpy), ``mkl`` (error if
missing), ``numpy``. ``SCIML_MKL_LIB`` names the library file explicitly.

Threads: MKL's OpenMP workers spin after a call (KMP_BLOCKTIME, 200 ms by default). Small
Taichi kernels run serialized on the calling thread (``_common.launch_mode``), so the spinning
worker does not delay them; ``KMP_BLOCKTIME=0`` was measured slower here (3.3 vs 2.7 ms for the
W1 GEMMs: every call wakes the workers). ``threads(n)`` / ``set_threads(n)`` limit MKL's count.
"""
import ctypes
import glob
import os
import sys

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_state = {"lib": None, "checked": False, "error": None}


def _candidates():
    env = os.environ.get("SCIML_MKL_LIB")
    if env:
        yield env
    roots = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(sys.executable))}
    for r in roots:
        for pat in ("lib/libmkl_rt.so*", "Library/bin/mkl_rt*.dll", "lib/libmkl_rt*.dylib"):
            yield from sorted(glob.glob(os.path.join(r, pat)), reverse=True)
    import ctypes.util
    found = ctypes.util.find_library("mkl_rt")
    if found:
        yield found


def _load():
    os.environ.setdefault("KMP_WARNINGS", "0")
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            lib.cblas_sgemm, lib.cblas_dgemm  # noqa: B018  (both symbols must exist)
        except (OSError, AttributeError) as e:
            errors.append(f"{path}: {e}")
            continue
        i, p = ctypes.c_int, ctypes.c_void_p
        lib.cblas_sgemm.argtypes = [i, i, i, i, i, i, ctypes.c_float, p, i, p, i, ctypes.c_float, p, i]
        lib.cblas_dgemm.argtypes = [i, i, i, i, i, i, ctypes.c_double, p, i, p, i, ctypes.c_double, p, i]
        lib.cblas_sgemm.restype = lib.cblas_dgemm.restype = None
        lib.MKL_Set_Num_Threads_Local.argtypes = [i]
        lib.MKL_Set_Num_Threads_Local.restype = i
        lib.MKL_Set_Num_Threads.argtypes = [i]
        lib.MKL_Set_Num_Threads.restype = None
        lib.MKL_Get_Max_Threads.restype = i
        lib.sciml_path = path
        return lib
    _state["error"] = "; ".join(errors) or "libmkl_rt not found (pip install mkl)"
    return None


def mkl():
    """The loaded MKL runtime library, or None (numpy's BLAS is used then)."""
    if not _state["checked"]:
        _state["checked"] = True
        choice = os.environ.get("SCIML_BLAS", "auto").strip().lower()
        if choice not in ("auto", "mkl", "numpy"):
            raise ValueError(f"SCIML_BLAS: expected 'auto', 'mkl' or 'numpy', got {choice!r}")
        if choice != "numpy":
            _state["lib"] = _load()
            if _state["lib"] is None and choice == "mkl":
                raise RuntimeError(f"SCIML_BLAS=mkl but MKL could not be loaded: {_state['error']}")
    return _state["lib"]


def name():
    lib = mkl()
    return f"mkl ({os.path.basename(lib.sciml_path)})" if lib is not None else "numpy"


class threads:
    """``with blas.threads(1): ...`` — MKL thread count for this Python thread (no-op without MKL)."""

    def __init__(self, n):
        self.n = int(n)

    def __enter__(self):
        lib = mkl()
        self._prev = lib.MKL_Set_Num_Threads_Local(self.n) if lib is not None else None
        return self

    def __exit__(self, *exc):
        if self._prev is not None:
            mkl().MKL_Set_Num_Threads_Local(self._prev)


def get_threads():
    lib = mkl()
    return lib.MKL_Get_Max_Threads() if lib is not None else None


def set_threads(n):
    """Process-wide MKL thread count (every Python thread); no-op without MKL."""
    lib = mkl()
    if lib is not None and n is not None:
        lib.MKL_Set_Num_Threads(int(n))
        lib.MKL_Set_Num_Threads_Local(0)  # 0: this thread follows the process-wide count again


def gemm(a, b, out, m: int, n: int, k: int, ta: bool, tb: bool, dtype: str, accumulate: bool = False) -> bool:
    """out[:m*n] (m, n) = op(a) @ op(b) (``+=`` with ``accumulate``) on flat contiguous numpy buffers;
    False if MKL is absent."""
    lib = mkl()
    if lib is None or dtype not in ("float32", "float64"):
        return False
    f = lib.cblas_sgemm if dtype == "float32" else lib.cblas_dgemm
    f(_ROW_MAJOR, _TRANS if ta else _NO_TRANS, _TRANS if tb else _NO_TRANS, m, n, k, 1.0,
      a.ctypes.data, m if ta else k, b.ctypes.data, k if tb else n, 1.0 if accumulate else 0.0, out.ctypes.data, n)
    return True


def available() -> bool:
    return mkl() is not None


__all__ = ["mkl", "name", "threads", "get_threads", "set_threads", "gemm", "available"]
