"""argparse types of the commands' numeric flags (``kyai generate/judge/run``, ``kyai compare``).

:func:`number` reads the text and names what it is not; each type adds its own bound.
"""

from __future__ import annotations

import argparse
from typing import TypeVar

N = TypeVar("N", int, float)


def number(text: str, kind: type[N]) -> N:
    """``text`` read as ``kind`` (``int`` or ``float``), or argparse's error saying it is not."""
    try:
        return kind(text)
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None


def positive_int(text: str) -> int:
    """A whole number of at least 1."""
    value = number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def non_negative_int(text: str) -> int:
    """A whole number of at least 0."""
    value = number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def positive_float(text: str) -> float:
    """A number above 0."""
    value = number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def non_negative_float(text: str) -> float:
    """A number of at least 0 (a sampling temperature)."""
    value = number(text, float)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def probability(text: str) -> float:
    """A number above 0 and at most 1 (nucleus sampling's ``top_p``)."""
    value = number(text, float)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not above 0 and at most 1")
    return value
