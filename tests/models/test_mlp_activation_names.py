"""MLP(activation=...) takes a function or its name (DeepXDE style)."""
import numpy as np
import pytest

import sciml as sm
from sciml.models import MLP


@pytest.mark.parametrize("name,fn", [("tanh", sm.tanh), ("relu", sm.relu), ("sin", sm.sin), ("Swish", sm.silu)])
def test_name_equals_function(name, fn):
    sm.init(arch="cpu", dtype="float64")
    x = sm.tensor(np.random.default_rng(0).standard_normal((5, 3)))
    a, b = MLP([3, 8, 2], name, seed=1), MLP([3, 8, 2], fn, seed=1)
    assert a.activation is fn
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())


def test_bad_activation():
    with pytest.raises(ValueError, match="unknown activation name"):
        MLP([2, 4, 1], "nope")
    with pytest.raises(TypeError, match="expected a function"):
        MLP([2, 4, 1], 3)
