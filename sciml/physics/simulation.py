"""Simulations written as Taichi kernels, differentiable through thousands of steps.

A :class:`Simulation` maps (initial state ``x0``, physical parameters ``params``, per-step
``controls``) to the final state ``x_T`` as ONE sciml primitive, so it composes with every sciml
op, module, optimizer and transform (first order: the adjoint is a Taichi kernel).

Two execution paths, chosen automatically (``mode="auto"``):

* ``"fused"`` (fast path, small states): the time loop runs inside one ``rollout`` kernel that
  fills a history buffer ``(m+1) x S``, and a HAND-WRITTEN ``adjoint`` kernel steps the adjoint
  state backward in time. One or two kernel launches per segment instead of one per step.
  Taichi's own reverse mode over a serialized time loop silently returns zeros, so sciml never
  asks Taichi to differentiate the time loop: the adjoint is yours (or a built-in's), and must be
  tested against finite differences.
* ``"per_step"`` (large states, or when only a ``step`` kernel is given): one launch of ``step``
  per time step, and Taichi's ``step.grad`` per step in reverse (the DiffTaichi / ``ti.ad.Tape``
  pattern). Not available on Vulkan (Taichi's ndarray autodiff returns zeros there, issue 8524).

Checkpointing (both paths): ``checkpoint_every=k`` stores every k-th state and recomputes each
segment of k steps during the backward pass: memory ``(T/k + k) S`` instead of ``T S``, for one
extra forward. ``"auto"`` stores everything when it fits ``memory_budget`` and picks k = sqrt(T)
otherwise; ``None`` always stores everything (and raises if it does not fit).

Kernel conventions (S = prod(state_shape), P = prod(params_shape), C = prod(control_shape)):

* ``step(x, params, control, x_next, *constants)``: ndarrays of the declared shapes
  (``state_shape``, ``params_shape``, ``control_shape`` or ``(1,)`` without controls). Writes every
  element of ``x_next`` once, never writes its inputs (Taichi's autodiff rules).
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
from ..autodiff.taichi_bridge import FIRST_ORDER_MSG, TaichiFunction, copy_kernels
from ..autodiff.tensor import as_tensor, zeros

VULKAN_MSG = ("Simulation {name!r}: the per-step path differentiates the step kernel with Taichi's autodiff, "
              "which returns all-zero ndarray gradients on Vulkan (taichi issue 8524). Supply rollout= and "
              "adjoint= kernels (the fused path), or run on arch='cpu'.")
SMALL_STATE = 1 << 16  # elements; below this "auto" picks the fused path when it exists
CHUNK_BYTES = 1 << 22  # forward without gradient: run in segments of about this many bytes


def _shape(name, s):
    if s is None:
        return None
    s = (int(s),) if isinstance(s, (int, np.integer)) else tuple(int(d) for d in s)
    if not s or any(d <= 0 for d in s):
        raise ValueError(f"Simulation({name}=...): got {s}; expected a non-empty tuple of positive sizes.")
    return s


class Simulation:
    """A differentiable simulation ``x_T = sim(x0, params, controls)``.

    Args:
        state_shape: shape of the state (pack positions and velocities into one array).
        steps: number of time steps T.
        params_shape: shape of the physical parameters (default ``(1,)``).
        control_shape: shape of one step's control (``controls`` then has shape ``(T, *control_shape)``);
            None for no controls.
        step: ``@ti.kernel`` for one step (the per-step path, and ``step_function``).
        rollout, adjoint: ``@ti.kernel``s for the fused path (see the module docstring).
        constants: extra arrays passed to every kernel after its own arguments (not differentiated).
        mode: "auto" (fused when rollout/adjoint exist and the state has at most 65536 elements, or
            when there is no step kernel), "fused" or "per_step".
        checkpoint_every: "auto", None (store every state) or k (store every k-th state).
        memory_budget: bytes allowed for stored states (default 2 GiB).
        name: used in errors.

    Example:
        >>> sim = sm.physics.heat1d(n=64, steps=500)            # built-in, with a hand-written adjoint
        >>> u0 = sm.randn(64, seed=0)
        >>> g = sm.grad(lambda u: ((sim(u, sm.tensor([0.2])) - 1.0) ** 2).sum())(u0)
    """

    def __init__(self, *, state_shape, steps, params_shape=(1,), control_shape=None, step=None, rollout=None,
                 adjoint=None, constants=(), mode="auto", checkpoint_every="auto", memory_budget=2 << 30,
                 name="simulation"):
        self.name = name
        self.state_shape = _shape("state_shape", state_shape)
        self.params_shape = _shape("params_shape", params_shape)
        self.control_shape = _shape("control_shape", control_shape)
        if not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"Simulation(steps=...): got {steps!r}; expected a positive int.")
        self.steps = int(steps)
        self.S = math.prod(self.state_shape)
        self.P = math.prod(self.params_shape)
        self.C = math.prod(self.control_shape) if self.control_shape else 1
        self.step, self.rollout_kernel, self.adjoint_kernel = step, rollout, adjoint
        self.constants = tuple(constants)
        if (rollout is None) != (adjoint is None):
            raise ValueError(f"Simulation {name!r}: the fused path needs both rollout= and adjoint= kernels; "
                             f"got only {'rollout' if adjoint is None else 'adjoint'}.")
        if mode not in ("auto", "fused", "per_step"):
            raise ValueError(f"Simulation(mode=...): got {mode!r}; expected 'auto', 'fused' or 'per_step'.")
        if mode == "auto":
            fused_ok = rollout is not None and (step is None or self.S <= SMALL_STATE)
            mode = "fused" if fused_ok else "per_step"
        if mode == "fused" and rollout is None:
            raise ValueError(f"Simulation {name!r}: mode='fused' needs rollout= and adjoint= kernels.")
        if mode == "per_step" and step is None:
            raise ValueError(f"Simulation {name!r}: mode='per_step' needs a step= kernel.")
        self.mode = mode
        self.memory_budget = int(memory_budget)
        self.checkpoint_every = self._choose_k(checkpoint_every)
        self._saved = {}
        self._pool = []
        self.prim = Primitive(f"simulation:{name}", self._forward)
        self.prim.def_vjp(self._vjp)
        self.grad_prim = Primitive(f"simulation:{name}.grad", self._grad_forward)
        self.grad_prim.def_vjp(self._no_second_order)
        self.grad_prim.def_jvp(self._no_second_order)
        self._step_fn = None
        self._validated = False
        self._grad_bufs = None

    def __repr__(self):
        return (f"Simulation({self.name!r}, state_shape={self.state_shape}, steps={self.steps}, mode={self.mode!r}, "
                f"checkpoint_every={self.checkpoint_every})")

    __hash__ = object.__hash__

    # --- memory ----------------------------------------------------------------------------
    def memory_bytes(self, checkpoint_every=None) -> int:
        """Bytes of stored states for a differentiated rollout with this checkpoint interval
        (None = every state stored)."""
        item = np.dtype(backend.NP_DTYPES[runtime.default_dtype()]).itemsize
        T, S = self.steps, self.S
        if checkpoint_every is None or checkpoint_every >= T:
            return (T + 1) * S * item
        k = int(checkpoint_every)
        return (math.ceil(T / k) + 1 + k + 1) * S * item

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
        if not isinstance(k, (int, np.integer)) or k < 1:
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
    def __call__(self, x0, params=None, controls=None):
        """Final state after ``steps`` steps, a Tensor of ``state_shape``."""
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
        return self.prim(*ins, sim=self)

    def trajectory(self, x0, params=None, controls=None, every=1):
        """The states x_0, x_every, x_2every, ... x_T as a numpy array (no gradient; for plots)."""
        x0 = as_tensor(x0)
        dtype = x0.dtype
        npdt = backend.NP_DTYPES[dtype]
        p = self._host(zeros(self.params_shape, dtype) if params is None else as_tensor(params, dtype))
        ctrl = self._host(as_tensor(controls, dtype)) if controls is not None else np.zeros(self.steps * self.C, npdt)
        S, C = self.S, self.C
        seg = np.empty((self.steps + 1) * S, npdt)
        seg[:S] = self._host(x0)
        self._roll(seg, p, ctrl, self.steps)
        return seg.reshape((self.steps + 1,) + self.state_shape)[::every].copy()

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
        if self.step is None:
            raise ValueError(f"Simulation {self.name!r} has no step= kernel.")
        if self._step_fn is None:
            cs = self.control_shape or (1,)
            self._step_fn = TaichiFunction(self.step, [self.state_shape, self.params_shape, cs],
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

    def _segments(self, k):
        b = list(range(0, self.steps, k)) + [self.steps]
        return list(zip(b[:-1], b[1:]))

    def _forward(self, *ins, sim):
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
        segs = self._segments(k)
        ckpts = np.empty((len(segs) + 1, S), npdt) if recording else None
        seg = self._take((k + 1) * S, npdt)
        seg[:S] = self._host(x0)
        for j, (a, b) in enumerate(segs):
            m = b - a
            if recording:
                ckpts[j] = seg[:S]
            self._roll(seg, p, ctrl[a * C:b * C], m)
            last = seg[m * S:(m + 1) * S]
            if recording:
                ckpts[j + 1] = last
            if j + 1 < len(segs):
                seg[:S] = last
        x_T = seg[(segs[-1][1] - segs[-1][0]) * S:(segs[-1][1] - segs[-1][0] + 1) * S].copy()
        out = backend.from_numpy(x_T, dtype)
        if recording:
            key = id(out)
            self._saved[key] = (weakref.ref(out) if isinstance(out, np.ndarray) else None, ckpts, seg, segs)
            weakref.finalize(out, self._release, key)
        else:
            self._pool.append(seg)
            del self._pool[:-2]
        return out, self.state_shape, dtype

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

    def _roll(self, seg, p, ctrl, m):
        if self.mode == "fused":
            self._run(self.rollout_kernel, seg[:(m + 1) * self.S], p, ctrl, m)
            return
        view = seg[:(m + 1) * self.S].reshape((m + 1,) + self.state_shape)
        pv = p.reshape(self.params_shape)
        cv = ctrl.reshape((m,) + (self.control_shape or (1,)))
        t0 = 0
        if not self._validated:  # once: a step kernel that writes its input breaks Taichi's autodiff
            before = view[0].copy()
            self.step(view[0], pv, cv[0], view[1], *self.constants)
            if not np.array_equal(before, view[0], equal_nan=True):
                raise RuntimeError(
                    f"Simulation {self.name!r}: the step kernel wrote its input {self._x_name()!r}. A step must "
                    "read x and write only x_next (Taichi's autodiff is silently wrong otherwise).")
            self._validated = True
            t0 = 1
        for t in range(t0, m):
            self.step(view[t], pv, cv[t], view[t + 1], *self.constants)

    def _x_name(self):
        try:
            import inspect
            return next(iter(inspect.signature(self.step).parameters))
        except Exception:  # pragma: no cover
            return "x"

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
    def _vjp(self, g, *ins, out, sim):
        if self.mode == "per_step" and runtime.arch() == "vulkan":
            raise RuntimeError(VULKAN_MSG.format(name=self.name))
        need_p = needs(1)
        flat = self.grad_prim(g, *ins, out, sim=self, need_params=int(need_p))
        sizes = [x.size for x in ins]
        cots, start = [], 0
        for x, n in zip(ins, sizes):
            cots.append(flat[start:start + n].reshape(x.shape))
            start += n
        if not need_p:
            cots[1] = None
        return tuple(cots)

    def _grad_forward(self, g, *ins, sim, need_params):
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
        _, ckpts, seg, segs = saved
        ctrl = self._host(ins[2]) if len(ins) > 2 else np.zeros(self.steps * C, npdt)
        p = self._host(params)
        lam = self._host(g).copy()
        gp = np.zeros(self.P, npdt)
        gc = np.zeros(self.steps * C, npdt)
        work = np.zeros(S, npdt)
        for j in range(len(segs) - 1, -1, -1):
            a, b = segs[j]
            m = b - a
            if j != len(segs) - 1:  # the last segment is still in `seg` from the forward
                seg[:S] = ckpts[j]
                self._roll(seg, p, ctrl[a * C:b * C], m)
            self._adj(seg[:(m + 1) * S], p, ctrl[a * C:b * C], m, lam, work, gp, gc[a * C:b * C], need_params)
        parts = [lam, gp] + ([gc] if len(ins) > 2 else [])
        flat = np.concatenate(parts)
        return backend.from_numpy(flat, dtype), (flat.size,), dtype

    def _adj(self, seg, p, ctrl, m, lam, work, gp, gc, need_params):
        if self.mode == "fused":
            self._run(self.adjoint_kernel, seg, p, ctrl, m, lam, work, gp, gc, need_params)
            return
        ti = runtime.ensure_init()
        dtype = ti.f64 if seg.dtype == np.float64 else ti.f32
        cs = self.control_shape or (1,)
        key = (dtype, self.state_shape)
        if self._grad_bufs is None or self._grad_bufs[0] != key:
            self._grad_bufs = (key, ti.ndarray(dtype, self.state_shape, needs_grad=True),
                               ti.ndarray(dtype, self.params_shape, needs_grad=True),
                               ti.ndarray(dtype, cs, needs_grad=True),
                               ti.ndarray(dtype, self.state_shape, needs_grad=True))
        _, xa, pa, ca, xb = self._grad_bufs
        K = copy_kernels()
        K["load"](p, pa, pa.grad)
        S, C = self.S, self.C
        for t in range(m - 1, -1, -1):
            K["load"](seg[t * S:(t + 1) * S], xa, xa.grad)
            K["load"](ctrl[t * C:(t + 1) * C], ca, ca.grad)
            K["put"](lam, xb.grad)
            self.step.grad(xa, pa, ca, xb, *self.constants)
            K["get"](xa.grad, lam)
            K["get"](ca.grad, gc[t * C:(t + 1) * C])
        if need_params:
            tmp = np.empty(self.P, p.dtype)
            K["get"](pa.grad, tmp)
            gp += tmp

    def _no_second_order(self, *args, **kwargs):
        raise NotImplementedError(FIRST_ORDER_MSG.format(name=self.name))
