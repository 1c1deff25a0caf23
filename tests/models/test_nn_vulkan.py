"""NN kernels on Vulkan (own process: ti.init is once per process); skipped without a Vulkan ICD."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ICD = [d for d in ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d") if os.path.isdir(d) and os.listdir(d)]


@pytest.mark.skipif(not ICD, reason="no Vulkan ICD installed (apt-get install mesa-vulkan-drivers)")
def test_nn_kernels_on_vulkan():
    env = dict(os.environ)
    env.pop("SCIML_ARCH", None)
    env.pop("SCIML_DTYPE", None)
    r = subprocess.run([sys.executable, os.path.join(HERE, "vulkan_nn_check.py")], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and "OK vulkan nn" in r.stdout, (r.stdout + r.stderr)[-4000:]
