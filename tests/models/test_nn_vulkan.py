"""NN kernels on Vulkan (own process: ti.init is once per process); skipped without a Vulkan ICD
(a failure instead when SCIML_REQUIRE_VULKAN is set, as in CI)."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ICD = [d for d in ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d") if os.path.isdir(d) and os.listdir(d)]


def test_nn_kernels_on_vulkan():
    if not ICD:
        if os.environ.get("SCIML_REQUIRE_VULKAN"):   # set by .ci/run: CI must really run this pass
            pytest.fail("no Vulkan ICD installed; SCIML_REQUIRE_VULKAN is set")
        pytest.skip("no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
    env = dict(os.environ)
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "vulkan_nn_check.py")], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan nn" in r.stdout, (r.stdout + r.stderr)[-4000:]
