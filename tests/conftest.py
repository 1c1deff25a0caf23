import os

os.environ.setdefault("SCIML_POOL_WARM", "0")  # path choices never depend on timing here (kernels/_warm.py)

import sciml

sciml.init(arch="cpu", dtype="float64", seed=0)
