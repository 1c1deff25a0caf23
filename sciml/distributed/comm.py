"""The process group: MPI (mpi4py over OpenMPI) when launched by ``mpirun``, else one process.

Every collective here runs against a deadline, so a rank that died or stopped taking part makes
the others fail with a message that says so (then ``MPI_Abort`` ends the whole job) instead of
hanging forever: blocking MPI calls watched by a daemon thread (default), or non-blocking calls
(``Iallreduce``, ``Ibcast``, ``Ibarrier``) polled by the caller with ``on_timeout="raise"``.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback

import numpy as np

LAUNCHER_ENV = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
                "MV2_COMM_WORLD_SIZE", "HYDRA_CONTROL_FD")
DEFAULT_TIMEOUT = 300.0  # seconds; SCIML_DIST_TIMEOUT or init(timeout=...) change it

TIMEOUT_MSG = ("sciml.distributed: {what} timed out on rank {rank} of {size} after {timeout:g} s waiting for "
               "the other ranks. A rank died, hangs, or runs a different sequence of collectives (every rank "
               "must call the same collectives in the same order). Aborting the MPI job. Raise the limit with "
               "SCIML_DIST_TIMEOUT=<seconds> or sciml.distributed.init(timeout=...) if ranks legitimately "
               "wait longer (e.g. rank 0 writing a large checkpoint).")
NO_MPI4PY = ("sciml.distributed.init(backend='mpi'): mpi4py is not installed. Install it with "
             "`pip install 'sciml[mpi]'` (needs an MPI library: Debian `apt-get install openmpi-bin "
             "libopenmpi-dev`).")


class DistributedTimeoutError(RuntimeError):
    """A collective did not complete before the deadline (raised when ``on_timeout='raise'``)."""


class _Group:
    """State of the process group (one per process)."""

    def __init__(self):
        self.initialized = False
        self.comm = None          # mpi4py communicator, or None when single-process
        self.MPI = None
        self.rank = 0
        self.size = 1
        self.timeout = DEFAULT_TIMEOUT
        self.on_timeout = "abort"
        self.threads = None


_G = _Group()


def launched_by_mpirun() -> bool:
    """True when an MPI launcher (mpirun / mpiexec / srun with PMI) started this process."""
    return any(k in os.environ for k in LAUNCHER_ENV)


def init(backend: str = "auto", timeout: float | None = None, on_timeout: str = "abort",
         abort_on_exception: bool = True, threads="auto") -> tuple[int, int]:
    """Join the process group; returns ``(rank, world_size)``. Safe to call more than once.

    Args:
        backend: ``"auto"`` (MPI when mpi4py is installed and the process was started by ``mpirun``,
            else a single process), ``"mpi"`` (MPI, or an error saying what is missing) or ``"none"``
            (single process).
        timeout: seconds a collective may wait for the other ranks before the job is aborted with a
            clear message. Default: env ``SCIML_DIST_TIMEOUT`` or 300.
        on_timeout: ``"abort"`` (print the message, then ``MPI_Abort`` the whole job) or ``"raise"``
            (raise :class:`DistributedTimeoutError` on this rank only; the others may still hang).
        abort_on_exception: under MPI, an uncaught exception on any rank prints its traceback and
            aborts the job at once (otherwise the other ranks would wait for it until the timeout).
        threads: CPU threads per rank for Taichi kernels and the BLAS. ``"auto"`` (under MPI): the
            cores this rank may use, i.e. the machine's cores divided among its ranks, or the one
            core ``mpirun`` bound the rank to (OpenMPI binds ranks to cores when ranks <= cores; more
            threads than cores makes spinning thread pools fight: measured 5 s instead of 50 ms per
            PINN step here); an int: that many; None: leave the defaults. Applies to Taichi only if
            called before sciml starts Taichi (the first tensor).

    Example:
        >>> from sciml import distributed as dist
        >>> rank, size = dist.init()       # (0, 1) without mpirun; (r, N) under `mpirun -np N`
    """
    if backend not in ("auto", "mpi", "none"):
        raise ValueError(f"sciml.distributed.init(backend=...): got {backend!r}; expected 'auto', 'mpi' or 'none'.")
    if not (threads in (None, "auto") or isinstance(threads, int) and not isinstance(threads, bool) and threads > 0):
        raise ValueError(f"sciml.distributed.init(threads=...): got {threads!r}; expected 'auto', None or a "
                         "positive int.")
    if on_timeout not in ("abort", "raise"):
        raise ValueError(f"sciml.distributed.init(on_timeout=...): got {on_timeout!r}; expected 'abort' or 'raise'.")
    if timeout is None:
        env = os.environ.get("SCIML_DIST_TIMEOUT")
        timeout = float(env) if env else (_G.timeout if _G.initialized else DEFAULT_TIMEOUT)
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"sciml.distributed.init(timeout=...): got {timeout!r}; expected a positive number of "
                         "seconds.")
    _G.timeout, _G.on_timeout = timeout, on_timeout
    if _G.initialized:
        return _G.rank, _G.size
    use_mpi = False
    if backend == "mpi":
        use_mpi = True
    elif backend == "auto" and launched_by_mpirun():
        try:
            import mpi4py  # noqa: F401
            use_mpi = True
        except ImportError:
            if int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1"))) > 1:
                print("sciml.distributed: started by mpirun but mpi4py is not installed; every rank runs "
                      "alone (install it: pip install 'sciml[mpi]').", file=sys.stderr)
    if use_mpi:
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise RuntimeError(NO_MPI4PY) from e
        _G.MPI, _G.comm = MPI, MPI.COMM_WORLD
        _G.rank, _G.size = _G.comm.Get_rank(), _G.comm.Get_size()
        if abort_on_exception and _G.size > 1:
            _install_excepthook()
        if threads == "auto":  # mpirun binds each rank to a core by default when ranks <= cores
            threads = _auto_threads(_G.comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size())
        _bind_device()
    _G.initialized = True
    if threads not in (None, "auto"):
        _limit_threads(int(threads))
    return _G.rank, _G.size


def _bind_device():
    """One GPU per rank (sciml/distributed/devices.py): narrow CUDA_VISIBLE_DEVICES to this rank's GPU
    before Taichi starts, so ranks of a node do not all run on GPU 0. Nothing happens when no GPU is
    visible, when Taichi has already started (then the user's own choice stands), or with
    SCIML_BIND_DEVICE=0."""
    from .. import runtime
    from . import devices
    if os.environ.get("SCIML_BIND_DEVICE", "1") == "0" or runtime.is_initialized():
        return
    if devices.local_rank() is not None:
        devices.bind_local_device("cuda", required=False)


def _auto_threads(local_ranks: int) -> int:
    cores = os.cpu_count() or 1
    try:
        bound = len(os.sched_getaffinity(0))  # mpirun --bind-to core leaves one core per rank
    except AttributeError:  # pragma: no cover - not Linux
        bound = cores
    return max(1, min(bound, cores // local_ranks))


def _limit_threads(n: int):
    """Taichi's CPU thread pool (if Taichi has not started yet) and the BLAS pool to ``n`` threads."""
    from .. import runtime
    _G.threads = n
    if not runtime.is_initialized():
        os.environ.setdefault("TI_CPU_MAX_NUM_THREADS", str(n))  # read by ti.init
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(n)
    except ImportError:  # BLAS keeps its default pool
        pass


def _ensure():
    if not _G.initialized:
        init()
    return _G


def _install_excepthook():
    prev = sys.excepthook

    def hook(tp, value, tb):
        if tp is KeyboardInterrupt:
            return prev(tp, value, tb)
        sys.stderr.write(f"sciml.distributed: uncaught exception on rank {_G.rank} of {_G.size}; "
                         "aborting the MPI job so the other ranks do not wait for it:\n")
        sys.stderr.write("".join(traceback.format_exception(tp, value, tb)))
        sys.stderr.flush()
        abort(1)
    sys.excepthook = hook


def rank() -> int:
    """This process's rank (0 when not running under MPI)."""
    return _ensure().rank


def world_size() -> int:
    """Number of processes in the job (1 when not running under MPI)."""
    return _ensure().size


def is_main() -> bool:
    """True on rank 0: the rank that prints progress and writes checkpoints and plots."""
    return _ensure().rank == 0


def is_distributed() -> bool:
    """True when more than one process takes part."""
    return _ensure().size > 1


def timeout() -> float:
    """Seconds a collective waits for the other ranks before failing."""
    return _ensure().timeout


def abort(code: int = 1):
    """End every rank of the job (``MPI_Abort``); a plain exit when single-process."""
    sys.stdout.flush()
    sys.stderr.flush()
    if _G.comm is not None:
        _G.comm.Abort(code)
    os._exit(code)  # pragma: no cover - Abort does not return


class _Watchdog:
    """A daemon thread that ends the job when a blocking collective outlives the deadline.

    Blocking MPI collectives are much faster than polling non-blocking ones for large buffers
    (measured here, 2 ranks, 670k float32: Allreduce 0.4 ms; Iallreduce + Test loop 6-8 ms: OpenMPI's
    non-blocking algorithm progresses only when polled), and mpi4py releases the GIL while blocked,
    so a watchdog thread can see that a call is overdue, print the message and abort.
    """

    def __init__(self):
        self.current = None  # (what, deadline) while a collective runs, else None
        self.thread = None

    def run(self, what, fn):
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name="sciml-distributed-watchdog", daemon=True)
            self.thread.start()
        self.current = (what, time.monotonic() + _G.timeout)
        try:
            return fn()
        finally:
            self.current = None

    def _loop(self):
        while True:
            cur = self.current
            now = time.monotonic()
            if cur is not None and now > cur[1]:
                _timed_out(cur[0])
            time.sleep(min(0.25, max(0.01, _G.timeout / 20)))


_WATCHDOG = _Watchdog()


def _timed_out(what):
    msg = TIMEOUT_MSG.format(what=what, rank=_G.rank, size=_G.size, timeout=_G.timeout)
    if _G.on_timeout == "raise":
        raise DistributedTimeoutError(msg)
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
    try:
        if threading.current_thread() is threading.main_thread() or \
                _G.MPI.Query_thread() == _G.MPI.THREAD_MULTIPLE:
            abort(3)
    finally:
        os._exit(3)  # mpirun sees the non-zero exit and ends the other ranks


def wait(req, what: str):
    """Poll a non-blocking MPI request until it completes or the deadline passes (``on_timeout='raise'``)."""
    if req.Test():
        return
    deadline = time.monotonic() + _G.timeout
    spins, pause = 0, 2e-5
    while not req.Test():
        spins += 1
        if spins > 1000:  # after a busy phase, back off to at most 1 ms between polls
            time.sleep(pause)
            pause = min(pause * 1.5, 1e-3)
            if time.monotonic() > deadline:
                _timed_out(what)


def _collective(what, blocking, nonblocking):
    """Run a collective with the deadline: blocking + watchdog (default), or polled (``on_timeout='raise'``)."""
    if _G.on_timeout == "raise":
        wait(nonblocking(), what)
    else:
        _WATCHDOG.run(what, blocking)


def barrier():
    """Wait until every rank gets here (with the collective timeout)."""
    g = _ensure()
    if g.size > 1:
        _collective("barrier()", g.comm.Barrier, g.comm.Ibarrier)


def allreduce_buffer(buf: np.ndarray, op: str = "sum", what: str = "all_reduce") -> np.ndarray:
    """Sum (``op="sum"``), max or min of a contiguous numpy buffer over ranks, in place; returns it."""
    g = _ensure()
    if g.size > 1 and buf.size:
        mpi_op = {"sum": g.MPI.SUM, "max": g.MPI.MAX, "min": g.MPI.MIN}[op]
        _collective(what, lambda: g.comm.Allreduce(g.MPI.IN_PLACE, buf, op=mpi_op),
                    lambda: g.comm.Iallreduce(g.MPI.IN_PLACE, buf, op=mpi_op))
    return buf


def bcast_buffer(buf: np.ndarray, root: int = 0, what: str = "broadcast") -> np.ndarray:
    """Copy rank ``root``'s contiguous numpy buffer into ``buf`` on every rank, in place; returns it."""
    g = _ensure()
    if g.size > 1 and buf.size:
        _collective(what, lambda: g.comm.Bcast(buf, root=root), lambda: g.comm.Ibcast(buf, root=root))
    return buf


def allgather_buffer(buf: np.ndarray, counts, what: str = "all_gather") -> np.ndarray:
    """Concatenation over ranks (in rank order) of every rank's contiguous 1-D numpy ``buf``, whose
    sizes are ``counts`` (a sequence, one entry per rank); returns a new array on every rank."""
    g = _ensure()
    if g.size == 1:
        return np.array(buf)
    counts = [int(c) for c in counts]
    out = np.empty(sum(counts), buf.dtype)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
    spec = [out, counts, displs, g.MPI._typedict[buf.dtype.char]]  # mpi4py's numpy -> MPI type table
    _collective(what, lambda: g.comm.Allgatherv(buf, spec), lambda: g.comm.Iallgatherv(buf, spec))
    return out


def bcast_object(obj, root: int = 0):
    """Broadcast a small picklable Python object from ``root`` (lengths, then bytes; with the timeout)."""
    import pickle
    g = _ensure()
    if g.size == 1:
        return obj
    data = np.frombuffer(pickle.dumps(obj), np.uint8) if g.rank == root else None
    n = np.array([0 if data is None else data.size], np.int64)
    bcast_buffer(n, root, "broadcast of an object (size)")
    buf = data.copy() if data is not None else np.empty(int(n[0]), np.uint8)
    bcast_buffer(buf, root, "broadcast of an object")
    return pickle.loads(buf.tobytes()) if g.rank != root else obj
