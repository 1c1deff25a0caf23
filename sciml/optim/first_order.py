"""First-order optimizers: SGD, Adam (amsgrad), AdamW, RMSprop, Adagrad as fused in-place Taichi kernels;
NAdam, RAdam, Adamax, Lion (and Adam with amsgrad) written in sciml ops (a few elementwise kernels each).
All take PyTorch-style parameter groups (``Adam([{"params": a, "lr": 1e-2}, {"params": b}], lr=1e-3)``).

Each step updates every parameter in place with a fused kernel (``sciml/kernels/optim.py``) that
reads the parameter, its gradient and the slot buffers once and writes them back; on CPU the
parameters' vector parts (16-byte SIMD lanes) are updated in ONE launch per dtype (up to 8
tensors per launch), on devices one launch per parameter. The update formulas are
PyTorch's (so trajectories match ``torch.optim``); the same updates exist as composable pure
Transforms in ``aliases.py`` (``adam(...)``, ``sgd(...)``) and give the same numbers.

Every optimizer takes ``lr`` as a number or a schedule (``schedules.py``) and ``clip_norm``
(clip the gradients to this global L2 norm before the update, as ``clip_by_global_norm``).

    >>> opt = sm.optim.Adam(model.parameters(), lr=1e-3)
    >>> opt.step(grads)          # grads shaped like model.parameters()
"""
from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..kernels import optim as K
from .base import Optimizer, global_norm
from .schedules import as_schedule

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "NAdam", "RAdam", "Adamax", "Lion"]


def _nonneg(cls, **kw):
    for k, v in kw.items():
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{cls}: {k}={v!r}; expected a non-negative number.")


def _group_option(key, doc):
    """A property reading ``key`` of the first parameter group and setting it in every group (and the
    defaults), so ``opt.weight_decay = 0.1`` takes effect at the next step."""
    def get(self):
        return self.param_groups[0][key] if self.param_groups else self.defaults[key]

    def set_(self, value):
        self.defaults[key] = value
        for g in self.param_groups:
            g[key] = value
        for i, g in enumerate(self.param_groups):
            self._check_group(g, i)
    return property(get, set_, doc=doc)


class _Fused(Optimizer):
    """Base of the fused optimizers: per-parameter slot buffers and a per-step kernel (one grouped launch
    per parameter group and dtype)."""
    _slot_names: tuple = ()

    def __init__(self, params=None, *, lr, clip_norm=None, weight_decay=0.0, **options):
        name = type(self).__name__
        self.defaults = dict(lr=lr, weight_decay=weight_decay, **options)
        if clip_norm is not None:
            _nonneg(name, clip_norm=clip_norm)
            if clip_norm == 0:
                raise ValueError(f"{name}: clip_norm=0; expected a positive number or None.")
        self.clip_norm = clip_norm
        self._check_group(self.defaults, None)
        super().__init__(params)

    weight_decay = _group_option("weight_decay", "L2 / decoupled weight decay (of the first group; sets all).")

    def _check_group(self, group, i):
        where = type(self).__name__ + ("" if i is None else f"(param_groups[{i}])")
        as_schedule(group["lr"])
        _nonneg(where, weight_decay=group["weight_decay"])

    def _slots_for(self, group):
        return self._slot_names

    def _init_state(self):
        self._slots = [{s: backend.zeros(max(p.size, 1), p.dtype) for s in self._slots_for(self.param_groups[gi])}
                       for p, gi in zip(self._leaves, self._group_of)]
        self._psteps = [0] * len(self._leaves)  # updates each parameter has had (frozen ones skip steps)
        self.state = None
        self._ptr_cache = {}  # data addresses of the parameter and slot buffers (kernels/optim.py)

    def _apply(self, grads):
        gscale = 1.0
        if self.clip_norm is not None:
            n = global_norm([g for g in grads if g is not None])
            if n > self.clip_norm:
                gscale = self.clip_norm / n
        by_key = {}
        groups, group_of, psteps = self.param_groups, self._group_of, self._psteps
        for i, (p, g, slots) in enumerate(zip(self._leaves, grads, self._slots)):
            if g is None:
                continue
            gi = group_of[i]
            names = self._slots_for(groups[gi])
            want = _NAME_SETS.get(names)
            if want is None:
                want = _NAME_SETS[names] = frozenset(names)
            if slots.keys() != want:  # e.g. momentum switched on
                slots = self._slots[i] = {s: slots.get(s) or backend.zeros(max(p.size, 1), p.dtype)
                                          for s in names}
            if p.size:
                by_key.setdefault((gi, psteps[i], p.dtype), []).append((p, g, slots))
            psteps[i] += 1
        for (gi, t, dtype), items in by_key.items():  # one grouped launch per group, step and dtype on CPU
            group = self.param_groups[gi]
            kind, scalars, plain, flags = self._spec(group, self.group_lr(group), gscale, t)
            K.update_many(kind, dtype, [(self._arrays(group, p._buf, g._buf, sl), p.size) for p, g, sl in items],
                          scalars, plain, flags, self._ptr_cache)

    def _state_arrays(self):
        out = {}
        for i, (p, slots) in enumerate(zip(self._leaves, self._slots)):
            for s, buf in slots.items():
                out[f"{i}.{s}"] = np.array(backend.to_numpy(buf, (p.size,), p.dtype))
        out["psteps"] = np.asarray(self._psteps, dtype=np.int64)
        return out

    def _load_state_arrays(self, arrays):
        name = type(self).__name__
        arrays = dict(arrays)
        psteps = arrays.pop("psteps", None)
        expected = {f"{i}.{s}" for i in range(len(self._leaves)) for s in self._slots[i]}
        if set(arrays) != expected:
            raise KeyError(f"{name}.load_state_dict: state keys {sorted(arrays)[:6]}... do not match this optimizer "
                           f"({len(self._leaves)} params, slots {self._slot_names}); it comes from another "
                           "optimizer or parameter set.")
        for i, (p, slots) in enumerate(zip(self._leaves, self._slots)):
            for s in slots:
                a = np.asarray(arrays[f"{i}.{s}"]).reshape(-1)
                if a.size != p.size:
                    raise ValueError(f"{name}.load_state_dict: slot {i}.{s} has {a.size} values; parameter {i} has "
                                     f"shape {p.shape}.")
                src = backend.from_numpy(a, p.dtype)
                if p.size:
                    K.copy(slots[s], src, p.size, p.dtype)
        self._psteps = None if psteps is None else [int(v) for v in np.asarray(psteps).reshape(-1)]
        if self._psteps is None or len(self._psteps) != len(self._leaves):
            self._psteps = None

    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        if self._psteps is None:  # a state from before per-parameter step counts: every parameter at `step`
            self._psteps = [self.step_count] * len(self._leaves)


_NAME_SETS: dict = {}  # slot-name tuple -> frozenset (compared with each parameter's slots every step)


def _betas(where, betas):
    try:
        b1, b2 = betas
        ok = all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in (b1, b2))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{where}: betas={betas!r}; expected two numbers in [0, 1).")
    return (float(b1), float(b2))


class SGD(_Fused):
    """Stochastic gradient descent with optional momentum (PyTorch's formulation).

    g <- g + wd p;  b <- mu b + (1 - dampening) g  (b = g at the first step);
    d = g + mu b if nesterov else b;  p <- p - lr d.

    Args:
        params: pytree of Parameters, a list of parameter groups, or None (bind later).
        lr: learning rate or schedule.
        momentum, dampening, nesterov, weight_decay: as in torch.optim.SGD (per group).
        clip_norm: clip gradients to this global norm first.
    """

    def __init__(self, params=None, lr=1e-2, momentum=0.0, *, dampening=0.0, nesterov=False, weight_decay=0.0,
                 clip_norm=None):
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay, momentum=momentum,
                         dampening=dampening, nesterov=nesterov)

    momentum = _group_option("momentum", "Momentum factor.")
    dampening = _group_option("dampening", "Momentum dampening.")
    nesterov = _group_option("nesterov", "Nesterov momentum.")

    def _check_group(self, group, i):
        super()._check_group(group, i)
        where = "SGD" + ("" if i is None else f"(param_groups[{i}])")
        _nonneg(where, momentum=group["momentum"], dampening=group["dampening"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(f"{where}: nesterov=True needs momentum > 0 and dampening = 0; got momentum="
                             f"{group['momentum']}, dampening={group['dampening']}.")

    def _slots_for(self, group):
        return ("momentum",) if group["momentum"] else ()

    def _spec(self, group, lr, gscale, t):
        mom = float(group["momentum"])
        flags = K.sgd_flags(mom, t == 0, bool(group["nesterov"]))
        return "sgd", (lr, mom, float(group["dampening"]), gscale, float(group["weight_decay"])), False, flags

    def _arrays(self, group, p, g, slots):
        return (p, g, slots["momentum"] if group["momentum"] else g)


class Adam(_Fused):
    """Adam (Kingma & Ba 2015), one fused in-place kernel per parameter group.

    g <- g + wd p;  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
    p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
    With ``amsgrad=True`` (Reddi et al. 2018, PyTorch's form) v_max <- max(v_max, v) replaces v in the
    denominator.

    Args:
        params: pytree of Parameters, a list of parameter groups, or None (bind later with ``bind``).
        lr: learning rate or schedule.
        betas: (b1, b2).
        eps: added to the denominator.
        weight_decay: L2 penalty added to the gradient (for decoupled decay use AdamW).
        amsgrad: use the running maximum of v.
        clip_norm: clip gradients to this global norm first.
    """
    _decoupled = False

    def __init__(self, params=None, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *, amsgrad=False,
                 clip_norm=None):
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay, betas=betas, eps=eps,
                         amsgrad=amsgrad)

    betas = _group_option("betas", "(b1, b2).")
    eps = _group_option("eps", "Denominator term.")
    amsgrad = _group_option("amsgrad", "Use the running maximum of the second moment.")

    def _check_group(self, group, i):
        super()._check_group(group, i)
        where = type(self).__name__ + ("" if i is None else f"(param_groups[{i}])")
        group["betas"] = _betas(where, group["betas"])
        _nonneg(where, eps=group["eps"])

    def _slots_for(self, group):
        return ("m", "v", "v_max") if group.get("amsgrad") else ("m", "v")

    def _spec(self, group, lr, gscale, t):
        b1, b2 = group["betas"]
        t += 1
        wd = float(group["weight_decay"])
        wd, dwd = (0.0, lr * wd) if self._decoupled else (wd, 0.0)
        scalars, plain = K.adam_scalars(lr, b1, b2, float(group["eps"]), 1 - b1 ** t, 1 - b2 ** t, gscale, wd, dwd)
        return "adam", scalars, plain, ()

    def _arrays(self, group, p, g, slots):
        return (p, g, slots["m"], slots["v"])

    def _apply(self, grads):
        if not any(g.get("amsgrad") for g in self.param_groups):
            return super()._apply(grads)
        return _composed_apply(self, grads, _adam_amsgrad_or_fused)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019): p <- p (1 - lr wd) before the Adam step."""
    _decoupled = True

    def __init__(self, params=None, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, *, amsgrad=False,
                 clip_norm=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         clip_norm=clip_norm)


class RMSprop(_Fused):
    """RMSprop (Hinton 2012; PyTorch's form): s <- a s + (1 - a) g^2; d = g / (sqrt(s) + eps);
    with momentum: b <- mu b + d, d = b;  p <- p - lr d."""

    def __init__(self, params=None, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, *,
                 clip_norm=None):
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay, alpha=alpha, eps=eps,
                         momentum=momentum)

    alpha = _group_option("alpha", "Smoothing constant.")
    eps = _group_option("eps", "Denominator term.")
    momentum = _group_option("momentum", "Momentum factor.")

    def _check_group(self, group, i):
        super()._check_group(group, i)
        where = "RMSprop" + ("" if i is None else f"(param_groups[{i}])")
        if not isinstance(group["alpha"], (int, float)) or not 0 <= group["alpha"] < 1:
            raise ValueError(f"{where}: alpha={group['alpha']!r}; expected a number in [0, 1).")
        _nonneg(where, eps=group["eps"], momentum=group["momentum"])

    def _slots_for(self, group):
        return ("square_avg", "momentum") if group["momentum"] else ("square_avg",)

    def _spec(self, group, lr, gscale, t):
        return ("rmsprop", (lr, float(group["alpha"]), float(group["eps"]), float(group["momentum"]), gscale,
                            float(group["weight_decay"])), False, (bool(group["momentum"]),))

    def _arrays(self, group, p, g, slots):
        return (p, g, slots["square_avg"], slots["momentum"] if group["momentum"] else slots["square_avg"])


class Adagrad(_Fused):
    """Adagrad (Duchi et al. 2011): s <- s + g^2;  p <- p - lr g / (sqrt(s) + eps)."""
    _slot_names = ("sum",)

    def __init__(self, params=None, lr=1e-2, eps=1e-10, weight_decay=0.0, *, clip_norm=None):
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay, eps=eps)

    eps = _group_option("eps", "Denominator term.")

    def _check_group(self, group, i):
        super()._check_group(group, i)
        _nonneg("Adagrad" + ("" if i is None else f"(param_groups[{i}])"), eps=group["eps"])

    def _spec(self, group, lr, gscale, t):
        return "adagrad", (lr, float(group["eps"]), gscale, float(group["weight_decay"])), False, ()

    def _arrays(self, group, p, g, slots):
        return (p, g, slots["sum"])


# --- optimizers written in sciml ops (a few elementwise kernels per parameter) --------------------------
def _composed_apply(opt, grads, rule):
    """Update each parameter with ``rule(opt, group, t, p, g, slots) -> (new_p, {slot: new value})`` computed
    in sciml ops (Tensors), then written in place into the Parameter and its slot buffers."""
    from ..autodiff.primitive import no_grad
    from ..autodiff.tensor import Tensor
    gscale = 1.0
    if opt.clip_norm is not None:
        n = global_norm([g for g in grads if g is not None])
        if n > opt.clip_norm:
            gscale = opt.clip_norm / n
    with no_grad():
        for i, (p, g) in enumerate(zip(opt._leaves, grads)):
            if g is None:
                continue
            group = opt.param_groups[opt._group_of[i]]
            names = opt._slots_for(group)
            slots = opt._slots[i]
            if set(slots) != set(names):
                slots = opt._slots[i] = {s: slots.get(s) or backend.zeros(max(p.size, 1), p.dtype) for s in names}
            t = opt._psteps[i]
            opt._psteps[i] += 1
            if not p.size:
                continue
            if gscale != 1.0:
                g = g * gscale
            cur = {s: Tensor._make(slots[s], p.shape, p.dtype) for s in names}
            new_p, new_slots = rule(opt, group, t, p.detach(), g.detach(), cur)
            for s, v in new_slots.items():
                v = v if v.dtype == p.dtype else v.astype(p.dtype)
                K.copy(slots[s], v._buf, p.size, p.dtype)
            p._assign(new_p)


def _adam_amsgrad_or_fused(opt, group, t, p, g, s):
    from ..autodiff.ops import maximum, sqrt
    b1, b2 = group["betas"]
    lr, wd, eps = opt.group_lr(group), float(group["weight_decay"]), float(group["eps"])
    t += 1
    if opt._decoupled:
        p = p * (1.0 - lr * wd)
    elif wd:
        g = g + wd * p
    m = b1 * s["m"] + (1 - b1) * g
    v = b2 * s["v"] + (1 - b2) * g * g
    new = {"m": m, "v": v}
    vd = v
    if group.get("amsgrad"):
        vd = new["v_max"] = maximum(s["v_max"], v)
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    return p - (lr / bc1) * m / (sqrt(vd) * (1.0 / math.sqrt(bc2)) + eps), new


class _Composed(_Fused):
    """Base of optimizers whose update is written in sciml ops (``_rule``) rather than a fused kernel."""
    _name = ""

    def _apply(self, grads):
        return _composed_apply(self, grads, type(self)._rule)


class _AdamFamily(_Composed):
    _slot_names = ("m", "v")
    _default_betas = (0.9, 0.999)

    betas = _group_option("betas", "(b1, b2).")
    eps = _group_option("eps", "Denominator term.")

    def _check_group(self, group, i):
        super()._check_group(group, i)
        where = type(self).__name__ + ("" if i is None else f"(param_groups[{i}])")
        group["betas"] = _betas(where, group["betas"])
        _nonneg(where, eps=group["eps"])

    def _prologue(self, group, t, p, g):
        """What every rule of the family starts with: (b1, b2, lr, eps, t + 1, g with L2 weight decay)."""
        b1, b2 = group["betas"]
        wd = float(group["weight_decay"])
        return b1, b2, self.group_lr(group), float(group["eps"]), t + 1, (g + wd * p if wd else g)


class NAdam(_AdamFamily):
    """NAdam (Dozat 2016), PyTorch's form with momentum decay psi:
    mu_t = b1 (1 - 0.96^(t psi) / 2);  m, v as Adam;  denom = sqrt(v / (1 - b2^t)) + eps;
    p <- p - lr (1 - mu_t) / (1 - prod_{i<=t} mu_i) g / denom - lr mu_{t+1} / (1 - prod_{i<=t+1} mu_i) m / denom.
    ``weight_decay`` is L2 (added to g)."""

    def __init__(self, params=None, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3,
                 *, clip_norm=None):
        _nonneg("NAdam", momentum_decay=momentum_decay)
        self._mu_prod = {}
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay, betas=betas, eps=eps,
                         momentum_decay=momentum_decay)

    def _mu(self, b1, psi, t):
        """(mu_t, prod_{i<=t} mu_i) for t >= 1 (products cached per (b1, psi))."""
        prods = self._mu_prod.setdefault((b1, psi), [1.0])
        while len(prods) <= t:
            k = len(prods)
            prods.append(prods[-1] * b1 * (1.0 - 0.5 * 0.96 ** (k * psi)))
        return b1 * (1.0 - 0.5 * 0.96 ** (t * psi)), prods[t]

    def _rule(self, group, t, p, g, s):
        from ..autodiff.ops import sqrt
        b1, b2, lr, eps, t, g = self._prologue(group, t, p, g)
        psi = float(group["momentum_decay"])
        mu, prod = self._mu(b1, psi, t)
        mu1, prod1 = self._mu(b1, psi, t + 1)
        m = b1 * s["m"] + (1 - b1) * g
        v = b2 * s["v"] + (1 - b2) * g * g
        denom = sqrt(v * (1.0 / (1 - b2 ** t))) + eps
        c_g, c_m = lr * (1 - mu) / (1 - prod), lr * mu1 / (1 - prod1)
        return p - (c_g * g + c_m * m) / denom, {"m": m, "v": v}


class RAdam(_AdamFamily):
    """Rectified Adam (Liu et al. 2020), PyTorch's form: rho_inf = 2 / (1 - b2) - 1,
    rho_t = rho_inf - 2 t b2^t / (1 - b2^t), m_hat = m / (1 - b1^t); if rho_t > 5:
    p <- p - lr r_t m_hat sqrt(1 - b2^t) / (sqrt(v) + eps) with
    r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)), else p <- p - lr m_hat."""

    def __init__(self, params=None, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *, clip_norm=None):
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay, betas=betas, eps=eps)

    def _rule(self, group, t, p, g, s):
        from ..autodiff.ops import sqrt
        b1, b2, lr, eps, t, g = self._prologue(group, t, p, g)
        m = b1 * s["m"] + (1 - b1) * g
        v = b2 * s["v"] + (1 - b2) * g * g
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        rho_inf = 2.0 / (1 - b2) - 1
        rho = rho_inf - 2 * t * b2 ** t / bc2
        if rho > 5.0:
            r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
            return p - (lr * r * math.sqrt(bc2) / bc1) * m / (sqrt(v) + eps), {"m": m, "v": v}
        return p - (lr / bc1) * m, {"m": m, "v": v}


class Adamax(_AdamFamily):
    """Adamax (Kingma & Ba 2015, infinity norm), PyTorch's form: m <- b1 m + (1 - b1) g;
    u <- max(b2 u, |g| + eps);  p <- p - lr / (1 - b1^t) m / u."""
    _slot_names = ("m", "u")

    def __init__(self, params=None, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *, clip_norm=None):
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay, betas=betas, eps=eps)

    def _rule(self, group, t, p, g, s):
        from ..autodiff.ops import abs as _abs, maximum
        b1, b2, lr, eps, t, g = self._prologue(group, t, p, g)
        m = b1 * s["m"] + (1 - b1) * g
        u = maximum(b2 * s["u"], _abs(g) + eps)
        return p - (lr / (1 - b1 ** t)) * m / u, {"m": m, "u": u}


class Lion(_AdamFamily):
    """Lion (Chen et al. 2023): c = b1 m + (1 - b1) g;  p <- p (1 - lr wd) - lr sign(c);
    m <- b2 m + (1 - b2) g. Defaults lr=1e-4, betas=(0.9, 0.99) as the paper."""
    _slot_names = ("m",)

    def __init__(self, params=None, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, *, clip_norm=None):
        super().__init__(params, lr=lr, clip_norm=clip_norm, weight_decay=weight_decay, betas=betas, eps=0.0)

    def _rule(self, group, t, p, g, s):
        from ..autodiff.ops import sign
        b1, b2 = group["betas"]
        lr, wd = self.group_lr(group), float(group["weight_decay"])
        c = b1 * s["m"] + (1 - b1) * g
        if wd:
            p = p * (1.0 - lr * wd)
        return p - lr * sign(c), {"m": b2 * s["m"] + (1 - b2) * g}
