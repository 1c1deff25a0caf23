"""``--arch`` for every benchmark: which Taichi backend sciml runs on (default cpu).

    python -m benchmarks.bench_w2_w3 --arch cuda

``add_argument(parser)`` adds the option; ``use(arch)`` (first thing after parsing) records it in
``ARCH``, which every ``sm.init`` in benchmarks/ passes on, and tells the peers:
  - timing (``benchmarks.peers.timeit_samples``) waits for the device after every timed batch
    (``sciml.backend.sync``), so device runs are timed to completion, not to enqueue;
  - JAX runs on the matching platform (``JAX_PLATFORMS=cuda`` for ``--arch cuda``, ``cpu``
    otherwise; an existing ``JAX_PLATFORMS`` wins), set before the JAX peer is imported;
  - for ``--arch cuda`` the PyTorch W2/W3 peers run on the GPU too (``SCIML_BENCH_TORCH_DEVICE=cuda``,
    read by benchmarks/peers/torch_peers.py; the sync also calls ``torch.cuda.synchronize``); the other
    PyTorch peers and the numpy peers stay on the CPU.
"""
import os

CHOICES = ("cpu", "vulkan", "cuda")
ARCH = "cpu"


def add_argument(parser):
    parser.add_argument("--arch", choices=CHOICES, default="cpu",
                        help="Taichi backend for sciml (default cpu); vulkan: float32 only")


def use(arch):
    """Record ``arch`` for the benchmark's ``sm.init`` calls and set up the peers (see the module doc)."""
    global ARCH
    if arch not in CHOICES:
        raise ValueError(f"--arch: got {arch!r}; expected one of {', '.join(CHOICES)}.")
    ARCH = arch
    os.environ.setdefault("JAX_PLATFORMS", "cuda" if arch == "cuda" else "cpu")
    if arch == "cuda":
        os.environ.setdefault("SCIML_BENCH_TORCH_DEVICE", "cuda")
    from benchmarks import peers
    peers.SYNC = None if arch == "cpu" else _sync
    return arch


def _sync():
    import sys

    from sciml import backend
    backend.sync()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def label():
    """A table-title fragment, e.g. 'sciml arch=cuda; torch/numpy peers on CPU'."""
    if ARCH == "cpu":
        return "CPU"
    if ARCH == "cuda" and os.environ.get("SCIML_BENCH_TORCH_DEVICE") == "cuda":
        return "sciml arch=cuda; JAX and the torch W2/W3 peers on the GPU, other peers on CPU"
    return f"sciml arch={ARCH}; torch/numpy peers on CPU"
