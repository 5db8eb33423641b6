"""The argument checks of rxmesh's constructors and operators, in one place.

Each refuses, naming the argument, what no caller could have meant: a timer that cannot wait, a
count below its floor, a hook that cannot be called. ``TypeError`` for the wrong kind of value,
``ValueError`` for the right kind out of range (``bool`` is never taken for a number).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["at_least", "positive_seconds", "require_callable", "validate_ladder"]


def _number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def validate_ladder(name: str, ladder: Sequence[float], *, allow_empty: bool) -> tuple[float, ...]:
    """Return ``ladder`` as a tuple of floats, refusing what no timer can wait.

    Raises:
        TypeError: ``ladder`` is not a sequence of real numbers.
        ValueError: a delay is negative or not finite, or the ladder is empty where one is needed.
    """
    if isinstance(ladder, str | bytes) or not isinstance(ladder, Sequence):
        raise TypeError(f"{name} must be a sequence of seconds, got {type(ladder).__name__}")
    result: list[float] = []
    for step in ladder:
        if not _number(step):
            raise TypeError(f"{name} must hold numbers of seconds, got {step!r}")
        seconds = float(step)
        if not seconds >= 0.0 or seconds == float("inf"):
            raise ValueError(f"{name} must hold finite delays >= 0 seconds, got {step!r}")
        result.append(seconds)
    if not result and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    return tuple(result)


def positive_seconds(name: str, value: object) -> float:
    """``value`` as a finite number of seconds > 0.

    Raises:
        TypeError: not a number.
        ValueError: zero, negative, NaN or infinite.
    """
    if not _number(value):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    seconds = float(value)  # type: ignore[arg-type]  # a number, checked just above
    if not (seconds > 0.0 and math.isfinite(seconds)):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return seconds


def at_least(name: str, value: object, minimum: int) -> int:
    """``value`` as an ``int`` no smaller than ``minimum``.

    Raises:
        TypeError: not an ``int``.
        ValueError: below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def require_callable(name: str, value: object, *, optional: bool = False) -> None:
    """Raise ``TypeError`` naming ``name`` unless ``value`` is callable (or optional ``None``)."""
    if value is None and optional:
        return
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")
