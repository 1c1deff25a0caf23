"""The fused recurrent layer primitive (sciml/models/_rnn_fused.py, kernels/rnn_seq.py): LSTM, GRU and Elman RNN
(tanh, relu), both directions, both output layouts: fused == composed (values and VJPs, float64), finite
differences to second order, PyTorch's outputs and gradients (GRU, RNN; the LSTM's are in test_nn_fused.py),
the float32 vector cells == the scalar cells, and a Vulkan pass in its own process (vulkan_seq_check.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import sciml as sm
from sciml.models import GRU, RNN, GRUCell, LSTMCell, RNNCell
from sciml.models._rnn_fused import rnn_layer, rnn_layer_composed, rnn_outputs
from sciml.testing import check_grads

HERE = os.path.dirname(os.path.abspath(__file__))
R = np.random.default_rng(0)
NG = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
KINDS = list(NG)


def _args(kind, T=3, B=2, I=2, H=3, dtype="float64", seed=0):
    r = np.random.default_rng(seed)
    ng = NG[kind]
    shapes = [(T, B, I), (ng * H, I), ((2 if kind == "GRU" else 1) * ng * H,), (ng * H, H), (B, H)]
    if kind == "LSTM":
        shapes.append((B, H))
    return [sm.tensor(0.7 * r.standard_normal(s), dtype) for s in shapes]


@pytest.mark.parametrize("kind", KINDS)
def test_fused_equals_composed_both_directions_and_layouts(kind):
    args = _args(kind, T=4, B=3, I=1 if kind == "LSTM" else 2, H=5)  # I = 1: the x^T dG form of dW_ih
    for rev in (False, True):
        for bf in (False, True):
            kw = dict(kind=kind, reverse=rev, batch_first=bf)
            a = rnn_layer(*args, **kw).numpy()
            b = rnn_layer_composed(*args, **kw).numpy()
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
            u = sm.tensor(R.standard_normal(a.shape))
            got = sm.vjp(lambda *t: rnn_layer(*t, **kw), *args)[1](u)
            want = sm.vjp(lambda *t: rnn_layer_composed(*t, **kw), *args)[1](u)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_derivatives_match_finite_differences_to_second_order(kind):
    args = _args(kind, T=2, B=2, I=2, H=2, seed=1)
    if kind == "RNN_RELU":  # keep pre-activations away from the kink
        args[2] = args[2] + 2.0
    check_grads(lambda *t: rnn_layer(*t, kind=kind, reverse=True, batch_first=True), tuple(args), order=2)


def test_outputs_views_and_nan():
    args = _args("LSTM", T=4, B=2, H=3)
    y, h, c = rnn_outputs(rnn_layer(*args), 4, 2, 3, "LSTM")
    np.testing.assert_array_equal(y.numpy()[-1], h.numpy())
    assert y.shape == (4, 2, 3) and c.shape == (2, 3)
    x = args[0].numpy().copy()
    x[1, 0, 0] = np.nan
    y = rnn_layer(sm.tensor(x), *args[1:]).numpy()[:4 * 2 * 3].reshape(4, 2, 3)
    assert np.isnan(y[1:, 0]).all() and np.isfinite(y[0]).all() and np.isfinite(y[:, 1]).all()
    with pytest.raises(ValueError, match="kind='LSTN'"):
        rnn_layer(*args, kind="LSTN")


@pytest.mark.parametrize("cls, kind", [(GRU, "GRU"), (RNN, "RNN_TANH"), (RNN, "RNN_RELU")])
def test_matches_torch_values_and_gradients(cls, kind):
    torch = pytest.importorskip("torch")
    from sciml.serialization import from_torch_state_dict
    kw = dict(num_layers=2, bidirectional=True, batch_first=True)
    if cls is RNN:
        kw["nonlinearity"] = kind[4:].lower()
    tl = getattr(torch.nn, cls.__name__)(3, 4, **kw).double()
    m = cls(3, 4, **kw)
    m.load_state_dict(from_torch_state_dict(tl.state_dict(), m))
    x = R.standard_normal((2, 5, 3))
    h0 = R.standard_normal((4, 2, 4))
    xt = torch.tensor(x, requires_grad=True)
    yt, ht = tl(xt, torch.tensor(h0))
    ((yt ** 2).sum() + (ht ** 3).sum()).backward()
    y, h = m(sm.tensor(x), sm.tensor(h0))
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h.numpy(), ht.detach().numpy(), rtol=1e-10, atol=1e-12)

    def loss(p, xx):
        yy, hh = m.apply(p, xx, sm.tensor(h0))
        return (yy ** 2).sum() + (hh ** 3).sum()
    gp, gx = sm.grad(loss, argnums=(0, 1))(m.params(), sm.tensor(x))
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-11)
    for name, p in tl.named_parameters():
        np.testing.assert_allclose(gp[name].numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-11, err_msg=name)


def test_cells_match_torch():
    torch = pytest.importorskip("torch")
    from sciml.serialization import from_torch_state_dict
    x, h, c = R.standard_normal((3, 2)), R.standard_normal((3, 4)), R.standard_normal((3, 4))
    for cls in (RNNCell, GRUCell, LSTMCell):
        tc = getattr(torch.nn, cls.__name__)(2, 4).double()
        sc = cls(2, 4)
        sc.load_state_dict(from_torch_state_dict(tc.state_dict(), sc))
        st = (torch.tensor(h), torch.tensor(c)) if cls is LSTMCell else torch.tensor(h)
        ss = (sm.tensor(h), sm.tensor(c)) if cls is LSTMCell else sm.tensor(h)
        want, got = tc(torch.tensor(x), st), sc(sm.tensor(x), ss)
        for w, g in zip(want if cls is LSTMCell else (want,), got if cls is LSTMCell else (got,)):
            np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN_RELU"])   # RNN_TANH: the relu cell with tanh
def test_float32_vector_cells_equal_scalar_cells(kind, monkeypatch):
    from sciml.kernels import recurrent as KR
    args = _args(kind, T=5, B=3, I=3, H=8, dtype="float32", seed=2)
    u = sm.tensor(R.standard_normal(rnn_layer(*args, kind=kind).shape), "float32")
    res = []
    for vec in (True, False):
        monkeypatch.setattr(KR, "VECTOR", vec)
        f = lambda *t: rnn_layer(*t, kind=kind, reverse=True, batch_first=True)  # noqa: E731
        P, pull = sm.vjp(f, *args)
        res.append([P.numpy()] + [g.numpy() for g in pull(u)])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_fused_seq_kernels_on_vulkan(tmp_path):
    from tests.models.vulkan_seq_check import write_cases
    cases = []
    for kind, rev, bf in (("LSTM", False, False), ("LSTM", True, True), ("GRU", True, True), ("RNN_TANH", True, False),
                          ("RNN_RELU", False, True)):
        args = [a.numpy() for a in _args(kind, T=4, B=3, I=2, H=8, seed=4)]
        out = rnn_layer(*(sm.tensor(a) for a in args), kind=kind)
        cases.append((f"{kind}_{rev}_{bf}", "rnn", dict(kind=kind, reverse=rev, batch_first=bf), args, [],
                      R.standard_normal(out.shape)))
    _run_vulkan(tmp_path, cases, write_cases)


def _run_vulkan(tmp_path, cases, write_cases):
    from tests.test_vulkan import _vulkan_available
    if not _vulkan_available():
        if os.environ.get("SCIML_REQUIRE_VULKAN"):   # set by .ci/run: CI must really run this pass
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    path = str(tmp_path / "cases.npz")
    write_cases(path, cases)
    env = dict(os.environ)
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "vulkan_seq_check.py"), path], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan seq" in r.stdout, (r.stdout + r.stderr)[-4000:]
