"""The FMA GEMMs of kernels/skinny_gemm.py on pinn.solve's replayed step (sciml.jit): the fused path's
A W^T and H^T G of a 32-wide net go to the FMA kernels (thresholds lowered so that 24 points reach them), their
launches are recorded with ndarray arguments (no raw addresses: fma_tile.axpy takes locals), so every replay
rebinds the step's buffers and gives the eager step's bits."""
import numpy as np
import pytest

import sciml as sm
from sciml import backend
from sciml.kernels import _vec as V
from sciml.kernels import fma_tile as FT
from sciml.kernels import skinny_gemm as SK
from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import Dirichlet, Interval, Problem, d, solve
from sciml.pinn import stages


@pytest.fixture(autouse=True)
def _fma_on(monkeypatch):
    """The FMA kernels are opt-in (SCIML_SKINNY_FMA=1; skinny_gemm's doc): these tests switch them on."""
    monkeypatch.setattr(SK, "FMA", [True])


pytestmark = pytest.mark.skipif(not (backend.on_host() and FT.available() and V.wide("float32") == 16),
                                reason="x86-64 AVX-512 CPU kernels")
_REAL = stages._Step


def _run(monkeypatch, jit, calls):
    monkeypatch.setenv("SCIML_PINN_JIT", "1" if jit else "0")
    made = []

    def spy(run):
        s = _REAL(run)
        made.append(s)
        return s
    monkeypatch.setattr(stages, "_Step", spy)

    def pde(u, x):
        return -d(u, x, x) - np.pi ** 2 * sm.sin(np.pi * x)
    problem = Problem(Interval(-1, 1), pde, conditions=[Dirichlet(0.0, on="left"), Dirichlet(0.0, on="right")])
    net = MLP([1, 32, 32, 32, 1], activation=sm.tanh, seed=0)
    solve(problem, net, points=24, stages=[(Adam(lr=1e-3), 30)], dtype="float32", progress=False, log_every=5)
    leaves = sm.tree_util.tree_leaves(net.params())
    return np.concatenate([np.asarray(p.numpy(), np.float32).ravel() for p in leaves]).view(np.uint32), made


def test_fma_gemms_replayed_same_bits(monkeypatch):
    monkeypatch.setattr(SK, "MIN_WORK", 1)
    monkeypatch.setattr(SK, "TN_MIN_K", 16)
    calls = {"nt": 0, "tn": 0}
    real_mm, real_tn = SK.matmul, SK.run_tn

    def mm(*a, **k):
        calls["nt"] += 1
        return real_mm(*a, **k)

    def tn(*a, **k):
        r = real_tn(*a, **k)
        calls["tn"] += bool(r)
        return r
    monkeypatch.setattr(SK, "matmul", mm)
    monkeypatch.setattr(SK, "run_tn", tn)
    ba, _ = _run(monkeypatch, False, calls)
    eager = dict(calls)
    assert eager["nt"] >= 30 and eager["tn"] >= 30   # the kernels ran in the eager steps
    lb, made = _run(monkeypatch, True, calls)
    assert np.array_equal(ba, lb)
    assert made and made[0].jitted, made[0].why
    assert made[0].fn.stats["replays"] >= 27
