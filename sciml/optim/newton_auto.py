"""Newton-CG's automatic choices (``jit="auto"``, ``hessian="auto"``) and its host fast paths: the
traced evaluation that also gives the dense Hessian, and numpy vector algebra for the line search.
See docs/second_order.md ("Newton-CG defaults")."""
from __future__ import annotations

import numpy as np

from .. import backend


_accumulate = np.add.accumulate


def _seq_sum(v):
    """Left-to-right float64 sum (the order of a serialized kernel's ``+=``; numpy's ``sum`` is pairwise).
    ``np.add.accumulate`` is ``cumsum``'s loop without its Python wrappers: ~1 us instead of ~3.5 us at
    n = 100 (the host CG takes three such sums per iteration)."""
    return float(_accumulate(v)[-1]) if v.size else 0.0


# ``hessian="auto"``: a dense H (one batched pass per Newton iteration, products as host matvecs) when on
# CPU, n <= AUTO_DENSE_N and one dense pass produces at most AUTO_DENSE_WORK tangent elements (n x the
# tangent elements of one product, measured by one probe pass); else Hessian-vector products. Measured on
# W6 (n = 100, ~8 CG products per Newton iteration): the dense pass costs about as much as 1.2 products,
# the launches and Python of the ~8 products it replaces dominate below ~1e6 elements per pass.
AUTO_DENSE_N = 512
AUTO_DENSE_WORK = 1 << 20


def _distributed():
    """True inside a multi-process job (the collectives of a wrapped loss: no auto-jit, no auto-dense)."""
    import sys
    comm = sys.modules.get("sciml.distributed.comm")
    try:
        return comm is not None and comm._G.comm is not None and comm.is_distributed()
    except Exception:  # noqa: BLE001 (not initialised: single process)
        return False


class _Quiet:
    """A :func:`sciml.jit` function with ``fallback="eager"`` whose trace-time warnings are silenced: the
    optimizer's automatic jit (``jit="auto"``) runs a loss that cannot be traced (host reads, random
    draws, user Taichi kernels) eagerly, as the user wrote it, without a warning."""
    __slots__ = ("j",)

    def __init__(self, fn):
        from ..autodiff.jit import jit
        self.j = jit(fn, fallback="eager")

    @property
    def stats(self):
        return self.j.stats

    def traced(self):
        """True when the first call's trace succeeded (replays follow)."""
        return any(not isinstance(p, str) for p in self.j.plans.values())

    def __call__(self, *args):
        if self.j.plans:
            return self.j(*args)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return self.j(*args)


def _auto_hessian(prob, x):
    """``"dense"`` or ``"products"`` for ``hessian="auto"`` at ``x`` (see ``AUTO_DENSE_N``): deterministic,
    from the problem's size and the tangent data of one probe pass (one column of the dense pass; not
    counted in ``nhvp``), never from timings."""
    if not backend.on_host() or prob.n > AUTO_DENSE_N or _distributed():
        return "products"
    from ..autodiff import transforms as T
    from ..autodiff.tensor import Tensor
    f = _flat_loss(prob)
    xt = prob.tensor(x)
    e = np.zeros((1, prob.n), dtype=np.dtype(prob.dtype))
    e[0, 0] = 1.0
    try:
        T.batched_jvp(T.grad(f), (xt,), (Tensor._make(backend.from_numpy(e.reshape(-1), prob.dtype), (1, prob.n),
                                                       prob.dtype),))
    except Exception:  # noqa: BLE001 (a loss the batched pass cannot take: the products, as before)
        return "products"
    per_col = max(int(T._last_cost[0]), prob.n)
    return "dense" if prob.n * per_col <= AUTO_DENSE_WORK else "products"


class _HostVec:
    """:class:`sciml.optim.lbfgs._Vec` in numpy for the line-search loop of a host Newton-CG (small n): the
    same results bit for bit (float64 sums left to right, ``x + a d`` in the parameter dtype) without a
    kernel launch and a host read per dot product."""

    def __init__(self, n, dtype):
        self.n, self.dt = n, np.dtype(dtype)

    def axpy(self, x, a, d):
        n = self.n
        return x[:n] + self.dt.type(a) * d[:n]

    def dots(self, a, b, c):
        n = self.n
        a, b = np.asarray(a[:n], dtype=np.float64), np.asarray(b[:n], dtype=np.float64)
        ab = a * b
        ac = ab if c is b else a * np.asarray(c[:n], dtype=np.float64)
        return [_seq_sum(ab), _seq_sum(ac), _seq_sum(b * b), float(np.abs(b).max()) if n else 0.0]


def _flat_loss(prob):
    """The loss as a function of ONE flat Tensor (leaves sliced out by ops, so tangents and traces pass)."""
    from ..autodiff.ops import getitem, reshape
    shapes, offs = prob.shapes, prob.offsets

    def f(xf):
        if len(shapes) == 1:
            return prob._f(reshape(xf, shapes[0]) if shapes[0] != (prob.n,) else xf)
        return prob._f(*[reshape(getitem(xf, slice(a, b)), s) for a, b, s in zip(offs, offs[1:], shapes)])
    return f


class _ValueGradHessian:
    """With a dense H under jit, every evaluation of the line search is ONE replayed pass giving the loss,
    the gradient and H (forward over reverse with the n basis tangents: its primal part is the evaluation),
    and the Newton iteration at an accepted point takes H from the evaluation that accepted it instead
    of a second pass. On W6 one iteration was 1 dense pass + 1.2 evaluations, now ~1.2 dense passes.
    Installed as ``prob._jvg``; the same numbers as a separate evaluation and ``sm.hessian`` (the same
    kernels in the same order; H transposed on the host, as ``jacfwd`` does with a launch)."""

    def __init__(self, prob, jc):
        self.prob, self.jc = prob, jc
        self.plain = prob._jvg
        key = (prob.loss_fn, tuple(prob.shapes), prob.dtype, repr(prob.treedef))
        if jc.get("vghkey") != key:
            from ..autodiff import transforms as T
            from ..autodiff.jit import jit
            f = _flat_loss(prob)
            n, dt = prob.n, prob.dtype

            def vgh(xf):
                from ..autodiff.tensor import tensor
                eye = tensor(np.eye(n), dt)
                (v, g), (_, hb) = T.batched_jvp(T.value_and_grad(f), (xf,), (eye,))
                return v, g, hb                     # hb[i] = H e_i
            jc.update(vghkey=key, vgh=_Quiet(vgh) if jc.get("auto") else jit(vgh))
        self.fn = jc["vgh"]
        self.last = None                            # (the buffer evaluated, H as a numpy (n, n) array)
        prob._jvg = self

    def __call__(self, xt):
        if self.jc.get("eager"):
            return self.plain(xt)
        v, g, hb = self.fn(xt)
        if self.jc.get("auto") and not self.fn.traced():   # not traceable: plain evaluations from now on
            self.jc["eager"] = True
        self.last = (xt._buf, hb)
        return v, g

    def hessian_at(self, buf):
        """H at ``buf`` as a numpy (n, n) array if the last evaluation was there, else None."""
        if self.last is None or self.last[0] is not buf:
            return None
        return np.ascontiguousarray(self.last[1].numpy().T)
