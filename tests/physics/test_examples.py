"""The differentiable-physics examples run (--quick) and their objective falls."""
import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["heat_inverse", "billiards", "mass_spring"])
def test_example_quick(name, tmp_path):
    out = tmp_path / f"{name}.png"
    result = _load(name).main(["--quick", "--out", str(out)])
    history = result[0] if isinstance(result, tuple) else result
    assert history[-1] < history[0]
    assert out.exists() and out.stat().st_size > 1000
