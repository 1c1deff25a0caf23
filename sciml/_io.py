"""Atomic file writes and output-path checks, shared by every writer in sciml.

Every file sciml writes for a user (``Module.save``, ``sm.save``, optimizer/trainer state, PINN
checkpoints, plots) goes through :func:`atomic_write`: the data goes to a temporary file in the
target's folder, is flushed and fsynced, and is renamed over the target, so a crash or a kill
during the write leaves either the old file or the new one, never a torn one, and no temporary
file is left behind. :func:`check_output_path` validates a path *before* any work starts.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

__all__ = ["atomic_write", "check_output_path"]


def check_output_path(path, *, arg: str, suffixes=None, default_suffix: str | None = None) -> str:
    """Return ``path`` as a string after checking that its folder exists and is writable.

    Args:
        path: the output path the user gave (str or os.PathLike).
        arg: how the user named it, for the message (e.g. ``"solve(checkpoint=...)"`` or ``"--plot"``).
        suffixes: allowed file suffixes (e.g. ``(".png", ".pdf", ".svg")``), or None for any.
        default_suffix: a suffix that is appended when ``path`` has none (e.g. ``".npz"``).

    Raises:
        ValueError: the path is empty, names a folder, or has an unsupported suffix.
        FileNotFoundError: its folder does not exist.
        PermissionError: its folder is not writable.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{arg}: expected a file path (str or os.PathLike), got {type(path).__name__}.")
    path = os.fspath(path)
    if not path:
        raise ValueError(f"{arg}: got an empty path; expected a file path.")
    if os.path.isdir(path):
        raise ValueError(f"{arg}: {path!r} is a folder; expected a file path inside it.")
    root, ext = os.path.splitext(path)
    if not ext and default_suffix:
        path, ext = path + default_suffix, default_suffix
    if suffixes is not None and ext.lower() not in tuple(s.lower() for s in suffixes):
        raise ValueError(f"{arg}: {path!r} has suffix {ext or '(none)'!r}; expected one of {', '.join(suffixes)}.")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{arg}: the folder {folder!r} of {path!r} does not exist; create it first.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{arg}: the folder {folder!r} of {path!r} is not writable.")
    return path


def check_plot_arg(parser, path, flag: str = "--plot", suffixes=(".png", ".pdf", ".svg")):
    """A CLI's figure path checked right after argument parsing (so a bad one fails before any training):
    ``path`` back as a string (None stays None), or ``parser.error`` (exit 2) with a message naming ``flag``."""
    if path is None:
        return None
    try:
        return check_output_path(path, arg=flag, suffixes=suffixes)
    except (TypeError, ValueError, OSError) as e:
        parser.error(str(e))


def _fsync_dir(folder):
    with contextlib.suppress(OSError):   # not every filesystem lets a folder be opened/fsynced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_write(path, suffix: str | None = None):
    """Context manager yielding a temporary path in ``path``'s folder; on success it is fsynced
    and renamed over ``path``; on any error it is removed and ``path`` is left as it was.

    The temporary name ends with ``suffix`` (default: ``path``'s own suffix), so writers that
    pick a format by suffix (``np.savez``, ``Figure.savefig``) see the right one.

    Example:
        >>> with atomic_write("model.npz") as tmp:
        ...     np.savez(tmp, **arrays)
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    if suffix is None:
        suffix = os.path.splitext(base)[1]
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp" + suffix, dir=folder)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:    # the writer may have closed its handle: flush through a new one
            f.flush()
            os.fsync(f.fileno())
        try:   # mkstemp makes the file 0600; give it the permissions a plain open() would
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        except OSError:
            pass
        os.replace(tmp, path)
        _fsync_dir(folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
