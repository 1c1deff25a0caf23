"""sciml._taichi_front: Taichi's per-node error text (get_pos_info) memoized: the same strings as
Taichi's own, each distinct node formatted once, and compile errors still say where."""
import numpy as np
import pytest

import sciml as sm
from sciml import _taichi_front as TF


def _ctx_cls():
    from taichi.lang.ast import ast_transformer_utils as U
    return U.ASTTransformerContext


def _spy(fn):
    """Patch get_pos_info with ``fn(patched, orig, self, node)`` for a block."""
    cls = _ctx_cls()
    patched = cls.get_pos_info
    cls.get_pos_info = lambda self, node: fn(patched, patched.__wrapped__, self, node)
    return lambda: setattr(cls, "get_pos_info", patched)


def test_installed_by_init_and_same_text_as_taichi():
    sm.init()   # its first call in the process installs the patch
    assert TF._STATE["installed"] and hasattr(_ctx_cls().get_pos_info, "__wrapped__") and TF.install()
    same = []

    def check(patched, orig, self, node):   # every node of a real kernel: the memoized text is Taichi's
        got, want = patched(self, node), orig(self, node)
        same.append(got == want)
        return got
    undo = _spy(check)
    try:
        import taichi as ti

        @ti.kernel
        def k(a: ti.types.ndarray(), n: ti.i32):
            for i in range(n):
                acc = 0.0
                for u in ti.static(range(4)):   # the same nodes, visited 4 times
                    acc += a[i] * u
                a[i] = acc
        x = np.arange(5, dtype=np.float32)
        k(x, 5)
    finally:
        undo()
    np.testing.assert_array_equal(x, np.arange(5, dtype=np.float32) * 6)
    assert len(same) > 20 and all(same)


def test_formats_each_distinct_node_once():
    sm.init()
    TF._CACHE.clear()
    visits = []

    def count(patched, orig, self, node):
        visits.append(1)
        return patched(self, node)
    undo = _spy(count)
    try:
        import taichi as ti

        @ti.kernel
        def k(a: ti.types.ndarray()):
            for i in range(1):
                acc = 0.0
                for u in ti.static(range(16)):   # unrolled: its nodes visited 16 times
                    acc += a[u] * (u + 1)
                a[0] = acc
        x = np.ones(16, np.float32)
        k(x)
    finally:
        undo()
    assert x[0] == sum(range(1, 17))
    assert 0 < 3 * len(TF._CACHE) < len(visits), (len(TF._CACHE), len(visits))


def test_compile_errors_still_say_where():
    sm.init()
    import taichi as ti

    @ti.kernel
    def bad(a: ti.types.ndarray()):
        for i in range(1):
            a[i] = undefined_name_here   # noqa: F821
    with pytest.raises(Exception) as e:
        bad(np.zeros(1, np.float32))
    msg = str(e.value)
    assert "undefined_name_here" in msg and "test_taichi_front.py" in msg and "^" in msg
