"""``--arch`` for every benchmark: which Taichi backend sciml runs on (default cpu).

    python -m benchmarks.bench_w2_w3 --arch cuda

``add_argument(parser)`` adds the option; ``use(arch)`` (first thing after parsing) records it in
``ARCH``, which every ``sm.init`` in benchmarks/ passes on, and tells the peers:
  - timing (``benchmarks.peers.timeit_samples``) waits for the device after every timed batch
    (``sciml.backend.sync``), so device runs are timed to completion, not to enqueue;
  - JAX runs on the matching platform (``JAX_PLATFORMS=cuda`` for ``--arch cuda``, ``cpu``
    otherwise; an existing ``JAX_PLATFORMS`` wins), set before the JAX peer is imported;
  - the PyTorch and numpy peers stay on the CPU: their tables say so (a CUDA torch peer needs
    ``.to("cuda")`` and ``torch.cuda.synchronize`` in benchmarks/peers/torch_peers.py: not done yet).
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
    from benchmarks import peers
    peers.SYNC = None if arch == "cpu" else _sync
    return arch


def _sync():
    from sciml import backend
    backend.sync()


def label():
    """A table-title fragment, e.g. 'sciml arch=cuda; torch/numpy peers on CPU'."""
    return "CPU" if ARCH == "cpu" else f"sciml arch={ARCH}; torch/numpy peers on CPU"
