"""L-BFGS with a strong-Wolfe line search (Nocedal & Wright, Alg. 7.4 / 7.5).

The functional core is :func:`lbfgs`: ``lbfgs(loss_fn, params, ...) -> Result``. The stateful
shell :class:`LBFGS` binds parameters (a Module's, or any pytree of Tensors) and writes the
result back into them: ``LBFGS(model.parameters()).step(loss_fn)``.

Everything runs on one flat parameter vector; per iteration the vector algebra is the fused
two-loop recursion (one launch on CPU), one axpy per trial point and one fused dot kernel per
evaluation (``sciml/kernels/lbfgs.py``). Line-search bookkeeping is Python floats.

Stopping (each honoured exactly, checked after every iteration):
    gtol: ||g||_2 <= gtol (also checked at the start);
    ftol: |f_k - f_{k+1}| <= ftol * max(|f_k|, |f_{k+1}|, tiny);
    xtol: max_i |x_{k+1} - x_k|_i <= xtol;
    max_iter: at most this many iterations (accepted steps);
    max_eval: at most this many loss(+gradient) evaluations, counting the first one.
The returned point is never worse than the start: a step is accepted only if it lowers the loss.

``compat="torch"`` runs ``torch.optim.LBFGS(line_search_fn="strong_wolfe")``'s iteration instead
(what DeepXDE's PyTorch backend runs), iterate for iterate: the first step ``min(1, 1/||g||_1) lr``
(only on the very first iteration; after that ``lr``, also with no pairs stored), a pair kept when
``s.y > 1e-10`` (absolute), no restart on a non-descent direction (the run stops: reason
"descent"), a line search whose budget is the evaluations left (``max_eval - nfev + 1``: ``max_ls``
is ignored unless given, and ``max_eval`` may be passed by one, as torch does), which checks
``f(t_i) >= f(t_{i-1})`` from its third trial on, and returns ``t = 0`` (the run stops) when its
budget ends while extrapolating to a higher loss; stopping on ``max |g| <= gtol``, ``max |t d| <=
xtol`` and ``|f_k - f_{k+1}| < ftol`` (torch's ``tolerance_grad`` is gtol, its ``tolerance_change``
is both ftol and xtol). On a device it runs the host-driven loop (a host read per evaluation),
not the fixed-launch device iteration of the default.
"""
from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..kernels import lbfgs as K
from .line_search import strong_wolfe
from .result import CurvatureOptimizer, Flat, IterInfo, Result, check_nonneg, check_positive_int, budget_spent

ALL_NONFINITE = ("{where}: the loss is not finite at every trial point of the line search at iteration {it} "
                 "(loss at the current point: {f:.6g}). The parameters were left at the last finite point; "
                 "the loss likely overflows (check the data, the learning rate or the model).")
GRAD_NONFINITE = ("{where}: the gradient is not finite at iteration {it} although the loss is {f:.6g}; "
                  "check the loss for operations with infinite derivatives (sqrt(0), abs at 0 ...).")


def _host_buf(values, dtype):
    if backend.on_host():
        return values
    return backend.from_numpy(values, dtype)


class _Vec:
    """Flat-buffer helpers bound to one problem (n, dtype)."""

    def __init__(self, n, dtype):
        self.n, self.dtype = n, dtype
        self.acc = K.acc_dtype(dtype)
        self.out = backend.zeros(5, self.acc)

    def read(self):
        """The first four outputs; all five stay in ``self.last`` (the fifth, sum |b|: torch's first step)."""
        self.last = backend.to_numpy(self.out, (5,), self.acc).astype(float).tolist()
        return self.last[:4]

    def axpy(self, x, a, d):
        out = backend.empty(self.n, self.dtype)
        K.axpy(x, a, d, out, self.n, self.dtype)
        return out

    def dots(self, a, b, c):
        K.dots(a, b, c, self.out, self.n, self.dtype)
        return self.read()


def _check_options(where, history, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2):
    check_positive_int(where, "history", history)
    check_positive_int(where, "max_iter", max_iter)
    check_positive_int(where, "max_eval", max_eval, allow_none=True)
    for name, v in (("gtol", gtol), ("ftol", ftol), ("xtol", xtol)):
        check_nonneg(where, name, v)
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"{where}: lr (the first trial step) must be a finite number > 0; got {lr!r}.")
    if not 0 < c1 < c2 < 1:
        raise ValueError(f"{where}: line-search constants need 0 < c1 < c2 < 1; got c1={c1!r}, c2={c2!r}.")


def lbfgs(loss_fn, params, *, history=10, max_iter=1000, max_eval=None, gtol=1e-7, ftol=1e-12, xtol=1e-12,
          lr=1.0, c1=1e-4, c2=0.9, max_ls=None, callback=None, jit=False, compat=None):
    """Minimise ``loss_fn(params)`` by L-BFGS with a strong-Wolfe line search.

    Args:
        loss_fn: function of a pytree shaped like ``params`` returning a scalar Tensor.
        params: pytree of float Tensors (one dtype), or a Module (its ``params()``): the start.
        history: number of (s, y) pairs kept (m).
        max_iter: maximum iterations (accepted steps).
        max_eval: maximum loss evaluations, counting the first; default ``ceil(max_iter * 5 / 4)``
            like torch (never exceeded).
        gtol, ftol, xtol: tolerances (see the module docstring); 0 disables one.
        lr: first trial step of each line search (the first iteration uses ``min(1, 1/||g||_2) lr``).
        c1, c2: strong-Wolfe constants.
        max_ls: evaluations per line search (default 25; with ``compat="torch"`` the evaluations left).
        callback: ``callback(IterInfo)`` after each iteration; return True to stop.
        jit: evaluate the loss and gradient through :func:`sciml.jit` (traced once, then replayed
            without Python per op: 2-3x less wall time on small problems). ``loss_fn`` must then be
            traceable (no host reads or random draws inside; it warns and runs eagerly otherwise).
        compat: None (sciml's rules above) or ``"torch"``: ``torch.optim.LBFGS`` with
            ``line_search_fn="strong_wolfe"`` step for step (see the module docstring); with
            ``gtol=1e-8, ftol=0, xtol=0, history=100`` it is DeepXDE's (PyTorch backend) L-BFGS.
    Returns:
        :class:`~sciml.optim.result.Result`; ``result.params`` is a pytree shaped like ``params``.
    Raises:
        FloatingPointError: the loss is not finite at the start, or at every trial of a line search
            (``err.result`` then holds the last finite iterate).
    Example:
        >>> x0 = sm.tensor([-1.2, 1.0])
        >>> r = lbfgs(lambda x: (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2, x0, gtol=1e-8)
        >>> r.params    # ~ Tensor([1., 1.])
    """
    opts = _options("lbfgs", history, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls, compat)
    prob = Flat(loss_fn, params, "lbfgs", jit=jit)
    return _run(prob, opts, callback, None)[0]


def _options(where, history, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls, compat=None):
    _check_options(where, history, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2)
    if compat not in (None, "torch"):
        raise ValueError(f"{where}: compat must be None or 'torch'; got {compat!r}.")
    torch = compat == "torch"
    if max_ls is None:
        max_ls = None if torch else 25
    else:
        check_positive_int(where, "max_ls", max_ls)
    if max_eval is None:   # torch: int(max_iter * 1.25)
        max_eval = max_iter * 5 // 4 if torch else -(-max_iter * 5 // 4)
    return dict(m=history, max_iter=max_iter, max_eval=int(max_eval), gtol=float(gtol), ftol=float(ftol),
                xtol=float(xtol), lr=float(lr), c1=float(c1), c2=float(c2), max_ls=max_ls, where=where,
                torch=torch)


class _History:
    """The (s, y) pairs: (m, n) buffers, 1/(s.y) per slot, slots in age order, the scale gamma."""

    def __init__(self, m, n, dt):
        self.m, self.n, self.dt = m, n, dt
        self.S = backend.zeros(m * n, dt)
        self.Y = backend.zeros(m * n, dt)
        self.rho = np.zeros(m, np.float64)
        self.acc = K.acc_dtype(dt)
        self.alpha = backend.zeros(2 * m, self.acc)
        self.slots: list[int] = []
        self.gamma = 1.0
        self.min_sy = None   # compat="torch": keep a pair when s.y > min_sy (else s.y > 1e-10 y.y)
        self.started = False  # compat="torch": an iteration has run (torch's first step only before)
        if not backend.on_host():   # the device iteration (_run_device) keeps its state there
            self.st = backend.zeros(m + 1, self.acc)      # rho per slot, gamma
            self.ist = backend.zeros(m + 2, "int32")      # slots oldest first, number used, last slot
            self.alpha2 = backend.zeros(2 * m, self.acc)

    def upload(self):
        """Device: the state of the host fields (a loaded state dict) into the device buffers."""
        if backend.on_host():
            return
        st = np.zeros(self.m + 1)
        st[:self.m], st[self.m] = self.rho, self.gamma
        ist = np.zeros(self.m + 2, np.int32)
        ist[:len(self.slots)], ist[self.m] = self.slots, len(self.slots)
        self.st, self.ist = backend.from_numpy(st, self.acc), backend.from_numpy(ist, "int32")

    def download(self):
        """Device: the host fields from the device buffers (for a state dict)."""
        if backend.on_host():
            return
        st = backend.to_numpy(self.st, (self.m + 1,), self.acc).astype(np.float64)
        ist = backend.to_numpy(self.ist, (self.m + 2,), "int32")
        self.rho[:] = st[:self.m]
        self.gamma = float(st[self.m])
        self.slots = [int(v) for v in ist[:int(ist[self.m])]]

    def compatible(self, n, dt, o):
        return self.n == n and self.dt == dt and self.m == o["m"]

    def ready(self):
        return bool(self.slots)

    def reset(self):
        self.slots.clear()
        if not backend.on_host():
            K.lbfgs_reset(self.ist, self.m)

    def first_step(self, gnorm, lr, f, f_prev, gtd):
        return lr if self.slots else min(1.0, 1.0 / gnorm) * lr

    def direction(self, prob, x, g, d, V=None):
        """Fill d = -H g; with ``V``, return (g.d, max |d|) computed in the same launch."""
        m = self.m
        order = np.array(self.slots + [0] * (m - len(self.slots)), np.int32)
        K.two_loop(g, self.S, self.Y, _host_buf(self.rho, self.acc), self.alpha, d, _host_buf(order, "int32"),
                   len(self.slots), self.gamma, self.n, self.dt, None if V is None else V.out)
        if V is not None:
            st = V.read()
            return st[0], st[3]

    def push(self, V, x_new, x, g_new, g):
        """Store s = x_new - x, y = g_new - g if s.y > 0 (curvature); returns max |s|."""
        if len(self.slots) == self.m:
            slot = self.slots[0]
        else:
            slot = len(self.slots)
            used = set(self.slots)
            while slot in used:
                slot = (slot + 1) % self.m
        K.push_pair(x_new, x, g_new, g, self.S, self.Y, slot, V.out, self.n, self.dt)
        sy, yy, _, s_inf = V.read()
        if (sy > self.min_sy and yy > 0) if self.min_sy is not None else (sy > 1e-10 * yy and yy > 0):
            if len(self.slots) == self.m:
                self.slots.pop(0)
            self.slots.append(slot)
            self.rho[slot] = 1.0 / sy
            self.gamma = sy / yy
        return s_inf


def _run(prob, o, callback, hist, make=None):
    """The line-search loop on a :class:`Flat` problem, shared by L-BFGS, BFGS, Newton and
    Newton-CG: ``hist`` provides the search direction (``ready``, ``reset``, ``first_step``,
    ``direction``, ``push``, ``compatible``) and carries over between calls of a stateful shell;
    ``make(n, dtype)`` builds a new one (default: an L-BFGS history). Returns (Result, hist)."""
    tm = o.get("torch", False)
    if make is None and not backend.on_host() and not tm:   # (compat="torch": this loop, on any arch)
        return _run_device(prob, o, callback, hist)
    where, n, dt = o["where"], prob.n, prob.dtype
    if hist is None or not hist.compatible(n, dt, o):
        hist = make(n, dt) if make is not None else _History(o["m"], n, dt)
    V = hist.vec() if hasattr(hist, "vec") else _Vec(n, dt)  # Newton-CG on the host: numpy (optim/newton.py)
    x = prob.x0
    f, g = prob.value_and_grad(x)
    prob.check_start(f)
    gg, gmax = (lambda r: (r[2], r[3]))(V.dots(g, g, g))
    gnorm, gl1 = math.sqrt(gg), (V.last[4] if tm else None)
    if not math.isfinite(gnorm):
        raise FloatingPointError(GRAD_NONFINITE.format(where=where, it=0, f=f))
    it, reason, f_prev = 0, None, None
    gtol, ftol, xtol = o["gtol"], o["ftol"], o["xtol"]
    if tm:
        hist.min_sy = 1e-10
    if (gmax if tm else gnorm) <= gtol:
        reason = "gtol"
    while reason is None:
        reason = budget_spent(it, prob, o)
        if tm and reason == "max_eval" and it == 0:   # torch: a call runs at least one iteration
            reason = None
        if reason is not None:
            break
        d = backend.empty(n, dt)
        if tm:   # torch: -g with min(1, 1/|g|_1) lr on the very first iteration, else the two-loop, lr
            if hist.started:
                gtd, d_inf = hist.direction(prob, x, g, d, V)
                t = o["lr"]
            else:
                K.axpy(g, -2.0, g, d, n, dt)
                gtd, d_inf, t = -gg, gmax, min(1.0, 1.0 / gl1) * o["lr"]
            hist.started = True
            if gtd > -ftol:
                reason = "descent"
                break
        elif hist.ready():
            if isinstance(hist, _History):
                gtd, d_inf = hist.direction(prob, x, g, d, V)
            else:
                hist.direction(prob, x, g, d)
                gtd, _, _, d_inf = V.dots(g, d, d)
            t = hist.first_step(gnorm, o["lr"], f, f_prev, gtd)
        if not tm and (not hist.ready() or not gtd < 0):   # first step, or not a descent direction: -g
            hist.reset()
            K.axpy(g, -2.0, g, d, n, dt)
            gtd, _, _, d_inf = V.dots(g, d, d)
            t = min(1.0, 1.0 / gnorm) * o["lr"]
        x_cur, g_cur = x, g
        finite = [0]

        def phi(tt, x_cur=x_cur, d=d):
            xt = V.axpy(x_cur, tt, d)
            ft, gt = prob.value_and_grad(xt)
            if not math.isfinite(ft):
                return math.inf, math.inf, None
            finite[0] += 1
            gtd_t, _, ggt, gmax_t = V.dots(d, gt, d)
            return ft, gtd_t, (xt, gt, ggt, gmax_t, V.last[4] if tm else None)

        if tm:   # torch passes max_ls = max_eval - evals and evaluates up to max_ls + 1 times
            budget = max(1, o["max_eval"] - prob.nfev + 1)
            budget = budget if o["max_ls"] is None else min(o["max_ls"], budget)
        else:
            budget = min(o["max_ls"], o["max_eval"] - prob.nfev)
        t, f_new, _, st, _, _ = strong_wolfe(phi, f, gtd, t, d_inf, c1=o["c1"], c2=o["c2"], max_evals=budget,
                                             torch=tm)
        if st is None or not (f_new <= f if tm else f_new < f):
            if not finite[0]:
                err = FloatingPointError(ALL_NONFINITE.format(where=where, it=it + 1, f=f))
                err.result = _result(prob, x, f, gnorm, it, "line_search", o)
                raise err
            reason = "max_eval" if prob.nfev >= o["max_eval"] else "line_search"
            break
        x_new, g_new, ggt, gmax, gl1 = st
        if not math.isfinite(ggt):
            err = FloatingPointError(GRAD_NONFINITE.format(where=where, it=it + 1, f=f_new))
            err.result = _result(prob, x, f, gnorm, it, "line_search", o)
            raise err
        if hasattr(hist, "step_size"):              # dense self-scaled updates need t (s = t d)
            hist.step_size = t
        s_inf = hist.push(V, x_new, x_cur, g_new, g_cur)
        f_old = f_prev = f
        x, g, f = x_new, g_new, f_new
        gnorm = math.sqrt(ggt)
        it += 1
        if callback is not None and callback(IterInfo(it, f, gnorm, t, prob.nfev, lambda x=x: prob.tree(x))):
            reason = "callback"
            break
        if tm:   # torch's order: max_iter, max_eval (at the loop's top), then these
            if prob.nfev >= o["max_eval"] and it < o["max_iter"]:
                reason = "max_eval"
            elif gmax <= gtol:
                reason = "gtol"
            elif t * d_inf <= xtol:
                reason = "xtol"
            elif abs(f_old - f) < ftol:
                reason = "ftol"
        elif gnorm <= gtol:
            reason = "gtol"
        elif abs(f_old - f) <= ftol * max(abs(f_old), abs(f), 1e-300):
            reason = "ftol"
        elif s_inf <= xtol:
            reason = "xtol"
    return _result(prob, x, f, gnorm, it, reason, o), hist


def _eval_device(prob, buf):
    """(loss buffer, gradient buffer) at ``buf`` with no host read (the loss is read with the
    trial point's dot products, ``K.eval_dots``)."""
    if prob._jvg is not None:
        v, g = prob._jvg(prob.tensor(buf))
        g = g._buf
    elif len(prob.shapes) == 1:
        v, g = prob._value_and_grad(buf)
    else:   # the leaves cut out of, and the gradient laid into, flat buffers in one launch each
        from ..autodiff import value_and_grad
        from ..autodiff.tensor import Tensor
        bufs = [backend.empty(k, prob.dtype) for k in prob.sizes]
        K.split(buf, bufs, prob.sizes, prob.dtype)
        leaves = [Tensor._make(b, s, prob.dtype) for b, s in zip(bufs, prob.shapes)]
        v, gs = value_and_grad(prob._f, argnums=tuple(range(len(leaves))))(*leaves)
        g = backend.empty(prob.n, prob.dtype)
        K.join([t._buf for t in gs], g, prob.sizes, prob.dtype)
    prob.nfev += 1
    prob.ngev += 1
    return v._buf, g


def _read(R, acc):
    return backend.to_numpy(R, (K.RN,), acc).astype(float).tolist()


def _run_device(prob, o, callback, hist):
    """L-BFGS on a device (Vulkan, CUDA): the same iteration as ``_run``, with the history state
    in device buffers and fixed launch counts (the two-loop recursion, the pair update, the first
    trial point and each trial point's dot products are one launch each, ``kernels/lbfgs.py``), no
    uploads, and ONE host read per iteration with one evaluation: the first trial point is chosen on
    the device (``K.lbfgs_trial``: the direction if it descends, else -g after a reset, with the
    step the host would take in each case), so the previous pair update's max |s|, the direction's
    g.d, max |d| and pairs used, and the trial's loss and dot products come back in one read of R.
    The xtol test of an iteration therefore waits for the next read: when it stops the run, the
    next iteration's speculative trial is dropped (not counted in nfev / ngev); when a budget ends
    the run first, R is read once more for it."""
    where, n, dt, m = o["where"], prob.n, prob.dtype, o["m"]
    if hist is None or not hist.compatible(n, dt, o):
        hist = _History(m, n, dt)
    acc = hist.acc
    R, Rt = backend.zeros(K.RN, acc), backend.zeros(K.RN, acc)
    x = prob.x0
    fb, g = _eval_device(prob, x)
    d = backend.empty(n, dt)
    K.lbfgs_direction(g, hist.S, hist.Y, hist.st, hist.ist, hist.alpha2, d, R, m, n, dt)
    K.eval_dots(g, g, fb, R, n, dt)
    r = _read(R, acc)
    f = r[K.R_F] if math.isfinite(r[K.R_F]) else math.inf
    prob.check_start(f)
    gg, gmax = r[K.R_BB], r[K.R_BMAX]
    gnorm = math.sqrt(gg)
    if not math.isfinite(gnorm):
        raise FloatingPointError(GRAD_NONFINITE.format(where=where, it=0, f=f))
    it, reason = 0, None
    gtol, ftol, xtol = o["gtol"], o["ftol"], o["xtol"]
    pushed = False   # R holds a pair update whose max |s| (the xtol test) has not been read yet
    if gnorm <= gtol:
        reason = "gtol"
    while reason is None:
        reason = budget_spent(it, prob, o)
        if reason is not None:
            if pushed and _read(R, acc)[K.R_SINF] <= xtol:
                reason = "xtol"
            break
        t_desc, t_fb = o["lr"], min(1.0, 1.0 / gnorm) * o["lr"]   # hist.first_step with / without pairs
        x_cur, g_cur = x, g
        xt = backend.empty(n, dt)
        K.lbfgs_trial(x_cur, g_cur, d, xt, hist.ist, R, t_desc, t_fb, m, n, dt)
        fbt, gt = _eval_device(prob, xt)
        K.eval_dots(d, gt, fbt, R, n, dt)
        r = _read(R, acc)
        if pushed and r[K.R_SINF] <= xtol:          # the previous iteration's test: the trial is dropped
            prob.nfev -= 1
            prob.ngev -= 1
            reason = "xtol"
            break
        used, gtd, d_inf = r[K.R_USED], r[K.R_GTD], r[K.R_DINF]
        if used > 0 and gtd < 0:
            t = t_desc
        else:                                          # first step, or not a descent direction: -g
            gtd, d_inf, t = -gg, gmax, t_fb            # (the device has reset the pairs and set d = -g)
        finite = [0]

        def outcome(rr, xt):
            ft = rr[K.R_F]
            if not math.isfinite(ft):
                return math.inf, math.inf, None
            finite[0] += 1
            return ft, rr[K.R_AB], (xt, gt_[0], rr[K.R_BB], rr[K.R_BMAX])

        gt_ = [gt]
        first = [(t, outcome(r, xt))]

        def phi(tt, x_cur=x_cur, d=d):
            if first[0] is not None and tt == first[0][0]:   # the trial evaluated above
                res, first[0] = first[0][1], None
                return res
            first[0] = None
            xt = backend.empty(n, dt)
            K.axpy(x_cur, tt, d, xt, n, dt)
            fbt, gt_[0] = _eval_device(prob, xt)
            K.eval_dots(d, gt_[0], fbt, Rt, n, dt)
            return outcome(_read(Rt, acc), xt)

        budget = min(o["max_ls"], o["max_eval"] - prob.nfev + 1)   # + 1: the trial above is counted
        t, f_new, _, st, _, _ = strong_wolfe(phi, f, gtd, t, d_inf, c1=o["c1"], c2=o["c2"], max_evals=budget)
        pushed = False
        if st is None or not f_new < f:
            if not finite[0]:
                err = FloatingPointError(ALL_NONFINITE.format(where=where, it=it + 1, f=f))
                err.result = _result(prob, x, f, gnorm, it, "line_search", o)
                raise err
            reason = "max_eval" if prob.nfev >= o["max_eval"] else "line_search"
            break
        x_new, g_new, ggt, gmax = st
        if not math.isfinite(ggt):
            err = FloatingPointError(GRAD_NONFINITE.format(where=where, it=it + 1, f=f_new))
            err.result = _result(prob, x, f, gnorm, it, "line_search", o)
            raise err
        K.lbfgs_push(x_new, x_cur, g_new, g_cur, hist.S, hist.Y, hist.st, hist.ist, R, m, n, dt)
        d = backend.empty(n, dt)                       # the next direction, read with the next trial
        K.lbfgs_direction(g_new, hist.S, hist.Y, hist.st, hist.ist, hist.alpha2, d, R, m, n, dt)
        pushed = True
        f_old = f
        x, g, f, gg = x_new, g_new, f_new, ggt
        gnorm = math.sqrt(ggt)
        it += 1
        if callback is not None and callback(IterInfo(it, f, gnorm, t, prob.nfev, lambda x=x: prob.tree(x))):
            reason = "callback"
            break
        if gnorm <= gtol:
            reason = "gtol"
        elif abs(f_old - f) <= ftol * max(abs(f_old), abs(f), 1e-300):
            reason = "ftol"
    return _result(prob, x, f, gnorm, it, reason, o), hist


def _result(prob, x, f, gnorm, it, reason, o):
    msgs = {"gtol": f"||grad|| = {gnorm:.3e} <= gtol = {o['gtol']:g}",
            "ftol": f"relative loss change <= ftol = {o['ftol']:g}",
            "xtol": f"max |step| <= xtol = {o['xtol']:g}",
            "max_iter": f"reached max_iter = {o['max_iter']}",
            "max_eval": f"reached max_eval = {o['max_eval']} evaluations",
            "callback": "the callback asked to stop",
            "descent": "the search direction is not a descent direction (compat='torch' stops there)",
            "line_search": "the line search found no point with a lower loss (at the limit of precision, "
                           "or the evaluation budget ran out)"}
    return Result(params=prob.tree(x), loss=f, grad_norm=gnorm, iterations=it, nfev=prob.nfev,
                  ngev=prob.ngev, nhvp=prob.nhvp, reason=reason,
                  message=f"{o['where']}: stopped after {it} iterations and {prob.nfev} evaluations: "
                          f"{msgs[reason]}.")


class LBFGS(CurvatureOptimizer):
    """L-BFGS with a strong-Wolfe line search, as a stateful optimizer.

    ``opt.step(loss_fn)`` runs up to ``max_iter`` iterations (default 20, like torch) from the
    bound parameters' current values, writes the result into them and returns the
    :class:`Result`; the (s, y) history carries over to the next ``step``. ``loss_fn`` takes a
    pytree shaped like the bound params (``model.params()`` -> a dict: use ``model.apply``).

    Args:
        params: ``model.parameters()``, ``model.params()``, a Module, or None (bind later).
        history, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls, compat: as in
            :func:`lbfgs` (``max_iter`` and ``max_eval`` count per ``step``, as torch's do).
        callback: ``callback(IterInfo)`` per iteration; return True to stop.
        jit: True: loss and gradient traced by :func:`sciml.jit` and replayed; False: eager, always;
            None (default): eager, except inside :func:`sciml.pinn.solve`, which replays it when the
            stage's loss replays (the same bits).
    Example:
        >>> net = sm.models.MLP([1, 16, 1], seed=0)
        >>> opt = LBFGS(net.params(), max_iter=200)
        >>> res = opt.step(lambda p: ((net.apply(p, x) - y) ** 2).mean())
    """

    def __init__(self, params=None, *, history=10, max_iter=20, max_eval=None, gtol=1e-7, ftol=1e-12,
                 xtol=1e-12, lr=1.0, c1=1e-4, c2=0.9, max_ls=None, callback=None, jit=None, compat=None):
        self._opts = _options("LBFGS", history, max_iter, max_eval, gtol, ftol, xtol, lr, c1, c2, max_ls, compat)
        self._callback = callback
        # jit=None: eager here; ``sciml.pinn.solve`` may replay it when its first-order step replays
        self._jit_auto, self._jit, self._jit_cache = jit is None, bool(jit), {}
        self._hist = None
        super().__init__(params)

    def _init_state(self):
        super()._init_state()
        self._hist = None

    def _minimize(self, loss_fn, values):
        prob = Flat(loss_fn, values, "LBFGS.step", jit=self._jit, jit_cache=self._jit_cache)
        res, self._hist = _run(prob, self._opts, self._callback, self._hist)
        return res

    def _state_arrays(self):
        """The (s, y) history, so a resumed run continues exactly (empty before the first step)."""
        h = self._hist
        if h is None:
            return {}
        h.download()
        size = h.m * h.n
        return {"lbfgs.S": backend.to_numpy(h.S, (size,), h.dt).copy(),
                "lbfgs.Y": backend.to_numpy(h.Y, (size,), h.dt).copy(),
                "lbfgs.rho": h.rho.copy(), "lbfgs.slots": np.array(h.slots, np.int64),
                "lbfgs.gamma": np.array([h.gamma], np.float64), "lbfgs.shape": np.array([h.m, h.n], np.int64)}

    def _load_state_arrays(self, arrays):
        keys = ("lbfgs.S", "lbfgs.Y", "lbfgs.rho", "lbfgs.slots", "lbfgs.gamma", "lbfgs.shape")
        present = [k for k in keys if k in arrays]
        if not present:
            self._hist = None
            return
        if len(present) != len(keys):
            raise KeyError(f"LBFGS.load_state_dict: missing {sorted(set(keys) - set(present))}; the state dict "
                           "comes from a different optimizer.")
        m, n = (int(v) for v in np.asarray(arrays["lbfgs.shape"]))
        total = sum(p.size for p in self._leaves if p.requires_grad)  # the history is over the trainable ones
        if m != self._opts["m"] or n != total:
            raise ValueError(f"LBFGS.load_state_dict: the history is for history={m} over {n} parameters; this "
                             f"optimizer has history={self._opts['m']} over {total} parameters.")
        S = np.asarray(arrays["lbfgs.S"])
        dt = str(S.dtype)
        h = _History(m, n, dt)
        h.S = backend.from_numpy(S.ravel(), dt)
        h.Y = backend.from_numpy(np.asarray(arrays["lbfgs.Y"], S.dtype).ravel(), dt)
        h.rho[:] = np.asarray(arrays["lbfgs.rho"], np.float64)
        h.slots = [int(v) for v in np.asarray(arrays["lbfgs.slots"])]
        h.gamma = float(np.asarray(arrays["lbfgs.gamma"])[0])
        h.started = bool(h.slots)
        h.upload()
        self._hist = h
