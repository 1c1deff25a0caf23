"""Simulations written as Taichi kernels, differentiable through thousands of steps.

A :class:`Simulation` maps (initial state ``x0``, physical parameters ``params``, per-step
``controls``) to the final state ``x_T`` as ONE sciml primitive, so it composes with every sciml
op, module, optimizer and transform (first order: the adjoint is a Taichi kernel).

Two execution paths, chosen automatically (``mode="auto"``):

* ``"fused"`` (fast path, chosen whenever rollout/adjoint kernels exist: measured 5-7x faster than
  the per-step path from 65,536 to 1,048,576 cells of heat1d): the time loop runs inside one ``rollout`` kernel that
  fills a history buffer ``(m+1) x S``, and a HAND-WRITTEN ``adjoint`` kernel steps the adjoint
  state backward in time. One or two kernel launches per segment instead of one per step.
  Taichi's own reverse mode over a serialized time loop silently returns zeros, so sciml never
  asks Taichi to differentiate the time loop: the adjoint is yours (or a built-in's), and must be
  tested against finite differences.
* ``"per_step"`` (a ``step`` kernel or a list of kernels, scratch arrays, a per-step loss): one launch
  per kernel per time step, and Taichi's ``.grad`` per kernel per step in reverse (the DiffTaichi /
  ``ti.ad.Tape`` pattern), each step reversed with the forward's own x_t and x_{t+1} loaded and its
  scratch recomputed. Not available on Vulkan (Taichi's ndarray autodiff returns zeros there, issue 8524).
  A step written as ``ti.func``(s) runs its forward as a generated time loop inside ONE kernel per
  segment (``_loop.py``); its backward is the same per-step ``.grad`` of a generated step kernel.

Checkpointing (both paths): ``checkpoint_every=k`` stores every k-th state and recomputes each
segment of k steps during the backward pass: memory ``(T/k + k) S`` instead of ``T S``, for one
extra forward. ``"auto"`` stores everything when it fits ``memory_budget`` and picks k = sqrt(T)
otherwise; ``None`` always stores everything (and raises if it does not fit).

Kernel conventions (S = prod(state_shape), P = prod(params_shape), C = prod(control_shape)):

* ``step(x, params, control, x_next, *scratch, *constants[, t])``: ndarrays of the declared shapes
  (``state_shape``, ``params_shape``, ``control_shape`` or ``(1,)`` without controls, then the
  ``scratch`` arrays in order). ``x_next`` and the scratch arrays start zeroed each step; the step
  never writes ``x``, ``params`` or ``control`` (Taichi's autodiff rules, docs/physics.md). A step
  may be a list of kernels run in order (e.g. particle-to-grid, grid update, grid-to-particle) that
  share the scratch arrays. A kernel whose last argument is an integer receives the step index t.
* ``loss(x, params, control, out, *constants[, t])``: optional per-step loss, run after step t on
  x = x_{t+1}; adds into ``out[0]`` (shape (1,)). The sum over all steps is an output of ``sim``.
* ``rollout(hist, params, controls, m, *constants)``: FLAT 1-D arrays (2-D indexing costs 40 %
  here). ``hist`` has (m+1) S entries, row 0 is the start state; fill rows 1..m. ``controls`` has
  m C entries (row t drives step t).
* ``adjoint(hist, params, controls, m, lam, work, gparams, gcontrols, need_params, *constants)``:
  ``lam`` (S) holds dL/dx_m on entry and must hold dL/dx_0 on exit; ``work`` is S of scratch;
  add dL/dparams into ``gparams`` (P) when ``need_params`` is 1; write dL/dcontrols into
  ``gcontrols`` (m C). ``hist`` holds the states of this segment (as written by ``rollout``).
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from .. import backend, runtime
from ..autodiff.backward import needs
from ..autodiff.primitive import Primitive, _state as _tape_state
from ..autodiff.taichi_bridge import TaichiFunction
from ..autodiff.tensor import as_tensor, zeros

VULKAN_MSG = ("Simulation {name!r}: the per-step path differentiates the step kernel with Taichi's autodiff, "
              "which returns all-zero ndarray gradients on Vulkan (taichi issue 8524). Supply rollout= and "
              "adjoint= kernels (the fused path), or run on arch='cpu'.")
SECOND_ORDER_MSG = (
    "Simulation {name!r}: derivatives of the rollout come from Taichi's reverse mode (step.grad) or a "
    "hand-written adjoint, which are first order: hessian, hvp and grad-of-grad through it are not available. "
    "What exists: grad / value_and_grad / vjp / jacrev of the rollout (first order), and jvp / jacfwd when the "
    "Simulation is given a tangent= kernel (then Gauss-Newton products J^T (J v) work); for full second order "
    "write the step in sciml ops and loop in Python.")
CHUNK_BYTES = 1 << 22  # forward without gradient: run in segments of about this many bytes


def _shape(name, s):
    if s is None:
        return None
    s = (int(s),) if isinstance(s, (int, np.integer)) else tuple(int(d) for d in s)
    if not s or any(d <= 0 for d in s):
        raise ValueError(f"Simulation({name}=...): got {s}; expected a non-empty tuple of positive sizes.")
    return s


class SimulationCheckError(AssertionError):
    """``check=True`` (or :meth:`Simulation.check_step`) found a step VJP that disagrees with finite differences."""


class Simulation:
    """A differentiable simulation ``x_T = sim(x0, params, controls)``.

    Args:
        state_shape: shape of the state (pack positions and velocities into one array).
        steps: number of time steps T.
        params_shape: shape of the physical parameters (default ``(1,)``).
        control_shape: shape of one step's control (``controls`` then has shape ``(T, *control_shape)``);
            None for no controls.
        step: ``@ti.kernel`` for one step, or a list of kernels run in order (the per-step path); or a
            ``@ti.func`` (a list of them) with the same arguments, all ``ti.template()``: then the forward
            runs a generated time loop inside one kernel per segment, and the backward recomputes each
            segment and runs the generated step kernel's ``.grad`` step by step (``sciml/physics/_loop.py``).
        scratch: ``{name: shape}`` of arrays the step kernels share within a step (an MPM grid):
            passed after ``x_next`` in this order, zeroed before each step, differentiated, and
            recomputed from x_t in the backward pass (never stored).
        loss: optional per-step loss kernel (see the module docstring), or a ``ti.func`` when the step is
            one (then it runs inside the generated time loop); ``sim(...)`` then returns ``(states, loss_sum)``.
        rollout, adjoint: ``@ti.kernel``s for the fused path (see the module docstring).
        tangent: optional forward-mode kernel ``tangent(x, params, control, x_next, *scratch, dx, dparams,
            dcontrol, dx_next, *dscratch, *constants[, t])`` writing the step's tangent ``dx_next`` (x_next
            holds the step's result); with several step kernels, a list of tangent kernels, one per step
            kernel: tangent k runs right after step kernel k and writes the tangents of what it wrote
            (scratch tangents ``dscratch`` start zeroed each step). Enables ``jvp`` / ``jacfwd`` through
            the rollout; with a ``loss=`` kernel the loss's tangent is sum_t <grad loss_t, (dx_{t+1}, dparams,
            dcontrol_t)>, each gradient from the loss kernel's ``.grad`` (CPU).
        constants: extra arrays passed to every kernel after its own arguments (not differentiated):
            index tables, time-indexed targets or forcing read by the step index t.
        mode: "auto" (fused when rollout/adjoint exist and no per-step feature is used), "fused" or
            "per_step".
        checkpoint_every: "auto", None (store every state) or k (store every k-th state).
        memory_budget: bytes allowed for stored states (default 2 GiB).
        check: on the first differentiated call, compare one step's VJP with finite differences and
            raise :class:`SimulationCheckError` naming the derivative that disagrees.
        name: used in errors.
        time_loop: with a ``ti.func`` step, run the forward as the generated in-kernel time loop (default);
            False launches the generated step kernel once per step instead (same results).

    Example:
        >>> sim = sm.physics.heat1d(n=64, steps=500)            # built-in, with a hand-written adjoint
        >>> u0 = sm.randn(64, seed=0)
        >>> g = sm.grad(lambda u: ((sim(u, sm.tensor([0.2])) - 1.0) ** 2).sum())(u0)
    """

    def __init__(self, *, state_shape, steps, params_shape=(1,), control_shape=None, step=None, scratch=None,
                 loss=None, rollout=None, adjoint=None, tangent=None, constants=(), mode="auto",
                 checkpoint_every="auto", memory_budget=2 << 30, check=False, name="simulation", time_loop=True):
        self.name = name
        self.state_shape = _shape("state_shape", state_shape)
        self.params_shape = _shape("params_shape", params_shape)
        self.control_shape = _shape("control_shape", control_shape)
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"Simulation(steps=...): got {steps!r}; expected a positive int.")
        self.steps = int(steps)
        self.S = math.prod(self.state_shape)
        self.P = math.prod(self.params_shape)
        self.C = math.prod(self.control_shape) if self.control_shape else 1
        self.constants = tuple(constants)
        self.scratch = self._scratch(scratch)
        self.loop = self._step_loop(step, loss)
        if self.loop is not None:  # ti.func step: generated per-step kernel (+ loss kernel) and time-loop kernel
            self.kernels, self.kernel_t = [self.loop.step_kernel], [True]
            if self.loop.loss_kernel is not None:
                loss = self.loop.loss_kernel
        else:
            self.kernels = self._step_kernels(step)
            self.kernel_t = [self._arity(k, 4 + len(self.scratch), "step") for k in self.kernels]
        self.step = self.kernels[0] if len(self.kernels) == 1 else (self.kernels or None)
        self.loss_kernel = loss
        self.loss_t = (True if self.loop is not None and self.loop.loss_kernel is not None
                       else self._arity(loss, 4, "loss") if loss is not None else False)
        self.time_loop = bool(time_loop) and self.loop is not None
        self.tangent_kernel = tangent
        self.tangent_kernels = []
        if tangent is not None:
            tans = list(tangent) if isinstance(tangent, (list, tuple)) else [tangent]
            if len(tans) != len(self.kernels):
                if self.loop is not None:
                    raise ValueError(f"Simulation {name!r}: a step written as ti.func(s) runs as ONE kernel; give one "
                                     f"tangent= kernel for the whole step (got {len(tans)}).")
                raise ValueError(f"Simulation {name!r}: tangent= needs one tangent kernel per step kernel (in the "
                                 f"same order); got {len(tans)} for {len(self.kernels)} step kernel(s).")
            self.tangent_kernels = tans
            self.tangent_ts = [self._arity(k, 8 + 2 * len(self.scratch), "tangent") for k in tans]
            self.tangent_t = self.tangent_ts[0]
        self.rollout_kernel, self.adjoint_kernel = rollout, adjoint
        if (rollout is None) != (adjoint is None):
            raise ValueError(f"Simulation {name!r}: the fused path needs both rollout= and adjoint= kernels; "
                             f"got only {'rollout' if adjoint is None else 'adjoint'}.")
        if mode not in ("auto", "fused", "per_step"):
            raise ValueError(f"Simulation(mode=...): got {mode!r}; expected 'auto', 'fused' or 'per_step'.")
        per_step_only = [w for w, on in (("scratch=", self.scratch), ("loss=", loss is not None),
                                          ("a list of step kernels", len(self.kernels) > 1),
                                          ("a step kernel taking t", any(self.kernel_t))) if on]
        if mode == "auto":
            mode = "fused" if rollout is not None and not per_step_only else "per_step"
        if mode == "fused" and rollout is None:
            raise ValueError(f"Simulation {name!r}: mode='fused' needs rollout= and adjoint= kernels.")
        if mode == "fused" and per_step_only:
            raise ValueError(f"Simulation {name!r}: mode='fused' runs the rollout/adjoint kernels only; "
                             f"{', '.join(per_step_only)} need mode='per_step'.")
        if mode == "per_step" and not self.kernels:
            raise ValueError(f"Simulation {name!r}: mode='per_step' needs a step= kernel.")
        self.mode = mode
        self.check = bool(check)
        self.memory_budget = int(memory_budget)
        self.checkpoint_every = self._choose_k(checkpoint_every)
        self._saved = {}
        self._pool = []
        self.prim = Primitive(f"simulation:{name}", self._forward)
        self.prim.def_vjp(self._vjp)
        self.prim.def_jvp(self._jvp)
        self.jvp_prim = Primitive(f"simulation:{name}.jvp", self._jvp_forward)
        self.jvp_prim.def_vjp(self._no_second_order)
        self.jvp_prim.def_jvp(self._no_second_order)
        self.grad_prim = Primitive(f"simulation:{name}.grad", self._grad_forward)
        self.grad_prim.def_vjp(self._no_second_order)
        self.grad_prim.def_jvp(self._no_second_order)
        self._step_fn = None
        self._validated = False
        self._checked = False
        self._steppers = {}
        self._force_staged = False

    def __repr__(self):
        return (f"Simulation({self.name!r}, state_shape={self.state_shape}, steps={self.steps}, mode={self.mode!r}, "
                f"checkpoint_every={self.checkpoint_every})")

    __hash__ = object.__hash__

    # --- construction checks ---------------------------------------------------------------
    def _scratch(self, scratch):
        if scratch is None:
            return {}
        if not isinstance(scratch, dict):
            raise TypeError(f"Simulation(scratch=...): got {type(scratch).__name__}; expected a dict "
                            "{name: shape}.")
        return {str(k): _shape(f"scratch[{k!r}]", v) for k, v in scratch.items()}

    def _step_loop(self, step, loss):
        """A step written as ti.func(s): the generated kernels (``_loop.StepLoop``), else None."""
        from ._loop import StepLoop, func_name, is_func
        ks = list(step) if isinstance(step, (list, tuple)) else ([step] if step is not None else [])
        funcs = [is_func(k) for k in ks]
        if not any(funcs):
            if loss is not None and is_func(loss):
                raise TypeError(f"Simulation {self.name!r}: loss= is a ti.func ({func_name(loss)!r}) but the step is "
                                "a kernel; write both as ti.func (one generated time loop) or both as kernels.")
            return None
        if not all(funcs):
            raise TypeError(f"Simulation {self.name!r}: step= mixes @ti.func and @ti.kernel; give a list of ti.funcs "
                            "(run in one generated kernel) or a list of kernels.")
        return StepLoop(self, ks, loss if loss is not None and is_func(loss) else None)

    def _step_kernels(self, step):
        if step is None:
            return []
        ks = list(step) if isinstance(step, (list, tuple)) else [step]
        if not ks:
            raise ValueError(f"Simulation(step=...): got an empty list; expected a @ti.kernel or a list of them.")
        for k in ks:
            if not hasattr(getattr(k, "kernel", k), "_primal"):
                raise TypeError(f"Simulation(step=...): got {type(k).__name__}; expected a @ti.kernel "
                                "(or a list of them).")
        return ks

    def _arity(self, kernel, n_arrays, what):
        """Check a kernel's argument count; True if it takes the step index t last."""
        from ._launch import kernel_arguments, kernel_name, takes_step_index
        if not hasattr(getattr(kernel, "kernel", kernel), "_primal"):
            raise TypeError(f"Simulation({what}=...): got {type(kernel).__name__}; expected a @ti.kernel.")
        names, _ = kernel_arguments(kernel)
        want = n_arrays + len(self.constants)
        has_t = len(names) == want + 1 and takes_step_index(kernel)  # an int constant last is not t
        if len(names) != want + has_t:
            if what == "step":
                lay = "x, params, control, x_next" + "".join(f", {k}" for k in self.scratch)
            elif what == "tangent":
                lay = ("x, params, control, x_next" + "".join(f", {k}" for k in self.scratch)
                       + ", dx, dparams, dcontrol, dx_next" + "".join(f", d{k}" for k in self.scratch))
            else:
                lay = "x, params, control, out"
            lay += "".join(f", constant{i}" for i in range(len(self.constants)))
            raise ValueError(
                f"Simulation {self.name!r}: {what} kernel {kernel_name(kernel)!r} takes {len(names)} arguments "
                f"({', '.join(names)}); expected ({lay}), optionally followed by the step index t: ti.i32.")
        return has_t

    # --- memory ----------------------------------------------------------------------------
    def memory_bytes(self, checkpoint_every=None) -> int:
        """Bytes of stored states for a differentiated rollout with this checkpoint interval
        (None = every state stored). Scratch arrays add their size once (never stored per step)."""
        item = np.dtype(backend.NP_DTYPES[runtime.default_dtype()]).itemsize
        T, S = self.steps, self.S
        extra = sum(math.prod(s) for s in self.scratch.values()) * item * 2  # values + gradients
        if checkpoint_every is None or checkpoint_every >= T:
            return (T + 1) * S * item + extra
        k = int(checkpoint_every)
        return (math.ceil(T / k) + 1 + k + 1) * S * item + extra

    def _choose_k(self, k):
        full = self.memory_bytes(None)
        if k is None:
            if full > self.memory_budget:
                raise MemoryError(
                    f"Simulation {self.name!r}: storing all {self.steps + 1} states of {self.S} elements needs "
                    f"{full / 2**20:.1f} MiB, over memory_budget={self.memory_budget / 2**20:.1f} MiB. Use "
                    f"checkpoint_every='auto' (or an int k: memory (T/k + k) states, one extra forward).")
            return self.steps
        if k == "auto":
            if full <= self.memory_budget:
                return self.steps
            k = max(1, int(round(math.sqrt(self.steps))))
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"Simulation(checkpoint_every=...): got {k!r}; expected 'auto', None or a positive int.")
        k = min(int(k), self.steps)
        need = self.memory_bytes(k)
        if need > self.memory_budget:
            raise MemoryError(
                f"Simulation {self.name!r}: {self.steps} steps with checkpoint_every={k} store "
                f"{need / 2**20:.1f} MiB of states, over memory_budget={self.memory_budget / 2**20:.1f} MiB. "
                f"Choose k near sqrt(steps) = {int(math.sqrt(self.steps))}, raise memory_budget, or use fewer steps.")
        return k

    # --- public call -----------------------------------------------------------------------
    def __call__(self, x0, params=None, controls=None, *, states=None):
        """Run the simulation.

        Args:
            x0, params, controls: Tensors (or arrays) of ``state_shape``, ``params_shape`` and
                ``(steps, *control_shape)``; gradients flow to all three.
            states: which states to return: None (the final state, shape ``state_shape``), an int k
                (x_0, x_k, x_2k, ... up to x_T: shape ``(T // k + 1, *state_shape)``) or a list of
                step indices in [0, steps] (shape ``(len, *state_shape)``).

        Returns:
            The chosen state(s), a differentiable Tensor; with a ``loss=`` kernel, a tuple
            ``(states, loss)`` where ``loss`` is the per-step loss summed over the rollout (shape ()).
        """
        x0 = as_tensor(x0)
        if x0.dtype not in ("float32", "float64"):
            raise TypeError(f"Simulation {self.name!r}: x0 has dtype {x0.dtype}; expected float32 or float64.")
        dtype = x0.dtype
        if tuple(x0.shape) != self.state_shape:
            raise ValueError(f"Simulation {self.name!r}: x0 has shape {tuple(x0.shape)}; expected state_shape "
                             f"{self.state_shape}.")
        params = zeros(self.params_shape, dtype) if params is None else as_tensor(params, dtype)
        self._check("params", params, self.params_shape, dtype)
        ins = [x0, params]
        if self.control_shape is not None:
            if controls is None:
                raise ValueError(f"Simulation {self.name!r}: controls are required, shape "
                                 f"{(self.steps,) + self.control_shape}.")
            controls = as_tensor(controls, dtype)
            self._check("controls", controls, (self.steps,) + self.control_shape, dtype)
            ins.append(controls)
        elif controls is not None:
            raise ValueError(f"Simulation {self.name!r} was declared without control_shape; got controls.")
        times = self._times(states)
        flat = self.prim(*ins, sim=self, times=times)
        n = len(times) * self.S
        xs = flat[:n] if self.loss_kernel is not None else flat
        xs = xs.reshape(self.state_shape if states is None else (len(times),) + self.state_shape)
        if self.loss_kernel is None:
            return xs
        return xs, flat[n:].reshape(())

    def _times(self, states):
        T = self.steps
        if states is None:
            return (T,)
        if isinstance(states, (int, np.integer)) and not isinstance(states, bool):
            if states < 1:
                raise ValueError(f"Simulation {self.name!r}: states={states}; expected a positive int k (every "
                                 "k-th state), a list of step indices or None.")
            return tuple(range(0, T + 1, int(states)))
        if isinstance(states, (list, tuple, range, np.ndarray)):
            out = []
            for v in list(states):
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= T:
                    raise ValueError(f"Simulation {self.name!r}: states contains {v!r}; expected step indices "
                                     f"(ints) in [0, {T}].")
                out.append(int(v))
            if not out:
                raise ValueError(f"Simulation {self.name!r}: states=[] selects nothing.")
            return tuple(out)
        raise TypeError(f"Simulation {self.name!r}: states={states!r}; expected None, an int or a list of ints.")

    def trajectory(self, x0, params=None, controls=None, every=1):
        """The states x_0, x_every, x_2every, ... x_T as a numpy array (no gradient; for plots)."""
        x0 = as_tensor(x0)
        dtype = x0.dtype
        npdt = backend.NP_DTYPES[dtype]
        p = self._host(zeros(self.params_shape, dtype) if params is None else as_tensor(params, dtype))
        ctrl = self._host(as_tensor(controls, dtype)) if controls is not None else np.zeros(self.steps * self.C, npdt)
        S = self.S
        seg = self._take((self.steps + 1) * S, npdt)  # pooled: the per-step path reuses its launch contexts
        seg[:S] = self._host(x0)
        self._roll(seg, p, ctrl, self.steps, 0)
        out = seg.reshape((self.steps + 1,) + self.state_shape)[::every].copy()
        self._pool.append(seg)
        del self._pool[:-2]
        return out

    def _check(self, what, t, shape, dtype):
        if t.dtype != dtype:
            raise TypeError(f"Simulation {self.name!r}: {what} has dtype {t.dtype}; expected {dtype} (like x0).")
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"Simulation {self.name!r}: {what} has shape {tuple(t.shape)}; expected {tuple(shape)}.")

    # --- one step as a function (closed-loop controllers) ----------------------------------
    @property
    def step_function(self) -> TaichiFunction:
        """``x_next = sim.step_function(x, params, control)``: one step as a differentiable function
        (Taichi's ``step.grad`` as VJP). For controllers that read the state each step."""
        if not self.kernels:
            raise ValueError(f"Simulation {self.name!r} has no step= kernel.")
        if len(self.kernels) > 1 or self.scratch or any(self.kernel_t):
            raise ValueError(f"Simulation {self.name!r}: step_function needs a single step kernel without scratch "
                             "or step index.")
        if self._step_fn is None:
            cs = self.control_shape or (1,)
            self._step_fn = TaichiFunction(self.kernels[0], [self.state_shape, self.params_shape, cs],
                                           [self.state_shape], self.constants, name=f"{self.name}.step",
                                           validate=False)
        return self._step_fn

    def rollout(self, x0, params, controller, steps=None, return_states=False):
        """Closed loop: ``x_{t+1} = step(x_t, params, controller(x_t, t))`` for ``steps`` steps
        (default ``self.steps``), recorded op by op on sciml's tape (no checkpointing).

        Returns the final state, or the list of all states with ``return_states=True``."""
        f = self.step_function
        x = as_tensor(x0)
        states = [x]
        for t in range(self.steps if steps is None else steps):
            x = f(x, params, controller(x, t))
            if return_states:
                states.append(x)
        return states if return_states else x

    # --- engine ----------------------------------------------------------------------------
    def _host(self, t):
        return np.ascontiguousarray(backend.to_numpy(t._buf, (t.size,), t.dtype))

    def _segments(self, k, times=()):
        b = sorted(set(range(0, self.steps, k)) | {self.steps} | set(times))
        return list(zip(b[:-1], b[1:]))

    def _stepper(self, npdt):
        key = (np.dtype(npdt), self._force_staged)
        st = self._steppers.get(key)
        if st is None:
            from ._per_step import make_stepper
            st = self._steppers[key] = make_stepper(self, npdt)
        return st

    def _forward(self, *ins, sim, times):
        x0, params = ins[0], ins[1]
        dtype = x0.dtype
        npdt = backend.NP_DTYPES[dtype]
        S, C = self.S, self.C
        ctrl = self._host(ins[2]) if len(ins) > 2 else np.zeros(self.steps * C, npdt)
        p = self._host(params)
        recording = _tape_state["grad_enabled"] and any(x._node is not None for x in ins)
        if recording:
            k = self.checkpoint_every
        else:
            k = max(1, min(self.steps, CHUNK_BYTES // (S * np.dtype(npdt).itemsize)))
        segs = self._segments(k, times)
        mmax = max(b - a for a, b in segs)
        ckpts = np.empty((len(segs) + 1, S), npdt) if recording else None
        seg = self._take((mmax + 1) * S, npdt)
        seg[:S] = self._host(x0)
        has_loss = self.loss_kernel is not None
        out = np.empty(len(times) * S + has_loss, npdt)
        where = {}
        for i, t in enumerate(times):
            where.setdefault(t, []).append(i)
        for i in where.get(0, ()):
            out[i * S:(i + 1) * S] = seg[:S]
        loss_acc = np.zeros(1, npdt) if has_loss else None
        for j, (a, b) in enumerate(segs):
            m = b - a
            if recording:
                ckpts[j] = seg[:S]
            self._roll(seg, p, ctrl[a * C:b * C], m, a, loss_acc)
            last = seg[m * S:(m + 1) * S]
            if recording:
                ckpts[j + 1] = last
            for i in where.get(b, ()):
                out[i * S:(i + 1) * S] = last
            if j + 1 < len(segs):
                seg[:S] = last
        if has_loss:
            out[-1] = loss_acc[0]
        res = backend.from_numpy(out, dtype)
        if recording:
            key = id(res)
            # the last item: which segment `seg` holds now (the last one after the forward)
            self._saved[key] = [weakref.ref(res) if isinstance(res, np.ndarray) else None, ckpts, seg, segs,
                                len(segs) - 1]
            weakref.finalize(res, self._release, key)
        else:
            self._pool.append(seg)
            del self._pool[:-2]
        return res, (out.size,), dtype

    def _take(self, n, npdt):
        """A work buffer of n elements, reused across calls (a 16 MB np.empty + first touch costs ms)."""
        for i, b in enumerate(self._pool):
            if b.size == n and b.dtype == npdt:
                return self._pool.pop(i)
        return np.empty(n, npdt)

    def _release(self, key):
        saved = self._saved.pop(key, None)
        if saved is not None:
            self._pool.append(saved[2])
            del self._pool[:-2]

    def _roll(self, seg, p, ctrl, m, t0, loss_acc=None):
        if self.mode == "fused":
            self._run(self.rollout_kernel, seg[:(m + 1) * self.S], p, ctrl, m)
            return
        if self.time_loop and (loss_acc is None or self.loss_kernel is None or self.loop.loss_func is not None):
            self._stepper(seg.dtype).loop_forward(seg, p, ctrl, m, t0, loss_acc)  # the generated time loop
            return
        self._stepper(seg.dtype).forward(seg, p, ctrl, m, t0, loss_acc)

    def _check_input_unchanged(self, before, after):
        """Once: a step kernel that writes its input breaks Taichi's autodiff."""
        if not np.array_equal(before, np.asarray(after).reshape(before.shape), equal_nan=True):
            raise RuntimeError(
                f"Simulation {self.name!r}: the step kernel wrote its input {self._x_name()!r}. A step must "
                "read x and write only x_next and scratch (Taichi's autodiff is silently wrong otherwise).")
        self._validated = True

    def _x_name(self):
        from ._launch import signature_names
        names = signature_names(self.kernels[0]) if self.kernels else []
        return names[0] if names else "x"

    def _run(self, kernel, *args):
        """Launch a fused kernel on flat numpy arrays (CPU zero-copy; device: copy in and out)."""
        if backend.on_host():
            kernel(*args, *self.constants)
            return
        ti = runtime.ensure_init()
        dev = []
        for a in args:
            if isinstance(a, np.ndarray):
                d = ti.ndarray(ti.f64 if a.dtype == np.float64 else ti.f32, max(a.size, 1))
                if a.size:
                    d.from_numpy(a.reshape(-1) if a.size == d.shape[0] else np.resize(a, 1))
                dev.append(d)
            else:
                dev.append(a)
        kernel(*dev, *self.constants)
        for a, d in zip(args, dev):
            if isinstance(a, np.ndarray) and a.size:
                a[...] = d.to_numpy()[:a.size].reshape(a.shape)

    # --- reverse mode ----------------------------------------------------------------------
    def _vjp(self, g, *ins, out, sim, times):
        if self.mode == "per_step" and runtime.arch() == "vulkan":
            raise RuntimeError(VULKAN_MSG.format(name=self.name))
        need_p = needs(1)
        flat = self.grad_prim(g, *ins, out, sim=self, times=times, need_params=int(need_p))
        cots, start = [], 0
        for x in ins:
            cots.append(flat[start:start + x.size].reshape(x.shape))
            start += x.size
        if not need_p:
            cots[1] = None
        return tuple(cots)

    def _grad_forward(self, g, *ins, sim, times, need_params):
        x0, params = ins[0], ins[1]
        out = ins[-1]
        ins = ins[:-1]
        dtype = x0.dtype
        npdt = backend.NP_DTYPES[dtype]
        S, C = self.S, self.C
        saved = self._saved.get(id(out._buf))
        if saved is None or (saved[0] is not None and saved[0]() is not out._buf):
            raise RuntimeError(f"Simulation {self.name!r}: the forward states of this output were not kept "
                               "(was it computed under no_grad?).")
        _, ckpts, seg, segs, held = saved
        ctrl = self._host(ins[2]) if len(ins) > 2 else np.zeros(self.steps * C, npdt)
        p = self._host(params)
        if self.check and not self._checked:
            self.check_step(ckpts[0], p, ctrl[:C])
            self._checked = True
        gall = self._host(g)
        g_loss = float(gall[-1]) if self.loss_kernel is not None else None
        where = {}
        for i, t in enumerate(times):
            where.setdefault(t, []).append(i)
        lam = np.zeros(S, npdt)
        gp = np.zeros(self.P, npdt)
        gc = np.zeros(self.steps * C, npdt)
        work = np.zeros(S, npdt)
        for j in range(len(segs) - 1, -1, -1):
            a, b = segs[j]
            m = b - a
            for i in where.get(b, ()):
                lam += gall[i * S:(i + 1) * S]
            if j != held:  # recompute the segment (the one `seg` holds is reused: the last, after the forward)
                seg[:S] = ckpts[j]
                self._roll(seg, p, ctrl[a * C:b * C], m, a)
                held = saved[4] = j
            self._adj(seg[:(m + 1) * S], p, ctrl[a * C:b * C], m, a, lam, work, gp, gc[a * C:b * C], need_params,
                      g_loss)
        for i in where.get(0, ()):
            lam += gall[i * S:(i + 1) * S]
        parts = [lam, gp] + ([gc] if len(ins) > 2 else [])
        flat = np.concatenate(parts)
        return backend.from_numpy(flat, dtype), (flat.size,), dtype

    def _adj(self, seg, p, ctrl, m, t0, lam, work, gp, gc, need_params, g_loss=None):
        if self.mode == "fused":
            self._run(self.adjoint_kernel, seg, p, ctrl, m, lam, work, gp, gc, need_params)
            return
        self._stepper(seg.dtype).backward(seg, p, ctrl, m, t0, lam, work, gp, gc, g_loss)

    # --- forward mode (tangent= kernel) ----------------------------------------------------
    def _jvp(self, tangents, *ins, out, sim, times):
        if self.tangent_kernel is None:
            raise NotImplementedError(SECOND_ORDER_MSG.format(name=self.name))
        tans = [t if t is not None else zeros(x.shape, x.dtype) for t, x in zip(tangents, ins)]
        return self.jvp_prim(*ins, *tans, sim=self, times=times, n=len(ins))

    def _jvp_forward(self, *args, sim, times, n):
        """Tangents of the chosen states: the step and the tangent kernel, step by step (no history kept)."""
        ins, tans = args[:n], args[n:]
        dtype = ins[0].dtype
        npdt = backend.NP_DTYPES[dtype]
        S, C, T = self.S, self.C, self.steps
        cs = self.control_shape or (1,)
        x = self._host(ins[0]).copy().reshape(self.state_shape)
        dx = self._host(tans[0]).copy().reshape(self.state_shape)
        p = self._host(ins[1]).copy().reshape(self.params_shape)
        dp = self._host(tans[1]).copy().reshape(self.params_shape)
        if n > 2:
            c = self._host(ins[2]).copy().reshape((T,) + cs)
            dc = self._host(tans[2]).copy().reshape((T,) + cs)
        else:
            c, dc = np.zeros((T,) + cs, npdt), np.zeros((T,) + cs, npdt)
        xn, dxn = np.empty_like(x), np.empty_like(dx)
        where = {}
        for i, t in enumerate(times):
            where.setdefault(t, []).append(i)
        has_loss = self.loss_kernel is not None
        out = np.zeros(len(times) * S + has_loss, npdt)
        for i in where.get(0, ()):
            out[i * S:(i + 1) * S] = dx.reshape(-1)
        if has_loss and not backend.on_host():
            raise NotImplementedError(
                f"Simulation {self.name!r}: forward mode through a loss= kernel takes the loss kernel's gradient "
                "(Taichi's reverse mode), which runs on the CPU only; on this arch return the states (states=...) "
                "and write the loss in sciml ops.")
        if backend.on_host():  # cached launch contexts over owned buffers
            key = ("tangent", np.dtype(npdt))
            runner = self._steppers.get(key)
            if runner is None:
                from ._per_step import TangentRunner
                runner = self._steppers[key] = TangentRunner(self, npdt)
            runner.run(x.reshape(-1), dx.reshape(-1), p.reshape(-1), dp.reshape(-1), c.reshape(-1), dc.reshape(-1),
                       where, out)
            return backend.from_numpy(out, dtype), (out.size,), dtype
        scr = [np.zeros(sh, npdt) for sh in self.scratch.values()]
        dscr = [np.zeros(sh, npdt) for sh in self.scratch.values()]
        for t in range(T):
            for a_ in (xn, dxn, *scr, *dscr):
                a_.fill(0.0)
            for step, has_t, tan, tan_t in zip(self.kernels, self.kernel_t, self.tangent_kernels, self.tangent_ts):
                step(*([x, p, c[t], xn, *scr, *self.constants] + ([t] if has_t else [])))
                tan(*([x, p, c[t], xn, *scr, dx, dp, dc[t], dxn, *dscr, *self.constants] + ([t] if tan_t else [])))
            x, xn, dx, dxn = xn, x, dxn, dx
            for i in where.get(t + 1, ()):
                out[i * S:(i + 1) * S] = dx.reshape(-1)
        return backend.from_numpy(out, dtype), (out.size,), dtype

    # --- checking one step against finite differences --------------------------------------
    def _step_eval(self, x, p, c, t=0):
        """(x_next, step loss) of one step from numpy inputs, no gradient."""
        npdt = x.dtype
        S = self.S
        seg = np.zeros(2 * S, npdt)
        seg[:S] = x
        acc = np.zeros(1, npdt) if self.loss_kernel is not None else None
        if self.mode == "fused":
            self._run(self.rollout_kernel, seg, p.copy(), c.copy(), 1)
        else:
            self._stepper(npdt).forward(seg, p.copy(), c.copy(), 1, t, acc)
        return seg[S:].copy(), (acc[0] if acc is not None else 0.0)

    def _step_vjp(self, x, p, c, u, u_loss, t=0):
        npdt = x.dtype
        S = self.S
        seg = np.zeros(2 * S, npdt)
        seg[:S] = x
        if self.mode == "fused":
            self._run(self.rollout_kernel, seg, p.copy(), c.copy(), 1)
        else:
            self._stepper(npdt).forward(seg, p.copy(), c.copy(), 1, t, None)
        lam = u.astype(npdt).copy()
        gp = np.zeros(self.P, npdt)
        gc = np.zeros(self.C, npdt)
        self._adj(seg, p.copy(), c.copy(), 1, t, lam, np.zeros(S, npdt), gp, gc, 1,
                  u_loss if self.loss_kernel is not None else None)
        return lam, gp, gc

    LOCATE_MAX = 512  # states up to this size: check_step names the x_next entries that disagree

    def _locate(self, x, p, c, t, k, d, fd_vec):
        """The x_next entries whose derivative (along d, w.r.t. input k) disagrees most: one VJP per entry."""
        npdt = x.dtype
        ad_vec = np.empty(self.S)
        for i in range(self.S):
            e = np.zeros(self.S, npdt)
            e[i] = 1.0
            g = self._step_vjp(x, p, c, e, 0.0, t)[k]
            ad_vec[i] = float(np.dot(g.astype(np.float64), d))
        diff = np.abs(ad_vec - fd_vec)
        worst = [int(i) for i in np.argsort(-diff)[:3] if diff[i] > 0]
        parts = [f"x_next[{', '.join(str(int(j)) for j in np.unravel_index(i, self.state_shape))}] "
                 f"(VJP {ad_vec[i]:.4e}, finite differences {fd_vec[i]:.4e})" for i in worst]
        return "; worst entries: " + ", ".join(parts)

    def check_step(self, x, params=None, control=None, *, t=0, eps=None, rtol=None, seed=0):
        """Compare one step's VJP (the kernels' ``.grad``, or the fused adjoint) with central finite
        differences at the state ``x``; raise :class:`SimulationCheckError` naming each derivative
        (output x_next or the step loss, with respect to x, params or control) that disagrees.

        Returns a dict ``{"d(x_next)/d(x)": relative error, ...}`` when all agree. Use float64:
        in float32 the check is loose (eps 1e-3, tolerance 5e-2)."""
        x = np.ascontiguousarray(np.asarray(x.numpy() if hasattr(x, "numpy") else x)).reshape(-1)
        npdt = x.dtype if x.dtype in (np.float32, np.float64) else np.float64
        x = x.astype(npdt)
        p = np.zeros(self.P, npdt) if params is None else np.asarray(
            params.numpy() if hasattr(params, "numpy") else params, npdt).reshape(-1).copy()
        c = np.zeros(self.C, npdt) if control is None else np.asarray(
            control.numpy() if hasattr(control, "numpy") else control, npdt).reshape(-1).copy()
        f64 = npdt == np.float64
        eps = eps or (1e-6 if f64 else 1e-3)
        rtol = rtol or (1e-5 if f64 else 5e-2)
        rng = np.random.default_rng(seed)
        outs = [("x_next", rng.standard_normal(self.S).astype(npdt), 0.0)]
        if self.loss_kernel is not None:
            outs.append(("loss", np.zeros(self.S, npdt), 1.0))
        inputs = [("x", x), ("params", p)] + ([("control", c)] if self.control_shape is not None else [])
        report, bad = {}, []
        for oname, u, ul in outs:
            gx, gp, gc = self._step_vjp(x, p, c, u, ul, t)
            for (iname, val), g in zip(inputs, (gx, gp, gc)):
                d = rng.standard_normal(val.size).astype(npdt)
                h = eps * max(1.0, float(np.abs(val).max()) if val.size else 1.0)
                plus, minus = [v.copy() for v in (x, p, c)], [v.copy() for v in (x, p, c)]
                k = [n for n, _ in inputs].index(iname)
                plus[k] = plus[k] + h * d
                minus[k] = minus[k] - h * d
                (xp, lp), (xm, lm) = self._step_eval(*plus, t=t), self._step_eval(*minus, t=t)
                if oname == "x_next":
                    fd = float(np.dot(u.astype(np.float64), (xp.astype(np.float64) - xm) / (2 * h)))
                else:
                    fd = (float(lp) - float(lm)) / (2 * h)
                ad = float(np.dot(g.astype(np.float64), d))
                err = abs(ad - fd) / max(abs(fd), abs(ad), 1e-12 if f64 else 1e-6)
                key = f"d({oname})/d({iname})"
                report[key] = err
                if not (err <= rtol) and abs(ad - fd) > (1e-9 if f64 else 1e-4):
                    msg = f"{key}: VJP gives {ad:.6e}, finite differences {fd:.6e} (relative error {err:.1e})"
                    if oname == "x_next" and self.S <= self.LOCATE_MAX:
                        msg += self._locate(x, p, c, t, k, d, (xp.astype(np.float64) - xm) / (2 * h))
                    bad.append(msg)
        if bad:
            raise SimulationCheckError(
                f"Simulation {self.name!r}: the step's derivatives disagree with finite differences at step {t}:\n  "
                + "\n  ".join(bad) + "\nCheck the step kernels against the rules in docs/physics.md ('Rules for kernels Taichi "
                "differentiates'): a kernel that writes its inputs, or overwrites a value after it was read (in the same "
                "loop, a later loop or a later kernel of the step), is reversed wrongly. (A kink in the step at this "
                "state, e.g. a contact, can also trip the check: try check_step at another state.)")
        return report

    def _no_second_order(self, *args, **kwargs):
        raise NotImplementedError(SECOND_ORDER_MSG.format(name=self.name))
