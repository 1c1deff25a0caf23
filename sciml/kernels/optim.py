"""Fused, in-place optimizer update kernels (Taichi only; flat buffers in, written in place).

Each optimizer step for one parameter is ONE kernel launch (plus a scalar tail launch when the
size is not a multiple of the vector width) that reads the parameter, its gradient and the
optimizer's slot buffers once and writes them back: the textbook lines of Adam/AdamW, SGD
(momentum, Nesterov, weight decay), RMSprop and Adagrad, with a gradient scale factor
(global-norm clipping) and the step's learning rate passed as scalars.

On CPU the update kernels run on ``ti.Vector`` lanes (4 x float32 / 2 x float64, 16 bytes;
``_vec.py``): the flat buffers are passed as vector-typed ndarrays and the kernel is compiled
with Taichi's ``real_matrix_scalarize`` off, so LLVM emits packed SSE loads, stores, ``sqrtps``
and ``divps`` instead of scalar code (measured: Adam over W1's 669K
float32 parameters 1.28 -> ~0.52 ms). The kernel source is the same for scalars and vectors
(IEEE sqrt and division in either form; LLVM's fast-math contraction may round the two forms
differently in the last bit). A buffer
that is not 16-byte aligned, a tensor below ``VEC_MIN`` elements, and devices take the
scalar kernel. Measured here (2 vCPUs): the serialized loop beat Taichi's parallel-for up to
~4M float32 elements on this VM (hyper-threaded pair); parallel above ``VEC_SERIAL_BELOW``.

These are the only kernels in sciml that write into their inputs: optimizers own the
parameter and slot buffers they update (``sciml.models.Parameter``).
"""
import math

from . import _common as C
from . import _vec as V

BLOCK = 1024  # elements per parallel iteration (measured: 64 -> 1024 cuts Adam on 400k floats ~2x here)
VEC_MIN = 64  # elements: below this the scalar kernel (launch-bound either way)
VEC_SERIAL_BELOW = 1 << 22  # elements: serialized vector loop below this on CPU (measured, see above)


def _loop(serial):
    """Elements per iteration of a flat loop: one when serialized, a block of BLOCK when parallel."""
    return 1 if serial else BLOCK


def _build(kind, dtype, serial, plain=False, flags=(), lanes=0):
    """The update kernel ``kind``. ``lanes`` > 0: the vector form (arrays are ndarrays of
    ``ti.Vector(lanes)``, ``n`` counts vectors); the body is the same source for both forms."""
    ti = C.ti()
    T = C.backend.ti_dtype(dtype)
    if lanes:
        A = ti.types.ndarray(dtype=ti.types.vector(lanes, T), ndim=1)
        blk = max(BLOCK // lanes, 1)
    else:
        A = C.arr(dtype)
        blk = _loop(serial)

    if kind == "adam":
        @ti.kernel
        def k(p: A, g: A, m: A, v: A, n: ti.i32, step: T, b1: T, b2: T, eps: T, inv_sqrt_bc2: T,
              gscale: T, wd: T, keep: T):
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
        return k

    if kind == "sgd":
        momentum_on, first, nesterov = flags

        @ti.kernel
        def k(p: A, g: A, buf: A, n: ti.i32, lr: T, momentum: T, damp: T, gscale: T, wd: T):
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
        return k

    if kind == "rmsprop":
        (momentum_on,) = flags

        @ti.kernel
        def k(p: A, g: A, sq: A, buf: A, n: ti.i32, lr: T, alpha: T, eps: T, momentum: T, gscale: T,
              wd: T):
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
        return k

    if kind == "adagrad":
        @ti.kernel
        def k(p: A, g: A, s: A, n: ti.i32, lr: T, eps: T, gscale: T, wd: T):
            ti.loop_config(serialize=serial)
            for blkid in range((n + blk - 1) // blk):
                for i in range(blkid * blk, ti.min(n, blkid * blk + blk)):
                    pi = p[i]
                    gi = g[i] * gscale + wd * pi
                    si = s[i] + gi * gi
                    s[i] = si
                    p[i] = pi - lr * gi / (ti.sqrt(si) + eps)
        return k

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

    if kind == "sumsq":
        @ti.kernel
        def k(x: A, out: A, n: ti.i32, slot: ti.i32):
            ti.loop_config(serialize=serial)
            for blkid in range((n + blk - 1) // blk):
                acc = ti.cast(0.0, T)
                for i in range(blkid * blk, ti.min(n, blkid * blk + blk)):
                    acc += x[i] * x[i]
                out[slot] += acc
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
    if L and n >= VEC_MIN and C.backend.on_host():
        ptrs = V.pointers(arrays)
        if ptrs is not None:
            h = n - n % L
            serial = h < VEC_SERIAL_BELOW
            k = V.cached(("optim_vec", kind, dtype, serial, plain, flags),
                         lambda: _build(kind, dtype, serial, plain, flags, lanes=L), L)
            m = h // L
            k(arrays, ptrs, [m] * len(arrays), (m,) + tuple(scalars))
            if h == n:
                return
            arrays, n = [a[h:n] for a in arrays], n - h
    _kernel(kind, n, dtype, plain, flags)(*arrays, n, *scalars)


def adam(p, g, m, v, n, dtype, lr, b1, b2, eps, bc1, bc2, gscale=1.0, wd=0.0, decoupled_wd=0.0):
    """In place: Adam (L2 weight decay ``wd``; AdamW's decoupled decay as ``decoupled_wd`` = lr*wd)."""
    # p <- p (1 - dwd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps): the textbook line, one division
    plain = gscale == 1.0 and wd == 0.0 and decoupled_wd == 0.0
    _run("adam", (p, g, m, v), n, dtype, (lr / bc1, b1, b2, eps, 1.0 / math.sqrt(bc2), gscale, wd,
                                          1.0 - decoupled_wd), plain)


def sgd(p, g, buf, n, dtype, lr, momentum=0.0, dampening=0.0, gscale=1.0, wd=0.0, first=True, nesterov=False):
    """In place: SGD with optional (Nesterov) momentum, PyTorch's formulation."""
    mom = momentum != 0 and buf is not None
    _run("sgd", (p, g, buf if mom else g), n, dtype, (lr, momentum, dampening, gscale, wd),
         flags=(mom, bool(first), bool(nesterov) and mom))


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
    _kernel("sumsq", n, dtype)(x, out, n, slot)
