"""What a curvature optimizer returns, and the flat view of a parameter pytree they all share.

Every optimizer in this family works on ONE flat parameter vector (a backend buffer of
``n`` elements): the pytree of parameters is concatenated once, each evaluation hands the
loss a pytree of views of that vector (free on CPU), and the gradient leaves are concatenated
back (one launch). The vector algebra then runs on flat buffers in a few fused kernels
(``sciml/kernels/lbfgs.py``).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .. import backend
from ..autodiff import pytree
from ..autodiff.tensor import Tensor
from .base import Optimizer

NONFINITE_START = ("{where}: the loss is {value} at the starting point; it must be finite. Check the data, the "
                   "initial parameters and the loss for overflow (log of 0, exp of large values, division by 0).")


@dataclasses.dataclass
class Result:
    """What happened in a run of a curvature optimizer.

    Attributes:
        params: the final parameters (a pytree shaped like the input; for a shell, also written
            into the bound parameters).
        loss: the loss at ``params`` (float).
        grad_norm: the Euclidean norm of the gradient at ``params`` (nan if never computed there).
        iterations: completed iterations (accepted steps).
        nfev: loss evaluations (each value-and-gradient evaluation counts once).
        ngev: gradient evaluations.
        nhvp: Hessian-vector (or Jacobian) products.
        reason: why it stopped: one of "gtol", "ftol", "xtol", "max_iter", "max_eval", "callback",
            "line_search" (no decrease found), "converged" (method-specific exact convergence).
        message: a sentence saying the same with numbers.
    """
    params: Any
    loss: float
    grad_norm: float
    iterations: int
    nfev: int
    ngev: int
    nhvp: int
    reason: str
    message: str

    @property
    def success(self) -> bool:
        return self.reason in ("gtol", "ftol", "xtol", "converged")


class IterInfo:
    """Passed to ``callback(info)`` after each iteration; return True from the callback to stop.

    Attributes: ``iteration``, ``loss``, ``grad_norm`` (nan where not computed), ``step_size``,
    ``nfev``, and ``params`` (the current parameters as a pytree, built when first read).
    """
    __slots__ = ("iteration", "loss", "grad_norm", "step_size", "nfev", "_params", "_cache")

    def __init__(self, iteration, loss, grad_norm, step_size, nfev, params_fn):
        self.iteration, self.loss, self.grad_norm = iteration, loss, grad_norm
        self.step_size, self.nfev, self._params, self._cache = step_size, nfev, params_fn, None

    @property
    def params(self):
        if self._cache is None:
            self._cache = self._params()
        return self._cache

    def __repr__(self):
        return (f"IterInfo(iteration={self.iteration}, loss={self.loss:.6g}, grad_norm={self.grad_norm:.3e}, "
                f"step_size={self.step_size:.3g}, nfev={self.nfev})")


class CurvatureOptimizer(Optimizer):
    """Shell shared by the optimizers that take the loss as a function: ``step(loss_fn)`` reads the
    bound parameters, runs the method's functional core, writes the result back in place and
    returns the :class:`Result` (also kept as ``last_result``)."""

    def _init_state(self):
        self.state = None
        self.last_result = None

    def _state_arrays(self):
        return {}

    def _load_state_arrays(self, arrays):
        pass

    def step(self, loss_fn=None, *, max_iter=None):
        """Run the method from the bound parameters on ``loss_fn`` (params pytree -> scalar Tensor).

        ``max_iter`` lowers this call's iteration budget (e.g. the steps left in a training stage;
        the evaluation budget scales with it as in the constructor's default); it never raises it."""
        if max_iter is not None:
            return self._step_capped(loss_fn, max_iter)
        name = type(self).__name__
        if loss_fn is None or not callable(loss_fn):
            raise TypeError(f"{name}.step(loss_fn): got {type(loss_fn).__name__}; {name} evaluates the loss "
                            "several times, so it takes a function of a pytree shaped like the bound params that "
                            "returns a scalar Tensor, e.g. opt.step(lambda p: mse(model.apply(p, x), y)).")
        self._require_bound()
        frozen = tuple(not p.requires_grad for p in self._leaves)
        if any(frozen):
            return self._step_frozen(loss_fn, frozen)
        self._frozen_seen = frozen
        try:
            res = self._minimize(loss_fn, self._read())
        except FloatingPointError as e:
            part = getattr(e, "result", None)
            if part is not None:
                self._write(part.params)
                self.last_result = part
            raise
        self._write(res.params)
        self.step_count += 1
        self.last_result = res
        return res

    def _step_frozen(self, loss_fn, frozen):
        """``step`` with frozen parameters (``requires_grad_(False)``): the method sees only the trainable
        ones (a list of their values, in the bound order); ``loss_fn`` still gets the full pytree, the frozen
        leaves being the live Parameters' values (constants). Only the trainable Parameters are written; the
        result's ``params`` is the full pytree. The carried state (L-BFGS/BFGS history, AdaHessian moments) is
        over the trainable parameters: it restarts when the set of frozen parameters changes."""
        name = type(self).__name__
        if all(frozen):
            raise ValueError(f"{name}.step: every bound parameter is frozen (requires_grad=False); nothing to "
                             "optimise. Unfreeze some with p.requires_grad_(True).")
        if getattr(self, "_frozen_seen", None) not in (None, frozen):
            self._init_state()  # the carried state is over another parameter set
        self._frozen_seen = frozen
        train = [i for i, f in enumerate(frozen) if not f]
        wrap = getattr(self, "_frozen_wrap", None)
        if wrap is None or wrap[0] is not loss_fn or wrap[1] != frozen:  # one wrapper per (loss_fn, mask):
            live, td = self._leaves, self._treedef                        # jit caches keyed on it stay warm

            def sub_loss(values):
                full = [p.detach() for p in live]
                for i, v in zip(train, values):
                    full[i] = v
                return loss_fn(pytree.unflatten(td, full))
            wrap = self._frozen_wrap = (loss_fn, frozen, sub_loss)
        values = pytree.flatten(self._read())[0]

        def full_tree(res):
            vals = list(values)
            for i, v in zip(train, pytree.flatten(res.params)[0]):
                vals[i] = v
            return dataclasses.replace(res, params=pytree.unflatten(self._treedef, vals))

        def write(res):
            for i, v in zip(train, pytree.flatten(res.params)[0]):
                self._leaves[i]._assign(v)
        try:
            res = self._minimize(wrap[2], [values[i] for i in train])
        except FloatingPointError as e:
            part = getattr(e, "result", None)
            if part is not None:
                write(part)
                self.last_result = full_tree(part)
            raise
        write(res)
        res = full_tree(res)
        self.step_count += 1
        self.last_result = res
        return res

    def _step_capped(self, loss_fn, max_iter):
        check_positive_int(f"{type(self).__name__}.step", "max_iter", max_iter)
        opts = getattr(self, "_opts", None)
        if not isinstance(opts, dict) or "max_iter" not in opts or opts["max_iter"] <= max_iter:
            return self.step(loss_fn)
        saved = dict(opts)
        opts["max_iter"] = int(max_iter)
        opts["max_eval"] = min(saved["max_eval"], -(-int(max_iter) * 5 // 4))
        try:
            return self.step(loss_fn)
        finally:
            opts.clear()
            opts.update(saved)

    def _minimize(self, loss_fn, values):  # pragma: no cover - abstract
        raise NotImplementedError


def _is_module(p):
    return hasattr(p, "params") and callable(getattr(p, "params")) and hasattr(p, "apply")


class Flat:
    """A loss of a pytree of Tensors, seen as a function of one flat vector.

    Counts evaluations (``nfev``, ``ngev``, ``nhvp``). Buffers passed in are never written.
    """

    def __init__(self, loss_fn, params, where: str, jit: bool = False, jit_cache=None):
        if not callable(loss_fn):
            raise TypeError(f"{where}: loss_fn must be callable (params -> scalar Tensor); got "
                            f"{type(loss_fn).__name__}.")
        if _is_module(params):
            params = params.params()
        leaves, self.treedef = pytree.flatten(params)
        if not leaves:
            raise ValueError(f"{where}: params is empty; expected a pytree of float Tensors.")
        for i, l in enumerate(leaves):
            if not isinstance(l, Tensor):
                raise TypeError(f"{where}: params leaf {i} is a {type(l).__name__}; expected a Tensor "
                                "(wrap arrays with sciml.tensor).")
            if l.dtype not in ("float32", "float64"):
                raise TypeError(f"{where}: params leaf {i} has dtype {l.dtype}; expected float32 or float64.")
        dts = {l.dtype for l in leaves}
        if len(dts) > 1:
            raise TypeError(f"{where}: params mix dtypes {sorted(dts)}; expected one float dtype.")
        self.where, self.loss_fn = where, loss_fn
        self.dtype = leaves[0].dtype
        self.shapes = [l.shape for l in leaves]
        self.sizes = [l.size for l in leaves]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int).tolist()
        self.n = self.offsets[-1]
        self.nfev = self.ngev = self.nhvp = 0
        self.x0 = self.cat([l.detach() for l in leaves])
        if self.x0 is leaves[0]._buf:  # never alias the caller's buffer
            self.x0 = self.copy(self.x0)
        self._jvg = None
        if jit:  # value_and_grad traced once and replayed (sciml.jit); shells keep it across steps
            from ..autodiff.jit import jit as _jit
            key = (loss_fn, tuple(self.shapes), self.dtype, repr(self.treedef))
            if jit_cache is not None and jit_cache.get("key") == key:
                self._jvg = jit_cache["fn"]
            else:
                self._jvg = _jit(self._value_and_grad_flat)
                if jit_cache is not None:
                    jit_cache.update(key=key, fn=self._jvg)

    # --- buffers <-> pytrees ------------------------------------------------------------
    def copy(self, buf):
        if backend.on_host():
            return np.array(buf[:self.n])
        from ..kernels import lbfgs as K
        out = backend.empty(self.n, self.dtype)
        K.axpy(buf, 0.0, buf, out, self.n, self.dtype)
        return out

    def cat(self, leaves):
        """One flat buffer from leaves shaped like the params (one launch, or none for one leaf)."""
        if len(leaves) == 1:
            return leaves[0]._buf
        from ..autodiff.ops import concat, reshape
        return concat([reshape(l, (-1,)) for l in leaves])._buf

    def leaves(self, buf):
        """Tensors shaped like the param leaves, reading ``buf`` (views on CPU)."""
        if backend.on_host():
            return [Tensor._make(buf[a:b], s, self.dtype)
                    for a, b, s in zip(self.offsets, self.offsets[1:], self.shapes)]
        if len(self.shapes) == 1:
            return [Tensor._make(buf, self.shapes[0], self.dtype)]
        from ..autodiff.ops import getitem, reshape
        x = Tensor._make(buf, (self.n,), self.dtype)
        return [reshape(getitem(x, slice(a, b)), s).detach()
                for a, b, s in zip(self.offsets, self.offsets[1:], self.shapes)]

    def tree(self, buf):
        return pytree.unflatten(self.treedef, self.leaves(buf))

    def tensor(self, buf):
        return Tensor._make(buf, (self.n,), self.dtype)

    # --- evaluations --------------------------------------------------------------------
    def _scalar(self, v):
        if not isinstance(v, Tensor):
            raise TypeError(f"{self.where}: loss_fn must return a scalar Tensor; got {type(v).__name__}.")
        if v.size != 1:
            raise ValueError(f"{self.where}: loss_fn must return a scalar Tensor; got shape {v.shape}. "
                             "Reduce it with .sum() or .mean().")
        return v

    def _f(self, *leaves):
        return self._scalar(self.loss_fn(pytree.unflatten(self.treedef, list(leaves))))

    def value(self, buf) -> float:
        from ..autodiff import no_grad
        with no_grad():
            v = self._f(*self.leaves(buf))
        self.nfev += 1
        return _finite_or_inf(float(v))

    def _value_and_grad_flat(self, x):
        v, g = self._value_and_grad(x._buf)
        return v, self.tensor(g)

    def value_and_grad(self, buf):
        """(loss as a float, gradient as a flat buffer)."""
        if self._jvg is not None:
            v, g = self._jvg(self.tensor(buf))
            self.nfev += 1
            self.ngev += 1
            return float(v), g._buf
        v, g = self._value_and_grad(buf)
        self.nfev += 1
        self.ngev += 1
        return float(v), g

    def _value_and_grad(self, buf):
        from ..autodiff import value_and_grad
        leaves = self.leaves(buf)
        v, gs = value_and_grad(self._f, argnums=tuple(range(len(leaves))))(*leaves)
        return v, self.cat(list(gs))

    def hvp(self, buf, vbuf):
        """(gradient, Hessian @ v) as flat buffers, by forward over reverse (JVP of value_and_grad;
        the loss value at ``buf`` comes free and is kept in ``last_value``)."""
        from ..autodiff import transforms as T
        leaves = self.leaves(buf)
        vg = T.value_and_grad(self._f, argnums=tuple(range(len(leaves))))
        (fv, g), (_, hv) = T.jvp(lambda *a: vg(*a), tuple(leaves), tuple(self.leaves(vbuf)))
        self.last_value = float(fv)
        self.nhvp += 1
        self.ngev += 1
        return self.cat(list(g)), self.cat(list(hv))

    def hvp_operator(self, buf):
        """``v -> H v`` at ``buf`` (flat buffers) for many ``v``: the gradient graph is recorded once and
        each product is one backward pass through it (reverse over reverse; H is symmetric), cheaper
        than a fresh forward-over-reverse pass per product."""
        from ..autodiff import transforms as T
        leaves = self.leaves(buf)
        k = len(leaves)
        g = T.grad(self._f, argnums=tuple(range(k)))
        _, pull = T.vjp(lambda *a: tuple(g(*a)), *leaves)
        self.ngev += 1

        def op(vbuf):
            hv = pull(tuple(self.leaves(vbuf)), create_graph=False)
            self.nhvp += 1
            return self.cat([h.detach() for h in hv])
        return op

    def dense_hessian_operator(self, buf):
        """``v -> H v`` with H formed once at ``buf`` (batched forward over reverse, one pass for
        n <= 512): each product is then one matrix-vector product. For small n."""
        from ..autodiff.curvature import hessian_dense
        from ..autodiff.ops import matmul
        H = hessian_dense(lambda p: self._f(*p), tuple(self.leaves(buf)))
        self.ngev += 1

        def op(vbuf):
            self.nhvp += 1
            return matmul(H, Tensor._make(vbuf, (self.n,), self.dtype))._buf
        return op

    def check_start(self, f):
        if not math.isfinite(f):
            raise FloatingPointError(NONFINITE_START.format(where=self.where, value=f))


def _finite_or_inf(f):
    return f if math.isfinite(f) else math.inf


def check_positive_int(where, name, v, allow_none=False):
    if v is None and allow_none:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{where}: {name} must be a positive integer; got {v!r}.")
    return int(v)


def check_nonneg(where, name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not v >= 0 \
            or not math.isfinite(v):
        raise ValueError(f"{where}: {name} must be a finite number >= 0; got {v!r}.")
    return float(v)


def budget_spent(it, prob, o):
    """'max_iter' or 'max_eval' when the iteration or evaluation budget of options ``o`` is used up, else None."""
    if it >= o["max_iter"]:
        return "max_iter"
    if prob.nfev >= o["max_eval"]:
        return "max_eval"
    return None
