"""Networks for PINNs beyond one MLP: several networks (one per field) and feature/output
transforms (DeepXDE's ``apply_feature_transform`` / ``apply_output_transform``).

Any object with ``params()`` and ``apply(params, x)`` works in ``solve``; these two are such
objects. Derivative paths: :class:`Fields` of MLPs keeps the fused Taylor-mode kernels (each
network's derivatives are computed on its own and stacked); :class:`Transformed` runs its
transforms on truncated Taylor series (:mod:`sciml.pinn.jets`): an output transform composes
with the network's fused jet, a feature transform's jet enters the fused kernels' first layer
(``fused.mlp_jet``); a transform using an op without a jet rule falls back to nested forward
mode through ``apply``. ``Result.path_reason`` says which path ran and why.

Example:
    >>> net = Transformed(MLP([2, 32, 32, 1], seed=0),
    ...                   features=lambda x: sm.concat([sm.sin(x[:, 0:1]), sm.cos(x[:, 0:1]),
    ...                                                 x[:, 1:2]], axis=1),   # periodic in x
    ...                   output=lambda x, u: x[:, 1:2] * u + sm.sin(x[:, 0:1]))  # hard u(x, 0)
"""
from ..autodiff import ops


class Fields:
    """Several networks, one per output field; ``apply`` stacks their outputs (columns in the
    order given). ``Fields(MLP([2, 32, 1]), MLP([2, 32, 1]))`` for a two-field system."""

    def __init__(self, *nets):
        if not nets:
            raise ValueError("Fields: give at least one network.")
        for k, n in enumerate(nets):
            if not (hasattr(n, "params") and hasattr(n, "apply")):
                raise TypeError(f"Fields: network {k} is a {type(n).__name__}; expected an object "
                                "with params() and apply(params, x).")
        self.nets = list(nets)

    def params(self):
        return {str(k): n.params() for k, n in enumerate(self.nets)}

    def apply(self, params, x):
        outs = [n.apply(params[str(k)], x) for k, n in enumerate(self.nets)]
        return outs[0] if len(outs) == 1 else ops.concat(outs, axis=1)

    __call__ = lambda self, x: self.apply(self.params(), x)  # noqa: E731


class Transformed:
    """``u(x) = output(x, net(features(x)))``.

    Args:
        net: the network (``params()`` and ``apply(params, z)``).
        features: None or ``features(x) -> (n, m)`` of the points ``x (n, dim)`` (a Tensor
            function: ``sm.sin``, ``sm.concat``, ...); the net's input width is ``m``.
        output: None or ``output(x, y) -> (n, k)`` of the points and the net's output ``y``
            (hard constraints: ``lambda x, y: x[:, 0:1] * (1 - x[:, 0:1]) * y``).
    """

    def __init__(self, net, features=None, output=None):
        if not (hasattr(net, "params") and hasattr(net, "apply")):
            raise TypeError(f"Transformed: net is a {type(net).__name__}; expected an object with "
                            "params() and apply(params, x).")
        for what, f in (("features", features), ("output", output)):
            if f is not None and not callable(f):
                raise TypeError(f"Transformed({what}=...): expected a function, got "
                                f"{type(f).__name__}.")
        self.net, self.features, self.output = net, features, output

    def params(self):
        return self.net.params()

    def apply(self, params, x):
        y = self.net.apply(params, x if self.features is None else self.features(x))
        return y if self.output is None else self.output(x, y)

    __call__ = lambda self, x: self.apply(self.params(), x)  # noqa: E731


__all__ = ["Fields", "Transformed"]
