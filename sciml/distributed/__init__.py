"""Data-parallel training over MPI (mpi4py over OpenMPI): the same script on 1 or N processes.

    mpirun -np 2 python train.py             # add --allow-run-as-root as root, --oversubscribe if short of cores

    import sciml.distributed as dist
    dist.init()                                   # (rank, world_size); (0, 1) without mpirun or mpi4py
    params = dist.broadcast(params)               # same start on every rank (Tensors)
    dist.broadcast_parameters(model)              # ... or in place into a Module's Parameters
    x_local, y_local = dist.shard((x, y))         # each rank its block of the global batch
    loss, grads = dist.value_and_grad(loss_fn)(params, x_local, y_local)   # global mean, one MPI call
    loss_fn = dist.wrap_loss(loss_fn)             # for L-BFGS / Newton-CG: global value, gradient, HVPs
    res_fn = dist.wrap_residuals(res_fn)          # for Levenberg-Marquardt / Gauss-Newton: global residuals
    if dist.is_main(): print(...)                 # only rank 0 prints, writes checkpoints and plots

Collectives time out (``SCIML_DIST_TIMEOUT``, default 300 s): a rank that died makes the others stop
with a clear message instead of hanging. See docs/distributed.md.
"""
from .autodiff import value_and_grad, wrap_loss, wrap_residuals
from .collectives import all_reduce, broadcast, broadcast_parameters
from .comm import (DistributedTimeoutError, abort, barrier, bcast_object, init, is_distributed, is_main,
                   launched_by_mpirun, rank, timeout, world_size)
from .data import local_count, print0, rank_seed, shard, shard_range

__all__ = ["init", "rank", "world_size", "is_main", "is_distributed", "barrier", "all_reduce", "broadcast",
           "broadcast_parameters", "bcast_object", "wrap_loss", "wrap_residuals", "value_and_grad", "shard",
           "shard_range", "local_count", "rank_seed", "print0", "abort", "timeout", "launched_by_mpirun",
           "DistributedTimeoutError"]
