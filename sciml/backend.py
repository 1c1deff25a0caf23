"""Buffers: the only code that knows which Taichi buffer type holds a tensor's data.

Every buffer is flat (1-D); shapes live on the Tensor. On CPU a buffer is a C-contiguous
numpy array, which Taichi kernels read and write zero-copy (measured here: +14 us per
argument vs +8 us for a ``ti.ndarray``, but allocation costs 0.3 us instead of 50 us and
``.numpy()`` is free). On Vulkan and CUDA a buffer is a device ``ti.ndarray``.
"""
from __future__ import annotations

import math

import numpy as np

from . import runtime

NP_DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "bool": np.uint8}
_TI = {}
TRACE: list = [None]  # the recorder of sciml.jit while it traces (sciml/autodiff/jit.py), else None
_meta_cache: dict = {}
runtime.on_shutdown(_meta_cache.clear)


def traced_random(what: str):
    """Called where random numbers are drawn: inside a function that sciml.jit traces they would
    be drawn once and frozen into every replay, so the trace stops with a clear error."""
    if TRACE[0] is not None:
        TRACE[0].fail(f"draws random numbers ({what}) inside the function: a replay would repeat the same draw. "
                      "Draw them outside and pass them in as an argument.")


def ti_dtype(dtype: str):
    ti = runtime.ensure_init()
    if not _TI:
        _TI.update(float32=ti.f32, float64=ti.f64, int32=ti.i32, bool=ti.u8)
    return _TI[dtype]


_host: list = []  # cached once the runtime has started (the arch is fixed per process)
# Host buffers of at least ALIGN_MIN_BYTES start on a 64-byte boundary, so that the wide vector kernels
# (8 or 16 lanes, kernels/_vec.py: aligned vector loads) can run on them; numpy itself aligns to 16 bytes.
# Smaller buffers stay plain np.empty (the aligned allocation costs ~1-2 us more; their kernels are
# launch-bound anyway).
ALIGN, ALIGN_MIN_BYTES = 64, 1 << 16
_ITEM = {t: np.dtype(t).itemsize for t in NP_DTYPES.values()}
_u8 = np.uint8


def _aligned(n, dt, alloc):
    """A new flat numpy array of ``n`` elements of ``dt`` whose data starts on an ALIGN-byte boundary:
    a slice of an over-allocated byte array, wrapped through a memoryview so that the result's ``.base``
    is not an ndarray (sciml.jit treats a buffer whose base is an ndarray as a view into that one)."""
    nb = n * _ITEM[dt]
    raw = alloc(nb + ALIGN, _u8)
    off = -_address(raw) & (ALIGN - 1)
    return np.frombuffer(memoryview(raw)[off:off + nb], dt)


def _address(a):
    import ctypes
    global _address
    addressof, from_buffer = ctypes.addressof, ctypes.c_char.from_buffer

    def _address(a):  # noqa: F811 - bound once, on first use
        return addressof(from_buffer(a))
    return _address(a)


def on_host() -> bool:
    """True when buffers are numpy arrays (CPU backend)."""
    if _host:
        return _host[0]
    h = runtime.arch() == "cpu"
    _host.append(h)
    return h


def aligned_empty(n: int, dtype: str):
    """A new flat host buffer of ``n`` elements starting on an ALIGN-byte boundary, whatever its size
    (sciml.jit's per-call output buffers, so that a replay meets the alignment its trace saw)."""
    return _aligned(n, NP_DTYPES[dtype], np.empty)


def _big(n, dt):
    """Whether a host buffer of ``n`` elements of ``dt`` is allocated ALIGN-byte aligned: from ALIGN_MIN_BYTES on,
    and at every size while sciml.jit traces (a replay allocates its fresh outputs aligned, kernels/_vec.py)."""
    return n * _ITEM[dt] >= ALIGN_MIN_BYTES or TRACE[0] is not None


_NEW_ND = []  # the fast device allocator, built on first use (see _new_ndarray)


def _new_ndarray(dtype: str, n: int):
    """A new zero-filled 1-D device ndarray of ``n`` elements, as ``ti.ndarray(dtype, n)`` makes it
    but without its cost: Taichi 1.7.4's ``ScalarNdarray.__init__`` formats the whole Python stack
    into a debug string on every allocation (~0.4 ms at a deep call site, measured on an H100 host:
    about two thirds of a W2 step's wall time on CUDA). The same C++ call, with an empty DebugInfo;
    the object is a plain ``ScalarNdarray`` (freed by its own ``__del__``). Falls back to
    ``ti.ndarray`` if this Taichi lacks any piece."""
    if not _NEW_ND:
        try:
            from taichi._lib import core as _core
            from taichi.lang import impl
            from taichi.lang._ndarray import Ndarray, ScalarNdarray
            from taichi.lang.enums import Layout
            rt = impl.get_runtime  # the program is looked up per call: ti.init makes a new one
            dbg, null, new, base = _core.DebugInfo(), Layout.NULL, ScalarNdarray.__new__, Ndarray.__init__
            tdts = {}

            def make(dtype, n):
                tdt = tdts.get(dtype)
                if tdt is None:
                    tdt = tdts[dtype] = ti_dtype(dtype)
                a = new(ScalarNdarray)
                base(a)
                a.dtype = a.element_type = tdt
                a.arr = rt().prog.create_ndarray(tdt, [n], layout=null, zero_fill=True, dbg_info=dbg)
                a.shape = (n,)
                return a
            make("float32", 1)  # fails here, not later, on another Taichi
        except Exception:  # pragma: no cover - another Taichi version
            ti = runtime.ensure_init()

            def make(dtype, n):
                return ti.ndarray(ti_dtype(dtype), n)
        _NEW_ND.append(make)
    return _NEW_ND[0](dtype, n)


def empty(n: int, dtype: str):
    """A new flat buffer of ``n`` elements (uninitialised on CPU, zeros on device)."""
    if _host and _host[0] and TRACE[0] is None:  # the eager CPU path (every op's output): no calls but numpy's
        dt = NP_DTYPES[dtype]
        return _aligned(n, dt, np.empty) if n * _ITEM[dt] >= ALIGN_MIN_BYTES else np.empty(n, dt)
    if on_host():
        dt = NP_DTYPES[dtype]
        buf = _aligned(n, dt, np.empty) if _big(n, dt) else np.empty(n, dt)
    else:
        runtime.ensure_init()
        with runtime.LAUNCH_LOCK:  # device allocation goes through Taichi's program state
            buf = _new_ndarray(dtype, max(int(n), 1))
    if TRACE[0] is not None:
        TRACE[0].created(buf, "empty")
    return buf


def zeros(n: int, dtype: str):
    if on_host():
        dt = NP_DTYPES[dtype]
        buf = _aligned(n, dt, np.zeros) if _big(n, dt) else np.zeros(n, dt)
    else:
        runtime.ensure_init()
        with runtime.LAUNCH_LOCK:
            buf = _new_ndarray(dtype, max(int(n), 1))  # device ndarrays start zeroed
    if TRACE[0] is not None:
        TRACE[0].created(buf, "zeros")
    return buf


def from_numpy(a: np.ndarray, dtype: str):
    """Copy a numpy array (any shape) into a new flat buffer of ``dtype``."""
    dt = NP_DTYPES[dtype]
    if on_host() and isinstance(a, np.ndarray) and _big(a.size, dt):
        flat = _aligned(a.size, dt, np.empty)
        flat.reshape(a.shape)[...] = a  # numpy's unsafe cast, as np.array(a, dtype) below
    else:
        flat = np.array(a, dtype=dt, order="C").reshape(-1)  # always a copy
    if on_host():
        if TRACE[0] is not None:
            TRACE[0].created(flat, "const")
        return flat
    runtime.ensure_init()
    with runtime.LAUNCH_LOCK:
        buf = _new_ndarray(dtype, max(flat.size, 1))
    if flat.size:
        if flat.size == buf.shape[0]:
            buf.from_numpy(flat)
        else:  # pragma: no cover
            raise AssertionError
    if TRACE[0] is not None:
        TRACE[0].created(buf, "const", flat)
    return buf


def to_numpy(buf, shape, dtype: str) -> np.ndarray:
    """A numpy array with the buffer's contents (a read-only view on CPU, a copy on device)."""
    n = math.prod(shape)  # Python ints (np.prod costs ~5 us here, paid by every float(loss))
    if TRACE[0] is not None:
        TRACE[0].host_read(buf, shape, dtype)
    if isinstance(buf, np.ndarray):
        a = buf[:n].reshape(shape)
    else:
        with runtime.LAUNCH_LOCK:
            a = buf.to_numpy()[:n].reshape(shape)
    if dtype == "bool":
        a = a.view(np.bool_)
    return a


def meta(values: tuple):
    """A cached int32 buffer holding kernel metadata (shapes, strides, offsets)."""
    buf = _meta_cache.get(values)
    if buf is None:
        if len(_meta_cache) > 4096:
            _meta_cache.clear()
        buf = from_numpy(np.asarray(values, dtype=np.int32), "int32")
        _meta_cache[values] = buf
    return buf


def sync():
    if not on_host():
        runtime.ensure_init().sync()
