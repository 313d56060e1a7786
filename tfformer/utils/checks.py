"""Argument checks that name the argument: one wording for every module's errors."""

from __future__ import annotations

from typing import Any


def check_at_least(name: str, value: Any, minimum: int = 1, why: str = "") -> None:
    """Raises ValueError `NAME must be >= MINIMUM (WHY), got VALUE` when `value` is below
    `minimum`; None passes (an unset optional setting)."""
    if value is not None and value < minimum:
        reason = f" ({why})" if why else ""
        raise ValueError(f"{name} must be >= {minimum}{reason}, got {value}")


def check_fraction(name: str, value: Any) -> None:
    """Raises ValueError naming `name` unless 0 <= value < 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")


def check_non_negative(name: str, value: Any) -> None:
    """Raises ValueError naming `name` unless value >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
