from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dws_operator.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("24h", 86400),
        ("168h", 604800),
        ("90m", 5400),
        ("1h30m", 5400),
        ("7200s", 7200),
        ("0s", 0),
        ("1h30m15s", 5415),
        ("1.5s", 1.5),
        ("999999h", 999999 * 3600),
    ],
)
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "1d", "h", "24", "-1h", "1m1h", "1.5h", "1234567h", "24 h"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@given(st.integers(0, 999_999 * 3600))
def test_format_round_trips(seconds: int) -> None:
    text = format_duration(timedelta(seconds=seconds))
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_format_is_short() -> None:
    assert format_duration(timedelta(days=7)) == "168h"
    assert format_duration(timedelta(minutes=90)) == "1h30m"
    assert format_duration(timedelta(0)) == "0s"
