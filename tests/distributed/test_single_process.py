"""sciml.distributed in one process (no mpirun): the no-op fallback, helpers, errors, rule wiring."""
import numpy as np
import pytest

import sciml as sm
import sciml.distributed as dist
from sciml.distributed import autodiff as dad
from sciml.testing import check_grads


def test_single_process_fallback():
    assert dist.init() == (0, 1)
    assert (dist.rank(), dist.world_size(), dist.is_main(), dist.is_distributed()) == (0, 1, True, False)
    dist.barrier()
    tree = {"g": sm.tensor([1.0, 2.0]), "n": 3}
    assert dist.all_reduce(tree) is tree
    assert dist.broadcast(tree) is tree
    f = lambda p: (p ** 2).sum()  # noqa: E731
    assert dist.wrap_loss(f) is f
    loss, g = dist.value_and_grad(f)(sm.tensor([1.0, 2.0]))
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    assert dist.bcast_object({"a": 1}) == {"a": 1}
    x = np.arange(6.0)
    assert dist.shard(x) is x


def test_shard_range_covers_everything_once():
    for n in (0, 1, 7, 16):
        for size in (1, 2, 3, 5):
            blocks = [dist.shard_range(n, r, size) for r in range(size)]
            assert blocks[0][0] == 0 and blocks[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
            assert max(b - a for a, b in blocks) - min(b - a for a, b in blocks) <= 1
    assert dist.shard_range(10, rank=1, size=3) == (4, 7)


def test_local_count_on_one_rank_is_everything():
    assert dist.local_count(10) == 10


def test_rank_seed_on_rank_zero_is_the_seed():
    assert dist.rank_seed(5) == 5 and dist.rank_seed(None) is None


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"init\(backend=...\): got 'tcp'"):
        dist.init(backend="tcp")
    with pytest.raises(ValueError, match=r"timeout=...\): got -1.0"):
        dist.init(timeout=-1)
    with pytest.raises(ValueError, match=r"on_timeout=...\): got 'ignore'"):
        dist.init(on_timeout="ignore")
    with pytest.raises(ValueError, match=r"init\(threads=...\): got 0"):
        dist.init(threads=0)
    with pytest.raises(ValueError, match=r"all_reduce\(op=...\): got 'prod'"):
        dist.all_reduce([sm.tensor([1.0])], op="prod")
    with pytest.raises(ValueError, match=r"weights apply to op='mean' only"):
        dist.all_reduce([sm.tensor([1.0])], op="sum", weight=2.0)
    with pytest.raises(TypeError, match=r"all_reduce: got a leaf of type str"):
        dist.all_reduce({"a": "x"})
    with pytest.raises(ValueError, match=r"broadcast\(root=...\): got 3; expected a rank in 0..0"):
        dist.broadcast([sm.tensor([1.0])], root=3)
    with pytest.raises(ValueError, match=r"shard: the arrays have lengths \[3, 4\]"):
        dist.shard((np.zeros(3), np.zeros(4)))
    with pytest.raises(TypeError, match=r"shard: got list; expected a sciml Tensor or numpy array"):
        dist.shard(([1, 2],))
    with pytest.raises(ValueError, match=r"shard_range\(n=...\): got -1"):
        dist.shard_range(-1)
    with pytest.raises(ValueError, match=r"wrap_loss\(weight=...\): got -2"):
        dist.wrap_loss(lambda p: p, weight=-2)
    with pytest.raises(TypeError, match=r"broadcast_parameters: leaf 0 is a Tensor"):
        dist.broadcast_parameters([sm.tensor([1.0])])


def test_communication_primitives_differentiate_to_any_order():
    # With one rank both primitives are the identity; this checks their JVP/VJP rules are wired
    # consistently (the 2-rank values are checked in test_mpi.py).
    def f(w, b):
        p = dad._synced({"w": w, "b": b}, None)
        return dad._mean_over_ranks((sm.tanh(p["w"]) * p["b"].sum()).sum(), weight=None)
    w, b = sm.tensor(np.linspace(-1, 1, 6).reshape(2, 3)), sm.tensor([0.3, -0.7])
    check_grads(f, (w, b), order=2)
    v = (sm.tensor(np.ones((2, 3))), sm.tensor([1.0, 0.5]))
    _, hv = sm.hvp(f, (w, b), v)
    _, hv_ref = sm.hvp(lambda w, b: (sm.tanh(w) * b.sum()).sum(), (w, b), v)
    for a, r in zip(hv, hv_ref):
        np.testing.assert_allclose(a.numpy(), r.numpy(), rtol=1e-12)


def test_residual_primitives_differentiate_to_any_order():
    def f(w, b):
        p = dad._synced_sum({"w": w, "b": b})
        r = sm.reshape(sm.tanh(p["w"]) * p["b"].sum(), (-1,))
        return dad._gather(r, counts=(r.size,), offset=0) * 1.5
    w, b = sm.tensor(np.linspace(-1, 1, 6).reshape(2, 3)), sm.tensor([0.3, -0.7])
    check_grads(f, (w, b), order=2)
    assert dist.wrap_residuals(f) is f
