"""Argument checks shared by the layer constructors: clear errors naming the layer, the argument,
what was seen and what was expected (before any kernel runs)."""
from __future__ import annotations

import numbers

__all__ = ["pos_int", "nonneg_int", "int_tuple", "prob", "pos_float", "boolean"]


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def pos_int(where, name, v, minimum=1):
    """``v`` as an int >= ``minimum`` (bools, floats such as 3.5 and strings are refused)."""
    if not _is_int(v) or v < minimum:
        raise (TypeError if not _is_int(v) else ValueError)(
            f"{where}: {name}={v!r}; expected an integer >= {minimum}.")
    return int(v)


def nonneg_int(where, name, v):
    return pos_int(where, name, v, 0)


def int_tuple(where, name, v, n, minimum=1):
    """An int or a sequence of ``n`` ints, each >= ``minimum``, as an ``n``-tuple."""
    given = v
    if _is_int(v):
        v = (v,) * n
    elif isinstance(v, (tuple, list)) and len(v) == n and all(_is_int(a) for a in v):
        v = tuple(v)
    else:
        raise TypeError(f"{where}: {name}={v!r}; expected an integer or {n} integers.")
    if any(a < minimum for a in v):
        raise ValueError(f"{where}: {name}={given!r}; expected integers >= {minimum}.")
    return tuple(int(a) for a in v)


def prob(where, name, v, closed_right=False):
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and (0 <= v <= 1 if closed_right else 0 <= v < 1)
    if not ok:
        raise ValueError(f"{where}: {name}={v!r}; expected a probability in [0, 1{']' if closed_right else ')'}.")
    return float(v)


def pos_float(where, name, v, allow_zero=False):
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and v == v and abs(v) != float("inf") and (
        v >= 0 if allow_zero else v > 0)
    if not ok:
        raise ValueError(f"{where}: {name}={v!r}; expected a finite number {'>= 0' if allow_zero else '> 0'}.")
    return float(v)


def boolean(where, name, v):
    if not isinstance(v, (bool, int)) or isinstance(v, numbers.Integral) and v not in (0, 1):
        raise TypeError(f"{where}: {name}={v!r}; expected True or False.")
    return bool(v)
