"""One-call checkpoints: ``sm.save(obj, path)`` / ``sm.load(path)`` for nested dicts, lists and tuples of
Tensors, numpy arrays and Python scalars (int, float, bool, str, None), and a converter from a PyTorch
``state_dict``.

    >>> sm.save({"model": net.state_dict(), "opt": opt.state_dict(), "epoch": 3}, "ckpt.npz")
    >>> ck = sm.load("ckpt.npz"); net.load_state_dict(ck["model"]); opt.load_state_dict(ck["opt"])

Format: the arrays go into an ``.npz`` (or a ``.safetensors`` file when the path ends so), keyed
``"0"``, ``"1"``, ...; the structure (containers, scalars, which leaves were Tensors and their dtypes)
is JSON, stored as the ``__sciml_structure__`` entry (npz) or in the safetensors metadata. Loading
never unpickles (``allow_pickle=False``) and executes no code. Writes are atomic
(:func:`sciml._io.atomic_write`): a crash during ``save`` leaves the previous file intact.
Tensors come back as Tensors of the same dtype, numpy arrays as numpy arrays.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from ._io import atomic_write, check_output_path

__all__ = ["save", "load", "from_torch_state_dict"]

_STRUCT = "__sciml_structure__"
_VERSION = 1


def _encode(obj, arrays, where):
    from .autodiff.tensor import Tensor
    if isinstance(obj, Tensor):
        key = str(len(arrays))
        arrays[key] = np.ascontiguousarray(obj.numpy())
        return {"tensor": key, "dtype": obj.dtype}
    if isinstance(obj, np.ndarray):
        if obj.dtype == object or obj.dtype.kind not in "biufc":
            raise TypeError(f"sm.save: {where} is a numpy array of dtype {obj.dtype}; expected numbers or bools "
                            "(object arrays would need pickle).")
        key = str(len(arrays))
        arrays[key] = np.ascontiguousarray(obj)
        return {"array": key}
    if isinstance(obj, np.generic):
        return _encode(obj.item(), arrays, where)
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"float": repr(obj)}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"sm.save: {where} has a key {k!r} of type {type(k).__name__}; expected str keys.")
            out[k] = _encode(v, arrays, f"{where}[{k!r}]")
        return {"dict": out}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]
        return {"tuple" if isinstance(obj, tuple) else "list": items}
    raise TypeError(f"sm.save: {where} is a {type(obj).__name__}; expected a Tensor, numpy array, number, bool, str, "
                    "None, or a dict / list / tuple of those.")


def _decode(node, arrays, path):
    from .autodiff.tensor import tensor
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not isinstance(node, dict) or len(node) not in (1, 2):
        raise ValueError(f"sm.load({path!r}): the structure entry is damaged (found {str(node)[:60]!r}).")
    if "tensor" in node or "array" in node:
        key = node.get("tensor", node.get("array"))
        if key not in arrays:
            raise ValueError(f"sm.load({path!r}): the array {key!r} named in the structure is missing; the file is "
                             "incomplete or was not written by sm.save.")
        a = arrays[key]
        return tensor(a, node["dtype"]) if "tensor" in node else a
    if "float" in node:
        return float(node["float"])
    if "dict" in node:
        return {k: _decode(v, arrays, path) for k, v in node["dict"].items()}
    if "list" in node:
        return [_decode(v, arrays, path) for v in node["list"]]
    if "tuple" in node:
        return tuple(_decode(v, arrays, path) for v in node["tuple"])
    raise ValueError(f"sm.load({path!r}): unknown entry {sorted(node)} in the structure.")


def save(obj, path):
    """Write ``obj`` (nested dicts with str keys / lists / tuples of Tensors, numpy arrays, Python scalars,
    str and None) to ``path`` atomically: ``.safetensors`` if the path ends so, else ``.npz`` (appended if
    the path has no suffix). Returns the path written."""
    path = check_output_path(path, arg="sm.save(path)", suffixes=(".npz", ".safetensors"), default_suffix=".npz")
    arrays = {}
    structure = {"format": "sciml.save", "version": _VERSION, "root": _encode(obj, arrays, "obj")}
    text = json.dumps(structure, allow_nan=False)
    with atomic_write(path) as tmp:
        if path.endswith(".safetensors"):
            from safetensors.numpy import save_file
            bad = [k for k, a in arrays.items() if a.dtype.kind == "c"]
            if bad:
                raise TypeError("sm.save: safetensors cannot store complex arrays; use a .npz path.")
            save_file(arrays, tmp, metadata={_STRUCT: text})
        else:
            np.savez(tmp, **arrays, **{_STRUCT: np.frombuffer(text.encode("utf-8"), dtype=np.uint8)})
    return path


def load(path):
    """Read a file written by :func:`save` (no pickle, no code executed). Raises FileNotFoundError or
    ValueError naming ``path`` for a missing, truncated or foreign file."""
    path = os.fspath(path)
    if not os.path.exists(path) and os.path.exists(path + ".npz"):
        path = path + ".npz"
    if not os.path.exists(path):
        raise FileNotFoundError(f"sm.load: no file {path!r}.")
    try:
        if path.endswith(".safetensors"):
            from safetensors import safe_open
            with safe_open(path, framework="numpy") as f:
                meta = f.metadata() or {}
                arrays = {k: f.get_tensor(k) for k in f.keys()}
            text = meta.get(_STRUCT)
        else:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            raw = arrays.pop(_STRUCT, None)
            text = None if raw is None else bytes(np.asarray(raw, dtype=np.uint8)).decode("utf-8")
    except Exception as e:  # zip / header / safetensors errors: a damaged or foreign file
        raise ValueError(f"sm.load({path!r}): cannot read the file ({type(e).__name__}: {e}); it is truncated, "
                         "damaged, or not an .npz / .safetensors file.") from None
    if text is None:
        raise ValueError(f"sm.load({path!r}): the file has no sciml structure entry; it was not written by sm.save "
                         "(for Module.save files use Module.load / sciml.models.load_state).")
    try:
        structure = json.loads(text)
    except ValueError:
        raise ValueError(f"sm.load({path!r}): the structure entry is not valid JSON; the file is damaged.") from None
    if not isinstance(structure, dict) or structure.get("format") != "sciml.save":
        raise ValueError(f"sm.load({path!r}): not a sciml.save file.")
    if structure.get("version", 0) > _VERSION:
        raise ValueError(f"sm.load({path!r}): written by a newer sciml (format version {structure['version']}).")
    return _decode(structure["root"], arrays, path)


def from_torch_state_dict(state, model=None, *, transpose_linear=None, strict=True):
    """A sciml ``state_dict`` from a PyTorch one (``{name: torch.Tensor or array}``): values become numpy arrays,
    ``num_batches_tracked`` entries are dropped, and 2-D ``weight`` matrices of Linear layers are transposed
    (PyTorch stores ``(out, in)``, sciml ``(in, out)``).

    Args:
        state: the PyTorch state dict (tensors may live on any device; they are copied to host).
        model: the sciml Module to load into (optional). With it, each name is matched to the model's
            parameters and buffers (exactly, or by a unique dotted suffix: torch's ``"0.weight"`` of an
            ``nn.Sequential`` is sciml's ``"layers.0.weight"``), Linear weights are found by the model's layer types, and shapes are
            checked; a mismatch raises ValueError naming the entry.
        transpose_linear: without ``model``: transpose every 2-D ``*.weight`` (default True); with ``model``
            it is decided per layer.
        strict: with ``model``: missing or unexpected names raise KeyError.
    Returns:
        {name: numpy array}, ready for ``model.load_state_dict``.
    """
    out = {}
    for k, v in state.items():
        if k.endswith("num_batches_tracked"):
            continue
        a = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
        out[k] = a
    if model is None:
        if transpose_linear is None or transpose_linear:
            out = {k: (a.T.copy() if a.ndim == 2 and k.endswith("weight") else a) for k, a in out.items()}
        return out
    from .models.layers import Linear
    own = dict(model.named_parameters())
    own.update(model.named_buffers())
    linear_w = {f"{n}.weight" if n else "weight" for n, m in model.named_modules() if isinstance(m, Linear)}
    res = {}
    for k, a in out.items():
        if k not in own:  # e.g. torch's nn.Sequential "0.weight" for sciml's "layers.0.weight": a unique suffix
            cands = [n for n in own if n.endswith("." + k)]
            if len(cands) == 1:
                k = cands[0]
        if k not in own:
            if strict:
                raise KeyError(f"from_torch_state_dict: {k!r} has no counterpart in {type(model).__name__}; its "
                               f"parameters are {list(own)[:8]}...")
            continue
        if k in linear_w and a.ndim == 2:
            a = a.T.copy()
        if tuple(a.shape) != tuple(own[k].shape):
            raise ValueError(f"from_torch_state_dict: {k!r} has shape {tuple(a.shape)} (after conversion); the model "
                             f"expects {tuple(own[k].shape)}.")
        res[k] = a
    missing = [k for k in own if k not in res and not k.endswith("rng_state")]
    if strict and missing:
        raise KeyError(f"from_torch_state_dict: the PyTorch state has no entries for {missing}.")
    return res
