"""Steps written as ``@ti.func``s: a generated time loop inside one kernel for the forward pass.

A step given as a ``ti.func`` (or a list of them, run in order) is compiled twice:

* a **per-step kernel** ``step(x, params, control, x_next, *scratch, *constants, t)`` that calls the
  functions in order: the per-step engine launches its ``.grad`` step by step in reverse (the
  backward pass, with each step's scratch recomputed from x_t), exactly as for a step kernel;
* a **segment kernel** ``loop(hist, params, controls, *scratch, *constants, acc, t0, m)`` whose
  serialized top-level loop runs steps t0 .. t0+m-1 in ONE launch: step t reads row t of the
  history and writes row t+1 (and the controls' row t), through row views (below); x_next and the
  scratch arrays are zeroed before each step, as in the per-step path; a per-step loss written as a
  ``ti.func`` is accumulated into ``acc``.

Taichi parallelises only the outermost loop of a kernel, so inside the time loop the step's own
loops run serially: this suits steps whose loops are small (a few thousand items or fewer; a
parallel loop costs a thread-pool wake-up per launch on a small CPU anyway). Taichi's reverse mode
over a serialized time loop returns zero gradients, silently (docs/physics.md), so the time loop
is never differentiated: the backward recomputes each checkpointed segment with this kernel and
then runs the per-step kernel's ``.grad`` in reverse.

Row views: inside the loop, the functions receive ``_Row(hist, t)`` in place of ``x``. Taichi
evaluates subscripts of plain Python objects in Python at compile time, so ``x[i, j]`` becomes
``hist[t, i, j]`` and ``x.shape`` the row's shape. That is why every argument of a step function
must be ``ti.template()`` (a by-value argument would be copied into a local variable).
"""
from __future__ import annotations

import itertools
import linecache

import numpy as np

_COUNTER = itertools.count()


def is_func(f) -> bool:
    """True for a ``@ti.func`` (not a kernel)."""
    return getattr(f, "_is_taichi_function", False) is True and hasattr(f, "func")


def func_name(f) -> str:
    return getattr(f, "__name__", "func")


def func_arguments(f):
    return [a.name for a in f.func.arguments], [a.annotation for a in f.func.arguments]


class _Row:
    """Row ``t`` of a history array, inside a kernel: ``row[i, j]`` is ``arr[t, i, j]``."""

    def __init__(self, arr, t):
        self.arr, self.t = arr, t

    def __getitem__(self, idx):
        from taichi.lang import impl
        idx = idx if isinstance(idx, tuple) else (idx,)
        return impl.subscript(None, self.arr, self.t, *idx)

    @property
    def shape(self):
        return tuple(self.arr.shape)[1:]


def _row(arr, t):
    return _Row(arr, t)


# Taichi calls a plain Python function from a kernel as it is but warns ("Calling non-taichi
# function"); its check is hasattr(f, "_is_taichi_function"), and False keeps the call plain.
_row._is_taichi_function = False


def _check_func(sim, f, n_arrays, what):
    """Arity and annotations of a step/loss function; returns True if it takes the step index t last."""
    from taichi.types.annotations import template
    names, anns = func_arguments(f)
    want = n_arrays + len(sim.constants)
    if what == "step":
        lay = "x, params, control, x_next" + "".join(f", {k}" for k in sim.scratch)
    else:
        lay = "x, params, control, out"
    lay += "".join(f", constant{i}" for i in range(len(sim.constants)))
    if len(names) not in (want, want + 1):
        raise ValueError(
            f"Simulation {sim.name!r}: {what} function {func_name(f)!r} takes {len(names)} arguments "
            f"({', '.join(names)}); expected ({lay}), optionally followed by the step index t.")
    for n, a in zip(names, anns):
        if not isinstance(a, template) and a is not template:
            raise ValueError(
                f"Simulation {sim.name!r}: {what} function {func_name(f)!r}: argument {n!r} must be annotated "
                f"ti.template() (got {getattr(a, '__name__', a)!r}); a step written as ti.func receives row views "
                "of the rollout's history, which are passed by reference only.")
    return len(names) == want + 1


class StepLoop:
    """The generated per-step kernel, loss kernel and segment kernel of a ``ti.func`` step."""

    def __init__(self, sim, funcs, loss=None):
        import taichi as ti
        self.funcs = list(funcs)
        self.takes_t = [_check_func(sim, f, 4 + len(sim.scratch), "step") for f in self.funcs]
        self.loss_func = loss
        self.loss_t = _check_func(sim, loss, 4, "loss") if loss is not None else False
        cs = sim.control_shape or (1,)
        env = {"ti": ti, "_row": _row}
        nd = lambda ndim: ti.types.ndarray(ndim=ndim)  # noqa: E731
        env.update(AX=nd(len(sim.state_shape)), AP=nd(len(sim.params_shape)), AC=nd(len(cs)),
                   AH=nd(1 + len(sim.state_shape)), ACH=nd(1 + len(cs)), A1=nd(1),
                   SX=sim.state_shape)
        scr = [f"s{i}" for i in range(len(sim.scratch))]
        for i, shp in enumerate(sim.scratch.values()):
            env[f"AS{i}"], env[f"SS{i}"] = nd(len(shp)), shp
        cst = [f"k{i}" for i in range(len(sim.constants))]
        for i, c in enumerate(sim.constants):
            env[f"AK{i}"] = self._annotation(sim, i, c)
        for i, f in enumerate(self.funcs):
            env[f"f{i}"] = f
        if loss is not None:
            env["lf"] = loss
        uid = next(_COUNTER)
        sname = "".join(ch if ch.isalnum() else "_" for ch in sim.name)
        scr_sig = "".join(f", {s}: AS{i}" for i, s in enumerate(scr))
        cst_sig = "".join(f", {k}: AK{i}" for i, k in enumerate(cst))
        rest = "".join(f", {a}" for a in scr + cst)
        crest = "".join(f", {a}" for a in cst)

        def calls(x, c, xn, t, ind):
            return "".join(f"{ind}f{i}({x}, p, {c}, {xn}{rest}{', ' + t if ht else ''})\n"
                           for i, ht in enumerate(self.takes_t))

        srcs = {}
        srcs["step"] = (f"def {sname}_step(x: AX, p: AP, c: AC, xn: AX{scr_sig}{cst_sig}, t: ti.i32):\n"
                        + calls("x", "c", "xn", "t", "    "))
        if loss is not None:
            srcs["loss"] = (f"def {sname}_loss(x: AX, p: AP, c: AC, out: A1{cst_sig}, t: ti.i32):\n"
                            f"    lf(x, p, c, out{crest}{', t' if self.loss_t else ''})\n")
        body = ("    ti.loop_config(serialize=True)\n"
                "    for tt in range(m):\n"
                "        for I in ti.grouped(ti.ndrange(*SX)):\n"
                "            h[tt + 1, I] = 0.0\n"
                + "".join(f"        for I in ti.grouped(ti.ndrange(*SS{i})):\n            {s}[I] = 0.0\n"
                          for i, s in enumerate(scr))
                + calls("_row(h, tt)", "_row(c, tt)", "_row(h, tt + 1)", "t0 + tt", "        "))
        if loss is not None:
            body += f"        lf(_row(h, tt + 1), p, _row(c, tt), acc{crest}{', t0 + tt' if self.loss_t else ''})\n"
        srcs["loop"] = (f"def {sname}_loop(h: AH, p: AP, c: ACH{scr_sig}{cst_sig}, acc: A1, t0: ti.i32, "
                        f"m: ti.i32):\n" + body)
        self.source = srcs
        out = {}
        for what, src in srcs.items():
            fname = f"<sciml.physics:{sim.name}:{what}:{uid}>"
            linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
            exec(compile(src, fname, "exec", dont_inherit=True), env)  # noqa: S102 - generated from the declared shapes
            out[what] = ti.kernel(env[f"{sname}_{what}"])
        self.step_kernel = out["step"]
        self.loss_kernel = out.get("loss")
        self.loop_kernel = out["loop"]

    @staticmethod
    def _annotation(sim, i, c):
        import taichi as ti
        from taichi.lang._ndarray import Ndarray
        if isinstance(c, np.ndarray):
            return ti.types.ndarray(ndim=c.ndim)
        if isinstance(c, Ndarray):
            return ti.types.ndarray(ndim=len(c.shape))
        raise TypeError(f"Simulation {sim.name!r}: constants[{i}] is {type(c).__name__}; a step written as ti.func "
                        "takes arrays (numpy arrays or ti.ndarrays) as constants.")
