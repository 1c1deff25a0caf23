"""Zero-copy blocks of the fused path's flat outputs (``pinn/fused.py``): ``_block(x, off, shape)`` is
``x.flat[off:off+size].reshape(shape)`` (a view on the host), ``_unblock`` its transpose, ``_split`` a
flat tensor cut into blocks. On devices a Tensor owns a whole Taichi ndarray, so a block would be a
copy; the mechanisms below avoid those copies (``docs/perf.md``, "Device path").
"""
from __future__ import annotations

import math
import threading
import weakref

from .. import backend
from ..autodiff import primitive as _P
from ..autodiff.primitive import Primitive
from ..kernels import taylor as TK

# On devices a block cannot be a view (a Tensor owns a whole Taichi ndarray). Two ways around the copy:
#  - pre-split outputs: the adjoint writes each cotangent into its own buffer and registers them here
#    (``_PRESPLIT[id(flat)] = {offset: buffer}``, ``flat`` itself stays unwritten); ``_block`` hands out
#    the registered buffer (once: a second request for the same block copies from it; any other
#    request first copies every part into ``flat``);
#  - the blocks' cotangents (first order, no graph recorded, outside sm.jit) are copied straight into
#    ONE zero buffer per sweep (``_ACC``): the first block's VJP allocates it and returns it as the
#    cotangent of the stacked tensor, the other blocks copy theirs into it and return None, so the
#    sum of the blocks' scattered cotangents costs one copy per block and no additions.
#    Only for a tensor whose consumers are known to be disjoint blocks, one per offset (``_disjoint``:
#    registered right after they are made; one more ``_block`` of it drops the registration).
_PRESPLIT: dict = {}
_ACC = weakref.WeakKeyDictionary()   # node of the stacked tensor -> {thread id: (buffer Tensor, offsets done)}
_DISJOINT = weakref.WeakKeyDictionary()   # nodes whose only consumers are disjoint blocks (made so far)


def _disjoint(x):
    if x._node is not None and not backend.on_host():
        _DISJOINT[x._node] = True


def _presplit(flat, parts):
    key = id(flat)
    _PRESPLIT[key] = parts
    weakref.finalize(flat, _PRESPLIT.pop, key, None)


def _from_parts(x, off, size):
    """A block of a pre-split flat buffer: the registered part itself, a copy of it, or (None) not pre-split."""
    parts = _PRESPLIT.get(id(x._buf))
    if parts is None:
        return None
    hit = parts.get(off)
    buf = hit[0] if isinstance(hit, tuple) else hit
    if buf is not None and buf.shape[0] == size:
        if not isinstance(hit, tuple):
            parts[off] = (buf,)   # handed out: later requests copy from it
            return buf
        out = backend.empty(size, x.dtype)
        TK.copy(buf, 0, out, 0, size, x.dtype)
        return out
    for o, b in list(parts.items()):   # any other block: fill flat first (correct for every request)
        b = b[0] if isinstance(b, tuple) else b
        TK.copy(b, 0, x._buf, o, b.shape[0], x.dtype)
    _PRESPLIT.pop(id(x._buf), None)
    return None


def _block_forward(x, off, shape):
    size = math.prod(shape)
    if backend.on_host():
        return x._buf[off:off + size], shape, x.dtype
    if _DISJOINT and x._node is not None:
        _DISJOINT.pop(x._node, None)   # a block beyond the registered ones: the cotangents add as usual
    part = _from_parts(x, off, size) if _PRESPLIT else None
    if part is not None:
        return part, shape, x.dtype
    out = backend.empty(size, x.dtype)
    if size:
        TK.copy(x._buf, off, out, 0, size, x.dtype)
    return out, shape, x.dtype


def _unblock_forward(g, off, total, in_shape):
    out = backend.zeros(total, g.dtype)
    if g.size:
        TK.copy(g._buf, 0, out, off, g.size, g.dtype)
    return out, in_shape, g.dtype


_block = Primitive("block", _block_forward)       # out = x.flat[off:off+size].reshape(shape)
_unblock = Primitive("unblock", _unblock_forward)  # its transpose


def _block_vjp(g, x, out, off, shape):
    node = x._node
    if (backend.on_host() or backend.TRACE[0] is not None or node is None or node not in _DISJOINT
            or g._buf is None or g._tangents or _P.is_grad_enabled()):
        return (_unblock(g, off=off, total=x.size, in_shape=x.shape),)
    per = _ACC.get(node)
    if per is None:
        per = _ACC[node] = {}
    tid = threading.get_ident()
    st = per.get(tid)
    if st is None or off in st[1]:   # the first block of this sweep (a block seen twice: a new sweep)
        acc = _unblock(g, off=off, total=x.size, in_shape=x.shape)
        per[tid] = (acc, {off})
        return (acc,)
    if g.size:
        TK.copy(g._buf, 0, st[0]._buf, off, g.size, g.dtype)
    st[1].add(off)
    return (None,)


def _acc_done(out):
    """The stacked tensor's cotangent was consumed: the next sweep starts a new accumulation buffer."""
    per = _ACC.get(out._node) if out._node is not None else None
    if per:
        per.pop(threading.get_ident(), None)


_block.def_vjp(_block_vjp)
_block.def_jvp(lambda ts, x, out, off, shape: _block(ts[0], off=off, shape=shape))
_unblock.def_vjp(lambda g, x, out, off, total, in_shape: (_block(g, off=off, shape=x.shape),))
_unblock.def_jvp(lambda ts, x, out, off, total, in_shape: _unblock(ts[0], off=off, total=total,
                                                                    in_shape=in_shape))


def _split(flat, shapes):
    out, off = [], 0
    for s in shapes:
        size = math.prod(s)
        out.append(_block(flat, off=off, shape=tuple(s)))
        off += size
    _disjoint(flat)
    return out
