"""sm.graph: the traced computational graph (forward and backward), its DOT text and pictures."""
import os
import re
import sys
import types

import numpy as np
import pytest

import sciml as sm
from sciml.graph import Graph
from sciml.models import MLP, mse


def f_sin(x):
    return (sm.sin(x) * x).sum()


def _by_op(g, op):
    return [n for n in g.nodes if n["op"] == op]


def test_forward_graph_has_the_primitives_with_shapes_and_dtypes():
    x = sm.tensor([0.3, 1.2, 2.0])
    g = sm.graph(f_sin, x)
    assert isinstance(g, Graph) and g.name == "f_sin"
    assert g.ops("backward") == []
    assert g.ops("forward")[:3] == ["sin", "mul", "sum"]
    (inp,) = [n for n in g.nodes if n["kind"] == "input"]
    assert inp["op"] == "x" and inp["shape"] == (3,) and inp["dtype"] == "float64"
    (s,) = _by_op(g, "sin")
    assert s["shape"] == (3,) and s["dtype"] == "float64" and "(3,) float64" in s["label"]
    (m,) = _by_op(g, "mul")
    srcs = sorted(e[0] for e in g.edges if e[1] == m["id"])
    assert srcs == sorted([inp["id"], s["id"]])            # mul reads sin(x) and x
    outs = [n for n in g.nodes if n["output"]]
    assert len(outs) == 1 and outs[0]["output"] == "out" and outs[0]["shape"] == ()


def test_backward_adds_the_vjp_rules_and_marks_the_gradient():
    x = sm.tensor([0.3, 1.2])
    g = sm.graph(f_sin, x, backward=True)
    back = g.ops("backward")
    assert "cos" in back and back.count("mul") >= 2         # d/dx sin(x) x = cos(x) x + sin(x)
    (gx,) = [n for n in g.nodes if n["output"] == "grad x"]
    assert gx["kind"] == "backward" and gx["shape"] == (2,)
    kinds = [n["kind"] for n in g.nodes]                  # inputs, then forward, then backward nodes
    assert kinds.index("backward") > max(i for i, k in enumerate(kinds) if k == "forward")
    # the recorded pass is the real one: same gradient as sm.grad
    np.testing.assert_allclose(sm.grad(f_sin)(x).numpy(), np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy()))


def test_pytree_inputs_are_named_by_path_and_a_jit_function_traces_the_same():
    net = MLP([2, 4, 1], activation=sm.tanh, seed=0)
    X, Y = sm.tensor(np.ones((5, 2))), sm.tensor(np.zeros((5, 1)))

    def loss(params, x):
        return mse(net.apply(params, x), Y)
    g = sm.graph(loss, net.params(), X)
    names = [n["op"] for n in g.nodes if n["kind"] == "input"]
    assert names == ["params['layers']['0']['bias']", "params['layers']['0']['weight']",
                     "params['layers']['1']['bias']", "params['layers']['1']['weight']", "x"]
    w0 = [n for n in g.nodes if n["op"] == "params['layers']['0']['weight']"][0]
    assert w0["shape"] == (2, 4)
    assert g.ops("forward").count("matmul") == 2
    (first,) = [n for n in g.nodes if n["op"] == "matmul" and n["shape"] == (5, 4)]
    assert {g.nodes[s]["op"] for s, d, _ in g.edges if d == first["id"]} == {"x", w0["op"]}
    assert any(n["kind"] == "const" and n["shape"] == (5, 1) for n in g.nodes)   # Y, closed over
    jg = sm.graph(sm.jit(loss), net.params(), X, backward=True)
    assert jg.name == "sciml.jit(loss)" and jg.ops("forward") == g.ops("forward")
    grads = sorted(n["output"] for n in jg.nodes if n["output"].startswith("grad"))
    assert grads == sorted("grad " + s for s in names)


def test_dot_text_lists_every_node_and_edge():
    g = sm.graph(lambda a, b: sm.matmul(a, b).sum(), sm.ones((2, 3)), sm.ones((3, 4)), backward=True)
    dot = g.dot
    assert dot.startswith('digraph "<lambda>" {') and dot.rstrip().endswith("}")
    assert len(re.findall(r"^  n\d+ \[label=", dot, re.M)) == len(g.nodes)
    assert len(re.findall(r"^  n\d+ -> n\d+;$", dot, re.M)) == len(g.edges)
    assert 'label="matmul\\n' in dot and '(2, 4) float64' in dot
    assert 'xlabel="grad a"' in dot and 'xlabel="grad b"' in dot


def test_a_scalar_constant_shows_its_value():
    g = sm.graph(lambda x: x * 2.5, sm.tensor([1.0, 2.0]))
    consts = [n for n in g.nodes if n["kind"] == "const"]
    assert consts and consts[0]["label"].startswith("2.5")


@pytest.fixture
def no_graphviz(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)      # import graphviz -> ImportError


def test_render_by_suffix_with_the_matplotlib_fallback(tmp_path, no_graphviz):
    g = sm.graph(f_sin, sm.tensor([0.3, 1.2]), backward=True)
    g.render(tmp_path / "g.dot")
    assert (tmp_path / "g.dot").read_text() == g.dot
    g.render(str(tmp_path / "g.png"))
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    g.render(str(tmp_path / "g.svg"))
    assert b"<svg" in (tmp_path / "g.svg").read_bytes()[:2000]
    assert sorted(os.listdir(tmp_path)) == ["g.dot", "g.png", "g.svg"]     # no temporary files
    fig = g.figure()
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert len(texts) == len(g.nodes) and any("[grad x]" in t for t in texts)
    assert "<svg" in g._repr_svg_()


def test_render_through_graphviz_when_installed(tmp_path, monkeypatch):
    seen = {}

    class Source:
        def __init__(self, text):
            seen["dot"] = text

        def pipe(self, format):
            seen["format"] = format
            return b"%PDF-from-graphviz"
    monkeypatch.setitem(sys.modules, "graphviz", types.SimpleNamespace(Source=Source))
    g = sm.graph(f_sin, sm.tensor([0.3]))
    g.render(tmp_path / "g.pdf")
    assert (tmp_path / "g.pdf").read_bytes() == b"%PDF-from-graphviz"
    assert seen == {"dot": g.dot, "format": "pdf"}

    class NoDot(Source):
        def pipe(self, format):
            raise RuntimeError("failed to execute PosixPath('dot')")    # graphviz.ExecutableNotFound
    monkeypatch.setitem(sys.modules, "graphviz", types.SimpleNamespace(Source=NoDot))
    g.render(tmp_path / "h.png")                                       # falls back to matplotlib
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_arguments_are_refused_before_f_runs(tmp_path):
    def never(x):
        raise AssertionError("f ran")
    with pytest.raises(ValueError, match=r"graph\(path=...\): .* has suffix '.jpg'; expected one of .dot"):
        sm.graph(never, sm.tensor([1.0]), path=tmp_path / "g.jpg")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sm.graph(never, sm.tensor([1.0]), path=tmp_path / "no" / "g.svg")
    with pytest.raises(TypeError, match="f must be callable"):
        sm.graph(3, sm.tensor([1.0]))
    with pytest.raises(ValueError, match="no Tensor among args"):
        sm.graph(lambda a: a, 2.0)
    with pytest.raises(TypeError, match="f returned float; expected a Tensor"):
        sm.graph(lambda a: 1.0, sm.tensor([1.0]))
    with pytest.raises(ValueError, match=r"Graph.render\(path\)"):
        sm.graph(f_sin, sm.tensor([1.0])).render(tmp_path / "g.txt")


def test_path_writes_the_picture(tmp_path, no_graphviz):
    g = sm.graph(f_sin, sm.tensor([1.0, 2.0]), path=tmp_path / "g.svg")
    assert (tmp_path / "g.svg").stat().st_size > 1000 and "Graph('f_sin'" in repr(g)
