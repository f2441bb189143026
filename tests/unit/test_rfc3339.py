"""RFC 3339 as Kubernetes and GKE write it: one reader, a writer per precision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from dws_operator import rfc3339

MOMENT = datetime(2026, 11, 23, 10, 0, 0, 123456, tzinfo=UTC)


def test_each_precision_as_its_writer_writes_it() -> None:
    assert rfc3339.seconds(MOMENT) == "2026-11-23T10:00:00Z"
    assert rfc3339.milliseconds(MOMENT) == "2026-11-23T10:00:00.123Z"
    assert rfc3339.microseconds(MOMENT) == "2026-11-23T10:00:00.123456Z"


def test_a_time_in_another_zone_is_written_in_utc() -> None:
    later = MOMENT.astimezone(timezone(timedelta(hours=2)))
    assert rfc3339.seconds(later) == "2026-11-23T10:00:00Z"


@pytest.mark.parametrize(
    "text",
    ["2026-11-23T10:00:00.123456Z", "2026-11-23T12:00:00.123456+02:00"],
)
def test_parse_reads_any_offset(text: str) -> None:
    assert rfc3339.parse(text) == MOMENT


def test_what_it_writes_it_reads() -> None:
    assert rfc3339.parse(rfc3339.milliseconds(MOMENT)) == MOMENT.replace(microsecond=123000)


def test_parse_refuses_what_is_not_a_time() -> None:
    with pytest.raises(ValueError, match="Invalid isoformat"):
        rfc3339.parse("yesterday")
