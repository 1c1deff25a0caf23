"""Whether a large CPU map or whole-buffer sum should wake Taichi's thread pool now (the "warm pool" rule).

A parallel CPU launch hands its blocks to Taichi's worker threads and the launching thread sleeps until they are
done (taichi/system/threading.cpp). A worker whose vCPU has gone idle must first be woken: on this KVM guest (no
cpuidle driver: an idle vCPU halts and the host takes it back) that wake-up is cheap within ~0.2 ms of the pool's
last launch and costly after longer gaps. Evidence, the quiet run of 2026-11-28 13:25 (load 0.2, docs/perf.md): the
same parallel 1e6 float32 add in the same process took 347 us per call in ``bench_core``'s "elementwise" rows
(every timed batch preceded by one untimed call: a warm pool) and 844 us in the "single op" rows (batches of 2-5
calls after ~2 ms of numpy work: the first call of each batch meets a cold pool); numpy 494-676 us. The serial
16-lane kernel runs at numpy's speed or above on one thread (thread CPU time here, load 4: add 554-608 us vs
numpy's 699-708, sum 232 vs 317). So a single large op is cheaper serialized unless the pool is already warm, and
a sequence of large ops (a training step) is cheaper in parallel once it runs.

How long a burst must be: in that quiet run a batch's cold first call cost 1.5-3 ms more than a warm one (844 us
per call over batches of 3-6 calls against 347 warm), while a warm parallel add saves ~130 us against the serial
kernel (347 vs ~480 us at load 0.3): entering the pool pays off after about ten large ops, hence ``BURST = 8``.
These idle costs are inferred from that run, not measured directly (no idle window here since): ``python -m
benchmarks.bench_core --only breakdown`` prints the cold and warm pool against the serial kernel to check them.

The rule (:func:`cold`): a large launch runs serialized when the pool has not run a launch of these kernels for
``WARM_S`` and the launch does not continue a burst of at least ``BURST`` large launches, each started within
``GAP_S`` of the previous one's end. Serial and parallel compilations of these kernels give the same bits
(tests/test_determinism.py), so this choice changes only the time (docs/perf.md, "Reproducibility").
``SCIML_POOL_WARM=0`` turns it off (the load rule of ``_common.busy`` alone, as before); the test suite runs with
it off (tests/conftest.py) so that which compilation runs never depends on timing, and tests/test_pool_warm.py
checks the rule itself on a fake clock. While sciml.jit traces, the rule stays out (a replay repeats the traced
launch, so a sequence replayed in a loop keeps the parallel compilation the load rule picks).
"""
import os
from time import perf_counter

from ..backend import TRACE

ON = os.environ.get("SCIML_POOL_WARM", "1").strip() != "0"
WARM_S = 200e-6  # the pool counts as warm this long after a parallel launch ended (KVM's default halt polling)
GAP_S = 500e-6  # large launches at most this far apart form a burst
BURST = 8  # large launches in a burst before the next one goes parallel (it pays the pool's wake-up once)
clock = perf_counter
_st = [-1.0, -1.0, 0]  # end of the last parallel launch, end of the last large launch, large launches in this burst


def cold() -> bool:
    """True if the large launch about to start should run serialized (the pool is cold and no burst is under
    way). Call :func:`done` after the launch."""
    if not ON or TRACE[0] is not None:  # sciml.jit records the launch: its replays repeat that compilation
        return False
    now = clock()
    st = _st
    st[2] = st[2] + 1 if now - st[1] <= GAP_S else 1
    if now - st[0] <= WARM_S:
        return False
    return st[2] <= BURST


def done(parallel: bool):
    """Record the end of a large launch (``parallel``: it ran on the pool)."""
    now = clock()
    _st[1] = now
    if parallel:
        _st[0] = now


def reset():
    _st[:] = [-1.0, -1.0, 0]
