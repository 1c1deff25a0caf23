"""The per-step engine: one launch per step kernel forward, Taichi's ``.grad`` per kernel backward.

Host (CPU): the rollout's history is one flat numpy buffer; step t reads row t and writes row t+1
in place (zero-copy views), and the adjoint runs on the same rows with gradient buffers passed as
raw pointers (``_launch.RawKernel``): no per-step copies, ~10 us of Python per launch.

Device archs: the same loop on staging ``ti.ndarray``s (rows copied in and out, Taichi's own call).

Both run every step kernel's ``.grad`` with the forward's own x_t and x_{t+1} loaded (a step that
reads ``x_next`` after writing it, a scatter then a gather, is reversed against the values it saw),
and recompute scratch arrays from x_t before reversing a step (scratch is never stored).
"""
from __future__ import annotations

import numpy as np

from .. import backend, runtime
from ._launch import RawKernel


class HostStepper:
    """Per-step forward and backward on numpy rows (CPU)."""

    def __init__(self, sim, npdt):
        self.sim = sim
        self.npdt = npdt
        self.cs = sim.control_shape or (1,)
        self.scratch = [np.zeros(s, npdt) for s in sim.scratch.values()]
        self.scratch_g = [np.zeros(s, npdt) for s in sim.scratch.values()]
        self.fwd = [(RawKernel(k, False), t) for k, t in zip(sim.kernels, sim.kernel_t)]
        self.bwd = [(RawKernel(k, True), t) for k, t in zip(sim.kernels, sim.kernel_t)][::-1]
        self.loss_f = RawKernel(sim.loss_kernel, False) if sim.loss_kernel is not None else None
        self.loss_b = RawKernel(sim.loss_kernel, True) if sim.loss_kernel is not None else None
        self.lout = np.zeros(1, npdt)
        self.lout_g = np.zeros(1, npdt)
        n_c = len(sim.constants)
        self.tail_none = [None] * n_c

    def _rows(self, seg, m):
        return seg[:(m + 1) * self.sim.S].reshape((m + 1,) + self.sim.state_shape)

    def forward(self, seg, p, ctrl, m, t0, loss_acc=None):
        """Steps t0 .. t0+m-1: row 0 of ``seg`` holds x_{t0}; fills rows 1..m. ``loss_acc`` (shape (1,)):
        the per-step losses are added to it."""
        sim = self.sim
        rows = self._rows(seg, m)
        cr = ctrl.reshape((m,) + self.cs)
        pv = p.reshape(sim.params_shape)
        consts = list(sim.constants)
        nog = [None] * (4 + len(self.scratch) + len(consts) + 1)
        for t in range(m):
            x, xn, c = rows[t], rows[t + 1], cr[t]
            xn.fill(0.0)
            for s in self.scratch:
                s.fill(0.0)
            base = [x, pv, c, xn, *self.scratch, *consts]
            first = not sim._validated
            if first:
                before = x.copy()
            for rk, has_t in self.fwd:
                rk(base + [t0 + t] if has_t else base, nog)
            if first:
                sim._check_input_unchanged(before, x)
            if loss_acc is not None and self.loss_f is not None:
                self.lout[0] = 0.0
                la = [xn, pv, c, self.lout, *consts]
                self.loss_f(la + [t0 + t] if sim.loss_t else la, nog)
                loss_acc[0] += self.lout[0]

    def backward(self, seg, p, ctrl, m, t0, lam, work, gp, gc, g_loss=None):
        """``lam`` holds dL/dx_{t0+m} on entry, dL/dx_{t0} on exit; adds dL/dparams into ``gp`` and writes
        dL/dcontrols of these steps into ``gc`` (m C). ``g_loss``: cotangent of the summed per-step loss."""
        sim = self.sim
        rows = self._rows(seg, m)
        cr = ctrl.reshape((m,) + self.cs)
        gcr = gc.reshape((m,) + self.cs)
        pv, gpv = p.reshape(sim.params_shape), gp.reshape(sim.params_shape)
        shape = sim.state_shape
        lam_b, lam_a = lam.reshape(shape), work.reshape(shape)
        consts = list(sim.constants)
        nog = [None] * (4 + len(self.scratch) + len(consts) + 1)
        use_loss = g_loss is not None and self.loss_b is not None
        for t in range(m - 1, -1, -1):
            x, xn, c, gcv = rows[t], rows[t + 1], cr[t], gcr[t]
            base = [x, pv, c, xn, *self.scratch, *consts]
            if self.scratch:  # recompute this step's scratch from x_t (never stored)
                xn.fill(0.0)
                for s in self.scratch:
                    s.fill(0.0)
                for rk, has_t in self.fwd:
                    rk(base + [t0 + t] if has_t else base, nog)
                for s in self.scratch_g:
                    s.fill(0.0)
            lam_a.fill(0.0)
            gcv.fill(0.0)
            if use_loss:
                self.lout_g[0] = g_loss
                la = [xn, pv, c, self.lout, *consts]
                self.loss_b(la + [t0 + t] if sim.loss_t else la,
                            [lam_b, gpv, gcv, self.lout_g] + self.tail_none + [None])
            grads = [lam_a, gpv, gcv, lam_b, *self.scratch_g, *self.tail_none, None]
            for rk, has_t in self.bwd:
                rk(base + [t0 + t] if has_t else base, grads)
            lam_a, lam_b = lam_b, lam_a
        if m % 2:  # after an odd number of swaps the result is in work
            lam[...] = work


class StagedStepper:
    """The same loop on staging ti.ndarrays (device archs; also used to test this path on CPU)."""

    def __init__(self, sim, npdt):
        from ..autodiff.taichi_bridge import copy_kernels
        ti = runtime.ensure_init()
        self.sim = sim
        self.ti = ti
        self.K = copy_kernels()
        self.npdt = npdt
        dt = ti.f64 if npdt == np.float64 else ti.f32
        cs = sim.control_shape or (1,)
        self.cs = cs
        nd = lambda s: ti.ndarray(dt, s, needs_grad=True)  # noqa: E731
        self.X, self.XN, self.P, self.C = nd(sim.state_shape), nd(sim.state_shape), nd(sim.params_shape), nd(cs)
        self.scr = [nd(s) for s in sim.scratch.values()]
        self.L = nd((1,))
        self.zero = {id(a): np.zeros(int(np.prod(a.shape)), npdt) for a in [self.X, self.XN, self.L, *self.scr]}

    def _clear(self, a, grad_too=True):
        z = self.zero[id(a)]
        if grad_too:
            self.K["load"](z, a, a.grad)
        else:
            self.K["put"](z, a)

    def _args(self, t):
        return [self.X, self.P, self.C, self.XN, *self.scr, *self.sim.constants]

    def _run_fwd(self, t):
        base = self._args(t)
        for k, has_t in zip(self.sim.kernels, self.sim.kernel_t):
            k(*(base + [t] if has_t else base))

    def forward(self, seg, p, ctrl, m, t0, loss_acc=None):
        sim, K, S, C = self.sim, self.K, self.sim.S, self.sim.C
        K["put"](p, self.P)
        for t in range(m):
            K["put"](seg[t * S:(t + 1) * S], self.X)
            K["put"](ctrl[t * C:(t + 1) * C], self.C)
            self._clear(self.XN, False)
            for s in self.scr:
                self._clear(s, False)
            first = not sim._validated
            if first:
                before = seg[t * S:(t + 1) * S].copy()
            self._run_fwd(t0 + t)
            if first:
                after = np.empty(S, self.npdt)
                K["get"](self.X, after)
                sim._check_input_unchanged(before, after)
            K["get"](self.XN, seg[(t + 1) * S:(t + 2) * S])
            if loss_acc is not None and sim.loss_kernel is not None:
                self._clear(self.L, False)
                la = [self.XN, self.P, self.C, self.L, *sim.constants]
                sim.loss_kernel(*(la + [t0 + t] if sim.loss_t else la))
                out = np.empty(1, self.npdt)
                K["get"](self.L, out)
                loss_acc[0] += out[0]

    def backward(self, seg, p, ctrl, m, t0, lam, work, gp, gc, g_loss=None):
        sim, K, S, C = self.sim, self.K, self.sim.S, self.sim.C
        K["load"](p, self.P, self.P.grad)
        tmp = np.empty(S, self.npdt)
        for t in range(m - 1, -1, -1):
            K["load"](seg[t * S:(t + 1) * S], self.X, self.X.grad)
            K["load"](ctrl[t * C:(t + 1) * C], self.C, self.C.grad)
            if sim.scratch:
                self._clear(self.XN, False)
                for s in self.scr:
                    self._clear(s)
                self._run_fwd(t0 + t)
            K["put"](seg[(t + 1) * S:(t + 2) * S], self.XN)  # the forward's own x_{t+1}
            K["put"](lam, self.XN.grad)
            if g_loss is not None and sim.loss_kernel is not None:
                K["put"](np.full(1, g_loss, self.npdt), self.L.grad)
                la = [self.XN, self.P, self.C, self.L, *sim.constants]
                sim.loss_kernel.grad(*(la + [t0 + t] if sim.loss_t else la))
            base = self._args(t0 + t)
            for k, has_t in list(zip(sim.kernels, sim.kernel_t))[::-1]:
                k.grad(*(base + [t0 + t] if has_t else base))
            K["get"](self.X.grad, tmp)
            lam[...] = tmp
            K["get"](self.C.grad, gc[t * C:(t + 1) * C])
        out = np.empty(sim.P, self.npdt)
        K["get"](self.P.grad, out)
        gp += out


def make_stepper(sim, npdt):
    if backend.on_host() and not sim._force_staged:
        return HostStepper(sim, npdt)
    return StagedStepper(sim, npdt)
