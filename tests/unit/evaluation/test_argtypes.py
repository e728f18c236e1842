"""The commands' numeric argparse types: what each accepts and the message of each refusal."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest

from kyai._argtypes import non_negative_int, number, positive_float, positive_int
from kyai.compare import _alpha, _margin
from kyai.evaluation._gates import _fraction


@pytest.mark.parametrize(
    ("parse", "text", "value"),
    [
        (positive_int, "1", 1), (positive_int, " 12 ", 12),
        (non_negative_int, "0", 0), (non_negative_int, "7", 7),
        (positive_float, "0.5", 0.5), (positive_float, "3", 3.0),
        (_fraction, "0", 0.0), (_fraction, "1", 1.0),
        (_margin, "0.02", 0.02), (_alpha, "0.05", 0.05),
    ],
)  # fmt: skip
def test_accepted(parse: Callable[[str], Any], text: str, value: float) -> None:
    parsed = parse(text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (positive_int, "two", "'two' is not a whole number"),
        (positive_int, "1.5", "'1.5' is not a whole number"),
        (positive_int, "0", "0 is not at least 1"),
        (non_negative_int, "x", "'x' is not a whole number"),
        (non_negative_int, "-1", "-1 is negative"),
        (positive_float, "fast", "'fast' is not a number"),
        (positive_float, "0", "0.0 is not positive"),
        (positive_float, "nan", "nan is not positive"),
        (_fraction, "high", "'high' is not a number"),
        (_fraction, "1.5", "1.5 is not between 0 and 1"),
        (_margin, "", "'' is not a number"),
        (_margin, "2", "2.0 is not in [0, 1] (a score difference: 0.02 is 2 points)"),
        (_alpha, "1", "1.0 is not strictly between 0 and 1"),
    ],
)  # fmt: skip
def test_refused_with_its_message(parse: Callable[[str], Any], text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        parse(text)
    assert str(raised.value) == message


def test_number_reads_the_kind_it_is_given() -> None:
    assert number("3", int) == 3 and type(number("3", float)) is float
