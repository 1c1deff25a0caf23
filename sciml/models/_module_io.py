"""Module checkpoint files: atomic writes (with stale temporary-file cleanup) and ``load_state`` (split from
module.py; ``Module.save`` / ``Module.load`` call these)."""
from __future__ import annotations

import os

import numpy as np


def _resolve_load_path(path):
    path = os.fspath(path)
    if not os.path.exists(path) and os.path.exists(path + ".npz"):
        path = path + ".npz"
    return path


def _lock(f, blocking=True):
    """Exclusive advisory lock on an open file; True if taken (always True without fcntl)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no stale-file cleanup
        return blocking
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        return True
    except OSError:
        return False


STALE_AFTER_S = 1.0  # a temporary file untouched this long and not locked is a dead writer's


def _atomic_save(path, write):
    """Write ``path`` atomically through ``sciml._io.atomic_write``; ``write(f)`` fills the open file.

    While writing, the temporary file holds an exclusive ``flock`` (released by the kernel if the
    process dies), so after the rename, temporary files of the same target that nobody holds and
    that were last modified over ``STALE_AFTER_S`` ago are leftovers of a killed writer: removed.
    """
    import glob
    import time

    from .._io import atomic_write
    with atomic_write(path) as tmp:
        with open(tmp, "wb") as f:
            _lock(f)
            write(f)
            f.flush()
            os.fsync(f.fileno())
    folder, base = os.path.split(os.path.abspath(path))
    for stale in glob.glob(os.path.join(glob.escape(folder), "." + glob.escape(base) + ".*.tmp*")):
        try:
            with open(stale, "rb") as f:
                if time.time() - os.fstat(f.fileno()).st_mtime > STALE_AFTER_S and _lock(f, blocking=False):
                    os.remove(stale)
        except OSError:  # gone already, or not ours to remove
            pass


def _bad_file(path, e, kind):
    return ValueError(f"load_state({path!r}): not a complete {kind} checkpoint ({type(e).__name__}: {e}). "
                      "The file is truncated, damaged or was not written by Module.save.")


def load_state(path, allow_nonfinite: bool = False):
    """A {name: numpy array} dict from a file written by ``Module.save`` (no code is executed).

    Raises FileNotFoundError if there is no such file and ValueError (naming the file) if it is
    not a complete ``.npz``/``.safetensors`` checkpoint or, unless ``allow_nonfinite=True``,
    holds NaN or infinite values.
    """
    path = _resolve_load_path(path)
    if not os.path.isfile(path):
        if os.path.isdir(path):
            raise ValueError(f"load_state({path!r}): this is a folder; expected a .npz or .safetensors file.")
        raise FileNotFoundError(f"load_state({path!r}): no such file.")
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file
        try:
            state = load_file(path)
        except Exception as e:  # SafetensorError and friends: the file is not a valid safetensors
            raise _bad_file(path, e, ".safetensors") from None
    else:
        import zipfile
        import zlib
        try:
            z = np.load(path, allow_pickle=False)
            if not hasattr(z, "files"):
                raise ValueError("it holds a single .npy array, not named arrays")
            with z:
                state = {k: z[k] for k in z.files}
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, KeyError) as e:
            if isinstance(e, (FileNotFoundError, PermissionError)):
                raise
            raise _bad_file(path, e, ".npz") from None
    for k, v in state.items():
        if v.dtype.kind not in "biuf":
            raise ValueError(f"load_state({path!r}): {k!r} has dtype {v.dtype}; expected numbers.")
        if not allow_nonfinite and v.dtype.kind == "f" and not np.isfinite(v).all():
            bad = int(v.size - np.isfinite(v).sum())
            raise ValueError(f"load_state({path!r}): {k!r} holds {bad} non-finite value(s) (NaN or inf) of "
                             f"{v.size}; a model trained into NaN/inf is not loaded. Pass allow_nonfinite=True "
                             "to load it anyway.")
    return state
