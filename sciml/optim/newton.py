"""Newton's method: dense and damped (small problems), and truncated Newton-CG on HVPs.

``newton``: the exact Hessian (``sciml.autodiff.curvature.hessian_dense``: forward over reverse
with batched tangents, all rows in one pass for n <= 512), damped until positive definite: solve
``(H + mu I) p = -g`` with ``mu = 0`` when H is positive definite, else ``mu`` grown from
``1e-8 * max|H|`` by factors of 10 until a Cholesky factorisation succeeds. On CPU the small
(n, n) solve uses numpy.linalg (LAPACK); the Hessian itself is computed by sciml kernels.
A quadratic with a positive definite Hessian is solved in one iteration.

``newton_cg``: truncated conjugate gradient on Hessian-vector products (``globalization=
"trust_region"``: Steihaug-CG in a trust region instead of the line search) (the gradient graph at x is
recorded once per Newton step; each product is one backward pass through it),
stopped at the forcing tolerance ``||r||_1 <= min(0.5, sqrt(||g||_1)) ||g||_1`` (as SciPy; or
``||r||_2 <= cg_tol`` if given)
or at negative curvature (Nocedal & Wright, Alg. 7.1); then a strong-Wolfe line search from t = 1.
On an n-dimensional quadratic with a tight ``cg_tol`` CG takes at most n HVPs.

Both share the loop, tolerances and guarantees of :mod:`sciml.optim.lbfgs`.
"""
from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..kernels import lbfgs as K
from .lbfgs import _options, _run
from .result import CurvatureOptimizer, Flat, IterInfo, Result, check_positive_int, budget_spent


# CG on the host (numpy, float64 accumulation) for problems up to this size on CPU: at small n each
# fused kernel launch (~8 us) and host read costs far more than the arithmetic (~1 us for a 100-dot)
HOST_CG_MAX = 1 << 16


def _host_cg(n):
    return backend.on_host() and n <= HOST_CG_MAX


def _seq_sum(v):
    """Left-to-right float64 sum (the order of a serialized kernel's ``+=``; numpy's ``sum`` is pairwise)."""
    return float(np.cumsum(v)[-1]) if v.size else 0.0


class _NewtonCG:
    def __init__(self, n, dt, cg_max, cg_tol, hessian="products", jit_cache=None):
        self.n, self.dt, self.cg_max, self.cg_tol = n, dt, cg_max, cg_tol
        self.hessian = hessian
        self.jit_cache = jit_cache
        self.out = backend.zeros(5, K.acc_dtype(dt))
        self.cg_iters = 0

    def compatible(self, n, dt, o):
        return self.n == n and self.dt == dt

    def ready(self):
        return True

    def reset(self):
        pass

    def first_step(self, gnorm, lr, f, f_prev, gtd):
        # as scipy's line_search_wolfe1: predict the step from the last decrease (at most 1)
        if f_prev is not None and gtd < 0:
            t = 1.01 * 2.0 * (f - f_prev) / gtd
            if t > 0:
                return min(lr, t)
        return lr

    def _dots(self, a, b):
        K.dots(a, b, b, self.out, self.n, self.dt)
        return backend.to_numpy(self.out, (5,), K.acc_dtype(self.dt)).astype(float).tolist()

    def direction(self, prob, x, g, d):
        if _host_cg(self.n):
            return self._direction_host(prob, x, g, d)
        n, dt = self.n, self.dt
        acc = K.acc_dtype(dt)
        st = self._dots(g, g)
        gg, g1 = st[2], st[4]
        # forcing term on the 1-norm, as scipy's Newton-CG: ||r||_1 <= min(0.5, sqrt(||g||_1)) ||g||_1
        eta = self.cg_tol if self.cg_tol is not None else min(0.5, math.sqrt(g1)) * g1
        p = backend.zeros(n, dt)
        r = backend.empty(n, dt)
        K.axpy(g, -2.0, g, r, n, dt)                       # r = -g - H p, p = 0
        q = backend.empty(n, dt)
        K.axpy(r, 0.0, r, q, n, dt)                        # search direction q = r
        rr = gg
        hvp = _hvp_operator(prob, x, self.hessian, self.jit_cache)
        for j in range(self.cg_max):
            Hq = hvp(q)
            self.cg_iters += 1
            qHq, _, qq, _, _ = self._dots(q, Hq)
            if 0 <= qHq <= 3 * np.finfo(np.float64).eps:  # zero curvature: keep p
                if j == 0:
                    K.axpy(q, 0.0, q, p, n, dt)
                break
            if qHq < 0:                                    # negative curvature
                if j == 0:                                 # steepest descent, scaled by |g|^2/|g.Hg|
                    K.axpy(q, rr / -qHq - 1.0, q, p, n, dt)
                break
            alpha = rr / qHq
            K.cg_step(p, r, q, Hq, alpha, self.out, n, dt)
            rr_new, r1 = backend.to_numpy(self.out, (2,), acc).astype(float).tolist()
            if (math.sqrt(rr_new) if self.cg_tol is not None else r1) <= eta:
                break
            K.axpy(r, rr_new / rr, q, q, n, dt)            # q = r + beta q
            rr = rr_new
        K.axpy(p, 0.0, p, d, n, dt)

    def _direction_host(self, prob, x, g, d):
        """The same truncated CG as :meth:`direction` with the vector algebra in numpy (float64), for
        small problems on CPU: per CG iteration one product and a few microseconds of numpy instead of
        four kernel launches and two host reads. Sums accumulate left to right (``cumsum``), as the
        serialized CPU kernels do, so with Hessian-vector products the iterates are the kernel path's
        bit for bit (the dense products are a numpy matvec: last-bit differences)."""
        n = self.n
        gn = np.asarray(g[:n], dtype=np.float64)
        g1 = _seq_sum(np.abs(gn))
        eta = self.cg_tol if self.cg_tol is not None else min(0.5, math.sqrt(g1)) * g1
        p = np.zeros(n)
        r = -gn
        q = r.copy()
        rr = _seq_sum(gn * gn)
        hvp = _hvp_operator(prob, x, self.hessian, self.jit_cache, host=True)
        qbuf = np.empty(n, dtype=np.dtype(self.dt))
        eps3 = 3 * np.finfo(np.float64).eps
        for j in range(self.cg_max):
            qbuf[:] = q
            Hq = np.asarray(hvp(qbuf)[:n], dtype=np.float64)
            self.cg_iters += 1
            qHq = _seq_sum(q * Hq)
            if 0 <= qHq <= eps3:                           # zero curvature: keep p
                if j == 0:
                    p[:] = q
                break
            if qHq < 0:                                    # negative curvature
                if j == 0:                                 # steepest descent, scaled by |g|^2/|g.Hg|
                    p = q + (rr / -qHq - 1.0) * q
                break
            alpha = rr / qHq
            p += alpha * q
            r -= alpha * Hq
            rr_new = _seq_sum(r * r)
            if (math.sqrt(rr_new) if self.cg_tol is not None else _seq_sum(np.abs(r))) <= eta:
                break
            q *= rr_new / rr
            q += r                                         # q = r + beta q
            rr = rr_new
        d[:n] = p

    def push(self, V, x_new, x, g_new, g):
        return _max_abs_diff(V, x_new, x)


def _max_abs_diff(V, a, b):
    t = V.axpy(a, -1.0, b)
    return V.dots(t, t, t)[3]


def _hvp_operator(prob, x, hessian, jit_cache=None, host=False):
    """``v -> H v`` at ``x`` on flat buffers: through the recorded gradient graph (``products``), a dense H
    formed once (``dense``), or, with ``jit_cache`` (a dict; ``jit=True``), by replays of a traced
    product / dense Hessian function (:func:`sciml.jit`). ``host``: the caller passes and reads numpy
    buffers (CPU), so a dense H may stay a numpy matrix."""
    if jit_cache is not None:
        return _jit_operator(prob, x, hessian, jit_cache, host)
    if hessian == "dense" and host:  # H stays a numpy matrix: each product is a numpy matvec
        from ..autodiff.curvature import hessian_dense
        H = hessian_dense(lambda p: prob._f(*p), tuple(prob.leaves(x)))
        prob.ngev += 1
        return _counted_matvec(prob, H)
    return prob.dense_hessian_operator(x) if hessian == "dense" else prob.hvp_operator(x)


def _counted_matvec(prob, H):
    """``v -> H v`` on host buffers for a dense (n, n) Tensor H, as a numpy float64 matvec (BLAS gemv,
    ~5 us at n = 100; the GEMM call that ``sm.matmul`` makes for a vector costs ~60 us here). Its rounding
    differs from ``sm.matmul``'s in the last bits: W6 takes 207 iterations instead of 206."""
    n, dt = prob.n, np.dtype(prob.dtype)
    h = np.asarray(H.numpy(), dtype=np.float64)

    def op(vbuf):
        prob.nhvp += 1
        return (h @ np.asarray(vbuf[:n], dtype=np.float64)).astype(dt, copy=False)
    return op


def _flat_loss(prob):
    """The loss as a function of ONE flat Tensor (leaves sliced out by ops, so tangents and traces pass)."""
    from ..autodiff.ops import getitem, reshape
    shapes, offs = prob.shapes, prob.offsets

    def f(xf):
        if len(shapes) == 1:
            return prob._f(reshape(xf, shapes[0]) if shapes[0] != (prob.n,) else xf)
        return prob._f(*[reshape(getitem(xf, slice(a, b)), s) for a, b, s in zip(offs, offs[1:], shapes)])
    return f


def _jit_functions(prob, jit_cache):
    """Traced (``sciml.jit``) flat Hessian-vector product and dense Hessian of ``prob``'s loss, kept in
    ``jit_cache`` across Newton iterations (and across ``step`` calls of a shell) while the loss
    function, shapes and dtype stay the same."""
    key = (prob.loss_fn, tuple(prob.shapes), prob.dtype, repr(prob.treedef))
    if jit_cache.get("hkey") != key:
        from ..autodiff.jit import jit
        from ..autodiff import transforms as T
        from ..autodiff.curvature import hvp
        f = _flat_loss(prob)
        jit_cache.update(hkey=key, hvp=jit(lambda xf, vf: hvp(f, xf, vf)),
                         hess=jit(lambda xf: T.hessian(f)(xf)))
    return jit_cache["hvp"], jit_cache["hess"]


def _jit_operator(prob, x, hessian, jit_cache, host):
    hv, hess = _jit_functions(prob, jit_cache)
    xt = prob.tensor(x)
    if hessian == "dense":
        H = hess(xt)
        prob.ngev += 1
        if host:
            return _counted_matvec(prob, H)
        from ..autodiff.ops import matmul

        def op(vbuf):
            prob.nhvp += 1
            return matmul(H, prob.tensor(vbuf))._buf
        return op
    prob.ngev += 1

    def op(vbuf):
        prob.nhvp += 1
        return hv(xt, prob.tensor(vbuf))._buf
    return op


def _hessian_mode(where, hessian, n):
    if hessian not in ("products", "dense"):
        raise ValueError(f"{where}: hessian={hessian!r}; expected 'products' (Hessian-vector products through "
                         "the gradient's graph) or 'dense' (H formed once per iteration, small n).")
    if hessian == "dense":
        _check_dense(where, n)
    return hessian


class _DenseNewton(_NewtonCG):
    def __init__(self, n, dt, loss_fn):
        super().__init__(n, dt, 0, None)
        self.loss_fn = loss_fn
        self.hessians = 0

    def direction(self, prob, x, g, d):
        from ..autodiff.curvature import hessian_dense
        H = hessian_dense(self.loss_fn, prob.tree(x)).numpy().astype(np.float64)
        self.hessians += 1
        prob.nhvp += self.n
        gn = backend.to_numpy(g, (self.n,), self.dt).astype(np.float64)
        Hs = 0.5 * (H + H.T)
        mu, scale = 0.0, max(np.abs(Hs).max(), 1e-300)
        eye = np.eye(self.n)
        while True:
            try:
                L = np.linalg.cholesky(Hs + mu * eye)
                break
            except np.linalg.LinAlgError:
                mu = 1e-8 * scale if mu == 0.0 else mu * 10.0
                if not math.isfinite(mu) or mu > 1e30 * scale:
                    L = None
                    break
        if L is None:
            p = -gn
        else:
            p = -np.linalg.solve(L.T, np.linalg.solve(L, gn))
        pb = backend.from_numpy(p, self.dt)
        K.axpy(pb, 0.0, pb, d, self.n, self.dt)


def newton_cg(loss_fn, params, *, cg_max=None, cg_tol=None, max_iter=200, max_eval=None, gtol=1e-7, ftol=1e-12,
              xtol=1e-12, c1=1e-4, c2=0.9, max_ls=25, callback=None, globalization="line_search", delta0=None,
              delta_max=1e3, hessian="products", jit=False):
    """Minimise ``loss_fn(params)`` by truncated Newton-CG on Hessian-vector products.

    Args:
        cg_max: CG iterations (HVPs) per Newton step (default n, at most 200).
        cg_tol: absolute CG residual tolerance (2-norm); default the forcing term on the 1-norm.
        globalization: "line_search" (strong Wolfe) or "trust_region" (Steihaug-CG inside a trust
            region of radius delta, N&W Alg. 4.1 / 7.2; one evaluation per iteration).
        delta0, delta_max: initial (default 0.1 max(1, ||g||)) and largest trust-region radius.
        hessian: "products" (default): each CG product is a backward pass through the gradient's
            graph (recorded once per Newton iteration); "dense": H is formed once per Newton
            iteration (batched forward over reverse) and each CG product is a matrix-vector
            product. Same iterates; "dense" is faster when n is small (a few hundred) and CG
            takes many iterations, and uses n x (intermediate sizes) memory while forming H.
        jit: trace the loss-and-gradient evaluation and the Hessian product (``products``) or the
            dense Hessian (``dense``) once with :func:`sciml.jit` and replay them (tracing included in
            the first call; the loss's Python control flow is fixed at trace, as for ``jax.jit``).
            Same iterates as eager up to rounding.
        Others as in :func:`sciml.optim.lbfgs.lbfgs` (``max_eval`` counts loss+gradient
        evaluations of the line search; HVPs are reported in ``result.nhvp``).
    Example:
        >>> r = newton_cg(lambda x: ((x - 2.0) ** 4).sum() + (x ** 2).sum(), sm.tensor([0.0, 1.0]))
    """
    o = _options("newton_cg", 1, max_iter, max_eval if max_eval is not None else 10 * max_iter,
                 gtol, ftol, xtol, 1.0, c1, c2, max_ls)
    jc = {} if _check_jit("newton_cg", jit) else None
    prob = Flat(loss_fn, params, "newton_cg", jit=jc is not None, jit_cache=jc)
    cgm = _cg_max("newton_cg", cg_max, prob.n)
    hm = _hessian_mode("newton_cg", hessian, prob.n)
    if _globalization("newton_cg", globalization) == "trust_region":
        return _trust_region_run(prob, o, callback, cgm, cg_tol, delta0, delta_max, hm, jc)
    return _run(prob, o, callback, None, lambda n, dt: _NewtonCG(n, dt, cgm, cg_tol, hm, jc))[0]


def _check_jit(where, jit):
    if not isinstance(jit, (bool, np.bool_)):
        raise TypeError(f"{where}: jit must be True or False; got {jit!r}.")
    return bool(jit)


def _globalization(where, g):
    if g not in ("line_search", "trust_region"):
        raise ValueError(f"{where}: globalization={g!r}; expected 'line_search' or 'trust_region'.")
    return g


def _cg_max(where, cg_max, n):
    if cg_max is None:
        return min(n, 200)
    return check_positive_int(where, "cg_max", cg_max)


def newton(loss_fn, params, *, max_iter=100, max_eval=None, gtol=1e-7, ftol=1e-12, xtol=1e-12, c1=1e-4,
           c2=0.9, max_ls=25, callback=None):
    """Minimise ``loss_fn(params)`` by damped Newton with the dense Hessian (small problems).

    Example:
        >>> r = newton(lambda x: ((x - 2.0) ** 2).sum(), sm.tensor([0.0, 1.0]))   # one iteration
    """
    o = _options("newton", 1, max_iter, max_eval if max_eval is not None else 10 * max_iter,
                 gtol, ftol, xtol, 1.0, c1, c2, max_ls)
    prob = Flat(loss_fn, params, "newton")
    _check_dense("newton", prob.n)
    return _run(prob, o, callback, None, lambda n, dt: _DenseNewton(n, dt, loss_fn))[0]


def _check_dense(where, n):
    if n > 5000:
        raise ValueError(f"{where}: the dense Newton method forms an n x n Hessian; n = {n} parameters is too many "
                         "(limit 5000). Use NewtonCG or LBFGS.")


class NewtonCG(CurvatureOptimizer):
    """Truncated Newton-CG as a stateful optimizer; ``step(loss_fn)`` runs up to ``max_iter``
    (default 20) Newton iterations. Options as in :func:`newton_cg`."""

    def __init__(self, params=None, *, cg_max=None, cg_tol=None, max_iter=20, max_eval=None, gtol=1e-7,
                 ftol=1e-12, xtol=1e-12, c1=1e-4, c2=0.9, max_ls=25, callback=None, globalization="line_search",
                 delta0=None, delta_max=1e3, hessian="products", jit=False):
        self._jit_cache = {} if _check_jit("NewtonCG", jit) else None
        if hessian not in ("products", "dense"):
            _hessian_mode("NewtonCG", hessian, 0)
        self._hessian = hessian
        self._opts = _options("NewtonCG", 1, max_iter, max_eval if max_eval is not None else 10 * max_iter,
                              gtol, ftol, xtol, 1.0, c1, c2, max_ls)
        if cg_max is not None:
            check_positive_int("NewtonCG", "cg_max", cg_max)
        self._cg, self._callback = (cg_max, cg_tol), callback
        self._tr = (_globalization("NewtonCG", globalization), delta0, delta_max)
        super().__init__(params)

    def _minimize(self, loss_fn, values):
        jc = self._jit_cache
        prob = Flat(loss_fn, values, "NewtonCG.step", jit=jc is not None, jit_cache=jc)
        cgm = _cg_max("NewtonCG", self._cg[0], prob.n)
        hm = _hessian_mode("NewtonCG.step", self._hessian, prob.n)
        if self._tr[0] == "trust_region":
            return _trust_region_run(prob, self._opts, self._callback, cgm, self._cg[1], self._tr[1], self._tr[2],
                                     hm, jc)
        return _run(prob, self._opts, self._callback, None,
                    lambda n, dt: _NewtonCG(n, dt, cgm, self._cg[1], hm, jc))[0]


class Newton(CurvatureOptimizer):
    """Damped dense Newton as a stateful optimizer (small problems); options as in :func:`newton`."""

    def __init__(self, params=None, *, max_iter=20, max_eval=None, gtol=1e-7, ftol=1e-12, xtol=1e-12, c1=1e-4,
                 c2=0.9, max_ls=25, callback=None):
        self._opts = _options("Newton", 1, max_iter, max_eval if max_eval is not None else 10 * max_iter,
                              gtol, ftol, xtol, 1.0, c1, c2, max_ls)
        self._callback = callback
        super().__init__(params)

    def _minimize(self, loss_fn, values):
        prob = Flat(loss_fn, values, "Newton.step")
        _check_dense("Newton.step", prob.n)
        return _run(prob, self._opts, self._callback, None, lambda n, dt: _DenseNewton(n, dt, loss_fn))[0]


# --- trust-region Newton-CG (Steihaug) ------------------------------------------------------
def _steihaug(prob, hvp, x, g, gnorm, delta, cg_max, eta, n, dt):
    """Approximately minimise g.p + 0.5 p.Hp subject to ||p|| <= delta (N&W Alg. 7.2).
    Returns (p, hits_boundary)."""
    acc = K.acc_dtype(dt)
    out = backend.zeros(5, acc)

    def dots(a, b, c):
        K.dots(a, b, c, out, n, dt)
        return backend.to_numpy(out, (5,), acc).astype(float).tolist()

    def to_boundary(z, d):
        zd, zz, dd = dots(z, d, z)[0], dots(z, z, z)[0], dots(d, d, d)[0]
        tau = (-zd + math.sqrt(max(zd * zd - dd * (zz - delta * delta), 0.0))) / dd
        p = backend.empty(n, dt)
        K.axpy(z, tau, d, p, n, dt)
        return p

    z = backend.zeros(n, dt)
    r = backend.empty(n, dt)
    K.axpy(g, 0.0, g, r, n, dt)                            # r = g (gradient of the model at z = 0)
    d = backend.empty(n, dt)
    K.axpy(g, -2.0, g, d, n, dt)                           # d = -g
    rr = gnorm * gnorm
    if rr == 0:
        return z, False
    for _ in range(cg_max):
        Bd = hvp(d)
        dBd = dots(d, Bd, Bd)[0]
        if dBd <= 0:
            return to_boundary(z, d), True
        alpha = rr / dBd
        z_new = backend.empty(n, dt)
        K.axpy(z, alpha, d, z_new, n, dt)
        if math.sqrt(dots(z_new, z_new, z_new)[0]) >= delta:
            return to_boundary(z, d), True
        r_new = backend.empty(n, dt)
        K.axpy(r, alpha, Bd, r_new, n, dt)
        rr_new = dots(r_new, r_new, r_new)[0]
        z, r = z_new, r_new
        if math.sqrt(rr_new) <= eta:
            return z, False
        d_new = backend.empty(n, dt)
        K.axpy(r, -2.0, r, d_new, n, dt)                   # -r
        K.axpy(d_new, rr_new / rr, d, d, n, dt)            # d = -r + beta d
        rr = rr_new
    return z, False


def _trust_region_run(prob, o, callback, cg_max, cg_tol, delta0, delta_max, hessian="products", jit_cache=None):
    where, n, dt = o["where"], prob.n, prob.dtype
    acc = K.acc_dtype(dt)
    out = backend.zeros(5, acc)

    def dots(a, b, c):
        K.dots(a, b, c, out, n, dt)
        return backend.to_numpy(out, (5,), acc).astype(float).tolist()

    x = prob.x0
    f, g = prob.value_and_grad(x)
    prob.check_start(f)
    gnorm = math.sqrt(dots(g, g, g)[2])
    delta = delta0 if delta0 is not None else max(1.0, gnorm) * 0.1
    it, reason = 0, None
    if gnorm <= o["gtol"]:
        reason = "gtol"
    while reason is None:
        reason = budget_spent(it, prob, o)
        if reason is not None:
            break
        eta = cg_tol if cg_tol is not None else min(0.5, math.sqrt(gnorm)) * gnorm
        hvp = _hvp_operator(prob, x, hessian, jit_cache)  # one graph (or one dense H) per iteration
        p, boundary = _steihaug(prob, hvp, x, g, gnorm, delta, cg_max, eta, n, dt)
        Hp = hvp(p)
        gp = dots(p, g, g)[0]
        pHp = dots(p, Hp, Hp)[0]
        pred = -(gp + 0.5 * pHp)
        x_new = backend.empty(n, dt)
        K.axpy(x, 1.0, p, x_new, n, dt)
        f_new, g_new = prob.value_and_grad(x_new)
        f_new = f_new if math.isfinite(f_new) else math.inf
        rho = (f - f_new) / pred if pred > 0 else -1.0
        pnorm = math.sqrt(dots(p, p, p)[0])
        if rho < 0.25:
            delta = 0.25 * min(delta, pnorm) if pnorm > 0 else 0.25 * delta
        elif rho > 0.75 and boundary:
            delta = min(2.0 * delta, delta_max)
        it += 1
        if rho > 1e-4 and f_new < f:
            f_old = f
            x, f, g = x_new, f_new, g_new
            st = dots(g, g, g)
            gnorm = math.sqrt(st[2])
            if not math.isfinite(gnorm):
                raise FloatingPointError(f"{where}: the gradient is not finite at iteration {it}.")
            if callback is not None and callback(IterInfo(it, f, gnorm, pnorm, prob.nfev, lambda x=x: prob.tree(x))):
                reason = "callback"
            elif gnorm <= o["gtol"]:
                reason = "gtol"
            elif abs(f_old - f) <= o["ftol"] * max(abs(f_old), abs(f), 1e-300):
                reason = "ftol"
            elif dots(p, p, p)[3] <= o["xtol"]:
                reason = "xtol"
        elif delta < 1e-14 * max(1.0, math.sqrt(dots(x, x, x)[2])):
            reason = "line_search"
    msg = {"gtol": "||grad|| <= gtol", "ftol": "relative loss change <= ftol", "xtol": "max |step| <= xtol",
           "max_iter": "reached max_iter", "max_eval": "reached max_eval", "callback": "the callback asked to stop",
           "line_search": "the trust region shrank to nothing without a decrease"}[reason]
    return Result(params=prob.tree(x), loss=f, grad_norm=gnorm, iterations=it, nfev=prob.nfev, ngev=prob.ngev,
                  nhvp=prob.nhvp, reason=reason,
                  message=f"{where}: stopped after {it} iterations and {prob.nfev} evaluations: {msg}.")
