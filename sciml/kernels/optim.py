"""Fused, in-place optimizer update kernels (Taichi only; flat buffers in, written in place).

Each update reads a parameter, its gradient and the optimizer's slot buffers once and writes
them back: the textbook lines of Adam/AdamW, SGD (momentum, Nesterov, weight decay), RMSprop and
Adagrad, with a gradient scale factor (global-norm clipping) and the step's learning rate passed
as scalars. The per-tensor bodies are ``ti.func`` s (``_update_func``); kernels call them for one
tensor (``_run``) or for several in one launch (``update_many``, what the optimizers use).

On CPU the updates run on ``ti.Vector`` lanes (4 x float32 / 2 x float64, 16 bytes, or the host's wide
lanes, 8 / 16 x float32, where every buffer of a tensor is 32 / 64-byte aligned; ``_vec.py``):
the flat buffers are passed as vector-typed ndarrays and the kernel is compiled with Taichi's
``real_matrix_scalarize`` off, so LLVM emits packed SSE loads, stores, ``sqrtps`` and ``divps``
instead of scalar code, and all of an optimizer's tensors of one dtype go through ONE launch of
a generated kernel (vector members for the aligned parts; scalar members for ``n % lanes``
tails, tensors under ``VEC_MIN`` elements and misaligned buffers). Measured (Adam over W1's
669,706 float32 parameters in 6 tensors, interleaved A/B): 1.24 -> 0.48-0.50 ms of kernel time.
The body is the same source for scalars and vectors (IEEE sqrt and division in either form;
LLVM's fast-math contraction may round the two forms differently in the last bit). Taichi's
parallel-for was not faster than the serialized loop here for these kernels (2 vCPUs, 100K-670K
elements; tied at 4M), so tensors run serialized below ``VEC_SERIAL_BELOW`` elements and
blocked-parallel (one launch each) above. Devices update up to 11 (Adam) tensors in one
launch of a generated scalar kernel (one parallel loop per tensor, one element per thread).

These are the only kernels in sciml that write into their inputs: optimizers own the
parameter and slot buffers they update (``sciml.models.Parameter``).
"""
import math

from . import _common as C
from . import _vec as V

BLOCK = 1024  # elements per parallel iteration (measured: 64 -> 1024 cuts Adam on 400k floats ~2x here)
VEC_MIN = 64  # elements: below this the scalar kernel (launch-bound either way)
VEC_SERIAL_BELOW = 1 << 22  # elements: serialized vector loop below this on CPU (measured, see above)
VECTOR = True  # False: every update takes the per-tensor scalar kernel (the device path; benchmarks compare)


def _loop(serial):
    """Elements per iteration of a flat loop: one when serialized, a block of BLOCK when parallel."""
    return 1 if serial else BLOCK


_ARRAYS = {"adam": ("p", "g", "m", "v"), "sgd": ("p", "g", "buf"), "rmsprop": ("p", "g", "sq", "buf"),
           "adagrad": ("p", "g", "s")}  # the gradient is always second
_SCALARS = {"adam": ("step", "b1", "b2", "eps", "inv_sqrt_bc2", "gscale", "wd", "keep"),
            "sgd": ("lr", "momentum", "damp", "gscale", "wd"),
            "rmsprop": ("lr", "alpha", "eps", "momentum", "gscale", "wd"),
            "adagrad": ("lr", "eps", "gscale", "wd")}


def _update_func(kind, serial, blk, plain, flags):
    """The in-place update of one tensor as a ``ti.func`` (arrays, element count n, scalars): the
    same source for scalar buffers and for ndarrays of ``ti.Vector`` (n then counts vectors)."""
    ti = C.ti()
    Tp = ti.template()

    if kind == "adam":
        @ti.func
        def upd(p: Tp, g: Tp, m: Tp, v: Tp, n, step, b1, b2, eps, inv_sqrt_bc2, gscale, wd, keep):
            ti.loop_config(serialize=serial)
            for blkid in range((n + blk - 1) // blk):
                for i in range(blkid * blk, ti.min(n, blkid * blk + blk)):
                    gi = g[i]
                    if ti.static(not plain):  # plain: no clipping scale, no weight decay
                        gi = gi * gscale + wd * p[i]
                    mi = b1 * m[i] + (1 - b1) * gi
                    vi = b2 * v[i] + (1 - b2) * gi * gi
                    m[i] = mi
                    v[i] = vi
                    if ti.static(plain):
                        p[i] = p[i] - step * mi / (ti.sqrt(vi) * inv_sqrt_bc2 + eps)
                    else:
                        p[i] = p[i] * keep - step * mi / (ti.sqrt(vi) * inv_sqrt_bc2 + eps)
        return upd

    if kind == "sgd":
        momentum_on, first, nesterov = flags

        @ti.func
        def upd(p: Tp, g: Tp, buf: Tp, n, lr, momentum, damp, gscale, wd):
            ti.loop_config(serialize=serial)
            for blkid in range((n + blk - 1) // blk):
                for i in range(blkid * blk, ti.min(n, blkid * blk + blk)):
                    pi = p[i]
                    gi = g[i] * gscale + wd * pi
                    d = gi
                    if ti.static(momentum_on):
                        b = gi
                        if ti.static(not first):
                            b = momentum * buf[i] + (1 - damp) * gi
                        buf[i] = b
                        d = b
                        if ti.static(nesterov):
                            d = gi + momentum * b
                    p[i] = pi - lr * d
        return upd

    if kind == "rmsprop":
        (momentum_on,) = flags

        @ti.func
        def upd(p: Tp, g: Tp, sq: Tp, buf: Tp, n, lr, alpha, eps, momentum, gscale, wd):
            ti.loop_config(serialize=serial)
            for blkid in range((n + blk - 1) // blk):
                for i in range(blkid * blk, ti.min(n, blkid * blk + blk)):
                    pi = p[i]
                    gi = g[i] * gscale + wd * pi
                    s = alpha * sq[i] + (1 - alpha) * gi * gi
                    sq[i] = s
                    d = gi / (ti.sqrt(s) + eps)
                    if ti.static(momentum_on):
                        d = momentum * buf[i] + d
                        buf[i] = d
                    p[i] = pi - lr * d
        return upd

    if kind == "adagrad":
        @ti.func
        def upd(p: Tp, g: Tp, s: Tp, n, lr, eps, gscale, wd):
            ti.loop_config(serialize=serial)
            for blkid in range((n + blk - 1) // blk):
                for i in range(blkid * blk, ti.min(n, blkid * blk + blk)):
                    pi = p[i]
                    gi = g[i] * gscale + wd * pi
                    si = s[i] + gi * gi
                    s[i] = si
                    p[i] = pi - lr * gi / (ti.sqrt(si) + eps)
        return upd
    raise ValueError(kind)


def _build_update(kind, dtype, serial, plain=False, flags=(), lanes=0, members=None, device=False):
    """A kernel updating several tensors in one launch: arguments are each tensor's arrays (in
    ``_ARRAYS[kind]`` order), then each tensor's count n_t (elements, or vectors for a vector
    member), then the scalars ``_SCALARS[kind]``. ``members``: lanes per tensor (1 = scalar-typed
    arrays); default one tensor of ``lanes`` (0 = scalar). Its source is generated (the argument
    list depends on the members) and registered with ``linecache`` so that Taichi can read it."""
    import linecache
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    members = tuple(members) if members is not None else (lanes or 1,)
    env = {"ti": ti, "T": T}
    for L in set(members):
        env[f"A{L}"] = ti.types.ndarray(dtype=ti.types.vector(L, T), ndim=1) if L > 1 else C.arr(dtype)
    if device:
        blk = 1   # one element per thread (GPU-shaped: coalesced loads)
    elif len(members) == 1 and members[0] == 1:
        blk = _loop(serial)
    else:
        assert serial or len(members) == 1, "grouped updates are serialized"
        blk = max(BLOCK // max(members), 1)
    env["upd"] = _update_func(kind, serial, blk, plain, flags)
    names, sc = _ARRAYS[kind], _SCALARS[kind]
    sig = ([f"{a}{t}: A{L}" for t, L in enumerate(members) for a in names] + [f"n{t}: ti.i32" for t in range(len(members))]
           + [f"{x}: T" for x in sc])
    body = [f"    upd({', '.join(f'{a}{t}' for a in names)}, n{t}, {', '.join(sc)})" for t in range(len(members))]
    fn = f"{kind}_x{len(members)}"
    src = f"def {fn}({', '.join(sig)}):\n" + "\n".join(body) + "\n"
    fname = f"<sciml.kernels.optim:{kind}:{dtype}:{serial}:{plain}:{flags}:{members}:{device}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    exec(compile(src, fname, "exec"), env)  # noqa: S102 - generated from the fixed names above
    return ti.kernel(env[fn])


def _build(kind, dtype, serial, plain=False, flags=(), lanes=0):
    """Kernel ``kind``: an update kernel for one tensor (``lanes`` > 0: the vector form), or one
    of the helper kernels below."""
    if kind in _ARRAYS:
        return _build_update(kind, dtype, serial, plain, flags, lanes)
    ti = C.ti()
    A = C.arr(dtype)
    T = C.backend.ti_dtype(dtype)
    blk = _loop(serial)

    if kind == "copy":
        @ti.kernel
        def k(dst: A, src: A, n: ti.i32):
            ti.loop_config(serialize=serial)
            for blkid in range((n + blk - 1) // blk):
                for i in range(blkid * blk, ti.min(n, blkid * blk + blk)):
                    dst[i] = src[i]
        return k

    if kind == "axpy":
        @ti.kernel
        def k(p: A, u: A, n: ti.i32, a: T):
            ti.loop_config(serialize=serial)
            for blkid in range((n + blk - 1) // blk):
                for i in range(blkid * blk, ti.min(n, blkid * blk + blk)):
                    p[i] = p[i] + a * u[i]
        return k

    if kind == "sumsq":   # an ordered reduction (kernels/_common.scratch): the same bits on every run
        CH, combine = C.reduce_chunk(), C.combine_func()

        @ti.kernel
        def k(x: A, out: A, part: A, n: ti.i32, slot: ti.i32, nch: ti.i32):
            ti.loop_config(serialize=serial)
            for ch in range(nch):
                acc = ti.cast(0.0, T)
                for i in range(ch * CH, ti.min(n, ch * CH + CH)):
                    acc += x[i] * x[i]
                part[ch] = acc
            for _ in range(1):
                combine(part, out, slot, nch, 1, -1, True)   # out[slot] += the partials in order
        return k
    raise ValueError(kind)


def _kernel(kind, n, dtype, plain=False, flags=()):
    serial = C.launch_mode(n)
    return C.cached(("optim", kind, dtype, serial, plain, flags), lambda: _build(kind, dtype, serial, plain, flags))


def _run(kind, arrays, n, dtype, scalars, plain=False, flags=()):
    """Launch update ``kind`` over ``n`` elements of the flat ``arrays`` (written in place).

    CPU, n >= VEC_MIN, every buffer 16-byte aligned: the vector kernel over the first
    n - n % lanes elements and the scalar kernel over the rest (views); else the scalar kernel."""
    L = V.LANES.get(dtype)
    if L and VECTOR and n >= VEC_MIN and C.backend.on_host():
        ptrs = V.pointers(arrays)
        if ptrs is not None:
            L = V.lanes_for(ptrs, dtype)  # the host's wide lanes where every buffer is aligned for them
            h = n - n % L
            serial = h < VEC_SERIAL_BELOW or C.busy()
            k = V.cached(("optim_vec", kind, dtype, serial, plain, flags, L),
                         lambda: _build(kind, dtype, serial, plain, flags, lanes=L), L, rebind=True)
            m = h // L
            k(arrays, ptrs, [m] * len(arrays), (m,) + tuple(scalars))
            if h == n:
                return
            arrays, n = [a[h:n] for a in arrays], n - h
    _kernel(kind, n, dtype, plain, flags)(*arrays, n, *scalars)


GROUP_MAX = 8  # tensors per grouped launch (the generated kernel has 3-4 array arguments per tensor)


def _pointers(arrays, cache, aligned=True):
    """Data addresses of ``arrays`` (None if ``aligned`` and one is not 16-byte aligned). ``cache``
    (an optimizer's dict) remembers the addresses of its persistent buffers (every array but the
    gradient, the second): an address costs ~0.6-2 us per call here (``_common.address``)."""
    g = arrays[1]
    out = []
    for a in arrays:
        if cache is None or a is g:
            q = C.address(a)
        else:
            e = cache.get(id(a))
            if e is None or e[0] is not a:
                e = cache[id(a)] = (a, C.address(a))
            q = e[1]
        if aligned and q & 15:
            return None
        out.append(q)
    return out


def update_many(kind, dtype, items, scalars, plain=False, flags=(), cache=None):
    """Update ``kind`` over several tensors: ``items`` = [(arrays, n)] (arrays in ``_ARRAYS[kind]``
    order, written in place), the same ``scalars`` for all.

    On CPU every tensor below VEC_SERIAL_BELOW elements goes into ONE launch of a generated
    kernel (per GROUP_MAX tensors): the vector parts of the 16-byte-aligned ones as vector
    members, their ``n % lanes`` tails and the small or misaligned tensors as scalar members
    (measured: 6 launches ~17 us each -> one). Larger tensors take :func:`_run` (parallel)."""
    L = V.LANES.get(dtype)
    if not C.backend.on_host():
        _update_device(kind, dtype, items, scalars, plain, flags)
        return
    if not (L and VECTOR):
        for arrays, n in items:
            _run(kind, arrays, n, dtype, scalars, plain, flags)
        return
    vec, scal = [], []
    for arrays, n in items:
        if n >= VEC_SERIAL_BELOW:
            _run(kind, arrays, n, dtype, scalars, plain, flags)
            continue
        ptrs = _pointers(arrays, cache) if n >= VEC_MIN else None
        if ptrs is None:
            scal.append((arrays, _pointers(arrays, cache, aligned=False), n))
            continue
        Lm = V.lanes_for(ptrs, dtype)  # wide where every buffer of the tensor is aligned for it, else 16-byte
        h = n - n % Lm
        vec.append((arrays, ptrs, h // Lm, Lm))
        if h < n:
            tail = [a[h:n] for a in arrays]
            scal.append((tail, [q + h * a.itemsize for q, a in zip(ptrs, arrays)], n - h))
    vec.sort(key=lambda m: -m[3])  # wide members first: fewer distinct member layouts to compile
    members = [(m[:3], m[3]) for m in vec] + [(m, 1) for m in scal]
    na = len(_ARRAYS[kind])
    for c0 in range(0, len(members), GROUP_MAX):
        chunk = members[c0:c0 + GROUP_MAX]
        spec = tuple(Lm for _, Lm in chunk)
        k = V.cached(("optim_group", kind, dtype, plain, flags, spec),
                     lambda: _build_update(kind, dtype, True, plain, flags, members=spec),
                     tuple(Lm for Lm in spec for _ in range(na)), rebind=True)  # step-dependent scalars
        ms = [m[2] for m, _ in chunk]
        k([a for m, _ in chunk for a in m[0]], [q for m, _ in chunk for q in m[1]],
          [c for c in ms for _ in range(na)], tuple(ms) + tuple(scalars))


MAX_ARGS = 64  # Taichi's limit on a kernel's arguments (x64; Vulkan took as many here)


def _update_device(kind, dtype, items, scalars, plain, flags):
    """Devices: the tensors of one update in as few launches as Taichi's argument limit allows (a
    generated kernel with one parallel loop per tensor, one element per thread; Adam: 11 tensors a
    launch); counts are arguments, so one kernel serves every group of that many tensors."""
    items = [(a, n) for a, n in items if n > 0]
    per = (MAX_ARGS - len(scalars)) // (len(_ARRAYS[kind]) + 1)
    for c0 in range(0, len(items), per):
        chunk = items[c0:c0 + per]
        nt = len(chunk)
        k = C.cached(("optim_group_dev", kind, dtype, plain, flags, nt),
                     lambda: _build_update(kind, dtype, False, plain, flags, members=(1,) * nt, device=True))
        k(*[a for arrays, _ in chunk for a in arrays], *[n for _, n in chunk], *scalars)


def adam_scalars(lr, b1, b2, eps, bc1, bc2, gscale=1.0, wd=0.0, decoupled_wd=0.0):
    """(scalars, plain) of the Adam kernel; ``bc1``, ``bc2`` = 1 - b^t (bias corrections)."""
    # p <- p (1 - dwd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps): the textbook line, one division
    plain = gscale == 1.0 and wd == 0.0 and decoupled_wd == 0.0
    return (lr / bc1, b1, b2, eps, 1.0 / math.sqrt(bc2), gscale, wd, 1.0 - decoupled_wd), plain


def adam(p, g, m, v, n, dtype, lr, b1, b2, eps, bc1, bc2, gscale=1.0, wd=0.0, decoupled_wd=0.0):
    """In place: Adam (L2 weight decay ``wd``; AdamW's decoupled decay as ``decoupled_wd`` = lr*wd)."""
    scalars, plain = adam_scalars(lr, b1, b2, eps, bc1, bc2, gscale, wd, decoupled_wd)
    _run("adam", (p, g, m, v), n, dtype, scalars, plain)


def sgd_flags(momentum, first, nesterov, has_buf=True):
    mom = momentum != 0 and has_buf
    return (mom, bool(first), bool(nesterov) and mom)


def sgd(p, g, buf, n, dtype, lr, momentum=0.0, dampening=0.0, gscale=1.0, wd=0.0, first=True, nesterov=False):
    """In place: SGD with optional (Nesterov) momentum, PyTorch's formulation."""
    flags = sgd_flags(momentum, first, nesterov, buf is not None)
    _run("sgd", (p, g, buf if flags[0] else g), n, dtype, (lr, momentum, dampening, gscale, wd), flags=flags)


def rmsprop(p, g, sq, buf, n, dtype, lr, alpha, eps, momentum=0.0, gscale=1.0, wd=0.0):
    mom = momentum != 0 and buf is not None
    _run("rmsprop", (p, g, sq, buf if mom else sq), n, dtype, (lr, alpha, eps, momentum, gscale, wd), flags=(mom,))


def adagrad(p, g, s, n, dtype, lr, eps, gscale=1.0, wd=0.0):
    _run("adagrad", (p, g, s), n, dtype, (lr, eps, gscale, wd))


def copy(dst, src, n, dtype):
    """dst[:n] = src[:n] in place."""
    _kernel("copy", n, dtype)(dst, src, n)


def axpy(p, u, n, dtype, a=1.0):
    """p[:n] += a * u[:n] in place."""
    _kernel("axpy", n, dtype)(p, u, n, a)


def sumsq(x, out, n, dtype, slot):
    """out[slot] += sum(x[:n] ** 2) (out zeroed by the caller)."""
    nch = C.chunks(n)
    _kernel("sumsq", n, dtype)(x, out, C.scratch(nch, dtype), n, slot, nch)


def _build_gather(dtype, k):
    """out[off + i] = s_i[0] for i < k in one launch (generated: the argument list depends on k)."""
    import linecache
    ti = C.ti()
    env = {"ti": ti, "A": C.arr(dtype)}
    src = (f"def gather_x{k}(out: A, off: ti.i32, {', '.join(f's{i}: A' for i in range(k))}):\n"
           + "".join(f"    out[off + {i}] = s{i}[0]\n" for i in range(k)))
    fname = f"<sciml.kernels.optim:gather:{dtype}:{k}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    exec(compile(src, fname, "exec"), env)  # noqa: S102 - generated from the fixed names above
    return ti.kernel(env[f"gather_x{k}"])


GATHER_MAX = 16  # scalars per gather launch (32 misread the last one on lavapipe)


def gather_scalars(out, off, bufs, dtype):
    """In place: ``out[off + i] = bufs[i][0]`` (one-element buffers of ``dtype``, e.g. a step's loss
    and its terms), one launch per GATHER_MAX, so that a device reads many values back at once."""
    for c0 in range(0, len(bufs), GATHER_MAX):
        chunk = bufs[c0:c0 + GATHER_MAX]
        C.cached(("gather", dtype, len(chunk)), lambda: _build_gather(dtype, len(chunk)))(out, off + c0, *chunk)
