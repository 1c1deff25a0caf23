"""The first-order stage replays its step through sciml.jit (pinn/stages.py ``_Step``): the same
bits as the eager step, with resampling and adaptive weights too, and the replay really runs."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Dirichlet, Interval, Periodic, Problem, d, solve
from sciml.pinn import stages

_REAL = stages._Step   # (each test's spy wraps this one)


def _problem():
    def pde(u, x):
        return -d(u, x, x) - np.pi ** 2 * sm.sin(np.pi * x)
    return Problem(Interval(-1, 1), pde, reference=lambda p: np.sin(np.pi * p[:, 0]),
                   conditions=[Dirichlet(0.0, on="left"), Periodic("x")])


def _run(monkeypatch, jit, stage=None, **kw):
    monkeypatch.setenv("SCIML_PINN_JIT", "1" if jit else "0")
    made = []
    real = _REAL

    def spy(run):
        s = real(run)
        made.append(s)
        return s
    monkeypatch.setattr(stages, "_Step", spy)
    net = MLP([1, 20, 20, 20, 1], activation=sm.tanh, seed=0)
    plan = [(Adam(lr=1e-3), 30)] + ([stage] if stage else [])
    r = solve(_problem(), net, points=24, stages=plan, dtype="float32",
              progress=False, log_every=5, **kw)
    leaves = sm.tree_util.tree_leaves(net.params())
    bits = np.concatenate([np.asarray(p.numpy(), np.float32).ravel() for p in leaves])
    bits = bits.view(np.uint32)
    return np.asarray(r.history["loss"], np.float64), bits, made


@pytest.mark.parametrize("kw", [{}, {"weights": "grad_norm"},
                                {"resample": {"method": "rad", "every": 10}}],
                         ids=["plain", "grad_norm", "rad"])
def test_jitted_steps_same_bits_as_eager(monkeypatch, kw):
    la, ba, steps_a = _run(monkeypatch, False, **kw)
    lb, bb, steps_b = _run(monkeypatch, True, **kw)
    assert len(la) == len(lb) == 30
    assert np.array_equal(la.view(np.uint64), lb.view(np.uint64))
    assert np.array_equal(ba, bb)
    assert all(not s.jitted for s in steps_a), [s.why for s in steps_a]
    assert steps_b and all(s.jitted for s in steps_b), [s.why for s in steps_b]
    replays = sum(s.fn.stats["replays"] for s in steps_b)
    assert replays >= 30 - 3 * len(steps_b)   # per Loss: an eager probe, a trace, then replays
    if "resample" in kw:
        assert len(steps_b) == 3   # a new Loss at steps 10 and 20: each traced anew


def test_untraceable_step_falls_back_to_eager(monkeypatch):
    """A step the jit cannot trace (JitError: a host read of a traced value, a user's Taichi
    kernel) runs eagerly from then on, with the same bits as an eager run."""
    import sys
    J = sys.modules["sciml.autodiff.jit"]   # (sciml.autodiff.jit is also the function)
    la, ba, _ = _run(monkeypatch, False)

    def refuse(self, *a, **k):
        raise J.JitError("refused (test)")
    monkeypatch.setattr(J.Jitted, "_trace", refuse)
    lb, bb, made = _run(monkeypatch, True)
    assert np.array_equal(la.view(np.uint64), lb.view(np.uint64)) and np.array_equal(ba, bb)
    assert made and not made[0].jitted and "refused" in made[0].why


def test_lbfgs_stage_replayed_same_bits(monkeypatch):
    """After Adam, an L-BFGS stage evaluates its loss and gradient through sciml.jit (the solver
    turns on ``LBFGS(jit=...)`` when the first-order step replays): the same bits as eager."""
    from sciml.optim import LBFGS
    la, ba, _ = _run(monkeypatch, False, stage=(LBFGS(max_iter=50), 15))
    opt = LBFGS(max_iter=50)
    lb, bb, _ = _run(monkeypatch, True, stage=(opt, 15))
    assert len(la) > 30 and np.array_equal(la.view(np.uint64), lb.view(np.uint64))
    assert np.array_equal(ba, bb)
    assert opt._jit and opt._jit_cache.get("fn") is not None
    explicit = LBFGS(max_iter=50, jit=False)   # the user's explicit choice is kept
    lc, bc, _ = _run(monkeypatch, True, stage=(explicit, 15))
    assert not explicit._jit and not explicit._jit_cache
    assert np.array_equal(la.view(np.uint64), lc.view(np.uint64)) and np.array_equal(ba, bc)


def test_inverse_problem_replayed_same_bits(monkeypatch):
    """A trainable PDE coefficient (a bare Parameter, which records a tape node) is replayed too."""
    from sciml.pinn import Parameter, PointData

    def pde(u, x, C):
        return -C * d(u, x, x) - np.pi ** 2 * sm.sin(np.pi * x)
    xs = np.linspace(-1, 1, 5)[:, None]

    def run(jit):
        monkeypatch.setenv("SCIML_PINN_JIT", "1" if jit else "0")
        made = []
        monkeypatch.setattr(stages, "_Step", lambda r: made.append(_REAL(r)) or made[-1])
        pb = Problem(Interval(-1, 1), pde, parameters={"C": Parameter(2.0)},
                     conditions=[Dirichlet(0.0), PointData(xs, np.sin(np.pi * xs))])
        net = MLP([1, 16, 16, 1], activation=sm.tanh, seed=0)
        r = solve(pb, net, points=20, stages=[(Adam(lr=1e-2), 25)], dtype="float32", progress=False)
        return np.asarray(r.history["loss"], np.float64), r.parameters["C"], made
    la, ca, _ = run(False)
    lb, cb, made = run(True)
    assert np.array_equal(la.view(np.uint64), lb.view(np.uint64)) and ca == cb and ca != 2.0
    assert made[0].jitted and made[0].fn.stats["replays"] >= 22


def test_output_transform_replayed_same_bits(monkeypatch):
    """An output transform carrying the initial and boundary values (DeepXDE's
    diffusion_1d_exactBC): its jet rules decide x[:, a]'s constant derivatives from the
    structure, not by reading a Tensor, so the step traces and replays, with the eager bits."""
    from sciml.pinn import TimeInterval, Transformed

    def pde(u, x, t):
        return d(u, t) - d(u, x, x) + sm.exp(-t) * (sm.sin(np.pi * x) - np.pi ** 2 * sm.sin(np.pi * x))

    def run(jit):
        monkeypatch.setenv("SCIML_PINN_JIT", "1" if jit else "0")
        made = []
        monkeypatch.setattr(stages, "_Step", lambda r: made.append(_REAL(r)) or made[-1])
        pb = Problem(Interval(-1, 1) * TimeInterval(0, 1), pde,
                     reference=lambda p: np.sin(np.pi * p[:, 0]) * np.exp(-p[:, 1]))
        net = Transformed(MLP([2, 16, 16, 1], activation=sm.tanh, seed=0),
                          output=lambda x, y: x[:, 1:2] * (1 - x[:, 0:1] ** 2) * y + sm.sin(np.pi * x[:, 0:1]))
        r = solve(pb, net, points=pb.deepxde_points(num_domain=24)[1], stages=[(Adam(lr=1e-3), 25)],
                  dtype="float32", progress=False)
        return np.asarray(r.history["loss"], np.float64), r.rel_l2, made
    la, ea, _ = run(False)
    lb, eb, made = run(True)
    assert len(la) == 25 and np.array_equal(la.view(np.uint64), lb.view(np.uint64)) and ea == eb
    assert made[0].jitted, made[0].why
    assert made[0].fn.stats["replays"] >= 22 and made[0].fn.stats["eager"] == 0


def test_split_gemm_step_replayed_same_bits(monkeypatch):
    """A fused GEMM split in two halves on two threads (large point sets; here ``SPLIT_MIN``
    lowered so that 24 points split) is one recorded host call (``fused_gemm._split_gemm``): the step
    replays, the split runs in every replay, and the bits are the eager ones."""
    from sciml.pinn import fused_gemm as fused
    t = fused._THREADS
    with t:   # (settles whether this machine splits: two cores and a BLAS whose threads can be set)
        pass
    if t.lib is None or not t.enabled:
        pytest.skip("the fused path does not split GEMMs here (one core, or no BLAS thread control)")
    monkeypatch.setattr(fused, "SPLIT_MIN", 16)
    calls = []
    real = fused._split_gemm

    def spy(*a):
        calls.append(a[5] >= 16 if a[6] else a[3] >= 16)   # ta: the reduction split, else the rows
        return real(*a)
    monkeypatch.setattr(fused, "_split_gemm", spy)
    la, ba, _ = _run(monkeypatch, False)
    n_eager = len(calls)
    assert n_eager >= 30 and all(calls)
    calls.clear()
    lb, bb, made = _run(monkeypatch, True)
    assert np.array_equal(la.view(np.uint64), lb.view(np.uint64)) and np.array_equal(ba, bb)
    assert made and made[0].jitted, made[0].why
    assert made[0].fn.stats["replays"] >= 27
    assert len(calls) >= n_eager   # every replay ran the split calls (and the trace's checking runs)
    assert not t.active   # a replay's one-thread BLAS setting is its own
