"""The dense epilogue as one primitive: ``epilogue(h, b, act, p, state)`` = dropout(act(h + b)) for the GEMM
output h (..., m), the bias b (m,) or None, an activation ("identity", "relu", "tanh", "sigmoid", "silu") and
inverted dropout drawn from a Dropout stream ``state`` (its mask is the one ``Dropout`` itself draws), in one
kernel forward (the counter advance included; tanh / sigmoid / silu also store m act'(h + b)) and one backward
(g times that, or act' recomputed from h + b for identity / relu; the bias sums in the same pass;
``sciml/kernels/nn_dropout.py``). ``Sequential`` routes Linear -> activation -> Dropout
runs through it, and ``Dropout`` alone is ``epilogue(x, None, "identity", p, state)``.

Recorded backward passes and forward-mode tangents use :func:`epilogue_composed` (the same function in sciml
ops, the drawn mask a constant), so every order differentiates.
"""
from __future__ import annotations

from .. import backend
from ..autodiff.backward import needs
from ..autodiff.ops import relu, sigmoid, tanh
from ..autodiff.primitive import Primitive, is_grad_enabled
from ..autodiff.tensor import Tensor, zeros
from ..kernels import nn_dropout as K

__all__ = ["epilogue", "epilogue_composed", "ACTS"]

ACTS = K.EPI_ACTS
_ACT = {"identity": lambda z: z, "relu": relu, "tanh": tanh, "sigmoid": sigmoid, "silu": lambda z: z * sigmoid(z)}


def epilogue_composed(h, b, act, mask=None):
    """act(h + b) * mask in sciml ops (b, mask: Tensors or None)."""
    z = h if b is None else h + b
    a = _ACT[act](z)
    return a if mask is None else a * mask


def _fwd(*ins, act, p, state, saved):
    h = ins[0]
    b = ins[1] if len(ins) > 1 else None
    cols = b.shape[0] if b is not None else max(h.size, 1)
    rows = h.size // cols
    dt = h.dtype
    y = backend.empty(max(h.size, 1), dt)
    m = backend.empty(max(h.size, 1), dt) if state is not None else None
    d = backend.empty(max(h.size, 1), dt) if act in K.SAVE_D else None
    K.epilogue(act, h._buf, b._buf if b is not None else None, y, m, state._buf if state is not None else None,
               rows, cols, p, dt, state.dtype if state is not None else None, d)
    saved["mask"], saved["deriv"] = m, d
    return y, h.shape, dt


_epi = Primitive("dense_epilogue", _fwd)


def _mask(h, saved):
    m = saved["mask"]
    return None if m is None else Tensor._make(m, h.shape, h.dtype)


@_epi.def_vjp
def _vjp(g, *ins, out, act, p, state, saved):
    h = ins[0]
    b = ins[1] if len(ins) > 1 else None
    if is_grad_enabled() or any(t._tangents for t in (g, out) + ins):
        from ..autodiff.transforms import vjp
        mask = _mask(h, saved)
        _, pull = vjp(lambda *xs: epilogue_composed(xs[0], xs[1] if len(xs) > 1 else None, act, mask), *ins)
        return tuple(pull(g, create_graph=is_grad_enabled()))
    dt = h.dtype
    cols = b.shape[0] if b is not None else max(h.size, 1)
    rows = h.size // cols
    m = saved["mask"]
    if b is None and act == "identity" and m is None:
        return (g,)
    want_h = needs(0)
    if b is None and not want_h:
        return (None,)
    gz = backend.empty(max(h.size, 1), dt) if want_h else None
    gb = backend.empty(cols, dt) if b is not None else None
    if h.size:
        K.epilogue_vjp(act, g._buf, h._buf, b._buf if b is not None else None, m, gz, gb, rows, cols, dt,
                       saved.get("deriv"))
    elif gb is not None:
        gb = backend.zeros(cols, dt)
    gh = Tensor._make(gz, h.shape, dt) if want_h else None
    if b is None:
        return (gh,)
    return gh, (Tensor._make(gb, b.shape, dt) if needs(1) else None)


@_epi.def_jvp
def _jvp(ts, *ins, out, act, p, state, saved):
    from ..autodiff.transforms import jvp
    mask = _mask(ins[0], saved)
    ts = tuple(zeros(v.shape, v.dtype) if t is None else t for v, t in zip(ins, ts))
    return jvp(lambda *xs: epilogue_composed(xs[0], xs[1] if len(xs) > 1 else None, act, mask), ins, ts)[1]


def epilogue(h, b=None, act="identity", p=0.0, state=None):
    """dropout(act(h + b)) in one kernel: h (..., m) and b (m,) or None of one float dtype; ``state`` a Dropout
    stream buffer (6 words) whose counter advances, or None (no dropout); p in [0, 1)."""
    if state is None or p == 0:
        state, p = None, 0.0
    if b is None:
        return _epi(h, act=act, p=float(p), state=state, saved={})
    return _epi(h, b, act=act, p=float(p), state=state, saved={})
