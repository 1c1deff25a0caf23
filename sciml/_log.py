"""sciml's messages go through stdlib ``logging`` under the ``"sciml"`` logger.

By default sciml attaches one handler that prints INFO and above to stderr as plain lines; it stays
quiet while the root logger has handlers (the application configured logging itself, e.g. with
``logging.basicConfig``), and the records reach those instead.
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


def _root_has_handlers():
    return bool(logging.getLogger().handlers)


def _default_handler():
    """Attach sciml's stderr handler once. Records still propagate: when the application (or pytest's
    caplog) has put handlers on the root logger, they get the records and ours stays quiet."""
    if any(getattr(h, "_sciml_default", False) for h in logger.handlers):
        return
    h = _StderrHandler()
    h.setFormatter(logging.Formatter("%(message)s"))
    h.addFilter(lambda record: not _root_has_handlers())
    h._sciml_default = True
    logger.addHandler(h)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.DEBUG if debug_enabled() else logging.INFO)


def get_logger(name: str | None = None) -> logging.Logger:
    """The ``sciml`` logger (or a child, e.g. ``get_logger("pinn")`` -> ``sciml.pinn``)."""
    _default_handler()
    return logger.getChild(name) if name else logger


def debug_enabled() -> bool:
    """True when ``SCIML_DEBUG`` is set to something other than 0/empty."""
    return os.environ.get("SCIML_DEBUG", "0") not in ("", "0")
