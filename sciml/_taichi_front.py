"""Taichi's Python front end (kernel source -> IR) without its per-node cost of error text.

Taichi 1.7's AST builder calls ``ASTTransformerContext.get_pos_info(node)`` for every node it
visits (``Builder.__call__``, the debug info of each expression and loop), and that formats the
node's source lines with ``textwrap`` each time: the string is only shown in an error message.
Statically unrolled kernels visit the same nodes many times (the fused Taylor kernels: ~80,000
visits for 31 kernels on the ``diffusion_1d_exactBC`` port), so that formatting was ~60% of the
front end's time (cProfile: 12.6 of 20 s, load ~5), which runs on every process start, offline
cache hit or not. :func:`install` memoizes it on everything the text depends on (the function's
file, name, line offset and indent, the node's type and positions, its source lines): the same
strings, the same IR, the same compiled kernels, only computed once per distinct node.
"""
from __future__ import annotations

_CACHE: dict = {}
_MAX = 200_000   # entries kept (strings of a few hundred bytes); cleared when exceeded
_STATE = {"installed": False}


def install() -> bool:
    """Patch Taichi's ``get_pos_info`` once per process (idempotent). False where Taichi's
    front end does not have the expected shape (then nothing is changed)."""
    if _STATE["installed"]:
        return True
    try:
        from taichi.lang.ast import ast_transformer_utils as U
        ctx_cls = U.ASTTransformerContext
        orig = ctx_cls.get_pos_info
    except (ImportError, AttributeError):   # pragma: no cover - another Taichi version
        return False

    def get_pos_info(self, node):
        try:
            end = node.end_lineno
            body = getattr(node, "body", None)
            first = body[0].lineno if isinstance(body, list) and body and hasattr(body[0], "lineno") else None
            key = (self.file, self.lineno_offset, self.indent, self.func.func.__name__, type(node).__name__,
                   node.lineno, end, node.col_offset, node.end_col_offset, first,
                   tuple(self.src[node.lineno - 1:end]))
        except Exception:   # anything unexpected: Taichi's own text
            return orig(self, node)
        s = _CACHE.get(key)
        if s is None:
            if len(_CACHE) >= _MAX:
                _CACHE.clear()
            s = _CACHE[key] = orig(self, node)
        return s
    get_pos_info.__wrapped__ = orig
    ctx_cls.get_pos_info = get_pos_info
    _STATE["installed"] = True
    return True
