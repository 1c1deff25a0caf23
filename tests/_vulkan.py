"""Run a check on Vulkan in its own process (Taichi initialises once per process, and the suite's
process runs on the CPU in float64) and return what it printed after ``RESULT``.

``body`` is the script after :data:`PRELUDE` (which imports json, sys, numpy as np and sciml as sm,
and starts sciml on Vulkan in float32); it reads its input, if any, from stdin and prints
``"RESULT" + json.dumps({...})``. Without a Vulkan driver the test is skipped, or fails when
``SCIML_REQUIRE_VULKAN`` is set (as in CI, .ci/run).
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = '''import json, math, sys
import numpy as np
import sciml as sm
try:
    sm.init(arch="vulkan", dtype="float32")
except Exception as e:
    print("SKIP", e); sys.exit(0)
if sm.arch() != "vulkan":
    print("SKIP fell back to", sm.arch()); sys.exit(0)
'''


def run_script(tmp_path, body: str, payload=None, name: str = "vk_check.py", timeout: int = 900) -> dict:
    script = tmp_path / name
    script.write_text(PRELUDE + body)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    p = subprocess.run([sys.executable, str(script)], input=payload, capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    if p.stdout.startswith("SKIP"):
        if os.environ.get("SCIML_REQUIRE_VULKAN"):
            pytest.fail(f"{p.stdout.strip()}; SCIML_REQUIRE_VULKAN is set")
        pytest.skip(p.stdout.strip())
    got = json.loads(p.stdout.split("RESULT", 1)[1])
    assert got.get("arch", "vulkan") == "vulkan", got.get("arch")
    return got
