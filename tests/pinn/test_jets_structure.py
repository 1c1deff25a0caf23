"""The constant first derivatives of slices of the points (``jets.variables``: x[:, a]'s d/dx_a is
1.0) are decided from the structure (the one-hot rows and the view's addresses), never by
reading a Tensor: equal to the materialised coefficient for every shape-only op, and a traced
function (sciml.jit) with them replays with correct derivatives on other points."""
import numpy as np
import pytest

import sciml as sm
from sciml.pinn import jets

F64 = "float64"

# (name, d, f): shape-only ops of the points' jet; the coefficient of d/dx_a of f(x). One op on
# the points' own jet gives floats where the coefficient is one value; a chain of two (CHAINS)
# may keep a Tensor (as before: only the points' own jet carries the one-hot rows)
CHAINS = {"transpose_row", "col_of_taken"}
CASES = [
    ("col0", 2, lambda x: x[:, 0:1]), ("col1", 2, lambda x: x[:, 1:2]), ("int_col", 3, lambda x: x[:, 2]),
    ("step_cols", 3, lambda x: x[:, ::2]), ("two_cols", 3, lambda x: x[:, 1:3]),
    ("rows_and_col", 3, lambda x: x[1::2, 1:2]), ("new_axis", 2, lambda x: x[:, None, 1]),
    ("transpose", 2, lambda x: x.T), ("transpose_row", 3, lambda x: x.T[1:2, :]),
    ("reshape", 2, lambda x: sm.reshape(x, (-1,))), ("reshape_d1", 1, lambda x: sm.reshape(x, (-1,))),
    ("col_d1", 1, lambda x: x[:, 0]), ("take_rows", 3, lambda x: x[sm.tensor(np.array([2, 0, 0], np.int32),
                                                                                "int32")]),
    ("col_of_taken", 2, lambda x: x[sm.tensor(np.array([3, 1], np.int32), "int32")][:, 1:2]),
    ("broadcast", 2, lambda x: sm.broadcast_to(x[:, 1:2], (7, 2))),
    ("astype", 2, lambda x: x[:, 0:1].astype("float32")),
]


def _points(n=7, d=2, seed=0):
    return sm.tensor(np.random.default_rng(seed).uniform(-1, 1, (n, d)), F64)


@pytest.mark.parametrize("name,d,f", CASES, ids=[c[0] for c in CASES])
def test_constant_coefficients_equal_the_materialised_ones(name, d, f):
    x = _points(d=d)
    spec = jets.closure([(a,) for a in range(d)])
    xs = jets.variables(x, spec)
    with jets.recording():
        y = f(xs)
    assert isinstance(y, jets.JetTensor)
    for a in range(d):
        # the reference: the same op on the materialised one-hot coefficient
        e = np.zeros((1, d))
        e[0, a] = 1.0
        want = f(sm.tensor(np.broadcast_to(e, x.shape).copy(), F64)).numpy().astype(np.float64)
        c = y.coeff((a,))
        got = np.zeros_like(want) if c is None else (np.full(want.shape, c) if type(c) is float else c.numpy())
        np.testing.assert_array_equal(got, want, err_msg=f"{name}: d/dx{a}")
        uniform = want.size and (want == want.flat[0]).all()
        if uniform and name not in CHAINS:   # one value everywhere: a float (or None for 0), no Tensor
            assert c is None or type(c) is float, (name, a, c)
        elif not uniform:
            assert isinstance(c, sm.Tensor), (name, a, c)


def _dudx(p, x):
    """d/dx_b of an output-transform-like u = x1 * (1 - x0^2) * p + sin(pi x0), b = 0, 1."""
    spec = jets.closure([(0,), (1,)])
    xs = jets.variables(x, spec)
    with jets.recording():
        u = xs[:, 1:2] * (1.0 - xs[:, 0:1] ** 2) * p + sm.sin(np.pi * xs[:, 0:1])
    return u.coeff_tensor((0,)), u.coeff_tensor((1,))


def test_traced_slices_replay_with_correct_derivatives_on_other_points():
    f = sm.jit(_dudx)
    p = sm.tensor(np.full((5, 1), 0.5), F64)
    for seed in range(3):   # trace (+ its check), then replays on new points
        x = _points(n=5, seed=seed)
        g0, g1 = f(p, x)
        X = x.numpy()
        np.testing.assert_allclose(g0.numpy()[:, 0], -2 * X[:, 0] * X[:, 1] * 0.5 + np.pi * np.cos(np.pi * X[:, 0]),
                                   rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(g1.numpy()[:, 0], (1 - X[:, 0] ** 2) * 0.5, rtol=1e-13, atol=1e-13)
    assert f.stats["traces"] == 1 and f.stats["replays"] == 2 and f.stats["eager"] == 0
