"""Register-tile GEMM bodies with fused multiply-adds, for the serial float32 CPU kernels of ``lstm_host.py``.

Taichi 1.7's CPU JIT forms no FMA (its IR carries no ``contract`` flag and its JIT's TargetOptions are LLVM's
defaults: /work/shared/notes/taichi-cpu-codegen.md, docs/perf.md), so a register tile of ``acc += x * w`` costs a
multiply and an add per lane, half of what the host's FMA units do. Taichi does link LLVM bitcode into a kernel
(``ExternalFuncCallStmt::BITCODE``: the module is linked into the kernel's module, its functions are marked
always-inline, and the JIT compiles them with the host's features): the tile's inner loop here is such a
function, ``llvm.fma`` on ``<L x float>`` vectors, and the Taichi kernel around it keeps everything else (the
cells, the layouts, the step loop). Only on Taichi's x64 CPU arch (the caller checks): devices run the Taichi
tiles.

The function (``tile_name(L, R, G)``): ``void f(i64* w_0..w_{G-1}, i64* x_0..x_{R-1}, i32* n, i32* s, <L x
float>* acc_{r,g} ...)``: every argument a pointer to a local of the calling kernel (Taichi passes bitcode
arguments so); ``w_g`` the address of column block g's first weight vector (aligned ``<L x float>``, ``s``
vectors apart from one k to the next), ``x_r`` the address of row r's first input (``n`` consecutive floats);
for k < n: ``acc_{r,g} += x_r[k] * w_g[k s]`` (a broadcast and one FMA), the accumulators read from and written
back to the locals (the row-major r, g order).

``axpy_name(L)`` (``axpy``): one FMA on three locals, ``acc = fma(x, w, acc)`` (x broadcast), for kernels that
keep their own arrays and loops (``skinny_gemm.py``, ``taylor_gemm.py``): Taichi passes locals only (an ndarray
element is refused: "external func call via bitcode must pass in local variables"), so no raw address enters the
kernel and sciml.jit's replays rebind its arrays as for any kernel; once inlined, the locals become registers.

``fma_name(L)`` (``fma``): ``r = fma(a, b, c)`` on L-lane locals (L = 1: scalars), one rounding: the Horner steps of
the float32 transcendental forms (``elementwise.exp_funcs``: tanh, exp, sigmoid), whose dependent chains of
separate multiplies and adds were what those maps spent their time on.

The bitcode (``fma_tile.bc``, next to this file) is ``llvm-as`` (LLVM 14, bitcode that Taichi's LLVM 15 reads)
of :func:`module_text`; ``python -m sciml.kernels.fma_tile`` writes it again (a test compares the two when
``llvm-as`` is installed). Taichi's offline cache keys a kernel by its Python source, not the bitcode: the
function names carry ``VERSION``, bump it when the text changes.
"""
import os
import warnings

# Taichi warns at compile time about the call of a Python function (``call`` below) inside a kernel
warnings.filterwarnings("ignore", message=r".*Calling non-taichi function .FT\.(call|axpy|fma)", category=SyntaxWarning)

VERSION = 3
TEXT_SHA256 = "ea7ccb51bbfc4a7d"  # of module_text(): a test checks it (a new text needs a new VERSION)
SHAPES = ((16, 4, 4), (8, 2, 4))  # (lanes, rows, gates) of the functions in the module
AXPY_LANES = (16, 8)  # lanes of the one-FMA functions (``axpy_name``: skinny_gemm.py, taylor_gemm.py)
FMA_LANES = (1, 4, 8, 16, 32, 64)  # lanes of the elementwise FMA functions (``fma_name``: elementwise.exp_funcs)
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fma_tile.bc")
_LAYOUT = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"


def tile_name(L, R, G):
    return f"sciml_fma_tile_v{VERSION}_{L}x{R}x{G}"


def _tile(L, R, G):
    v = f"<{L} x float>"
    w = [f"%w{g}" for g in range(G)]
    x = [f"%x{r}" for r in range(R)]
    acc = [f"%a{r}_{g}" for r in range(R) for g in range(G)]
    args = [f"i64* {p}p" for p in w + x] + ["i32* %np", "i32* %sp"] + [f"{v}* {a}p" for a in acc]
    o = [f"define void @{tile_name(L, R, G)}({', '.join(args)}) {{", "entry:"]
    for p in w:
        o += [f"  {p}i = load i64, i64* {p}p", f"  {p} = inttoptr i64 {p}i to {v}*"]
    for p in x:
        o += [f"  {p}i = load i64, i64* {p}p", f"  {p} = inttoptr i64 {p}i to float*"]
    o += ["  %n = load i32, i32* %np", "  %s = load i32, i32* %sp", "  %ss = sext i32 %s to i64"]
    for a in acc:
        o += [f"  {a}0 = load {v}, {v}* {a}p, align 4"]
    o += ["  %go = icmp sgt i32 %n, 0", "  br i1 %go, label %loop, label %done", "loop:",
          "  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]"]
    for a in acc:
        o += [f"  {a}l = phi {v} [ {a}0, %entry ], [ {a}n, %loop ]"]
    o += ["  %kk = zext i32 %k to i64", "  %kw = mul nsw i64 %kk, %ss"]
    for g, p in enumerate(w):
        o += [f"  %wq{g} = getelementptr inbounds {v}, {v}* {p}, i64 %kw",
              f"  %wv{g} = load {v}, {v}* %wq{g}, align {4 * L}"]
    for r, p in enumerate(x):
        o += [f"  %xq{r} = getelementptr inbounds float, float* {p}, i64 %kk",
              f"  %xs{r} = load float, float* %xq{r}, align 4",
              f"  %xe{r} = insertelement {v} undef, float %xs{r}, i32 0",
              f"  %xv{r} = shufflevector {v} %xe{r}, {v} undef, <{L} x i32> zeroinitializer"]
    for r in range(R):
        for g in range(G):
            a = f"%a{r}_{g}"
            o += [f"  {a}n = call {v} @llvm.fma.v{L}f32({v} %xv{r}, {v} %wv{g}, {v} {a}l)"]
    o += ["  %k1 = add nuw nsw i32 %k, 1", "  %more = icmp slt i32 %k1, %n",
          "  br i1 %more, label %loop, label %done", "done:"]
    o += [f"  {a}f = phi {v} [ {a}0, %entry ], [ {a}n, %loop ]" for a in acc]
    o += [f"  store {v} {a}f, {v}* {a}p, align 4" for a in acc]
    o += ["  ret void", "}", ""]
    return o


def axpy_name(L):
    return f"sciml_fma_axpy_v{VERSION}_{L}"


def _axpy(L):
    """``axpy_name(L)``: ``void f(<L x float>* acc, float* x, <L x float>* w)``: acc = fma(x, w, acc) (x
    broadcast; every argument a local of the calling kernel, so that the kernel keeps its own arrays and indices:
    Taichi passes locals only, no ndarray element's address)."""
    v = f"<{L} x float>"
    return [f"define void @{axpy_name(L)}({v}* %ap, float* %xp, {v}* %wp) {{", "entry:",
            f"  %a = load {v}, {v}* %ap, align 4", "  %x = load float, float* %xp, align 4",
            f"  %xe = insertelement {v} undef, float %x, i32 0",
            f"  %xv = shufflevector {v} %xe, {v} undef, <{L} x i32> zeroinitializer",
            f"  %w = load {v}, {v}* %wp, align 4", f"  %r = call {v} @llvm.fma.v{L}f32({v} %xv, {v} %w, {v} %a)",
            f"  store {v} %r, {v}* %ap, align 4", "  ret void", "}", ""]


def fma_name(L):
    return f"sciml_fma_vvv_v{VERSION}_{L}"


def _fma(L):
    """``fma_name(L)``: ``void f(T* r, T* a, T* b, T* c)``: r = fma(a, b, c), T = <L x float> (float for L = 1)."""
    v = "float" if L == 1 else f"<{L} x float>"
    intr = "llvm.fma.f32" if L == 1 else f"llvm.fma.v{L}f32"
    return [f"define void @{fma_name(L)}({v}* %rp, {v}* %ap, {v}* %bp, {v}* %cp) {{", "entry:",
            f"  %a = load {v}, {v}* %ap, align 4", f"  %b = load {v}, {v}* %bp, align 4",
            f"  %c = load {v}, {v}* %cp, align 4", f"  %r = call {v} @{intr}({v} %a, {v} %b, {v} %c)",
            f"  store {v} %r, {v}* %rp, align 4", "  ret void", "}", ""]


def module_text():
    """The LLVM IR (text) of every tile function."""
    o = [f'target datalayout = "{_LAYOUT}"', ""]
    for s in SHAPES:
        o += _tile(*s)
    for L in AXPY_LANES:
        o += _axpy(L)
    for L in FMA_LANES:
        o += _fma(L)
    for L in sorted({s[0] for s in SHAPES} | set(AXPY_LANES) | set(FMA_LANES) - {1}):
        o += [f"declare <{L} x float> @llvm.fma.v{L}f32(<{L} x float>, <{L} x float>, <{L} x float>)"]
    o += ["declare float @llvm.fma.f32(float, float, float)"]
    return "\n".join(o) + "\n"


def available():
    """The bitcode is there (it ships with the package), the host is x86-64 (its data layout) and Taichi is 1.7
    (``call`` uses its front end's ``insert_external_func_call``)."""
    import platform

    import taichi
    return (platform.machine().lower() in ("x86_64", "amd64") and tuple(taichi.__version__[:2]) == (1, 7)
            and os.path.exists(PATH))


def axpy(L, acc, x, w):
    """Inside a Taichi kernel: ``acc = fma(x, w, acc)`` on the locals ``acc`` (vector of L float32), ``x``
    (float32, broadcast) and ``w`` (vector of L float32); one vector FMA once inlined."""
    _insert(axpy_name(L), [acc, x, w])


def fma(L, r, a, b, c):
    """Inside a Taichi kernel: ``r = fma(a, b, c)`` on the locals ``r``, ``a``, ``b``, ``c`` (L-lane float32 vectors,
    or float32 scalars for L = 1), one rounding; one vector FMA once inlined."""
    _insert(fma_name(L), [r, a, b, c])


def host_has_fma():
    """The host's CPU has FMA units (x86 flag ``fma``): without them ``llvm.fma`` compiles to a libm call per
    element. False where the flags cannot be read."""
    from . import _vec
    return "fma" in _vec.cpu_flags()


def _insert(name, args):
    from taichi._lib import core as _ti_core
    from taichi.lang import impl
    from taichi.lang.expr import make_expr_group
    impl.get_runtime().compiling_callable.ast_builder().insert_external_func_call(
        0, "", PATH, name, make_expr_group(args), make_expr_group([]),
        _ti_core.DebugInfo(impl.get_runtime().get_current_src_info()))


_AVAILABLE = []


def available_once():
    """:func:`available`, asked once per process (it costs ~20 us: the per-GEMM checks of skinny_gemm.py)."""
    if not _AVAILABLE:
        _AVAILABLE.append(available())
    return _AVAILABLE[0]


def call(L, R, G, ws, xs, n, s, accs):
    """Inside a Taichi kernel (``ti.static`` code): the tile function's call on the locals ``ws`` (G addresses,
    i64), ``xs`` (R addresses, i64), ``n`` and ``s`` (i32) and ``accs`` (R * G vectors of L float32, row-major)."""
    from taichi._lib import core as _ti_core
    from taichi.lang import impl
    from taichi.lang.expr import make_expr_group
    impl.get_runtime().compiling_callable.ast_builder().insert_external_func_call(
        0, "", PATH, tile_name(L, R, G), make_expr_group([*ws, *xs, n, s, *accs]), make_expr_group([]),
        _ti_core.DebugInfo(impl.get_runtime().get_current_src_info()))


def _write(path=PATH):  # pragma: no cover  (a developer's step: needs llvm-as)
    import subprocess
    import tempfile
    path = os.path.abspath(path)
    with tempfile.TemporaryDirectory() as d:  # the same input name every time: the bitcode records it
        with open(os.path.join(d, "fma_tile.ll"), "w") as f:
            f.write(module_text())
        subprocess.run(["llvm-as", "fma_tile.ll", "-o", path], check=True, cwd=d)


if __name__ == "__main__":  # pragma: no cover
    _write()
    print(PATH)
