"""A 1-D particle-in-cell toy (scatter to a grid, grid update, gather back) written three ways:

* ``packed_step``: ONE kernel whose state packs the grid (particles then grid), so its last loop
  reads ``x_next`` after earlier loops wrote it (the issue-13 case);
* ``p2g``, ``grid_op``, ``g2p``: three kernels sharing scratch grid arrays (issue 15);
* ``tape_reference``: plain Taichi fields, one kernel per step, ``ti.ad.Tape`` (the DiffTaichi way),
  an independent reference for the gradients.

State: positions xp (N) then velocities vp (N); params: [gravity scale, drag].
"""
import numpy as np
import taichi as ti

N, G = 8, 16
DT, MASS, EPS = 0.05, 1.0, 1e-2
arr = ti.types.ndarray(ndim=1)


@ti.func
def _stencil(xp):
    xg = xp * G
    base = ti.min(ti.max(ti.cast(ti.floor(xg), ti.i32), 0), G - 2)
    fx = xg - base
    return base, 1.0 - fx, fx


@ti.kernel
def packed_step(x: arr, p: arr, c: arr, xn: arr):
    """x = [xp, vp, gm, gmv, gv] (N + N + 3G); the grid parts of x are not read."""
    for i in range(N):  # particle to grid (scatter into x_next's grid part)
        base, w0, w1 = _stencil(x[i])
        xn[2 * N + base] += w0 * MASS
        xn[2 * N + base + 1] += w1 * MASS
        xn[2 * N + G + base] += w0 * MASS * x[N + i]
        xn[2 * N + G + base + 1] += w1 * MASS * x[N + i]
    for j in range(G):  # grid update: reads what the loop above wrote
        xn[2 * N + 2 * G + j] = xn[2 * N + G + j] / (xn[2 * N + j] + EPS) * (1.0 - p[1] * DT) - DT * p[0]
    for i in range(N):  # grid to particle (gather from x_next)
        base, w0, w1 = _stencil(x[i])
        v = w0 * xn[2 * N + 2 * G + base] + w1 * xn[2 * N + 2 * G + base + 1] + c[0]
        xn[N + i] = v
        xn[i] = x[i] + DT * v


@ti.kernel
def p2g(x: arr, p: arr, c: arr, xn: arr, gm: arr, gmv: arr, gv: arr):
    for i in range(N):
        base, w0, w1 = _stencil(x[i])
        gm[base] += w0 * MASS
        gm[base + 1] += w1 * MASS
        gmv[base] += w0 * MASS * x[N + i]
        gmv[base + 1] += w1 * MASS * x[N + i]


@ti.kernel
def grid_op(x: arr, p: arr, c: arr, xn: arr, gm: arr, gmv: arr, gv: arr):
    for j in range(G):
        gv[j] = gmv[j] / (gm[j] + EPS) * (1.0 - p[1] * DT) - DT * p[0]


@ti.kernel
def g2p(x: arr, p: arr, c: arr, xn: arr, gm: arr, gmv: arr, gv: arr):
    for i in range(N):
        base, w0, w1 = _stencil(x[i])
        v = w0 * gv[base] + w1 * gv[base + 1] + c[0]
        xn[N + i] = v
        xn[i] = x[i] + DT * v


def start_state(seed=0):
    rng = np.random.default_rng(seed)
    xp = 0.3 + 0.4 * rng.random(N)
    vp = 0.2 * rng.standard_normal(N)
    return xp, vp


REF_STEPS = 64
REF_PARAMS = np.array([9.8, 0.5])
_REF = {}


def reference_case():
    """One shared case (start state, params, controls, loss weights) and its ti.ad.Tape result,
    computed once per test session: ``(xp0, vp0, params, controls (T, 1), wx, wv, tape result)``."""
    if not _REF:
        xp, vp = start_state()
        rng = np.random.default_rng(1)
        wx, wv = rng.standard_normal(N), rng.standard_normal(N)
        ctrl = 0.1 * np.sin(np.arange(REF_STEPS))[:, None]
        _REF["case"] = (xp, vp, REF_PARAMS, ctrl, wx, wv, tape_reference(xp, vp, REF_PARAMS, ctrl[:, 0], wx, wv))
    return _REF["case"]


def tape_reference(xp0, vp0, params, controls, wx, wv):
    """Loss sum(wx x_T + wv v_T) and its gradients (dx0, dv0, dparams, dcontrols) with fields + ti.ad.Tape."""
    T = len(controls)
    fb = ti.FieldsBuilder()
    f64 = ti.f64
    xs, vs = ti.field(f64, needs_grad=True), ti.field(f64, needs_grad=True)
    gm, gmv, gv = ti.field(f64, needs_grad=True), ti.field(f64, needs_grad=True), ti.field(f64, needs_grad=True)
    pf, cf, loss = ti.field(f64, needs_grad=True), ti.field(f64, needs_grad=True), ti.field(f64, needs_grad=True)
    fb.dense(ti.ij, (T + 1, N)).place(xs, vs, xs.grad, vs.grad)
    fb.dense(ti.ij, (T, G)).place(gm, gmv, gv, gm.grad, gmv.grad, gv.grad)
    fb.dense(ti.i, 2).place(pf, pf.grad)
    fb.dense(ti.i, T).place(cf, cf.grad)
    fb.place(loss, loss.grad)
    tree = fb.finalize()

    @ti.kernel
    def k_p2g(t: ti.i32):
        for i in range(N):
            base, w0, w1 = _stencil(xs[t, i])
            gm[t, base] += w0 * MASS
            gm[t, base + 1] += w1 * MASS
            gmv[t, base] += w0 * MASS * vs[t, i]
            gmv[t, base + 1] += w1 * MASS * vs[t, i]

    @ti.kernel
    def k_grid(t: ti.i32):
        for j in range(G):
            gv[t, j] = gmv[t, j] / (gm[t, j] + EPS) * (1.0 - pf[1] * DT) - DT * pf[0]

    @ti.kernel
    def k_g2p(t: ti.i32):
        for i in range(N):
            base, w0, w1 = _stencil(xs[t, i])
            v = w0 * gv[t, base] + w1 * gv[t, base + 1] + cf[t]
            vs[t + 1, i] = v
            xs[t + 1, i] = xs[t, i] + DT * v

    @ti.kernel
    def k_loss(wxa: ti.types.ndarray(dtype=f64, ndim=1), wva: ti.types.ndarray(dtype=f64, ndim=1)):
        for i in range(N):
            loss[None] += wxa[i] * xs[T, i] + wva[i] * vs[T, i]

    for i in range(N):
        xs[0, i], vs[0, i] = float(xp0[i]), float(vp0[i])
    pf[0], pf[1] = float(params[0]), float(params[1])
    for t in range(T):
        cf[t] = float(controls[t])
    with ti.ad.Tape(loss=loss):
        for t in range(T):
            k_p2g(t)
            k_grid(t)
            k_g2p(t)
        k_loss(np.ascontiguousarray(wx, np.float64), np.ascontiguousarray(wv, np.float64))
    out = (float(loss[None]), xs.grad.to_numpy()[0].copy(), vs.grad.to_numpy()[0].copy(),
           pf.grad.to_numpy().copy(), cf.grad.to_numpy().copy())
    tree.destroy()
    return out
