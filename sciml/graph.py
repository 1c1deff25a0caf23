"""``sm.graph(f, *args)``: the computational graph a function builds, as a picture.

``f`` runs once, eagerly, on ``args`` with every Tensor in ``args`` watched by the tape (the
same record ``grad`` differentiates). The graph has one node per primitive application that
depends on the inputs (its op name, output shape and dtype, and its small parameters), one node
per input (named after ``f``'s parameters, with the pytree path: ``p['layers']['0']['weight']``)
and per constant Tensor it reads, and an edge per operand. Operations that do not depend on the
inputs were not recorded: their results appear as constants.

``backward=True`` adds the reverse pass: the VJP rules of every node, recorded as sciml ops
(the seed is ``ones`` of each output's shape, i.e. the gradient of their sum). That is the
differentiable form of the rules, what ``grad(grad(f))`` differentiates; a plain first-order
``grad`` runs some of those nodes as one fused kernel (e.g. a bias + activation adjoint).

A ``sm.jit`` function is traced through the function it wraps (its replay runs the kernels of
exactly these nodes).

Output: ``Graph.dot`` (Graphviz DOT text, always available), ``Graph.render(path)`` by suffix
(``.dot``/``.gv``: the text; ``.svg``/``.png``/``.pdf``: through the ``graphviz`` Python package
and its ``dot`` program when installed, ``pip install "sciml[graph]"``, else drawn with
matplotlib), and ``_repr_svg_`` for notebooks.

Example:
    >>> g = sm.graph(lambda x: (sm.sin(x) * x).sum(), sm.tensor([0.3, 1.2]), backward=True)
    >>> print(g.dot)
    >>> g.render("graph.svg")
"""
from __future__ import annotations

import inspect
import os

import numpy as np

from ._io import atomic_write, check_output_path
from ._log import get_logger
from .autodiff import backward as _B
from .autodiff import primitive as _P
from .autodiff.pytree import flatten, unflatten
from .autodiff.tensor import Tensor

log = get_logger("graph")

FORMATS = (".dot", ".gv", ".svg", ".png", ".pdf")
_COLORS = {"input": "#cfe2f3", "const": "#eeeeee", "forward": "#ffffff", "backward": "#fce5cd"}


def _paths(tree, prefix):
    """Names of the leaves of ``tree`` in ``flatten``'s order (dict keys sorted by str)."""
    if isinstance(tree, dict):
        return [p for k in sorted(tree, key=str) for p in _paths(tree[k], f"{prefix}[{k!r}]")]
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return [p for k, v in zip(tree._fields, tree) for p in _paths(v, f"{prefix}.{k}")]
    if isinstance(tree, (list, tuple)):
        return [p for i, v in enumerate(tree) for p in _paths(v, f"{prefix}[{i}]")]
    if tree is None:
        return []
    return [prefix]


def _arg_names(f, n):
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        elif params and params[-1].kind == params[-1].VAR_POSITIONAL:
            names.append(f"{params[-1].name}[{i - len(params) + 1}]")
        else:
            names.append(f"arg{i}")
    return names


def _fmt_param(v):
    if isinstance(v, (bool, int, str)) or v is None:
        return repr(v) if isinstance(v, str) else str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (tuple, list)) and len(v) <= 4 and all(isinstance(e, (int, float, bool)) for e in v):
        return "(" + ", ".join(_fmt_param(e) for e in v) + ("," if len(v) == 1 else "") + ")"
    if callable(v):
        return getattr(v, "__name__", None) or type(v).__name__
    return None


def _shape(shape):
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


class Graph:
    """A traced computational graph (see :func:`graph`).

    Attributes:
        nodes: list of dicts ``{"id", "kind", "op", "shape", "dtype", "params", "label", "output"}``;
            ``kind`` is ``"input"``, ``"const"``, ``"forward"`` or ``"backward"``; ``output`` is
            ``""`` or what the node returns (``"out"``, ``"out[1]"``, ``"grad x"``).
        edges: list of ``(src id, dst id, operand index)``.
        name: a title (the function's name).
    """

    def __init__(self, nodes, edges, name):
        self.nodes, self.edges, self.name = nodes, edges, name

    def __repr__(self):
        kinds = {k: sum(n["kind"] == k for n in self.nodes) for k in ("input", "const", "forward", "backward")}
        return (f"Graph({self.name!r}: {kinds['forward']} forward and {kinds['backward']} backward ops, "
                f"{kinds['input']} inputs, {kinds['const']} constants, {len(self.edges)} edges)")

    def ops(self, kind=None):
        """Op names of the primitive nodes, in execution order (``kind``: "forward"/"backward")."""
        return [n["op"] for n in self.nodes if n["kind"] in ((kind,) if kind else ("forward", "backward"))]

    @property
    def dot(self) -> str:
        """Graphviz DOT text (top to bottom, inputs first; backward nodes shaded)."""
        def q(s):
            return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        lines = [f"digraph {q(self.name)} {{", "  rankdir=TB;",
                 '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
                 '  edge [color="#555555", arrowsize=0.6];']
        for n in self.nodes:
            attrs = {"label": n["label"], "fillcolor": _COLORS[n["kind"]]}
            if n["kind"] in ("input", "const"):
                attrs["shape"] = "ellipse"
            if n["output"]:
                attrs["peripheries"] = "2"
                attrs["xlabel"] = n["output"]
            lines.append(f"  n{n['id']} [" + ", ".join(f"{k}={q(v)}" for k, v in attrs.items()) + "];")
        for s, d, _ in self.edges:
            lines.append(f"  n{s} -> n{d};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _graphviz(self, fmt):
        """Bytes of the picture through the graphviz package, or None (not installed / no ``dot``)."""
        try:
            import graphviz
        except ImportError:
            return None
        try:
            return graphviz.Source(self.dot).pipe(format=fmt)
        except Exception as e:  # graphviz.ExecutableNotFound (no `dot` program), a failed layout
            log.debug(f"graph: graphviz could not render ({e}); drawing with matplotlib")
            return None

    def figure(self):
        """The graph drawn with matplotlib (a :class:`matplotlib.figure.Figure`): one row per
        depth (longest path from an input), inputs on top, backward nodes shaded."""
        from matplotlib.figure import Figure
        from matplotlib.patches import FancyArrowPatch
        ids = {n["id"]: n for n in self.nodes}
        preds = {i: [] for i in ids}
        for s, d, _ in self.edges:
            preds[d].append(s)
        depth = {}
        for n in self.nodes:     # nodes are in a topological order
            depth[n["id"]] = 1 + max((depth[p] for p in preds[n["id"]]), default=-1)
        rows = {}
        for n in self.nodes:
            rows.setdefault(depth[n["id"]], []).append(n["id"])
        width = max(len(r) for r in rows.values())
        fig = Figure(figsize=(max(4.0, 2.3 * width), max(2.0, 1.05 * len(rows) + 0.6)))
        ax = fig.add_axes([0, 0, 1, 0.94 if self.name else 1])
        pos = {}
        for dpt in sorted(rows):   # each row ordered by the mean x of its operands: fewer crossings
            row = rows[dpt]
            if dpt > 0:
                row.sort(key=lambda i: np.mean([pos[p][0] for p in preds[i]]) if preds[i] else 0.0)
            for k, i in enumerate(row):
                pos[i] = ((k + 0.5) / len(row) * width, -dpt)
        for s, d, _ in self.edges:
            ax.add_patch(FancyArrowPatch(pos[s], pos[d], arrowstyle="-|>", mutation_scale=9, color="#777777",
                                         lw=0.7, shrinkA=13, shrinkB=13, connectionstyle="arc3,rad=0.05"))
        for i, (x, y) in pos.items():
            n = ids[i]
            text = n["label"] + (f"\n[{n['output']}]" if n["output"] else "")
            ax.text(x, y, text, ha="center", va="center", fontsize=7,
                    bbox=dict(boxstyle="round,pad=0.3", fc=_COLORS[n["kind"]],
                              ec="black" if n["output"] else "#888888", lw=1.4 if n["output"] else 0.6))
        ax.set_xlim(-0.1, width + 0.1)
        ax.set_ylim(-(len(rows) - 1) - 0.6, 0.6)
        ax.axis("off")
        if self.name:
            fig.suptitle(self.name, fontsize=9)
        return fig

    def render(self, path) -> str:
        """Write the graph to ``path``; its suffix picks the format: ``.dot``/``.gv`` (DOT text),
        ``.svg``, ``.png``, ``.pdf`` (graphviz when installed, else matplotlib). Atomic. Returns
        the path."""
        path = check_output_path(path, arg="Graph.render(path)", suffixes=FORMATS)
        ext = os.path.splitext(path)[1].lower()
        with atomic_write(path) as tmp:
            if ext in (".dot", ".gv"):
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(self.dot)
                return path
            data = self._graphviz(ext[1:])
            if data is not None:
                with open(tmp, "wb") as f:
                    f.write(data)
            else:
                self.figure().savefig(tmp, format=ext[1:], dpi=110)
        return path

    def _repr_svg_(self):  # notebooks
        data = self._graphviz("svg")
        if data is not None:
            return data.decode("utf-8")
        import io
        buf = io.StringIO()
        self.figure().savefig(buf, format="svg")
        return buf.getvalue()


def _label(op, shape, dtype, params):
    head = op
    if params:
        head += "\n" + ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{head}\n{_shape(shape)} {dtype}"


def graph(f, *args, backward=False, path=None):
    """Trace ``f(*args)`` and return its computational graph (a :class:`Graph`).

    Args:
        f: a function of Tensors (pytrees of Tensors) returning a Tensor or a pytree of Tensors;
            a ``sm.jit`` function is traced through the function it wraps.
        *args: its arguments; every Tensor in them is an input of the graph (numbers and numpy
            arrays are passed as they are and appear as constants where ops read them).
        backward: also record the reverse pass (gradients of the sum of the outputs with respect
            to every input Tensor) and add its nodes, shaded.
        path: also write the picture there (``.dot``, ``.gv``, ``.svg``, ``.png``, ``.pdf``;
            checked before ``f`` runs).

    Returns:
        The :class:`Graph`: ``.dot`` (DOT text), ``.render(path)``, ``.nodes``, ``.edges``,
        ``.ops()``.

    Example:
        >>> g = sm.graph(lambda x: (sm.sin(x) * x).sum(), sm.tensor([0.3, 1.2]), backward=True)
        >>> g.ops("forward")
        ['sin', 'mul', 'sum']
    """
    if not callable(f):
        raise TypeError(f"graph(f, ...): f must be callable, got {type(f).__name__}.")
    if path is not None:
        path = check_output_path(path, arg="graph(path=...)", suffixes=FORMATS)
    fn = getattr(f, "__wrapped__", f) if type(f).__name__ == "Jitted" else f
    name = getattr(fn, "__name__", type(fn).__name__)
    name = f"sciml.jit({name})" if fn is not f else name
    arg_names = _arg_names(fn, len(args))
    watched, names, trees = [], [], []
    with _P.reverse_scope(), _P.enable_grad():
        for a, an in zip(args, arg_names):
            leaves, td = flatten(a)
            paths = _paths(a, an)
            new = []
            for leaf, p in zip(leaves, paths):
                if isinstance(leaf, Tensor):
                    t = Tensor._make(leaf._buf, leaf.shape, leaf.dtype)
                    t._node = _P.leaf_node(t)
                    watched.append(t)
                    names.append(p)
                    new.append(t)
                else:
                    new.append(leaf)
            trees.append(unflatten(td, new))
        if not watched:
            raise ValueError("graph(f, *args): no Tensor among args; the graph starts at Tensor inputs "
                             "(pass the parameters and data f should depend on).")
        res = fn(*trees)
        outs, _ = flatten(res)
        bad = [type(o).__name__ for o in outs if not isinstance(o, Tensor)]
        if bad or not outs:
            raise TypeError(f"graph: f returned {', '.join(bad) or 'no Tensor'}; expected a Tensor or a "
                            "pytree of Tensors.")
        grads = []
        if backward:
            grads = _B.backward_to(outs, None, [t._node for t in watched], create_graph=True)
    g = _build(watched, names, outs, grads, name)
    if path is not None:
        g.render(path)
    return g


def _build(watched, names, outs, grads, name):
    """Walk the tape from the outputs (and gradients) back to the inputs."""
    fwd_order, _ = _B._toposort([o._node for o in outs], set())
    fwd = set(fwd_order)
    all_order = fwd_order
    if grads:
        all_order, _ = _B._toposort([o._node for o in outs] + [g._node for g in grads if g is not None], set())
    nodes, edges, ids = [], [], {}

    def add(kind, op, shape, dtype, params=None, label=None):
        i = len(nodes)
        nodes.append({"id": i, "kind": kind, "op": op, "shape": tuple(shape), "dtype": str(dtype),
                      "params": params or {}, "output": "",
                      "label": label or _label(op, shape, dtype, params)})
        return i

    for t, n in zip(watched, names):   # inputs first, in argument order (even unused ones)
        ids[t._node] = add("input", n, t.shape, t.dtype, label=f"{n}\n{_shape(t.shape)} {t.dtype}")
    consts = {}

    def const(x):
        key = id(x)
        if key not in consts:
            label = None
            if x.size == 1 and x._buf is not None:
                try:
                    label = f"{float(np.asarray(x.numpy()).reshape(-1)[0]):.4g}\n{x.dtype}"
                except Exception:  # a device buffer that cannot be read: shape and dtype only
                    label = None
            consts[key] = (x, add("const", "const", x.shape, x.dtype, label=label or
                                  f"const\n{_shape(x.shape)} {x.dtype}"))
        return consts[key][1]

    for node in fwd_order + [n for n in all_order if n not in fwd]:   # forward first
        if node in ids:
            continue
        if node.prim is None:   # a leaf not among the inputs (a closed-over requires_grad_ tensor)
            ids[node] = add("input", "leaf", node.out_shape, node.out_dtype,
                            label=f"leaf\n{_shape(node.out_shape)} {node.out_dtype}")
            continue
        params = {k: s for k, s in ((k, _fmt_param(v)) for k, v in (node.params or {}).items())
                  if s is not None and len(s) <= 24}
        kind = "forward" if node in fwd else "backward"
        operands = [ids[x._node] if x._node is not None and x._node in ids else const(x) for x in node.inputs]
        ids[node] = add(kind, node.prim.name, node.out_shape, node.out_dtype, params)
        for k, src in enumerate(operands):
            edges.append((src, ids[node], k))

    def mark(x, text):
        if x._node is not None and x._node in ids:
            i = ids[x._node]
        else:
            i = const(x)
        nodes[i]["output"] = (nodes[i]["output"] + ", " if nodes[i]["output"] else "") + text

    for k, o in enumerate(outs):
        mark(o, "out" if len(outs) == 1 else f"out[{k}]")
    for t, n, g in zip(watched, names, grads):
        if g is not None:
            mark(g, f"grad {n}")
    return Graph(nodes, edges, name)


__all__ = ["graph", "Graph", "FORMATS"]
