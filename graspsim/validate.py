"""The checks that typed configs run in ``__post_init__``, written once (imports nothing of ours).

Each checker takes ``(owner, name, value)`` and returns nothing, or raises ``ValueError`` naming the field as
``Owner.name`` (``name`` alone when ``owner`` is empty, for function arguments), saying what is allowed and
showing the value it got, e.g. ``TrainVisionConfig.steps must be a positive int; got 0``. ``bool`` is not an int
here (``True`` is no batch size), and numbers must be finite unless stated.
"""

from __future__ import annotations

import math
from typing import Any


def _field(owner: str, name: str) -> str:
    return f"{owner}.{name}" if owner else name


def _unit(unit: str) -> str:
    return f" ({unit})" if unit else ""


def is_int(value: Any) -> bool:
    """An ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite ``int`` or ``float`` that is not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive_int(owner: str, name: str, value: Any) -> None:
    """``value`` is an int >= 1."""
    if not (is_int(value) and value > 0):
        raise ValueError(f"{_field(owner, name)} must be a positive int; got {value!r}")


def non_negative_int(owner: str, name: str, value: Any) -> None:
    """``value`` is an int >= 0."""
    if not (is_int(value) and value >= 0):
        raise ValueError(f"{_field(owner, name)} must be a non-negative int; got {value!r}")


def int_in(owner: str, name: str, value: Any, lo: int, hi: int) -> None:
    """``value`` is an int with ``lo <= value <= hi``."""
    if not (is_int(value) and lo <= value <= hi):
        raise ValueError(f"{_field(owner, name)} must be an int in {lo}..{hi}; got {value!r}")


def finite_positive(owner: str, name: str, value: Any, unit: str = "") -> None:
    """``value`` is a finite number > 0 (``unit``, e.g. ``"m/s"``, is named in the message)."""
    if not (is_number(value) and value > 0):
        raise ValueError(f"{_field(owner, name)} must be a finite positive number{_unit(unit)}; got {value!r}")


def finite_non_negative(owner: str, name: str, value: Any, unit: str = "") -> None:
    """``value`` is a finite number >= 0."""
    if not (is_number(value) and value >= 0):
        raise ValueError(f"{_field(owner, name)} must be a finite non-negative number{_unit(unit)}; got {value!r}")


def probability(owner: str, name: str, value: Any) -> None:
    """``value`` is a number in [0, 1]."""
    if not (is_number(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{_field(owner, name)} must be in [0, 1]; got {value!r}")


def boolean(owner: str, name: str, value: Any) -> None:
    """``value`` is ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise ValueError(f"{_field(owner, name)} must be true or false; got {value!r}")


def value_range(owner: str, name: str, value: Any, lo: float = -math.inf, hi: float = math.inf) -> None:
    """``value`` is a (low, high) pair of finite numbers with ``lo <= low <= high <= hi``."""
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(is_number(v) for v in value)
    if not ok or not (lo <= value[0] <= value[1] <= hi):
        bounds = " <= ".join([*([f"{lo:g}"] if math.isfinite(lo) else []), "low", "high",
                              *([f"{hi:g}"] if math.isfinite(hi) else [])])
        raise ValueError(f"{_field(owner, name)} must be a (low, high) pair of finite numbers with {bounds}; "
                         f"got {value!r}")


def check_device(owner: str, value: Any) -> None:
    """The one check of every config's ``device`` field: a torch device this machine has (cpu, cuda, cuda:N,
    mps). Raises ValueError naming the field and what to use instead."""
    import torch

    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{owner}.device {value!r} is not a torch device; use cpu or cuda (cuda:N for one GPU)") from None
    if dev.type == "cpu":
        return
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{owner}.device {value!r}: CUDA is not available on this machine; use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{owner}.device {value!r}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                             f"(cuda:0..cuda:{torch.cuda.device_count() - 1})")
        return
    if dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"{owner}.device {value!r}: MPS is not available on this machine; use --device cpu")
        return
    raise ValueError(f"{owner}.device {value!r}: graspsim runs on cpu, cuda or mps, not {dev.type}")


__all__ = ["boolean", "check_device", "finite_non_negative", "finite_positive", "int_in", "is_int", "is_number",
           "non_negative_int", "positive_int", "probability", "value_range"]
