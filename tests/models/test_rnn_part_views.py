"""Views of the parts of rnn_layer's packed output (``y[:, -1]``, ``transpose(y)``, ``h[1:]``) are taken as one
view of the packed output itself (``_rnn_fused._part.flat_slice``, ops/shape.py's ``_slice_base``): the backward
scatters the view's cotangent straight into the packed cotangent, with no cotangent of the whole part and no
``rnn_unpart`` repack (1.6 MB per step in bench_nn's LSTM). The values and every gradient equal (to rounding)
those of the unfolded path; finite differences in float64 to second order (both modes); the LSTM model's training
step runs no repack; Vulkan through vulkan_seq_check.py's ``rnn_views`` op."""
import numpy as np
import pytest

import sciml as sm
from sciml.autodiff.ops import concat, reshape, transpose
from sciml.models import GRU, LSTM
from sciml.models import _rnn_fused as F
from sciml.models._rnn_fused import rnn_layer, rnn_outputs
from sciml.testing import check_grads

from tests.models.test_rnn_fused import _args, _run_vulkan


def _views(kind, bf):
    """The flat concatenation of views of every part: the last step of y, y with time and batch swapped, a slice
    of h_T (and of c_T)."""
    def f(*t):
        T, B = t[0].shape[:2]
        H = t[3].shape[1]
        y, h, c = rnn_outputs(rnn_layer(*t, kind=kind, batch_first=bf), T, B, H, kind, bf)
        parts = [y[:, -1] if bf else y[-1], transpose(y, (1, 0, 2)), h[1:, ::2]]
        if c is not None:
            parts.append(c[:1])
        return concat([reshape(p, (-1,)) for p in parts], 0)
    return f


@pytest.fixture
def unpart_calls(monkeypatch):
    calls, f = [], F._unpart.forward

    def spy(*a, **k):
        calls.append(1)
        return f(*a, **k)
    monkeypatch.setattr(F._unpart, "forward", spy)
    return calls


def test_view_of_a_part_reads_the_packed_output():
    args = [a.requires_grad_() for a in _args("LSTM", T=4, B=2, H=3)]
    P = rnn_layer(*args, kind="LSTM", batch_first=True)
    y, h, _ = rnn_outputs(P, 4, 2, 3, "LSTM", True)
    for v in (y[:, -1], transpose(y, (1, 0, 2)), h[1:]):
        assert v._node.prim.name == "view" and v._node.inputs[0] is P
    np.testing.assert_array_equal(y[:, -1].numpy(), P.numpy()[:24].reshape(2, 4, 3)[:, -1])
    with sm.no_grad():  # nothing recorded: a view of the part as before
        assert y[:, -1]._node is None


@pytest.mark.parametrize("kind, bf", [("LSTM", True), ("LSTM", False), ("GRU", True), ("RNN_TANH", False)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_folded_views_equal_the_unfolded_path(kind, bf, dtype, unpart_calls, monkeypatch):
    args = _args(kind, T=5, B=4, I=1 if kind == "LSTM" else 2, H=16, dtype=dtype, seed=2)
    f = _views(kind, bf)
    out = f(*args)
    u = sm.tensor(np.random.default_rng(3).standard_normal(out.shape), dtype)
    got = [out.numpy()] + [g.numpy() for g in sm.vjp(f, *args)[1](u)]
    assert not unpart_calls
    monkeypatch.delattr(F._part, "flat_slice")  # the views of the part itself, its cotangent repacked
    want = [f(*args).numpy()] + [g.numpy() for g in sm.vjp(f, *args)[1](u)]
    assert unpart_calls
    tol = dict(rtol=1e-6, atol=1e-7) if dtype == "float32" else dict(rtol=1e-13, atol=1e-15)
    for i, (a, b) in enumerate(zip(got, want)):  # to rounding: the vector width (and so the order of the batch
        np.testing.assert_allclose(a, b, err_msg=f"output {i}", **tol)  # sums) follows the buffers' alignment


@pytest.mark.parametrize("kind, bf", [("LSTM", True), ("GRU", False)])
def test_folded_views_finite_differences_to_second_order(kind, bf):
    args = _args(kind, T=3, B=2, I=2, H=2, seed=5)
    check_grads(_views(kind, bf), tuple(args), order=2)


@pytest.mark.parametrize("cls, bidirectional", [(LSTM, False), (LSTM, True), (GRU, True)])
def test_model_step_runs_no_repack(cls, bidirectional, unpart_calls, monkeypatch):
    """bench_nn's pattern: ``net(x)[0][:, -1]`` on a batch-first layer. A bidirectional layer concatenates its
    directions' outputs (an op of its own: the cotangent of each part is dense there and still repacked);
    the gradients equal the unfolded path's either way."""
    net = cls(2, 16, batch_first=True, bidirectional=bidirectional, seed=1, dtype="float32")
    x = sm.tensor(np.random.default_rng(6).standard_normal((4, 7, 2)), "float32")

    def grads():
        loss = (net(x)[0][:, -1] ** 2).sum()
        loss.backward()
        g = [p.grad.numpy().copy() for p in net.parameters()]
        for p in net.parameters():
            p.grad = None
        return float(loss), g
    loss, got = grads()
    assert bool(unpart_calls) == bidirectional
    monkeypatch.delattr(F._part, "flat_slice")
    loss2, want = grads()
    assert abs(loss - loss2) <= 1e-6 * abs(loss)
    for a, b in zip(got, want):  # to float32 rounding (see above)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_folded_views_on_vulkan(tmp_path):
    from tests.models.vulkan_seq_check import write_cases
    cases = []
    for kind, bf in (("LSTM", True), ("GRU", False)):
        args = [a.numpy() for a in _args(kind, T=4, B=3, I=2, H=8, seed=7)]
        out = _views(kind, bf)(*(sm.tensor(a) for a in args))
        cases.append((f"views_{kind}_{bf}", "rnn_views", dict(kind=kind, batch_first=bf), args, [],
                      np.random.default_rng(8).standard_normal(out.shape)))
    _run_vulkan(tmp_path, cases, write_cases)
