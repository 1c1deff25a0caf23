"""sciml's messages go through stdlib ``logging`` under the ``"sciml"`` logger.

By default sciml attaches one handler that prints INFO and above to stderr as plain lines, unless
the application has configured logging itself (a handler on ``"sciml"`` or on the root logger).
Silence or redirect it as with any library::

    import logging
    logging.getLogger("sciml").setLevel(logging.WARNING)     # only warnings and errors

Taichi's own compile-time chatter (e.g. "Loading variable ... before anything is stored") is
silenced unless ``SCIML_DEBUG=1`` is set (see :mod:`sciml.runtime`).
"""
from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger("sciml")


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler that looks up ``sys.stderr`` at emit time (pytest/notebooks swap it)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _default_handler():
    if logger.handlers or logging.getLogger().handlers:
        return
    h = _StderrHandler()
    h.setFormatter(logging.Formatter("%(message)s"))
    h._sciml_default = True
    logger.addHandler(h)
    logger.setLevel(logging.DEBUG if os.environ.get("SCIML_DEBUG") else logging.INFO)
    logger.propagate = False


def get_logger(name: str | None = None) -> logging.Logger:
    """The ``sciml`` logger (or a child, e.g. ``get_logger("pinn")`` -> ``sciml.pinn``)."""
    _default_handler()
    return logger.getChild(name) if name else logger


def debug_enabled() -> bool:
    """True when ``SCIML_DEBUG`` is set to something other than 0/empty."""
    return os.environ.get("SCIML_DEBUG", "0") not in ("", "0")
