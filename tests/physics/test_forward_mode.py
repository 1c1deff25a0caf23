"""Issue 15 item 5: JVPs through a Simulation with a tangent= kernel (checked against finite
differences and against jacrev), Gauss-Newton-vector products, and second-order errors that name
what exists."""
import numpy as np
import pytest

import sciml as sm
from sciml.physics import conduction1d, heat1d
from sciml.testing import check_grads

RNG = np.random.default_rng(0)


def _case(n=8):
    u0 = np.sin(np.linspace(0, np.pi, n)) + 0.1 * RNG.standard_normal(n)
    u0[0] = u0[-1] = 0.0
    return sm.tensor(u0), sm.tensor(0.1 + 0.2 * RNG.random(n))


def test_jvp_matches_finite_differences_and_jacrev():
    sim = conduction1d(8, 12)
    u0, k = _case()
    check_grads(lambda u, kk: sim(u, kk), (u0, k), order=1, modes=("fwd", "rev"))
    check_grads(lambda u, kk: sim(u, kk, states=[0, 4, 12]), (u0, k), order=1, modes=("fwd",))
    jf = sm.jacfwd(lambda kk: sim(u0, kk))(k).numpy()
    jr = sm.jacrev(lambda kk: sim(u0, kk))(k).numpy()
    np.testing.assert_allclose(jf, jr, rtol=1e-12, atol=1e-15)


def test_gauss_newton_vector_product():
    sim = conduction1d(8, 10)
    u0, k = _case()
    v = sm.tensor(RNG.standard_normal(8))
    f = lambda kk: sim(u0, kk, states=[5, 10])  # noqa: E731
    _, jv = sm.jvp(f, (k,), (v,))
    _, pull = sm.vjp(f, k)
    (gnv,) = pull(jv)
    J = sm.jacrev(f)(k).numpy().reshape(-1, 8)
    np.testing.assert_allclose(gnv.numpy(), J.T @ (J @ v.numpy()), rtol=1e-11, atol=1e-14)


def test_second_order_errors_name_what_exists():
    sim = heat1d(8, 4)  # no tangent kernel
    u0, _ = _case()
    with pytest.raises(NotImplementedError, match="jvp / jacfwd when the Simulation is given a tangent= kernel"):
        sm.jvp(lambda u: sim(u, sm.tensor([0.2])), (u0,), (u0,))
    csim = conduction1d(8, 4)
    k = sm.tensor(np.full(8, 0.2))
    with pytest.raises(NotImplementedError, match="hessian, hvp and grad-of-grad through it are not available"):
        sm.hessian(lambda kk: (csim(u0, kk) ** 2).sum())(k)


@pytest.mark.parametrize("mode", ["fused", "per_step"])
def test_several_pulls_from_one_checkpointed_forward(mode):
    """jacrev pulls back many cotangents through one forward: each must recompute the segments it
    needs (the second pull used to find the first segment where the last one was expected)."""
    sim = heat1d(8, 10, mode=mode, checkpoint_every=3)
    u0, _ = _case()
    r = sm.tensor([0.2])
    J = sm.jacrev(lambda u: sim(u, r, states=[4, 10]))(u0).numpy().reshape(16, 8)
    for i in (0, 9, 15):
        e = np.zeros(16)
        e[i] = 1.0
        _, pull = sm.vjp(lambda u: sim(u, r, states=[4, 10]), u0)
        np.testing.assert_allclose(J[i], pull(sm.tensor(e.reshape(2, 8)))[0].numpy(), rtol=1e-13, atol=1e-15)


# --- forward mode through a step of several kernels sharing scratch (one tangent kernel each) ----
import taichi as ti  # noqa: E402

from sciml.physics import Simulation  # noqa: E402

a1 = ti.types.ndarray(ndim=1)


@ti.kernel
def _mix(x: a1, p: a1, c: a1, xn: a1, tmp: a1, t: ti.i32):
    for i in range(x.shape[0]):
        j = (i + x.shape[0] - 1) % x.shape[0]
        tmp[i] = x[j] * p[0] + x[i] * p[1]


@ti.kernel
def _update(x: a1, p: a1, c: a1, xn: a1, tmp: a1, t: ti.i32):
    for i in range(x.shape[0]):
        xn[i] = x[i] + 0.3 * ti.sin(tmp[i]) + 0.01 * t * c[0]


@ti.kernel
def _mix_tangent(x: a1, p: a1, c: a1, xn: a1, tmp: a1, dx: a1, dp: a1, dc: a1, dxn: a1, dtmp: a1, t: ti.i32):
    for i in range(x.shape[0]):
        j = (i + x.shape[0] - 1) % x.shape[0]
        dtmp[i] = dx[j] * p[0] + x[j] * dp[0] + dx[i] * p[1] + x[i] * dp[1]


@ti.kernel
def _update_tangent(x: a1, p: a1, c: a1, xn: a1, tmp: a1, dx: a1, dp: a1, dc: a1, dxn: a1, dtmp: a1, t: ti.i32):
    for i in range(x.shape[0]):
        dxn[i] = dx[i] + 0.3 * ti.cos(tmp[i]) * dtmp[i] + 0.01 * t * dc[0]


def _two_kernel_sim(steps=6, **kw):
    return Simulation(state_shape=(7,), steps=steps, params_shape=(2,), control_shape=(1,), step=[_mix, _update],
                      scratch={"tmp": (7,)}, tangent=kw.pop("tangent", [_mix_tangent, _update_tangent]),
                      name="two_kernels", **kw)


def test_jvp_through_several_kernels_with_scratch():
    sim = _two_kernel_sim()
    args = (sm.tensor(RNG.standard_normal(7)), sm.tensor([0.6, 0.3]), sm.tensor(RNG.standard_normal((6, 1))))
    check_grads(lambda x, p, c: sim(x, p, c, states=[2, 6]), args, order=1, modes=("fwd", "rev"))
    for k in range(3):  # forward mode equals reverse mode, per argument
        jf = sm.jacfwd(lambda *a: sim(*a), argnums=k)(*args).numpy()
        jr = sm.jacrev(lambda *a: sim(*a), argnums=k)(*args).numpy()
        np.testing.assert_allclose(jf, jr, rtol=1e-12, atol=1e-14)


def test_tangent_list_errors_name_the_layout():
    with pytest.raises(ValueError, match="one tangent kernel per step kernel.*got 1 for 2"):
        _two_kernel_sim(tangent=_mix_tangent)
    with pytest.raises(ValueError, match=r"expected \(x, params, control, x_next, tmp, dx, dparams, dcontrol, "
                                         r"dx_next, dtmp\)"):
        _two_kernel_sim(tangent=[_mix_tangent, _update])


# --- forward mode through a running loss (loss= kernel) ----------------------------------------------


@ti.kernel
def _running_loss(x: a1, p: a1, c: a1, out: a1, t: ti.i32):
    for i in range(x.shape[0]):
        out[0] += (x[i] - 0.1 * t) ** 2 * p[1] + 0.5 * c[0] * x[i]


def test_jvp_through_a_running_loss():
    """The loss's tangent is sum_t <grad loss_t, tangents>: jvp equals finite differences, jacfwd equals jacrev
    for the states and the summed loss together, per argument."""
    sim = _two_kernel_sim(loss=_running_loss)
    args = (sm.tensor(RNG.standard_normal(7)), sm.tensor([0.6, 0.3]), sm.tensor(RNG.standard_normal((6, 1))))

    def f(*a):
        xs, loss = sim(*a, states=[3, 6])
        return sm.concat([xs.reshape((-1,)), loss.reshape((1,))])
    check_grads(f, args, order=1, modes=("fwd",))
    for k in range(3):
        jf = sm.jacfwd(f, argnums=k)(*args).numpy()
        jr = sm.jacrev(f, argnums=k)(*args).numpy()
        np.testing.assert_allclose(jf, jr, rtol=1e-12, atol=1e-14)
