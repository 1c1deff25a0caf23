"""The eager path's Python work, counted: tape nodes per op, one graph walk per backward(), Module.__call__'s
parameter substitution without dotted-name walks (and that it restores every Parameter, shares aliases, and
keeps the tuple error), per-thread autodiff flags."""
import threading

import numpy as np
import pytest

import sciml as sm
from sciml.autodiff import backward as B
from sciml.autodiff import primitive as P
from sciml.models import Linear, Module, Sequential, SiLU
from sciml.models import module as M


@pytest.fixture(autouse=True)
def _f64():
    sm.init(arch="cpu", dtype="float64")


def _nodes(t):
    order, _ = B._toposort([t._node], set())
    return [n for n in order if n.prim is not None]


def _double():
    def fwd(x):
        return x._buf * 2, x.shape, x.dtype
    dbl = P.Primitive("double", fwd)
    dbl.def_vjp(lambda g, x, out: (g * 2.0,))
    return dbl


def test_one_tape_node_per_primitive_and_none_without_grad():
    dbl = _double()
    rng = np.random.default_rng(0)
    x = sm.tensor(rng.standard_normal((3, 4)))
    w = sm.tensor(rng.standard_normal((3, 4))).requires_grad_()
    assert dbl(dbl(x))._node is None  # no input on the tape: nothing recorded
    with sm.no_grad():
        assert dbl(w)._node is None
    y = dbl(dbl(dbl(w)))
    assert [n.prim.name for n in _nodes(y)] == ["double"] * 3
    assert all(n.out_tangents is None for n in _nodes(y))
    g = sm.grad(lambda v: dbl(dbl(v)).sum())(w)
    np.testing.assert_array_equal(g.numpy(), np.full((3, 4), 4.0))
    # forward tangents still flow (the input pass notices tangents as well as tape nodes)
    _, t = sm.jvp(lambda v: dbl(v), (w,), (sm.tensor(np.ones((3, 4))),))
    np.testing.assert_array_equal(t.numpy(), np.full((3, 4), 2.0))


def test_backward_walks_the_tape_once(monkeypatch):
    calls = []
    orig = B._toposort

    def counted(*a, **k):
        calls.append(1)
        return orig(*a, **k)
    monkeypatch.setattr(B, "_toposort", counted)
    rng = np.random.default_rng(1)
    a = sm.tensor(rng.standard_normal((3, 3))).requires_grad_()
    b = sm.tensor(rng.standard_normal((3, 3))).requires_grad_()
    c = sm.tensor(rng.standard_normal((3, 3)))  # not on the tape
    loss = (sm.tanh(a @ b) * c + a).sum()
    loss.backward()
    assert len(calls) == 1
    an, bn, cn = a.numpy(), b.numpy(), c.numpy()
    s = 1 - np.tanh(an @ bn) ** 2
    np.testing.assert_allclose(a.grad.numpy(), (s * cn) @ bn.T + 1, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), an.T @ (s * cn), rtol=1e-12)
    loss2 = (a * a).sum()  # .grad accumulates, as in PyTorch
    loss2.backward()
    np.testing.assert_allclose(a.grad.numpy(), (s * cn) @ bn.T + 1 + 2 * an, rtol=1e-12)


class _Holder(Module):
    def __init__(self):
        self.lin = Linear(3, 2, seed=0)
        self.shared = self.lin.weight  # the same Parameter under a second name
        self.extra = [sm.models.Parameter(np.ones(2)), {"k": sm.models.Parameter(np.full(2, 2.0))}]

    def forward(self, x):
        return (self.lin(x) * self.extra[0] + self.extra[1]["k"]).sum() + (self.shared * self.shared).sum()


def test_module_call_substitutes_without_name_walks(monkeypatch):
    net = _Holder()
    x = sm.tensor(np.arange(6.0).reshape(2, 3))
    walks = []
    orig = M._walk

    def counted(*a, **k):
        walks.append(1)
        return orig(*a, **k)
    monkeypatch.setattr(M, "_walk", counted)
    loss = net(x)
    assert walks == []  # no dotted-name collection on the per-call path
    # every Parameter is back in place after the call
    assert isinstance(net.lin.weight, sm.models.Parameter) and net.shared is net.lin.weight
    assert isinstance(net.extra[0], sm.models.Parameter) and isinstance(net.extra[1]["k"], sm.models.Parameter)
    loss.backward()
    W, b = net.lin.weight.numpy(), net.lin.bias.numpy()
    xn = x.numpy()
    # d/dW of sum((x W + b) * e) + sum(W * W): the shared Parameter gets both uses (one alias)
    np.testing.assert_allclose(net.lin.weight.grad.numpy(), np.outer(xn.sum(0), np.ones(2)) + 2 * W, rtol=1e-12)
    np.testing.assert_allclose(net.extra[0].grad.numpy(), (xn @ W + b).sum(0), rtol=1e-12)
    np.testing.assert_allclose(net.extra[1]["k"].grad.numpy(), [2.0, 2.0], rtol=1e-12)


def test_module_call_restores_parameters_after_an_error():
    class Bad(Module):
        def __init__(self):
            self.lin = Linear(2, 2, seed=0)

        def forward(self, x):
            assert not isinstance(self.lin.weight, sm.models.Parameter)  # an alias while running
            raise RuntimeError("boom")
    net = Bad()
    with pytest.raises(RuntimeError, match="boom"):
        net(sm.tensor(np.ones((1, 2))))
    assert isinstance(net.lin.weight, sm.models.Parameter)


def test_parameter_in_a_tuple_keeps_its_error():
    class T(Module):
        def __init__(self):
            self.pair = (sm.models.Parameter(np.ones(2)), 1.0)

        def forward(self, x):
            return x * self.pair[0]
    with pytest.raises(TypeError, match="inside a tuple"):
        T()(sm.tensor(np.ones(2)))


def test_frozen_parameters_are_not_substituted():
    net = Sequential(Linear(3, 4, seed=0), SiLU(), Linear(4, 1, seed=1))
    net.layers[0].weight.requires_grad_(False)
    slots = M._trainable_slots(net)[0]
    assert {id(p) for _, _, p in slots} == {id(net.layers[0].bias), id(net.layers[2].weight),
                                            id(net.layers[2].bias)}
    loss = net(sm.tensor(np.ones((2, 3)))).sum()
    loss.backward()
    assert net.layers[0].weight.grad is None and net.layers[0].bias.grad is not None


def test_autodiff_flags_are_per_thread():
    seen = {}
    entered, release = threading.Event(), threading.Event()

    def worker():
        with sm.no_grad():
            seen["worker"] = P.is_grad_enabled()
            entered.set()
            release.wait(10)
    t = threading.Thread(target=worker)
    t.start()
    entered.wait(10)
    seen["main"] = P.is_grad_enabled()
    a = sm.tensor(np.ones(2)).requires_grad_()
    seen["main_records"] = (a * a)._node is not None
    release.set()
    t.join()
    assert seen == {"worker": False, "main": True, "main_records": True}


def _adam_run(clear, lrs):
    from sciml.kernels import _common as C
    from sciml.kernels import _vec as V
    from sciml.optim import Adam
    rng = np.random.default_rng(3)
    ps = [sm.models.Parameter(rng.standard_normal(n).astype(np.float32), dtype="float32") for n in (37, 64, 5)]
    gs = [sm.tensor(rng.standard_normal(p.shape).astype(np.float32), "float32") for p in ps]
    opt = Adam(ps, lr=lrs[0])
    ks = []
    for i, lr in enumerate(lrs):
        opt.lr = lr
        if clear or i == 0:
            for k in C._cache.values():
                if isinstance(k, V.VecLaunch) and k.rebind:
                    k.ctxs.clear()
        opt.step(gs)
        ks = [k for key, k in C._cache.items() if isinstance(k, V.VecLaunch) and k.rebind]
    return [p.numpy() for p in ps], ks


def test_optimizer_launch_contexts_are_reused_with_each_steps_scalars():
    """Adam's update kernel keeps its launch context by array arguments (the bias corrections change every
    step): steps on the same buffers reuse one context and give bit-identical results to contexts built
    afresh every step, through a learning rate of 0 and back."""
    lrs = [1e-2, 3e-3, 0.0, 1e-2, -0.0, 5e-3]
    fresh, _ = _adam_run(True, lrs)
    reused, ks = _adam_run(False, lrs)
    assert ks and all(len(k.ctxs) <= 1 for k in ks)
    for a, b in zip(fresh, reused):
        np.testing.assert_array_equal(a, b)


def test_submodules_called_by_their_parent_do_not_walk_again(monkeypatch):
    """One walk per top-level call: the submodules' Parameters are already substituted (a module outside the
    parent's tree still substitutes its own)."""
    class Outside(Module):
        def __init__(self):
            self.lin = Linear(4, 4, seed=2)

        def forward(self, x):
            return self.lin(x)
    other = Outside()

    class Net(Module):
        def __init__(self):
            self.a, self.b = Linear(3, 4, seed=0), Linear(4, 4, seed=1)
            self._hidden = other  # private attribute: not part of the walk

        def forward(self, x):
            return self._hidden(sm.tanh(self.b(sm.tanh(self.a(x))))).sum()
    net = Net()
    walks = []
    orig = M._trainable_slots

    def counted(root):
        walks.append(type(root).__name__)
        return orig(root)
    monkeypatch.setattr(M, "_trainable_slots", counted)
    loss = net(sm.tensor(np.ones((2, 3))))
    assert walks == ["Net", "Outside"]
    loss.backward()
    for p in (net.a.weight, net.b.bias, other.lin.weight):
        assert p.grad is not None and np.isfinite(p.grad.numpy()).all()
    assert isinstance(net.a.weight, sm.models.Parameter) and isinstance(other.lin.weight, sm.models.Parameter)
