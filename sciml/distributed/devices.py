"""One GPU per MPI rank: the node-local rank picks the device, before Taichi starts.

Taichi 1.7 opens CUDA device 0 of the devices the process can see (``cuDeviceGet(&dev, 0)`` in
``taichi/rhi/cuda/cuda_context.cpp``) and Vulkan device ``TI_VISIBLE_DEVICE`` (default: the first
suitable one, ``taichi/rhi/vulkan/vulkan_loader.cpp``). So a rank chooses its GPU through the
environment, before ``ti.init``: ``CUDA_VISIBLE_DEVICES`` narrowed to the one chosen entry (CUDA),
``TI_VISIBLE_DEVICE`` = the chosen index (Vulkan). Without this every rank of a node runs on GPU 0.

The choice is a pure function of the environment (:func:`plan`), so it is tested without a GPU:

- node-local rank from the launcher: ``OMPI_COMM_WORLD_LOCAL_RANK`` (Open MPI),
  ``MV2_COMM_WORLD_LOCAL_RANK`` (MVAPICH2), ``MPI_LOCALRANKID`` (MPICH / Intel MPI, Hydra),
  ``PALS_LOCAL_RANKID`` (Cray PALS), ``SLURM_LOCALID`` (``srun``), in that order;
- devices visible: the entries of ``CUDA_VISIBLE_DEVICES`` when set (indices, ``GPU-``/``MIG-`` UUIDs;
  empty = none), else the count given by the caller or found without starting CUDA
  (``/proc/driver/nvidia/gpus``);
- device index = local rank modulo the visible count (more ranks than GPUs share them round-robin,
  with a warning); ``SCIML_DEVICE_INDEX`` overrides it.

:func:`cuda_aware_mpi` says whether the MPI library can take device buffers directly (Open MPI's
``MPIX_Query_cuda_support`` through mpi4py, or ``SCIML_CUDA_AWARE_MPI=0/1``); collectives use host
copies otherwise.
"""
from __future__ import annotations

import dataclasses
import os
import warnings

LOCAL_RANK_ENV = ("OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                  "PALS_LOCAL_RANKID", "SLURM_LOCALID")
LOCAL_SIZE_ENV = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                  "PALS_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
ARCHS = ("cuda", "vulkan")


class NoDeviceError(ValueError):
    """No device of the wanted kind is visible to this rank."""


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """What :func:`plan` chose. ``env`` holds the variables to set before Taichi starts."""
    arch: str
    local_rank: int | None       # None: not started by a known launcher (then rank 0 of 1 is assumed)
    local_size: int | None
    n_devices: int
    index: int                   # the device among the visible ones
    device: str | None           # the CUDA_VISIBLE_DEVICES entry it maps to (CUDA), else None
    env: dict
    shared: bool                 # more local ranks than devices: some share a GPU


def _int_env(env, names, what):
    for name in names:
        v = env.get(name)
        if v is None or v == "":
            continue
        try:
            i = int(v.strip())
        except ValueError:
            raise ValueError(f"sciml.distributed.devices: {name}={v!r} is not an integer; expected the {what} "
                             "that the MPI launcher sets (a non-negative integer).") from None
        if i < 0:
            raise ValueError(f"sciml.distributed.devices: {name}={v!r} is negative; expected the {what} (>= 0).")
        return i, name
    return None, None


def local_rank(env=None) -> int | None:
    """This process's rank among the ranks on its node, from the launcher's environment (None if unknown)."""
    return _int_env(os.environ if env is None else env, LOCAL_RANK_ENV, "node-local rank")[0]


def local_size(env=None) -> int | None:
    """Number of ranks on this node, from the launcher's environment (None if unknown)."""
    return _int_env(os.environ if env is None else env, LOCAL_SIZE_ENV, "number of ranks on this node")[0]


def visible_cuda_devices(env=None) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` (None when unset; [] when set to nothing). As CUDA does,
    the list ends at the first invalid entry (``-1``, junk)."""
    env = os.environ if env is None else env
    v = env.get("CUDA_VISIBLE_DEVICES")
    if v is None:
        return None
    out = []
    for e in (p.strip() for p in v.split(",")):
        if e.startswith(("GPU-", "MIG-")) or (e.isdigit()):
            out.append(e)
        else:  # CUDA stops at the first invalid entry ("-1", "" or junk hides everything after it)
            break
    return out


def count_nvidia_gpus() -> int:
    """NVIDIA GPUs on this machine, counted without starting CUDA (``/proc/driver/nvidia/gpus``); 0 if none."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def plan(arch: str = "cuda", env=None, n_devices: int | None = None) -> DevicePlan:
    """The device this rank should use and the environment that selects it (nothing is changed).

    Args:
        arch: ``"cuda"`` or ``"vulkan"``.
        env: the environment to read (default ``os.environ``).
        n_devices: devices on the node when ``CUDA_VISIBLE_DEVICES`` does not list them (CUDA), or the
            Vulkan devices; default: counted from ``/proc/driver/nvidia/gpus``.
    Raises:
        ValueError: unknown arch, a malformed launcher variable, no visible device, or an override
            ``SCIML_DEVICE_INDEX`` out of range.
    """
    if arch not in ARCHS:
        raise ValueError(f"sciml.distributed.devices.plan(arch=...): got {arch!r}; expected one of {ARCHS}.")
    env = os.environ if env is None else env
    lr, _ = _int_env(env, LOCAL_RANK_ENV, "node-local rank")
    ls, _ = _int_env(env, LOCAL_SIZE_ENV, "number of ranks on this node")
    listed = visible_cuda_devices(env) if arch == "cuda" else None
    if listed is not None:
        n = len(listed)
    else:
        n = count_nvidia_gpus() if n_devices is None else n_devices
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"sciml.distributed.devices.plan(n_devices=...): got {n_devices!r}; expected an int >= 0.")
    if n == 0:
        why = ("CUDA_VISIBLE_DEVICES is set to an empty list" if listed is not None
               else "no GPU was found (/proc/driver/nvidia/gpus is empty or missing)")
        raise NoDeviceError(f"sciml.distributed.devices: no {arch} device for this rank: {why}. Run on CPU "
                            "(arch='cpu') or make a GPU visible.")
    override, name = _int_env(env, ("SCIML_DEVICE_INDEX",), "device index")
    if override is not None:
        if override >= n:
            raise ValueError(f"sciml.distributed.devices: {name}={override} but only {n} {arch} device(s) are "
                             "visible; expected 0 <= index < count.")
        index = override
    else:
        index = (lr or 0) % n
    shared = ls is not None and ls > n
    if arch == "cuda":
        device = listed[index] if listed is not None else str(index)
        new_env = {"CUDA_VISIBLE_DEVICES": device}
    else:
        device = None
        new_env = {"TI_VISIBLE_DEVICE": str(index)}
    return DevicePlan(arch, lr, ls, n, index, device, new_env, shared)


def bind_local_device(arch: str = "cuda", env=None, n_devices: int | None = None,
                      required: bool = True) -> DevicePlan | None:
    """Apply :func:`plan` to the environment (``os.environ`` or ``env``): call it on every rank before the
    first tensor (before Taichi starts), e.g. right after ``sciml.distributed.init()``.

    After Taichi has started on a GPU the choice cannot change: a :class:`RuntimeError` says so (on CPU
    nothing is needed and nothing is changed by calling this first). ``required=False``: return None
    instead of raising :class:`NoDeviceError` when no device is found (the environment is left as is)."""
    from .. import runtime
    target = os.environ if env is None else env
    try:
        p = plan(arch, target, n_devices)
    except NoDeviceError:
        if required:
            raise
        return None
    if env is None and runtime.is_initialized():
        current = {k: os.environ.get(k) for k in p.env}
        if current != p.env:
            raise RuntimeError("sciml.distributed.bind_local_device: Taichi has already started, so this rank's "
                               f"device can no longer be chosen (wanted {p.env}, have {current}). Call it before "
                               "the first tensor or sciml.init().")
        return p
    if p.shared:
        warnings.warn(f"sciml.distributed: {p.local_size} ranks on this node share {p.n_devices} {arch} device(s); "
                      f"local rank {p.local_rank} uses device {p.index} together with other ranks.", stacklevel=2)
    target.update(p.env)
    return p


def cuda_aware_mpi(MPI=None, env=None) -> bool:
    """True when the MPI library accepts CUDA device buffers in collectives.

    ``SCIML_CUDA_AWARE_MPI=1`` / ``0`` decides; else ``MPI.Query_cuda_support()`` where mpi4py has it; else
    Open MPI's ``MPIX_Query_cuda_support()`` from the loaded MPI library (Debian's Open MPI 4.1.4 here has the
    symbol and answers 0); else False (collectives copy through the host)."""
    env = os.environ if env is None else env
    v = env.get("SCIML_CUDA_AWARE_MPI")
    if v is not None and v.strip() != "":
        if v.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if v.strip().lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"sciml.distributed: SCIML_CUDA_AWARE_MPI={v!r}; expected 1 or 0.")
    real = MPI is None
    if MPI is None:
        try:
            from mpi4py import MPI
        except ImportError:
            return False
    q = getattr(MPI, "Query_cuda_support", None)
    if q is None:
        return _mpix_query_cuda_support() if real else False
    try:
        return bool(q())
    except Exception:  # an MPI without the extension raises NotImplementedError
        return False


def _mpix_query_cuda_support() -> bool:
    """Open MPI's ``MPIX_Query_cuda_support()`` from the process's loaded libraries (mpi4py loads libmpi)."""
    import ctypes
    try:
        f = ctypes.CDLL(None).MPIX_Query_cuda_support
    except (OSError, AttributeError):
        return False
    f.restype, f.argtypes = ctypes.c_int, []
    return bool(f())
