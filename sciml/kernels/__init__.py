"""Taichi kernels only: flat 1-D buffers in, flat 1-D buffers out. No Tensor, no tape.

Kernels are built on first use by small factories and cached per (op, dtype, mode,
serial); ``serial`` kernels run on one thread, which on CPU avoids the 70-100 us
thread-pool wake-up for small work (TAICHI-NOTES.md). Devices never serialize.
"""
from ._common import SERIAL_BELOW, launch_mode  # noqa: F401
