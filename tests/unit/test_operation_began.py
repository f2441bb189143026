"""When GKE began an operation, on the scheduler's monotonic clock: read from the
operation's start time against the time the answer came (`now`), bounded by the call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.cloud import container_v1

from dws_operator import rfc3339
from dws_operator.controller.operation_follower import began

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def started(ago: float) -> container_v1.Operation:
    return container_v1.Operation(
        name="operation-1", start_time=rfc3339.seconds(NOW - timedelta(seconds=ago))
    )


def test_a_start_within_the_call_is_placed_as_gke_says() -> None:
    # Sent at 100, answered at 110; GKE began 4 s before the answer.
    assert began(started(4), sent=100.0, answered=110.0, now=NOW) == 106.0


def test_a_start_before_the_call_or_after_the_answer_is_held_to_the_call() -> None:
    # A clock skewed either way moves the start no further than the call's round trip.
    assert began(started(60), sent=100.0, answered=110.0, now=NOW) == 100.0
    assert began(started(-30), sent=100.0, answered=110.0, now=NOW) == 110.0


def test_an_unreadable_start_is_the_answer() -> None:
    operation = container_v1.Operation(name="operation-1", start_time="soon")
    assert began(operation, sent=100.0, answered=110.0, now=NOW) == 110.0
