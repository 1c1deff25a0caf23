"""A condition's values must have one column per output it applies to: no silent broadcasting.

numpy's broadcasting would compare a one-column value with every output of a system, or one output
with every column of the data, and train on it without a word (DeepXDE fixed the same in its
PointSetBC: lululxvi/deepxde#2101). DeepXDE's conditions default to ``component=0``; sciml's
``component=None`` means every output, so a ported ``DirichletBC(geom, f, on)`` of a system whose
``f`` gives u's values alone must now say which output it is for.
"""
import numpy as np
import pytest

from sciml.models import MLP
from sciml.optim import Adam
from sciml.pinn import (Dirichlet, Initial, Interval, Neumann, PointData, Problem, Rectangle,
                        TimeInterval, d, solve)

X = np.linspace(0.05, 0.95, 10)[:, None]


def _solve(problem, n_out, steps=2, seed=0):
    return solve(problem, MLP([problem.domain.dim, 8, n_out], seed=seed), points=16,
                 stages=[(Adam(lr=1e-3), steps)], progress=False, seed=seed)


def _pde2(u, v, x):
    return [d(u, x) - v, d(v, x) + u]


@pytest.mark.parametrize("values, component, n_out, match", [
    (np.zeros((10, 1)), None, 2, r"1 column\(s\) at 10 points, but the condition applies to 2 output"),
    (np.zeros((10, 2)), None, 1, r"2 column\(s\) at 10 points, but the condition applies to 1 output"),
    (np.zeros((10, 2)), 0, 2, r"expected \(m,\) or \(m, 1\) values for output 0"),
    (np.zeros((10, 3)), 1, 2, r"3 column\(s\)"),
])
def test_point_data_columns_checked_when_the_problem_is_made(values, component, n_out, match):
    pde = _pde2 if n_out == 2 else (lambda u, x: d(u, x))
    with pytest.raises(ValueError, match=match):
        Problem(Interval(0, 1), pde, outputs=("u", "v") if n_out == 2 else 1,
                conditions=[PointData(X, values, component=component)])


def test_point_data_matching_columns_train():
    p = Problem(Interval(0, 1), _pde2, outputs=("u", "v"),
                conditions=[PointData(X, np.zeros((10, 2))), PointData(X, np.ones(10), component=1)])
    r = _solve(p, 2)
    assert np.isfinite(r.history["loss"][-1])


def test_function_value_of_one_column_on_a_system_needs_a_component():
    """DeepXDE's DirichletBC(geom, f, on) holds for component 0; a port that drops the component
    would make every output equal f. The error names the condition and the way out."""
    p = Problem(Interval(0, 1), _pde2, outputs=("u", "v"),
                conditions=[Dirichlet(lambda x: np.sin(x), on="left")])
    with pytest.raises(ValueError, match=r"dirichlet:left.*1 column\(s\) at \d+ points.*2 output.*"
                                         r"component=k.*DeepXDE's default is component=0"):
        _solve(p, 2)


@pytest.mark.parametrize("cond", [
    Dirichlet(0.0),                                                  # a number: every output
    Dirichlet(lambda x: np.stack([np.sin(x), np.cos(x)], 1)),       # one column per output
    Dirichlet(lambda x: np.sin(x), on="left", component=1),
    Neumann(lambda x: x, on="right", component=0),
])
def test_allowed_value_shapes_on_a_system(cond):
    p = Problem(Interval(0, 1), _pde2, outputs=("u", "v"), conditions=[cond])
    assert np.isfinite(_solve(p, 2).history["loss"][-1])


def test_initial_value_columns_checked():
    dom = Interval(0, 1) * TimeInterval(0, 1)

    def pde(u, v, x, t):
        return [d(u, t) - d(v, x), d(v, t) - d(u, x)]

    p = Problem(dom, pde, outputs=("u", "v"), conditions=[Initial(lambda x: np.sin(np.pi * x))])
    with pytest.raises(ValueError, match=r"initial.*1 column\(s\).*2 output"):
        _solve(p, 2)


def test_component_by_name_is_the_index():
    mk = (lambda c: Problem(Interval(0, 1), _pde2, outputs=("u", "v"),
                            conditions=[Dirichlet(1.0, on="left", component=c)]))
    a, b, c = mk("v"), mk(1), mk(-1)
    assert a.conditions[0].component == b.conditions[0].component == c.conditions[0].component == 1
    ra, rb = _solve(a, 2, steps=3), _solve(b, 2, steps=3)
    assert ra.history["loss"] == rb.history["loss"]


@pytest.mark.parametrize("component, exc, match", [
    (2, ValueError, r"component=2\): the problem has 2 output\(s\); expected an index in 0\.\.1"),
    (-3, ValueError, r"component=-3\)"),
    ("w", ValueError, r"no output named 'w'; the problem's outputs are \('u', 'v'\)"),
    ([0, 1], TypeError, r"component=\[0, 1\]\): expected None .*got list"),
    (True, TypeError, r"got bool"),
    (1.0, TypeError, r"got float"),
])
def test_bad_components_are_named(component, exc, match):
    with pytest.raises(exc, match=match):
        Problem(Interval(0, 1), _pde2, outputs=("u", "v"),
                conditions=[Dirichlet(0.0, on="left", component=component)])


def test_component_name_without_output_names():
    with pytest.raises(ValueError, match=r"no output named 'u'.*Problem\(outputs="):
        Problem(Interval(0, 1), lambda u, x: d(u, x), conditions=[Dirichlet(0.0, component="u")])


def test_reference_with_more_columns_than_outputs_is_refused_before_training():
    pts = np.linspace(0, 1, 20)[:, None]
    p = Problem(Interval(0, 1), lambda u, x: d(u, x), conditions=[Dirichlet(0.0, on="left")],
                reference=(pts, np.zeros((20, 2))))
    calls = []
    with pytest.raises(ValueError, match=r"reference gives 2 columns at 20 points but the problem "
                                         r"has 1 output"):
        solve(p, MLP([1, 8, 1], seed=0), points=16, stages=[(Adam(lr=1e-3), 2)], progress=False,
              callbacks=[lambda pr: calls.append(pr.step)])
    assert calls == []


def test_reference_with_fewer_columns_measures_the_first_outputs():
    """An inverse problem's known field (u) beside an unknown coefficient field (q): the error is u's."""
    pts = np.linspace(0, 1, 20)[:, None]
    p = Problem(Interval(0, 1), _pde2, outputs=("u", "v"), conditions=[Dirichlet(0.0, on="left")],
                reference=(pts, np.sin(pts)))
    r = _solve(p, 2)
    u = r.predict(pts)[:, :1]
    want = np.linalg.norm(u - np.sin(pts)) / np.linalg.norm(np.sin(pts))
    assert r.rel_l2 == pytest.approx(want, rel=1e-5)


def test_rectangle_system_dirichlet_component_names():
    """Kovasznay's pattern: one condition per output, by name."""
    p = Problem(Rectangle((0, 0), (1, 1)), lambda u, v, x, y: [d(u, x) + d(v, y)], outputs=("u", "v"),
                conditions=[Dirichlet(lambda x, y: x, component="u"),
                            Dirichlet(lambda x, y: y, component="v")])
    assert [c.component for c in p.conditions] == [0, 1]
    assert np.isfinite(_solve(p, 2).history["loss"][-1])


@pytest.mark.parametrize("n_out", [1, 2])
def test_output_transform_that_broadcasts_to_n_by_n_is_refused(n_out):
    """``x[:, 0] * y`` is (n,) times (n, k): (n, n) or an error by broadcasting. A one-point probe passed
    it and the run trained on an (n, n) output (rel. L2 1.0, no error)."""
    from sciml.pinn import Transformed
    names = ("u", "v")[:n_out] if n_out > 1 else 1
    pde = _pde2 if n_out == 2 else (lambda u, x: d(u, x, x) + 1.0)
    p = Problem(Interval(0, 1), pde, outputs=names, conditions=[Dirichlet(0.0)])
    net = Transformed(MLP([1, 8, 1], seed=0), output=lambda x, y: x[:, 0] * y)
    with pytest.raises(ValueError, match=r"maps 5 points .* to \(5, 5\).*x\[:, 0:1\] \* y"):
        solve(p, net, points=16, stages=[(Adam(lr=1e-3), 2)], progress=False)


def test_output_transform_with_a_column_slice_trains():
    from sciml.pinn import Transformed
    p = Problem(Interval(0, 1), lambda u, x: d(u, x, x) + 1.0, conditions=[Dirichlet(0.0)])
    net = Transformed(MLP([1, 8, 1], seed=0), output=lambda x, y: x[:, 0:1] * (1 - x[:, 0:1]) * y)
    assert np.isfinite(solve(p, net, points=16, stages=[(Adam(lr=1e-3), 2)], progress=False).history["loss"][-1])


def test_square_pde_residual_is_refused():
    """``d(u, x, x) + sin(x).reshape(-1)``: (n, 1) + (n,) is (n, n) by broadcasting; it trained silently."""
    import sciml as sm
    for res in (lambda u, x: d(u, x, x) + sm.sin(x).reshape(-1),
                lambda u, x: [d(u, x, x) + sm.sin(x).reshape(-1)]):
        p = Problem(Interval(0, 1), res, conditions=[Dirichlet(0.0)])
        with pytest.raises(ValueError, match=r"residual returned shape \(8, 8\) at 8 points.*broadcasting"):
            _solve(p, 1)


def test_square_operator_residual_is_refused():
    from sciml.pinn import Operator
    p = Problem(Interval(0, 1), lambda u, x: d(u, x, x) + 1.0,
                conditions=[Operator(lambda u, x: d(u, x) - x.reshape(-1), points=X)])
    with pytest.raises(ValueError, match=r"operator:points returned shape \(10, 10\) at 10 points"):
        _solve(p, 1)


def test_system_of_two_equations_at_two_points_is_a_list():
    """A list's parts are checked one by one: two (n, 1) equations at n = 2 points stay a system."""
    p = Problem(Interval(0, 1), _pde2, outputs=("u", "v"), conditions=[Dirichlet(0.0)])
    r = solve(p, MLP([1, 8, 2], seed=0), points=np.array([[0.3], [0.6]]), stages=[(Adam(lr=1e-3), 2)],
              progress=False)
    assert np.isfinite(r.history["loss"][-1])


@pytest.mark.parametrize("cond, dom, match", [
    (Dirichlet(lambda x: np.sin(x[:, 0:1])), "1d", r"Dirichlet\(on='boundary'\): the value function failed on the "
     r"coordinate columns \(1 array\(s\) of shape \(\d+,\) \('x',\)\): IndexError.*lambda x: \.\.\..*np\.stack"),
    (Dirichlet(lambda X: np.sin(X[:, 0:1])), "2d", r"\(2 array\(s\) .*\('x', 't'\)\): TypeError.*lambda x, t:"),
    (Initial(lambda X: np.sin(X[:, 0:1])), "2d", r"Initial: .*\('x',\)\): IndexError"),
])
def test_deepxde_style_value_function_gets_a_clear_error(cond, dom, match):
    """DeepXDE's value functions take one (m, dim) array; sciml's one (m,) array per coordinate."""
    domain = Interval(0, 1) if dom == "1d" else Interval(0, 1) * TimeInterval(0, 1)
    pde = (lambda u, x: d(u, x, x)) if dom == "1d" else (lambda u, x, t: d(u, t) - d(u, x, x))
    with pytest.raises(ValueError, match=match):
        _solve(Problem(domain, pde, conditions=[cond]), 1)


def test_deepxde_function_through_the_documented_adapter():
    f = lambda X: np.sin(np.pi * X[:, 0:1]) * np.exp(-X[:, 1:2])   # noqa: E731  (DeepXDE's form)
    p = Problem(Interval(0, 1) * TimeInterval(0, 1), lambda u, x, t: d(u, t) - d(u, x, x),
                conditions=[Dirichlet(lambda *c: f(np.stack(c, axis=1)))])
    assert np.isfinite(_solve(p, 1).history["loss"][-1])
