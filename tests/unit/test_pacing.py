"""The sandbox's clock for a long run: moved on to a little before each rollover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dws_operator import rfc3339
from dws_workshop.emulator.clock import SimClock
from dws_workshop.sandbox.pacing import MARGIN, rollover_due, skip_to_the_rollover

EPOCH = datetime(2026, 12, 1, tzinfo=UTC)
SPEC = {"run": {"duration": "25h", "stopBefore": "10m", "requestAhead": "20m"}}


def running(ends: datetime, started: datetime, trained: float = 0.0) -> dict[str, object]:
    return {
        "phase": "Running",
        "trainedSeconds": trained,
        "segments": [
            {"segment": 1, "startedAt": rfc3339.seconds(started), "endsAt": rfc3339.seconds(ends)}
        ],
    }


def test_it_skips_to_before_the_next_pools_are_due() -> None:
    ends = EPOCH + timedelta(hours=10)
    due = ends - timedelta(minutes=10 + 1 + 20) - MARGIN
    assert rollover_due(SPEC, running(ends, EPOCH)) == due
    clock = SimClock(1.0, real=lambda: 0.0, epoch=EPOCH)
    skipped = skip_to_the_rollover(clock, SPEC, running(ends, EPOCH))
    assert skipped == (due - EPOCH).total_seconds()
    assert clock.utc() == due
    # Once there, nothing more to skip.
    assert skip_to_the_rollover(clock, SPEC, running(ends, EPOCH)) == 0.0


def test_the_last_segment_is_skipped_to_before_its_duration_is_used_up() -> None:
    ends = EPOCH + timedelta(hours=10)
    due = rollover_due(SPEC, running(ends, EPOCH, trained=20 * 3600.0))
    assert due == EPOCH + timedelta(hours=5) - MARGIN


def test_nothing_to_skip_without_a_running_segment_with_an_end() -> None:
    assert rollover_due({}, running(EPOCH, EPOCH)) is None
    waiting = {**running(EPOCH, EPOCH), "phase": "WaitingForCapacity"}
    assert rollover_due(SPEC, waiting) is None
    unknown = {"phase": "Running", "segments": [{"segment": 1}]}
    assert rollover_due(SPEC, unknown) is None
