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
    """Per-step forward and backward on numpy rows (CPU).

    Every launch context (which rows, which gradient buffers, the step index) is built once per
    (history buffer, segment) and relaunched: ~2 us of Python per launch instead of ~30-60 us for a
    Taichi call. Parameters, controls and gradients live in buffers owned here (stable addresses)."""

    MAX_CONTEXTS = 1 << 16  # cached launch contexts before the cache is dropped (~ a few hundred bytes each)

    def __init__(self, sim, npdt):
        self.sim = sim
        self.npdt = npdt
        self.cs = sim.control_shape or (1,)
        S, P, C, T = sim.S, sim.P, sim.C, sim.steps
        self.scratch = [np.zeros(s, npdt) for s in sim.scratch.values()]
        self.scratch_g = [np.zeros(s, npdt) for s in sim.scratch.values()]
        self.fwd = [(RawKernel(k, False), t) for k, t in zip(sim.kernels, sim.kernel_t)]
        self.bwd = [(RawKernel(k, True), t) for k, t in zip(sim.kernels, sim.kernel_t)][::-1]
        self.loss_f = RawKernel(sim.loss_kernel, False) if sim.loss_kernel is not None else None
        self.loss_b = RawKernel(sim.loss_kernel, True) if sim.loss_kernel is not None else None
        self.lout = np.zeros(1, npdt)
        self.lout_g = np.zeros(1, npdt)
        self.p = np.zeros(sim.params_shape, npdt)
        self.gp = np.zeros(sim.params_shape, npdt)
        self.c = np.zeros((T,) + self.cs, npdt)
        self.gc = np.zeros((T,) + self.cs, npdt)
        self.lam = [np.zeros(sim.state_shape, npdt), np.zeros(sim.state_shape, npdt)]
        self.consts = list(sim.constants)
        self.none = [None] * (4 + len(self.scratch) + len(self.consts) + 1)
        self.plans = {}
        self.n_ctx = 0
        self.loop = None  # the ti.func step's time-loop kernel, compiled on first use
        self.none_loop = [None] * (3 + len(self.scratch) + len(self.consts) + 3)

    def _rows(self, seg, m):
        return seg[:(m + 1) * self.sim.S].reshape((m + 1,) + self.sim.state_shape)

    def _args(self, rows, t, tt):
        return [rows[t], self.p, self.c[tt], rows[t + 1], *self.scratch, *self.consts]

    def _plan(self, seg, t0, m, backward):
        key = (seg.__array_interface__["data"][0], t0, m, backward)
        plan = self.plans.get(key)
        if plan is not None:
            return plan
        if self.n_ctx > self.MAX_CONTEXTS:
            self.plans.clear()
            self.n_ctx = 0
        sim, rows = self.sim, self._rows(seg, m)
        # the backward recomputes scratch with the forward's own launch contexts (same arguments)
        fplan = self._plan(seg, t0, m, False) if backward and self.scratch else None
        plan = []
        for t in range(m):
            tt = t0 + t
            base = self._args(rows, t, tt)
            la = [rows[t + 1], self.p, self.c[tt], self.lout, *self.consts] + ([tt] if sim.loss_t else [])
            if not backward:
                fw = [rk.context(base + [tt] if has_t else base, self.none) for rk, has_t in self.fwd]
                lf = self.loss_f.context(la, self.none) if self.loss_f is not None else None
                plan.append((fw, lf))
                continue
            fw = fplan[t][0] if fplan is not None else None
            g_x, g_xn = self.lam[(m - t) % 2], self.lam[(m - 1 - t) % 2]
            grads = [g_x, self.gp, self.gc[tt], g_xn, *self.scratch_g] + [None] * (len(self.consts) + 1)
            bw = [rk.context(base + [tt] if has_t else base, grads) for rk, has_t in self.bwd]
            lb = None
            if self.loss_b is not None:
                lb = self.loss_b.context(la, [g_xn, self.gp, self.gc[tt], self.lout_g] + [None] * (len(self.consts) + 1))
            plan.append((fw, g_x, bw, lb))
        self.n_ctx += m * (len(self.fwd) + 1)
        self.plans[key] = plan
        return plan

    def forward(self, seg, p, ctrl, m, t0, loss_acc=None):
        """Steps t0 .. t0+m-1: row 0 of ``seg`` holds x_{t0}; fills rows 1..m. ``loss_acc`` (shape (1,)):
        the per-step losses are added to it."""
        sim = self.sim
        self.p.reshape(-1)[:] = p
        self.c[t0:t0 + m] = ctrl.reshape((m,) + self.cs)
        if not sim._validated:  # the first step through Taichi's checks, and the input-write check
            rows = self._rows(seg, m)
            before = rows[0].copy()
            rows[1].fill(0.0)
            for s in self.scratch:
                s.fill(0.0)
            base = self._args(rows, 0, t0)
            for rk, has_t in self.fwd:
                rk(base + [t0] if has_t else base, self.none)
            sim._check_input_unchanged(before, rows[0])
        plan = self._plan(seg, t0, m, False)
        rows = self._rows(seg, m)
        fl = [rk.launcher() for rk, _ in self.fwd]
        lfl = self.loss_f.launcher() if (self.loss_f is not None and loss_acc is not None) else None
        scratch = self.scratch
        for t, (fw, lf) in enumerate(plan):
            rows[t + 1].fill(0.0)
            for s in scratch:
                s.fill(0.0)
            for (lk, ck), c in zip(fl, fw):
                lk(ck, c)
            if lfl is not None:
                self.lout[0] = 0.0
                lfl[0](lfl[1], lf)
                loss_acc[0] += self.lout[0]

    def loop_forward(self, seg, p, ctrl, m, t0, loss_acc=None):
        """The same as :meth:`forward` for a ``ti.func`` step: ONE launch of the generated time-loop kernel."""
        sim = self.sim
        if not sim._validated:  # the first step through the per-step kernel: Taichi's checks, the input-write check
            self.forward(seg, p, ctrl[:sim.C], 1, t0)
        self.p.reshape(-1)[:] = p
        self.c[t0:t0 + m] = ctrl.reshape((m,) + self.cs)
        if self.loop is None:
            self.loop = RawKernel(sim.loop.loop_kernel, False)
            self.loop_acc = np.zeros(1, self.npdt)
        self.loop_acc[0] = 0.0
        self.loop([self._rows(seg, m), self.p, self.c[t0:t0 + m], *self.scratch, *self.consts, self.loop_acc, t0, m],
                  self.none_loop)
        if loss_acc is not None:
            loss_acc[0] += self.loop_acc[0]

    def backward(self, seg, p, ctrl, m, t0, lam, work, gp, gc, g_loss=None):
        """``lam`` holds dL/dx_{t0+m} on entry, dL/dx_{t0} on exit; adds dL/dparams into ``gp`` and writes
        dL/dcontrols of these steps into ``gc`` (m C). ``g_loss``: cotangent of the summed per-step loss."""
        sim = self.sim
        self.p.reshape(-1)[:] = p
        self.c[t0:t0 + m] = ctrl.reshape((m,) + self.cs)
        self.gp.fill(0.0)
        self.gc[t0:t0 + m] = 0.0
        self.lam[0].reshape(-1)[:] = lam
        self.lout_g[0] = g_loss if g_loss is not None else 0.0
        use_loss = g_loss is not None
        plan = self._plan(seg, t0, m, True)
        fl = [rk.launcher() for rk, _ in self.fwd]
        bl = [rk.launcher() for rk, _ in self.bwd]
        lbl = self.loss_b.launcher() if (use_loss and self.loss_b is not None and plan) else None
        scratch, scratch_g = self.scratch, self.scratch_g
        rows = self._rows(seg, m)
        for t in range(m - 1, -1, -1):
            fw, g_x, bw, lb = plan[t]
            if fw is not None:  # recompute this step's scratch from x_t (never stored)
                rows[t + 1].fill(0.0)
                for s in scratch:
                    s.fill(0.0)
                for (lk, ck), c in zip(fl, fw):
                    lk(ck, c)
                for s in scratch_g:
                    s.fill(0.0)
            g_x.fill(0.0)
            if lbl is not None and lb is not None:
                lbl[0](lbl[1], lb)
            for (lk, ck), c in zip(bl, bw):
                lk(ck, c)
        lam[...] = self.lam[m % 2].reshape(-1)
        gp += self.gp.reshape(-1)
        gc[...] = self.gc[t0:t0 + m].reshape(-1)


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

    def loop_forward(self, seg, p, ctrl, m, t0, loss_acc=None):
        """The generated time-loop kernel of a ``ti.func`` step on ti.ndarrays (Taichi's own call)."""
        sim, ti, S = self.sim, self.ti, self.sim.S
        if not sim._validated:
            self.forward(seg, p, ctrl[:sim.C], 1, t0)
        dt = ti.f64 if self.npdt == np.float64 else ti.f32
        h = ti.ndarray(dt, (m + 1,) + sim.state_shape)
        h.from_numpy(seg[:(m + 1) * S].reshape((m + 1,) + sim.state_shape))
        c = ti.ndarray(dt, (m,) + self.cs)
        c.from_numpy(np.ascontiguousarray(ctrl[:m * sim.C]).reshape((m,) + self.cs))
        pp = ti.ndarray(dt, sim.params_shape)
        pp.from_numpy(np.ascontiguousarray(p).reshape(sim.params_shape))
        acc = ti.ndarray(dt, (1,))
        acc.fill(0.0)
        sim.loop.loop_kernel(h, pp, c, *self.scr, *sim.constants, acc, t0, m)
        seg[S:(m + 1) * S] = h.to_numpy().reshape(-1)[S:]
        if loss_acc is not None:
            loss_acc[0] += acc.to_numpy()[0]

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


class TangentRunner:
    """Forward mode on the host: the step kernels and their tangent kernels, step by step, from launch
    contexts built once over buffers owned here (x/dx ping-pong, scratch and its tangents, params,
    controls, their tangents). Tangent kernel k runs right after step kernel k."""

    MAX_STEPS = 1 << 15  # contexts are cached for rollouts up to this many steps

    def __init__(self, sim, npdt):
        self.sim = sim
        cs = sim.control_shape or (1,)
        T = sim.steps
        self.x = [np.zeros(sim.state_shape, npdt) for _ in range(2)]
        self.dx = [np.zeros(sim.state_shape, npdt) for _ in range(2)]
        self.scr = [np.zeros(s, npdt) for s in sim.scratch.values()]
        self.dscr = [np.zeros(s, npdt) for s in sim.scratch.values()]
        self.p, self.dp = np.zeros(sim.params_shape, npdt), np.zeros(sim.params_shape, npdt)
        self.c, self.dc = np.zeros((T,) + cs, npdt), np.zeros((T,) + cs, npdt)
        self.pairs = [(RawKernel(k, False), kt, RawKernel(tk, False), tt)
                      for k, kt, tk, tt in zip(sim.kernels, sim.kernel_t, sim.tangent_kernels, sim.tangent_ts)]
        self.none = [None] * (8 + 2 * len(self.scr) + len(sim.constants) + 1)
        self.ctx = None
        self.loss = None
        if sim.loss_kernel is not None:  # the loss's tangent from its gradient: <grad loss_t, (dx, dp, dc)>
            self.loss = RawKernel(sim.loss_kernel, True)
            self.lout, self.lout_g = np.zeros(1, npdt), np.ones(1, npdt)
            self.lg = [np.zeros(sim.state_shape, npdt), np.zeros(sim.params_shape, npdt), np.zeros(cs, npdt)]
            self.lctx = None

    def _loss_contexts(self):
        sim = self.sim
        out = []
        for t in range(sim.steps):
            b = (t + 1) % 2
            la = [self.x[b], self.p, self.c[t], self.lout, *sim.constants] + ([t] if sim.loss_t else [])
            out.append(self.loss.context(la, self.lg + [self.lout_g] + [None] * (len(sim.constants) + 1)))
        return out

    def _loss_tangent(self, t, lctx):
        """d(loss_t) along the tangents: the loss kernel's gradient at (x_{t+1}, p, c_t) dotted with them."""
        b = (t + 1) % 2
        for g in self.lg:
            g.fill(0.0)
        self.lout_g[0] = 1.0
        if lctx is not None:
            launch, ck = self.loss.launcher()
            launch(ck, lctx[t])
        else:
            sim = self.sim
            la = [self.x[b], self.p, self.c[t], self.lout, *sim.constants] + ([t] if sim.loss_t else [])
            self.loss(la, self.lg + [self.lout_g] + [None] * (len(sim.constants) + 1))
        gx, gp, gc = self.lg
        return float(np.vdot(gx, self.dx[b])) + float(np.vdot(gp, self.dp)) + float(np.vdot(gc, self.dc[t]))

    def _args(self, t):
        a, b = t % 2, (t + 1) % 2
        consts = list(self.sim.constants)
        sa = [self.x[a], self.p, self.c[t], self.x[b], *self.scr, *consts]
        ta = [self.x[a], self.p, self.c[t], self.x[b], *self.scr, self.dx[a], self.dp, self.dc[t], self.dx[b],
              *self.dscr, *consts]
        return [(sk, sa + ([t] if kt else []), tk, ta + ([t] if tt else [])) for sk, kt, tk, tt in self.pairs]

    def _contexts(self):
        return [[(sk.context(sa, self.none), tk.context(ta, self.none)) for sk, sa, tk, ta in self._args(t)]
                for t in range(self.sim.steps)]

    def run(self, x0, dx0, p, dp, c, dc, where, out):
        """Tangents of the states at the times in ``where`` ({t: [slot, ...]}) into ``out`` (flat)."""
        sim, S = self.sim, self.sim.S
        self.x[0].reshape(-1)[:] = x0
        self.dx[0].reshape(-1)[:] = dx0
        self.p.reshape(-1)[:] = p
        self.dp.reshape(-1)[:] = dp
        self.c.reshape(-1)[:] = c
        self.dc.reshape(-1)[:] = dc
        if sim.steps > self.MAX_STEPS:  # no cache: a context per launch
            ctx = None
        else:
            if self.ctx is None:
                self.ctx = self._contexts()
            ctx = self.ctx
        if ctx is not None:
            launch = [(sk.launcher(), tk.launcher()) for sk, _, tk, _ in self.pairs]
        for i in where.get(0, ()):
            out[i * S:(i + 1) * S] = self.dx[0].reshape(-1)
        lctx, dloss = None, 0.0
        if self.loss is not None and ctx is not None:
            if self.lctx is None:
                self.lctx = self._loss_contexts()
            lctx = self.lctx
        for t in range(sim.steps):
            b = (t + 1) % 2
            for a_ in (self.x[b], self.dx[b], *self.scr, *self.dscr):
                a_.fill(0.0)
            if ctx is not None:
                for ((ls, ks), (lt, kt)), (cs_, ct) in zip(launch, ctx[t]):
                    ls(ks, cs_)
                    lt(kt, ct)
            else:
                for sk, sa, tk, ta in self._args(t):
                    sk(sa, self.none)
                    tk(ta, self.none)
            for i in where.get(t + 1, ()):
                out[i * S:(i + 1) * S] = self.dx[b].reshape(-1)
            if self.loss is not None:
                dloss += self._loss_tangent(t, lctx)
        if self.loss is not None:
            out[-1] = dloss
