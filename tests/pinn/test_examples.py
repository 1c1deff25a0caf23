"""The examples/*.py PDE scripts run in their quick mode (SCIML_QUICK=1) and share one
recipe per problem with `sciml solve` (sciml/pinn/problems.py): the same network, points,
conditions and stages; for Burgers (the README's PINN) the very same error at equal steps."""
import os
import runpy

import numpy as np
import pytest

from sciml.pinn import problems

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
DTYPE = {"burgers": "float32", "poisson": "float64", "heat": "float32", "wave": "float32",
         "helmholtz": "float32"}


def _shapes(net):
    return [tuple(p.shape) for _, p in net.named_parameters()]


@pytest.mark.parametrize("name", sorted(DTYPE))
def test_example_runs_quick_with_the_cli_recipe(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SCIML_QUICK", "1")
    monkeypatch.chdir(tmp_path)
    ns = runpy.run_path(os.path.join(EXAMPLES, f"{name}.py"), run_name="__main__")
    assert capsys.readouterr().out.startswith("relative L2 error: ")
    assert (tmp_path / f"{name}.png").exists()
    r, setup = ns["result"], problems.get(name).for_dtype(DTYPE[name])
    assert _shapes(ns["net"]) == _shapes(setup.net()) and ns["net"].activation is setup.net().activation
    assert r._loss.batch.n == setup.points["interior"]
    assert [(type(c).__name__, c.hard) for c in ns["problem"].conditions] == \
        [(type(c).__name__, c.hard) for c in setup.problem.conditions]
    assert r.history["step"][-1] <= 30 and np.isfinite(r.rel_l2)
    if name == "burgers":   # the README's PINN: the very run `sciml solve burgers` makes
        ref = setup.run(steps=(20, 10), dtype="float32", progress=False)
        assert r.rel_l2 == pytest.approx(ref.rel_l2, rel=1e-9, abs=0)
