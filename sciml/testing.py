"""Derivative checks against central finite differences (like ``jax.test_util.check_grads``).

``check_grads(f, args, order=2)`` checks forward mode (JVP) and reverse mode (VJP) of ``f``
along random directions in float64, then the same for the derivative functions themselves
up to ``order``. ``f`` takes Tensors and returns one Tensor.
"""
from __future__ import annotations

import numpy as np

from .autodiff.tensor import Tensor, tensor
from .autodiff.transforms import jvp, vjp


def _rand_like(rng, x: Tensor):
    return tensor(rng.standard_normal(x.shape), x.dtype)


def _axpy(a, xs, ys):
    return tuple(tensor(x.numpy() + a * y.numpy(), x.dtype) for x, y in zip(xs, ys))


def numerical_jvp(f, args, tangents, eps=1e-6):
    """Central difference (f(x + eps t) - f(x - eps t)) / 2 eps, as numpy."""
    hi = f(*_axpy(eps, args, tangents)).numpy()
    lo = f(*_axpy(-eps, args, tangents)).numpy()
    return (hi - lo) / (2 * eps)


def _close(name, got, want, rtol, atol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {got.shape} != expected {want.shape}")
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    if err > atol * scale + rtol * (float(np.max(np.abs(want))) if want.size else 0):
        raise AssertionError(f"{name}: max abs error {err:.3e} (scale {scale:.3e}); got\n{got}\nexpected\n{want}")


def check_jvp(f, args, rng, eps=1e-6, rtol=1e-5, atol=1e-6):
    ts = tuple(_rand_like(rng, a) for a in args)
    _, ty = jvp(f, args, ts)
    _close("jvp vs finite differences", ty.numpy(), numerical_jvp(f, args, ts, eps), rtol, atol)


def check_vjp(f, args, rng, eps=1e-6, rtol=1e-5, atol=1e-6):
    y, pull = vjp(f, *args)
    u = _rand_like(rng, y)
    cts = pull(u)
    ts = tuple(_rand_like(rng, a) for a in args)
    lhs = sum(float((c.numpy() * t.numpy()).sum()) for c, t in zip(cts, ts))
    rhs = float((u.numpy() * numerical_jvp(f, args, ts, eps)).sum())
    _close("vjp vs finite differences (<u, J t>)", lhs, rhs, rtol, atol)


def check_grads(f, args, order=1, modes=("fwd", "rev"), eps=1e-6, rtol=1e-5, atol=1e-6, seed=0):
    """Check derivatives of ``f`` at ``args`` up to ``order`` in the given modes.

    Raises AssertionError with the worst error if a check fails. Use float64 arguments.
    """
    args = tuple(args)
    rng = np.random.default_rng(seed)
    if "fwd" in modes:
        check_jvp(f, args, rng, eps, rtol, atol)
    if "rev" in modes:
        check_vjp(f, args, rng, eps, rtol, atol)
    if order > 1:
        if "fwd" in modes:
            ts = tuple(_rand_like(rng, a) for a in args)
            check_grads(lambda *a: jvp(f, a, ts)[1], args, order - 1, modes, eps, rtol, atol, seed + 1)
        if "rev" in modes:
            u = _rand_like(rng, f(*args))
            for k in range(len(args)):
                check_grads(lambda *a, k=k: vjp(f, *a)[1](u)[k], args, order - 1, modes, eps, rtol, atol, seed + 2)


def check_simulation(sim, x0, params=None, controls=None, *, rollout=True, eps=1e-6, rtol=1e-5, atol=1e-6,
                     seed=0):
    """Check a ``sciml.physics.Simulation``'s derivatives against finite differences.

    First one step at x_0 and at x_{T//2} (``sim.check_step``: raises
    ``sciml.physics.SimulationCheckError`` naming each derivative, output x_next or the step loss
    with respect to x, params or control, that disagrees), then, with ``rollout=True``, the whole
    rollout's VJP along random directions (``check_grads``). Use float64 inputs. Returns the
    per-step report of the first state (``{"d(x_next)/d(x)": relative error, ...}``).
    """
    x0 = tensor(np.asarray(x0.numpy() if isinstance(x0, Tensor) else x0))
    dt = x0.dtype
    p = params if params is None or isinstance(params, Tensor) else tensor(np.asarray(params), dt)
    c = controls if controls is None or isinstance(controls, Tensor) else tensor(np.asarray(controls), dt)
    cn = c.numpy() if c is not None else None
    mid = sim.steps // 2
    traj = sim.trajectory(x0, p, c)
    report = sim.check_step(x0.numpy(), p.numpy() if p is not None else None,
                            cn[0] if cn is not None else None, t=0, seed=seed)
    if mid > 0:
        sim.check_step(traj[mid], p.numpy() if p is not None else None, cn[mid] if cn is not None else None,
                       t=mid, seed=seed + 1)
    if rollout:
        args = [x0] + ([p] if p is not None else []) + ([c] if c is not None else [])

        def f(*a):
            xs = a[0]
            pp = a[1] if p is not None else None
            cc = a[-1] if c is not None else None
            out = sim(xs, pp, cc)
            if isinstance(out, tuple):  # (state, summed step loss)
                return out[0].reshape((-1,)) + out[1]
            return out
        check_grads(f, args, order=1, modes=("rev",), eps=eps, rtol=rtol, atol=atol, seed=seed)
    return report


def flat_mlp_loss(x, y, sizes):
    """``th -> mean((mlp(x) - y)**2)`` for a tanh MLP of layer ``sizes`` whose weights and biases
    are slices of one flat vector ``th`` (each layer: an (in, out) weight, then the bias), the
    shape of a dense-Hessian test (W4b). ``x``, ``y``: Tensors (n, sizes[0]) and (n, sizes[-1])."""
    from .autodiff import ops as _ops

    def f(th):
        h, k = x, 0
        for j, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
            w = _ops.reshape(th[k:k + i * o], (i, o))
            k += i * o
            h = _ops.matmul(h, w) + th[k:k + o]
            k += o
            if j < len(sizes) - 2:
                h = _ops.tanh(h)
        e = h - y
        return (e * e).mean()
    return f


def random_layers(sizes, seed=0, dtype="float64"):
    """``[(W, b), ...]`` Tensors of a dense net of layer ``sizes``: W (in, out) standard normal
    over sqrt(in), b normal with scale 0.3 (non-zero biases, so that tests see them)."""
    rng = np.random.default_rng(seed)
    return [(tensor(rng.standard_normal((i, o)) / np.sqrt(i), dtype), tensor(rng.standard_normal(o) * 0.3, dtype))
            for i, o in zip(sizes[:-1], sizes[1:])]


def flatten_layers(layers):
    """``[(W, b), ...] -> [W, b, ...]``; :func:`pair_layers` is its inverse."""
    return [t for W, b in layers for t in (W, b)]


def pair_layers(ps):
    """``[W, b, ...] -> [(W, b), ...]``."""
    return [(ps[2 * k], ps[2 * k + 1]) for k in range(len(ps) // 2)]
