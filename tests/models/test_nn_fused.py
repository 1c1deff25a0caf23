"""Fused NN kernels (issue 16, speed): the LSTM time loop (sciml/models/_lstm_fused.py, kernels/recurrent.py).

Each is checked in float64 against finite differences to second order, fused == composed, and against PyTorch
where installed; the Vulkan pass runs in its own process (vulkan_nn_fused_check.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import sciml as sm
from sciml.models import LSTM
from sciml.models._lstm_fused import lstm_outputs, lstm_sequence, lstm_sequence_composed
from sciml.testing import check_grads

R = np.random.default_rng(0)
HERE = os.path.dirname(os.path.abspath(__file__))


def _lstm_args(T=3, B=2, H=2):
    return (sm.tensor(R.normal(size=(T, B, 4 * H))), sm.tensor(0.5 * R.normal(size=(4 * H, H))),
            sm.tensor(R.normal(size=(B, H))), sm.tensor(R.normal(size=(B, H))))


def test_lstm_sequence_derivatives_match_finite_differences_to_second_order():
    check_grads(lstm_sequence, _lstm_args(), order=2)


def test_lstm_sequence_fused_equals_composed():
    args = _lstm_args(T=5, B=3, H=4)
    np.testing.assert_allclose(lstm_sequence(*args).numpy(), lstm_sequence_composed(*args).numpy(), rtol=1e-13,
                               atol=1e-14)
    u = sm.tensor(R.normal(size=lstm_sequence(*args).shape))
    got = sm.vjp(lstm_sequence, *args)[1](u)
    want = sm.vjp(lstm_sequence_composed, *args)[1](u)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-13)


def test_lstm_sequence_nan_propagates():
    gx, W, h0, c0 = _lstm_args()
    a = gx.numpy().copy()
    a[1, 0, 0] = np.nan
    P = lstm_sequence(sm.tensor(a), W, h0, c0).numpy()
    hs = P[:4 * 2 * 2].reshape(4, 2, 2)
    assert np.isnan(hs[2, 0, 0]) and np.isnan(hs[3:, 0]).all()  # step 1's unit 0, then all of batch row 0
    assert np.isfinite(hs[:2]).all() and np.isfinite(hs[:, 1]).all()


@pytest.mark.parametrize("layers, bidir, batch_first", [(1, False, True), (2, True, False)])
def test_lstm_matches_torch_values_and_gradients(layers, bidir, batch_first):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tl = torch.nn.LSTM(3, 5, num_layers=layers, bidirectional=bidir, batch_first=batch_first).double()
    m = LSTM(3, 5, num_layers=layers, bidirectional=bidir, batch_first=batch_first)
    m.load_state_dict({k: v.detach().numpy() for k, v in tl.state_dict().items()})
    x = R.normal(size=(4, 6, 3))
    D = 2 if bidir else 1
    h0, c0 = R.normal(size=(layers * D, 4 if batch_first else 6, 5)), R.normal(size=(layers * D, 4 if batch_first
                                                                                     else 6, 5))
    xt, ht, ct = (torch.tensor(a, requires_grad=True) for a in (x, h0, c0))
    out_t, (hn_t, cn_t) = tl(xt, (ht, ct))
    ((out_t ** 2).sum() + (hn_t * 0.3).sum() + (cn_t ** 3).sum()).backward()

    def loss(p, x, h, c):
        out, (hn, cn) = m.apply(p, x, (h, c))
        return (out ** 2).sum() + (hn * 0.3).sum() + (cn ** 3).sum()
    gp, gx, gh, gc = sm.grad(loss, argnums=(0, 1, 2, 3))(m.params(), sm.tensor(x), sm.tensor(h0), sm.tensor(c0))
    out, (hn, cn) = m(sm.tensor(x), (sm.tensor(h0), sm.tensor(c0)))
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(cn.numpy(), cn_t.detach().numpy(), rtol=1e-12, atol=1e-13)
    for a, t in ((gx, xt), (gh, ht), (gc, ct)):
        np.testing.assert_allclose(a.numpy(), t.grad.numpy(), rtol=1e-11, atol=1e-12)
    for name, p in tl.named_parameters():
        np.testing.assert_allclose(gp[name].numpy(), p.grad.numpy(), rtol=1e-11, atol=1e-12, err_msg=name)


def test_lstm_layer_second_derivative_through_fused_path():
    m = LSTM(2, 3, seed=0)
    x = sm.tensor(R.normal(size=(4, 2, 2)))
    check_grads(lambda t: m(t)[0], (x,), order=2)


def test_lstm_outputs_views():
    gx, W, h0, c0 = _lstm_args(T=4, B=2, H=3)
    hs, h, c = lstm_outputs(lstm_sequence(gx, W, h0, c0), 4, 2, 3)
    assert hs.shape == (4, 2, 3) and h.shape == (2, 3) and c.shape == (2, 3)
    np.testing.assert_array_equal(hs.numpy()[-1], h.numpy())


@pytest.mark.skipif(not [d for d in ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d") if os.path.isdir(d)
                         and os.listdir(d)], reason="no Vulkan ICD installed")
def test_fused_nn_kernels_on_vulkan():
    env = dict(os.environ)
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "vulkan_nn_fused_check.py")], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan nn fused" in r.stdout, (r.stdout + r.stderr)[-4000:]
