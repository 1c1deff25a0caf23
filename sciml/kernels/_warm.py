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

When to enter the pool: in that quiet run a batch's cold first call cost 1.5-3 ms more than a warm one (844 us
per call over batches of 3-6 calls against 347 warm), while a warm parallel add saves ~130 us against the serial
kernel (347 vs ~480 us at load 0.3). Not knowing how long a burst of large ops will last, the rule pays the
wake-up once the burst has spent about that much in serialized large launches (``BUY_S``, the ski-rental rule:
never more than twice the better choice's time in hindsight). Counting launches instead would switch in the
middle of batches of cheap sums but not of long maps. These idle costs are inferred from that run, not measured
directly (no idle window here since): ``python -m benchmarks.bench_core --only breakdown`` prints the cold and
warm pool against the serial kernel to check them.

The rule (:func:`cold`): a large launch runs serialized unless the pool ran a launch of these kernels within
``WARM_S``, or the launch continues a burst (large launches each started within ``GAP_S`` of the previous one's
end) whose serialized large launches have taken ``BUY_S`` in all. Serial and parallel compilations of these
kernels give the same bits (tests/test_determinism.py), so this choice changes only the time (docs/perf.md,
"Reproducibility"). Not seen by the rule: parallel launches of other kernels (fused, Taylor, conv): a large map
right after one of them counts as cold (a one-line hook in ``_common.FastLaunch`` could report them).
Off by default until an idle machine confirms the inferred costs (``bench_core``'s A/B rows): ``SCIML_POOL_WARM=1``
turns it on (off: the load rule of ``_common.busy`` alone, as before); the test suite runs with it off (tests/conftest.py) so that which compilation runs never depends on timing, and tests/test_pool_warm.py
checks the rule itself on a fake clock. While sciml.jit traces, the rule stays out (a replay repeats the traced
launch, so a sequence replayed in a loop keeps the parallel compilation the load rule picks).
"""
import os
from time import perf_counter

from ..backend import TRACE

ON = os.environ.get("SCIML_POOL_WARM", "0").strip() == "1"  # opt-in until measured on an idle machine
WARM_S = 200e-6  # the pool counts as warm this long after a parallel launch ended (KVM's default halt polling)
GAP_S = 500e-6  # large launches at most this far apart form a burst
BUY_S = 3e-3  # serialized time in a burst after which its next large launch wakes the pool (its cold cost, inferred)
clock = perf_counter
# end of the last parallel launch, end of the last large launch, start of the current one, serialized time in this
# burst
_st = [-1.0, -1.0, 0.0, 0.0]


def cold() -> bool:
    """True if the large launch about to start should run serialized (the pool is cold and the burst has not yet
    spent BUY_S serialized). Call :func:`done` after the launch."""
    if not ON or TRACE[0] is not None:  # sciml.jit records the launch: its replays repeat that compilation
        return False
    now = clock()
    st = _st
    if now - st[1] > GAP_S:  # a new burst
        st[3] = 0.0
    st[2] = now
    if now - st[0] <= WARM_S:
        return False
    return st[3] < BUY_S


def done(parallel: bool):
    """Record the end of a large launch (``parallel``: it ran on the pool)."""
    now = clock()
    st = _st
    st[1] = now
    if parallel:
        st[0] = now
    else:
        st[3] += now - st[2]


def reset():
    _st[:] = [-1.0, -1.0, 0.0, 0.0]
