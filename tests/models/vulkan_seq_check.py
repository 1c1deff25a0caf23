"""Vulkan pass over the fused sequence kernels, run in its own process by test_rnn_fused.py and
test_attention_fused.py: ``python vulkan_seq_check.py cases.npz``. Each case (written by the caller from the CPU
float64 path, which those tests check against the composed ops, finite differences and PyTorch) names a fused
op (``rnn``: ``_rnn_fused.rnn_layer``; ``attention``: ``_attn_fused.attention``), its keyword arguments, its
inputs, a cotangent and the expected output and input cotangents; here they are recomputed on Vulkan in float32.
Exits non-zero naming the failing check; prints "OK vulkan seq" otherwise."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import sciml as sm  # noqa: E402

fails = []


def check(name, got, want, tol):
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    try:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    except AssertionError as e:
        fails.append(f"{name}: {e}")


def write_cases(path, cases):
    """Caller side: ``cases`` is a list of (name, op, kwargs, inputs, extra, u) with numpy inputs (differentiated),
    extra numpy constants (attention: mask, dropout) and a cotangent u; the expected values come from the current
    (CPU, float64) process."""
    arrays, meta = {}, []
    for name, op, kw, inputs, extra, u in cases:
        fn = _op(op, kw, [sm.tensor(e) for e in extra])
        out, pull = sm.vjp(fn, *(sm.tensor(a) for a in inputs))
        grads = pull(sm.tensor(u))
        meta.append({"name": name, "op": op, "kw": kw, "n": len(inputs), "extra": len(extra)})
        for i, a in enumerate(inputs):
            arrays[f"{name}_in{i}"] = a
            arrays[f"{name}_g{i}"] = grads[i].numpy()
        for i, e in enumerate(extra):
            arrays[f"{name}_x{i}"] = e
        arrays[f"{name}_u"], arrays[f"{name}_out"] = u, out.numpy()
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)


def _op(op, kw, extra):
    if op == "rnn":
        from sciml.models._rnn_fused import rnn_layer
        return lambda *t: rnn_layer(*t, **kw)
    if op == "rnn_views":  # views of rnn_layer's packed parts (test_rnn_part_views.py)
        from tests.models.test_rnn_part_views import _views
        return _views(kw["kind"], kw["batch_first"])
    from sciml.models._attn_fused import attention
    mask = extra[0] if kw.get("mask") else None
    drop = extra[-1] if kw.get("dropout") else None
    return lambda *t: attention(*t, num_heads=kw["num_heads"], mask=mask, dropout=drop)


def main(path):
    assert sm.init(arch="vulkan", dtype="float32", seed=0) == "vulkan"
    z = np.load(path)
    f = np.float32
    for c in json.loads(str(z["meta"])):
        name = c["name"]
        extra = [sm.tensor(z[f"{name}_x{i}"].astype(f)) for i in range(c["extra"])]
        fn = _op(c["op"], c["kw"], extra)
        inputs = [sm.tensor(z[f"{name}_in{i}"].astype(f)) for i in range(c["n"])]
        out, pull = sm.vjp(fn, *inputs)
        check(f"{name} forward", out, z[f"{name}_out"], 2e-4)
        for i, g in enumerate(pull(sm.tensor(z[f"{name}_u"].astype(f)))):
            check(f"{name} backward {i}", g, z[f"{name}_g{i}"], 1e-3)
    if fails:
        print("\n".join(fails))
        sys.exit(1)
    print("OK vulkan seq")


if __name__ == "__main__":
    main(sys.argv[1])
