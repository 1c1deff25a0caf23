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
from .result import CurvatureOptimizer, Flat, check_positive_int
from .newton_auto import (_HostVec, _Quiet, _ValueGradHessian, _accumulate, _auto_hessian, _distributed, _flat_loss,
                          _seq_sum)
from .newton_trust import _trust_region_run


# CG on the host (numpy, float64 accumulation) for problems up to this size on CPU: at small n each
# fused kernel launch (~8 us) and host read costs far more than the arithmetic (~1 us for a 100-dot)
HOST_CG_MAX = 1 << 16


def _host_cg(n):
    return backend.on_host() and n <= HOST_CG_MAX


class _NewtonCG:
    def __init__(self, n, dt, cg_max, cg_tol, hessian="products", jit_cache=None):
        self.n, self.dt, self.cg_max, self.cg_tol = n, dt, cg_max, cg_tol
        self.hessian = hessian
        self.jit_cache = jit_cache
        self.out = backend.zeros(5, K.acc_dtype(dt))
        self.cg_iters = 0

    def compatible(self, n, dt, o):
        return self.n == n and self.dt == dt

    def vec(self):
        """The line-search loop's vector helper: numpy where the CG runs on the host."""
        if _host_cg(self.n):
            return _HostVec(self.n, self.dt)
        from .lbfgs import _Vec
        return _Vec(self.n, self.dt)

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
        eps3 = 3 * np.finfo(np.float64).eps
        h = getattr(hvp, "matrix", None)
        if h is not None and np.dtype(self.dt) == np.float64:
            d[:n] = self._cg_dense64(prob, h, p, r, q, rr, eta, eps3)
            return
        qbuf = np.empty(n, dtype=np.dtype(self.dt))

        def matvec(v):
            qbuf[:] = v
            return np.asarray(hvp(qbuf)[:n], dtype=np.float64)
        d[:n] = self._cg_loop(matvec, p, r, q, rr, eta, eps3)

    def _cg_dense64(self, prob, h, p, r, q, rr, eta, eps3):
        """:meth:`_cg_loop` with a float64 dense H held on the host: the product ``h @ q`` inline (W6: ~8
        CG steps per Newton iteration, 1678 in a solve)."""
        def matvec(v):
            prob.nhvp += 1
            return h @ v
        return self._cg_loop(matvec, p, r, q, rr, eta, eps3)

    def _cg_loop(self, matvec, p, r, q, rr, eta, eps3):
        """The truncated CG loop of :meth:`_direction_host` in float64 numpy, ``matvec(q) -> H q``: sums left
        to right (``np.add.accumulate``), temporaries in one preallocated buffer (~10 numpy calls per CG
        step)."""
        acc, mul, tmp = _accumulate, np.multiply, np.empty_like(q)
        tol2 = self.cg_tol is not None
        for j in range(self.cg_max):
            Hq = matvec(q)
            self.cg_iters += 1
            qHq = float(acc(mul(q, Hq, out=tmp))[-1])
            if 0 <= qHq <= eps3:                           # zero curvature: keep p
                if j == 0:
                    p[:] = q
                break
            if qHq < 0:                                    # negative curvature
                if j == 0:                                 # steepest descent, scaled by |g|^2/|g.Hg|
                    p = q + (rr / -qHq - 1.0) * q
                break
            alpha = rr / qHq
            p += mul(q, alpha, out=tmp)
            r -= mul(Hq, alpha, out=tmp)
            rr_new = float(acc(mul(r, r, out=tmp))[-1])
            if (math.sqrt(rr_new) if tol2 else float(acc(np.abs(r, out=tmp))[-1])) <= eta:
                break
            q *= rr_new / rr
            q += r                                         # q = r + beta q
            rr = rr_new
        return p

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
    if jit_cache is not None and not jit_cache.get("eager"):
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
    h = np.asarray(H if isinstance(H, np.ndarray) else H.numpy(), dtype=np.float64)

    def op(vbuf):
        prob.nhvp += 1
        return (h @ np.asarray(vbuf[:n], dtype=np.float64)).astype(dt, copy=False)
    op.matrix = h  # (the host CG's float64 loop multiplies by it directly)
    return op


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
        mk = _Quiet if jit_cache.get("auto") else jit
        jit_cache.update(hkey=key, hvp=mk(lambda xf, vf: hvp(f, xf, vf)),
                         hess=mk(lambda xf: T.hessian(f)(xf)))
    return jit_cache["hvp"], jit_cache["hess"]


def _jit_operator(prob, x, hessian, jit_cache, host):
    hv, hess = _jit_functions(prob, jit_cache)
    xt = prob.tensor(x)
    auto = jit_cache.get("auto")
    if hessian == "dense":
        H = prob._jvg.hessian_at(x) if isinstance(prob._jvg, _ValueGradHessian) else None
        if H is not None and not host:
            from ..autodiff.tensor import tensor
            H = tensor(H, prob.dtype)
        if H is None:
            H = hess(xt)
            if auto and not hess.traced():  # not traceable: the eager operators from the next iteration on
                jit_cache["eager"] = True
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
        r = hv(xt, prob.tensor(vbuf))._buf
        if auto and not jit_cache.get("checked"):
            jit_cache["checked"] = True
            jit_cache["eager"] = not hv.traced()
        return r
    return op


def _hessian_mode(where, hessian, n):
    if hessian not in ("auto", "products", "dense"):
        raise ValueError(f"{where}: hessian={hessian!r}; expected 'auto', 'products' (Hessian-vector products "
                         "through the gradient's graph) or 'dense' (H formed once per iteration, small n).")
    if hessian == "dense":
        _check_dense(where, n)
    return hessian


def _setup(where, loss_fn, params, jit, hessian, shared_cache=None):
    """(Flat problem, jit cache or None, Hessian mode) for one solve. ``jit="auto"``: the evaluation and the
    products / dense H through :class:`_Quiet` jits (eager where a trace fails), traced per solve;
    ``jit=True``: :func:`sciml.jit` (errors raised), the shell's ``shared_cache`` kept across steps.
    ``hessian="auto"`` is decided here, at the start point (:func:`_auto_hessian`)."""
    auto = jit == "auto" and not _distributed()
    jc = {"auto": True} if auto else (shared_cache if shared_cache is not None else {}) if jit is True else None
    prob = Flat(loss_fn, params, where, jit=jit is True, jit_cache=jc)
    if auto:
        prob._jvg = _Quiet(prob._value_and_grad_flat)
    hm = _hessian_mode(where, hessian, prob.n)
    if hm == "auto":
        hm = _auto_hessian(prob, prob.x0)
    if jc is not None and hm == "dense":
        _ValueGradHessian(prob, jc)
    return prob, jc, hm


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
              delta_max=1e3, hessian="auto", jit="auto"):
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
    _hessian_mode("newton_cg", hessian, 0)
    prob, jc, hm = _setup("newton_cg", loss_fn, params, _check_jit("newton_cg", jit), hessian)
    cgm = _cg_max("newton_cg", cg_max, prob.n)
    if _globalization("newton_cg", globalization) == "trust_region":
        return _trust_region_run(prob, o, callback, cgm, cg_tol, delta0, delta_max, hm, jc)
    return _run(prob, o, callback, None, lambda n, dt: _NewtonCG(n, dt, cgm, cg_tol, hm, jc))[0]


def _check_jit(where, jit):
    if isinstance(jit, str) and jit == "auto":
        return "auto"
    if not isinstance(jit, (bool, np.bool_)):
        raise TypeError(f"{where}: jit must be 'auto', True or False; got {jit!r}.")
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
                 delta0=None, delta_max=1e3, hessian="auto", jit="auto"):
        self._jit = _check_jit("NewtonCG", jit)
        self._jit_cache = {} if self._jit is True else None
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
        prob, jc, hm = _setup("NewtonCG.step", loss_fn, values, self._jit, self._hessian, self._jit_cache)
        cgm = _cg_max("NewtonCG", self._cg[0], prob.n)
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
