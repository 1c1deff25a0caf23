"""Generated kernels for a fused region: elementwise ops, strided views and their adjoints, scalar
broadcasts and whole-array sums, as ONE Taichi kernel (one launch) for any number of outputs.

A region is a DAG of nodes over flat index spaces (see :func:`source`):

    ("x", (), k, n)            array argument k (flat, n elements; n == 1 is read at 0 by consumers)
    ("op", (a, b), name, n)    elementwise op (``fused.UNARY`` / ``fused.BINARY``); size-1 args broadcast
    ("view", (a,), (off, s), n)   out[i] = a[off + i * s]      (an affine strided view: rows, columns)
    ("unview", (a,), (off, s, m), n) out[j] = a[(j - off) / s] where that is one of the view's m elements, else 0
    ("sum", (a,), (), 1)       the sum of a's elements in order

Every output gets one top-level loop that computes its expression inline at each index (nodes used
twice in one iteration are computed once; nothing but sums is stored between loops). Each sum is its own
loop(s), before the loops that read it, in the order ``kernels/reduce.py`` adds (sequential up to
``reduce.MAX_SEQ`` elements on devices, chunks of <= 2048 then the partials beyond; on the host a single
sequence below ``SERIAL_BELOW``, 256 chunks above), so a fused sum has the unfused sum's bits wherever
that kernel takes the scalar path (the CPU's vector-lane sum of >= 4096 elements adds in another order).
Loops of one launch run in order (Taichi's tasks), so a later loop reads the sums an earlier one wrote.
"""
from . import _common as C
from . import elementwise as E
from . import fused as KF
from . import reduce as KR

UNARY, BINARY = KF.UNARY, KF.BINARY


def sum_plan(r: int, host: bool):
    """[(chunk, nch), ...]: the partial-sum levels ``kernels/reduce.py`` uses for a sum of ``r`` elements
    (scalar path), outermost first; [] = one sequential loop."""
    levels = []
    while True:
        if not host and r > KR.MAX_SEQ:
            nch = -(-r // 2048)
        elif host and r >= C.SERIAL_BELOW:
            nch = min(KR.CHUNKS, -(-r // 1024))
        else:
            return levels
        chunk = -(-r // nch)
        nch = -(-r // chunk)
        levels.append((chunk, nch))
        r = nch


class _Emitter:
    def __init__(self, nodes):
        self.nodes, self.lines, self.k = nodes, [], 0
        self.red = {}  # node -> slot in `red` holding its sum

    def tmp(self, p="t"):
        self.k += 1
        return f"{p}{self.k}"

    def emit(self, j, idx, cache, ind):
        """Statements computing node j at index expression idx (appended at indent ind); returns its name."""
        kind, args, attr, n = self.nodes[j]
        if n == 1:
            idx = "0"
        key = (j, idx)
        if key in cache:
            return cache[key]
        sp = " " * ind
        if kind == "x":
            v = self.tmp("r")
            self.lines.append(f"{sp}{v} = x{attr}[{idx}]")
        elif kind == "sum":
            v = self.tmp("r")
            self.lines.append(f"{sp}{v} = red[{self.red[j]}]")
        elif kind == "view":
            off, s = attr
            q = idx if s == 1 else f"{idx} * {s}"
            v = self.emit(args[0], f"({q} + {off})" if off else q, cache, ind)
        elif kind == "unview":
            off, s, m = attr
            q, v = self.tmp("q"), self.tmp()
            self.lines.append(f"{sp}{v} = ti.cast(0, T)")
            self.lines.append(f"{sp}{q} = {idx} - {off}")
            cond = f"{q} >= 0 and {q} < {m * s}" + (f" and {q} % {s} == 0" if s != 1 else "")
            self.lines.append(f"{sp}if {cond}:")
            inner = self.emit(args[0], q if s == 1 else f"({q} // {s})", dict(cache), ind + 4)
            self.lines.append(f"{sp}    {v} = {inner}")
        else:  # "op"
            refs = [self.emit(a, idx, cache, ind) for a in args]
            v = self.tmp()
            expr = f"F_{attr}({refs[0]})" if attr in UNARY else BINARY[attr].format(*refs)
            self.lines.append(f"{sp}{v} = {expr}")
        cache[key] = v
        return v


def source(nodes, outputs, host: bool, n_arrays: int):
    """Python source of ``make(ti, A, T, F)`` returning the kernel ``k(x0.., o0.., red)``.

    ``nodes``: the region (module doc); ``outputs``: [(node, n)] written to o0.. (n: the output's size;
    a size-1 node broadcasts); ``n_arrays``: the array arguments (some may be unused). Returns (source,
    number of `red` slots)."""
    em = _Emitter(nodes)
    used = sorted({a for kind, _, a, _ in nodes if kind == "op" and a in UNARY})
    L = em.lines
    slots = 0
    for j, (kind, args, attr, n) in enumerate(nodes):  # sums in creation order: inputs before their readers
        if kind != "sum":
            continue
        r = nodes[args[0]][3]
        src, base = None, None  # the level being summed: None = the expression itself, else red[base:base+len]
        for chunk, nch in sum_plan(r, host) + [(r, 1)]:
            dst = slots
            slots += nch
            L.append("        ti.loop_config(serialize=False)" if nch > 1 else
                     "        ti.loop_config(serialize=True)")
            L.append(f"        for c in range({nch}):")
            L.append(f"            hi = ti.min(c * {chunk} + {chunk}, {r})")
            L.append("            acc = ti.cast(0, T)")
            L.append(f"            for q in range(c * {chunk}, hi):")
            if src is None:
                v = em.emit(args[0], "q", {}, 16)
            else:
                v = em.tmp("r")
                L.append(f"                {v} = red[{base} + q]")
            L.append(f"                acc = acc + {v}")
            L.append(f"            red[{dst} + c] = acc")
            src, base, r = "red", dst, nch
        em.red[j] = base
    for o, (j, n) in enumerate(outputs):
        L.append(f"        ti.loop_config(serialize={bool(host and C.launch_mode(n))})")
        L.append(f"        for i in range({n}):")
        v = em.emit(j, "i", {}, 12)
        L.append(f"            o{o}[i] = {v}")
    params = ", ".join([f"x{k}: A" for k in range(n_arrays)] + [f"o{k}: A" for k in range(len(outputs))]
                       + ["red: A"])
    head = ["# generated by sciml.kernels.fused_region: do not edit", "def make(ti, A, T, F):"]
    head += [f"    F_{op} = F[{op!r}]" for op in used]
    head += ["", "    @ti.kernel", f"    def region({params}):"]
    return "\n".join(head + L + ["    return region", ""]), max(slots, 1)


def build(src: str, dtype: str):
    """The (cached) kernel of :func:`source`'s ``src``, compiled without fast math: LLVM would otherwise
    contract a product and a sum into an FMA (or reassociate), which the unfused kernels, one op each,
    cannot do; without it every op rounds as it does alone."""
    def make():
        ti = C.ti()
        from .. import backend
        return KF._load(src).make(ti, C.arr(dtype), backend.ti_dtype(dtype), E._funcs(dtype))
    return _Exact(C.cached(("fused_region", src, dtype), make))


class _Exact:
    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k

    def __call__(self, *args):
        k = self.k
        if k.fast is not None:
            return k(*args)
        with C.LOCK:  # the first call compiles
            cfg = C.ti().lang.impl.current_cfg()
            prev, cfg.fast_math = cfg.fast_math, False
            try:
                return k(*args)
            finally:
                cfg.fast_math = prev
