"""A ``sciml.models.MLP`` evaluated inside a simulation step: closed-loop neural control in the time loop.

:class:`MLPController` turns an MLP into ``ti.func`` step functions (one per layer) that read the
network's weights from the Simulation's ``params`` and its input from a scratch array the user's
step fills (the features: clock, state, goal), and write the output (the actuations) into another
scratch array the physics reads. The whole closed loop then runs in the per-step machinery: the
forward as the generated in-kernel time loop, the backward as the step kernel's ``.grad`` per step
(Taichi differentiates the layers too), checkpointed. ``flatten(net.params())`` gives the
parameter vector as sciml ops, so the gradient reaches the MLP's own parameters (an optimizer
bound to ``net.parameters()`` trains it).

Each layer is one serialized loop over its outputs with the inputs unrolled
(``ti.static(range(n_in))``): meant for small controllers (tens of inputs and units), the
DiffTaichi kind; a wide layer unrolls into a long kernel.
"""
from __future__ import annotations

import itertools
import linecache


_ACTS = {"tanh": "ti.tanh({})", "relu": "ti.max({}, 0.0)", "sigmoid": "1.0 / (1.0 + ti.exp(-({})))",
         "sin": "ti.sin({})", None: "{}"}
_UID = itertools.count()


def _activation_name(fn, where):
    from ..models import activations as A
    if fn is None or isinstance(fn, str):
        name = None if fn is None else fn.strip().lower()
        if name not in _ACTS and name != "identity":
            raise ValueError(f"MLPController({where}={fn!r}): expected one of 'tanh', 'relu', 'sigmoid', 'sin', "
                             "'identity' or None.")
        return None if name == "identity" else name
    for name in ("tanh", "relu", "sigmoid", "sin"):
        if fn is getattr(A, name):
            return name
    raise ValueError(f"MLPController: the MLP's activation {getattr(fn, '__name__', fn)!r} has no Taichi form here; "
                     "use tanh, relu, sigmoid or sin.")


class MLPController:
    """An MLP from ``sciml.models`` as step functions of a :class:`~sciml.physics.Simulation`.

    Args:
        net: a ``sciml.models.MLP`` (its sizes, activation and, through :meth:`flatten`, its weights).
        input: name of the scratch array (shape ``(sizes[0],)``) the step fills with the network's input.
        output: name of the scratch array (shape ``(sizes[-1],)``) the network writes.
        output_activation: applied to the last layer (the MLP has none there): None, "tanh", ...
        offset: where the network's weights start in ``params`` (after the physics' own parameters).

    Layout of the weights in ``params[offset:offset + n_params]``: per layer its weight (in, out) row
    by row, then its bias. Hidden layers are scratch arrays ``f"{output}_h1"``, ... (:meth:`scratch`).

    Example:
        >>> net = MLP([n_in, 32, n_springs], activation="tanh", seed=0)
        >>> ctrl = MLPController(net, input="feat", output="act", output_activation="tanh")
        >>> scratch = {"center": (2,), **ctrl.scratch(), "v_inc": (n, 2)}
        >>> sim = Simulation(..., step=[features, *ctrl.funcs(scratch, n_constants=3), springs, advance],
        ...                  scratch=scratch, params_shape=(ctrl.n_params,))
        >>> loss = lambda p: -sim(x0, ctrl.flatten(p))[head, 0]
        >>> g = sm.grad(loss)(net.params())             # gradients shaped like net.params()
    """

    def __init__(self, net, *, input, output, output_activation=None, offset=0):
        from ..models import MLP
        if not isinstance(net, MLP):
            raise TypeError(f"MLPController(net=...): got {type(net).__name__}; expected a sciml.models.MLP.")
        self.net = net
        self.sizes = list(net.sizes)
        self.act = _activation_name(net.activation, "net.activation")
        self.out_act = _activation_name(output_activation, "output_activation")
        self.input, self.output = str(input), str(output)
        self.hidden = [f"{self.output}_h{k}" for k in range(1, len(self.sizes) - 1)]
        self.offset = int(offset)
        self.names = [n for n, _ in net.named_parameters()]
        self.layout = []  # per layer (weight offset, bias offset or None)
        pos = self.offset
        for layer in net.layers:
            w = pos
            pos += layer.in_features * layer.out_features
            b = None
            if layer.bias is not None:
                b = pos
                pos += layer.out_features
            self.layout.append((w, b))
        self.n_params = pos - self.offset

    def scratch(self):
        """``{input: (n_in,), hidden layers..., output: (n_out,)}``: merge into the Simulation's scratch."""
        out = {self.input: (self.sizes[0],)}
        out.update({h: (s,) for h, s in zip(self.hidden, self.sizes[1:-1])})
        out[self.output] = (self.sizes[-1],)
        return out

    def flatten(self, params):
        """The weights of ``params`` (a pytree shaped like ``net.params()``) as one vector, in sciml ops."""
        from ..autodiff.ops.shape import concat
        from ..autodiff.tensor import as_tensor
        parts = []
        for name in self.names:
            node = params
            for key in name.split("."):
                node = node[key]
            parts.append(as_tensor(node).reshape((-1,)))
        return concat(parts)

    def funcs(self, scratch, n_constants=0, takes_t=False):
        """The layers as ``ti.func`` step functions, one per layer, each taking the Simulation's arguments
        ``(x, params, control, x_next, *scratch, *constants[, t])`` for this ``scratch`` dict (its order)
        and number of constants."""
        import taichi as ti
        names = list(scratch)
        for n in [self.input, *self.hidden, self.output]:
            if n not in names:
                raise ValueError(f"MLPController: scratch has no {n!r}; merge controller.scratch() into it "
                                 f"(got {names}).")
        args = ["x", "p", "c", "xn"] + [f"s{i}" for i in range(len(names))] + [f"k{i}" for i in range(n_constants)]
        if takes_t:
            args.append("t")
        sig = ", ".join(f"{a}: ti.template()" for a in args)
        chain = [self.input, *self.hidden, self.output]
        out = []
        for li, ((w0, b0), layer) in enumerate(zip(self.layout, self.net.layers)):
            src_a, dst = f"s{names.index(chain[li])}", f"s{names.index(chain[li + 1])}"
            n_in, n_out = layer.in_features, layer.out_features
            act = _ACTS[self.act if li < len(self.layout) - 1 else self.out_act]
            init = f"p[{b0} + j]" if b0 is not None else "0.0"
            fn = f"mlp_layer{li}"
            src = (f"def {fn}({sig}):\n"
                   "    ti.loop_config(serialize=True)\n"
                   f"    for j in range({n_out}):\n"
                   f"        acc = {init}\n"
                   # unrolled in chunks of 32 (Taichi warns about longer static loops)
                   + "".join(f"        for i in ti.static(range({a}, {min(a + 32, n_in)})):\n"
                             f"            acc += p[{w0} + i * {n_out} + j] * {src_a}[i]\n" for a in range(0, n_in, 32))
                   + f"        {dst}[j] = {act.format('acc')}\n")
            fname = f"<sciml.physics.controller:{fn}:{next(_UID)}>"
            linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
            env = {"ti": ti}
            exec(compile(src, fname, "exec", dont_inherit=True), env)  # noqa: S102 - generated from the sizes
            out.append(ti.func(env[fn]))
        return out
