"""The CPU/device GEMMs of the fused PINN path (:mod:`sciml.pinn.fused`) and their threading.

``_gemm`` is the one GEMM entry point of the fused forward and adjoint: on devices it writes C in
place into a region of a larger buffer (``kernels.blas.device_gemm``); on the host it calls sciml's
matmul (BLAS), or, for large point sets inside the fused primitives (``with _THREADS:``), splits
the GEMM in two halves run as single-threaded BLAS calls on two threads (``_split_gemm``, one
recorded host call, so ``sciml.jit`` replays it whole and with the same bits).
"""
from __future__ import annotations

import os

import numpy as np

from .. import backend
from ..autodiff.ops import linalg as _linalg_ops
from ..kernels import _common as C
from ..kernels import blas as _kblas
from ..kernels import linalg as LK
from ..kernels import skinny_gemm as _skinny


def _gemm(a, b, out, m, n, k, ta=False, tb=False, dtype="float64", batch=1, defer=None, lvl=0):
    """out = op(a) @ op(b). On CPU with BLAS, a large GEMM is split in two halves run on two
    threads, each a single-threaded BLAS call (see ``_Threads``). ``out`` = (buffer, offset) on devices:
    C is written in place into that region of a larger buffer (no temporary and no copy kernel);
    ``defer``/``lvl``: ``device_gemm``'s (its column sums gathered for ``colsum.run``)."""
    if isinstance(out, tuple):
        _kblas.device_gemm(a, b, out[0], batch, m, n, k, ta, tb, dtype, out_off=out[1], defer=defer, ws_level=lvl)
        return
    blas = _linalg_ops._blas["enabled"]
    host = batch == 1 and (blas is None or blas)   # one host GEMM (BLAS or the skinny kernels)
    if host and not ta and _skinny.run(a, b, out, m, n, k, tb, dtype, False, True):
        return  # skinny float32 GEMMs: kernels/skinny_gemm.py's FMA kernel (Taichi's threads)
    if host and ta and not tb and _skinny.run_tn(a, b, out, m, n, k, dtype, False):
        return  # a layer's weight gradient H^T G (float32): the same module's chunked FMA kernel
    if host and _THREADS.active:
        if (not ta and m >= SPLIT_MIN) or (ta and not tb and k >= SPLIT_MIN):
            # one host call (sciml.jit records it whole: a replay runs both halves, the same bits)
            C.host_call(_split_gemm, a, b, out, m, n, k, ta, tb, dtype)
            return
    LK.matmul(a, b, out, batch, m, n, k, ta, tb, dtype, blas)


def _split_gemm(a, b, out, m, n, k, ta, tb, dtype):
    """The split GEMM of ``_gemm``: the halves of the rows of C (``ta`` False) or of the reduction
    (``ta``, then C = first half + second half) as two single-threaded BLAS calls, the second on
    ``_THREADS``' worker thread. Raw host GEMMs (``LK._host_matmul``), not ``LK.matmul``: a replay
    of sciml.jit runs this whole call, and a traced ``LK.matmul`` on the worker thread would wait
    for the tracing thread's lock. A replay runs outside ``with _THREADS:``: the BLAS count is set
    to one thread here (and restored), as inside the fused primitives."""
    t = _THREADS
    prev = None
    if not t.active:
        prev = t.lib.get_num_threads()
        if prev != 1:
            t.lib.set_num_threads(1)
    try:
        mm = LK._host_matmul
        if not ta:
            h = m // 2
            fut = t.submit(mm, a[h * k:m * k], b, out[h * n:m * n], 1, m - h, n, k, False, tb, dtype, False)
            mm(a[:h * k], b, out[:h * n], 1, h, n, k, False, tb, dtype, False)
            fut.result()
            return
        h = k // 2
        tmp = np.empty(m * n, out.dtype)
        fut = t.submit(mm, a[h * m:k * m], b[h * n:k * n], tmp, 1, m, n, k - h, True, False, dtype, False)
        mm(a[:h * m], b[:h * n], out, 1, m, n, h, True, False, dtype, False)
        fut.result()
        out[:m * n] += tmp
    finally:
        if prev is not None and prev != 1:
            t.lib.set_num_threads(prev)


SPLIT_MIN = 8192   # rows (or reduction length) above which a CPU GEMM is split over two threads


class _Threads:
    """CPU GEMM threading for the fused path.

    OpenBLAS's own worker threads spin while waiting, and fight Taichi's thread pool (and any
    other load) for the cores: measured here on a busy 2-core VM, the 17 GEMMs of one W2 step
    took 0.8-1.5 s with OpenBLAS's threads vs 31 ms single-threaded. Inside the fused
    primitives BLAS is set to one thread (threadpoolctl, ~1 us) and each large GEMM is split
    in two halves on two Python threads (numpy releases the GIL), which block instead of
    spinning. Without threadpoolctl, or with one core, GEMMs run as sciml's matmul does.
    """

    def __init__(self):
        self.lib = None
        self.pool = None
        self.active = False
        self.enabled = True
        self._checked = False

    def _check(self):
        self._checked = True
        if not backend.on_host() or (os.cpu_count() or 1) < 2:
            return
        from ..kernels import blas
        if blas.available():  # MKL (sciml's GEMM when installed): its own process-wide count
            import concurrent.futures
            self.lib = _MKLThreads(blas)
            self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sciml-gemm")
            return
        try:
            from threadpoolctl import ThreadpoolController
            libs = ThreadpoolController().select(user_api="blas").lib_controllers
        except Exception:  # pragma: no cover - threadpoolctl missing or unusable
            return
        if libs:
            import concurrent.futures
            self.lib = libs[0]
            self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sciml-gemm")

    def submit(self, *a):
        return self.pool.submit(*a)

    def __enter__(self):
        if not self._checked:
            self._check()
        self._prev = None
        if self.enabled and self.lib is not None and not self.active:
            self._prev = self.lib.get_num_threads()
            self.lib.set_num_threads(1)
            self.active = True
        return self

    def __exit__(self, *exc):
        if self._prev is not None:
            self.lib.set_num_threads(self._prev)
            self.active = False


class _MKLThreads:
    """threadpoolctl's controller interface over sciml's MKL binding."""

    def __init__(self, blas):
        self.blas = blas

    def get_num_threads(self):
        return self.blas.get_threads()

    def set_num_threads(self, n):
        self.blas.set_threads(n)


_THREADS = _Threads()
