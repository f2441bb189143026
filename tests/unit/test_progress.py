"""What `dws-operator dev` prints, from successive snapshots of a request."""

from __future__ import annotations

import dataclasses

from dws_workshop.emulator import DEFAULT_CLUSTER
from dws_workshop.sandbox.progress import ProgressLog, Snapshot, StepView
from dws_workshop.sandbox.session import calendar_start, sandbox_cluster


def snap(at: float, phase: str | None, nodes: int = 0, message: str = "", **extra: int) -> Snapshot:
    return Snapshot(
        at=at,
        phase=phase,
        message=message,
        nodes=nodes,
        planned_nodes=4,
        max_wait_seconds=extra.get("max_wait", 600),
        restarts=extra.get("restarts", 0),
    )


def test_a_whole_run() -> None:
    log = ProgressLog()
    lines: list[str] = []
    for s in (
        snap(0.2, None),
        snap(0.5, "Provisioning", message="Creating node pool p"),
        snap(0.9, "Provisioning", message="Creating node pool p"),
        snap(1.5, "WaitingForCapacity", message="Waiting for capacity: 0/4 nodes"),
        snap(6.0, "WaitingForCapacity", nodes=4),
        snap(12.0, "Running", nodes=4, message="Running on 4 x ct6e-standard-4t"),
        snap(30.0, "Succeeded", nodes=4, message="Job j succeeded"),
        snap(32.5, "Succeeded", nodes=0),
    ):
        lines += log.update(s)
    assert lines == [
        "[   0.5s] Provisioning        Creating node pool p",
        "[   1.5s] WaitingForCapacity  Waiting for capacity: 0/4 nodes",
        "[   6.0s] 4 node(s) appeared: 4/4 now",
        "[  12.0s] Running             Running on 4 x ct6e-standard-4t",
        "[  30.0s] Succeeded           Job j succeeded",
        "[  32.5s] 4 node(s) removed: 0/4 now",
    ]
    summary = log.summary()
    assert summary[0] == "phase timings:"
    assert "  WaitingForCapacity  at    1.5s  for   10.5s" in summary
    assert summary[-1] == "idle node time after the work ended: 2.5s"


def test_waiting_bar() -> None:
    log = ProgressLog()
    log.update(snap(1.0, "WaitingForCapacity"))
    bar = log.bar(snap(301.0, "WaitingForCapacity"))
    assert bar == "waiting for capacity [############............] 300.0s of 600s"
    assert log.bar(snap(302.0, "Running")) is None
    forever = log.bar(snap(5.0, "WaitingForCapacity", max_wait=0))
    assert forever == "waiting for capacity   4.0s (no time limit)"


def test_restarts_are_reported() -> None:
    log = ProgressLog()
    log.update(snap(1.0, "Running", nodes=2))
    assert log.update(snap(2.0, "WaitingForCapacity", nodes=1, restarts=1))[:2] == [
        "[   2.0s] WaitingForCapacity",
        "[   2.0s] restart 1: a node was lost, new attempt",
    ]


def test_ladder_steps_as_they_start_and_end() -> None:
    log = ProgressLog()
    first = StepView(1, "FlexStart", ("us-east5-a",))
    ended = StepView(1, "FlexStart", ("us-east5-a",), "TimedOut", "no capacity within 30m")
    second = StepView(2, "Spot")
    assert log.update(dataclasses.replace(snap(1.0, "Provisioning"), steps=(first,))) == [
        "[   1.0s] step 1 started: FlexStart in us-east5-a",
        "[   1.0s] Provisioning",
    ]
    lines = log.update(dataclasses.replace(snap(5.0, "Provisioning"), steps=(ended, second)))
    assert lines == [
        "[   5.0s] step 1 ended TimedOut: FlexStart in us-east5-a (no capacity within 30m)",
        "[   5.0s] step 2 started: Spot",
    ]
    # Nothing new: nothing printed again.
    assert log.update(dataclasses.replace(snap(6.0, "Provisioning"), steps=(ended, second))) == []


def test_the_sandbox_cluster_is_in_the_region_of_the_requests_zones() -> None:
    def manifest(provisioning: dict[str, object]) -> dict[str, object]:
        return {"spec": {"provisioning": provisioning}}

    assert sandbox_cluster(manifest({"mode": "Spot"})) == DEFAULT_CLUSTER
    ladder = {"mode": "Spot", "fallback": [{"mode": "FlexStart", "zones": ["us-east5-b"]}]}
    assert sandbox_cluster(manifest(ladder)) == (
        "projects/dws-sandbox/locations/us-east5/clusters/sandbox"
    )


def test_a_calendar_bookings_states_as_they_change() -> None:
    log = ProgressLog()

    def booking(at: float, state: str, message: str, phase: str = "Pending") -> list[str]:
        return log.update(dataclasses.replace(snap(at, phase, message=message), booking=state))

    assert booking(1.0, "Submitted", "Submitting the booking") == [
        "[   1.0s] Pending             Submitting the booking",
        "[   1.0s] booking Submitted   Submitting the booking",
    ]
    assert booking(2.0, "UnderReview", "under review") == [
        "[   2.0s] booking UnderReview under review"
    ]
    assert booking(3.0, "UnderReview", "under review") == []
    assert booking(4.0, "Delivered", "on it", phase="Running") == [
        "[   4.0s] Running             on it",
        "[   4.0s] booking Delivered   on it",
    ]


def test_an_approval_missed_between_two_looks_is_still_told_once() -> None:
    log = ProgressLog()
    booked = "Booked 2 VMs of a3-highgpu-8g in us-east5-a from A to B"

    def look(at: float, state: str, approved: bool, phase: str = "Pending") -> list[str]:
        seen = dataclasses.replace(
            snap(at, phase, message=state), booking=state, booked=booked if approved else None
        )
        return log.update(seen)

    assert look(1.0, "Submitted", False)[-1] == "[   1.0s] booking Submitted   Submitted"
    assert look(2.0, "Delivered", True, phase="Provisioning") == [
        "[   2.0s] Provisioning        Delivered",
        f"[   2.0s] booking Approved    {booked}",
        "[   2.0s] booking Delivered   Delivered",
    ]
    assert look(3.0, "Ended", True, phase="Failed") == [
        "[   3.0s] Failed              Ended",
        "[   3.0s] booking Ended       Ended",
    ]
    # Seen Approved itself: not told twice.
    seen = ProgressLog()
    seen.update(dataclasses.replace(snap(1.0, "Pending"), booking="Approved", booked=booked))
    later = seen.update(
        dataclasses.replace(snap(2.0, "Running"), booking="Delivered", booked=booked)
    )
    assert [line for line in later if "Approved" in line] == []


def test_the_calendar_start_of_a_manifest() -> None:
    block = {"startTime": "2030-01-07T08:00:00Z", "duration": "24h"}
    manifest = {"spec": {"provisioning": {"mode": "Calendar", "calendar": block}}}
    start = calendar_start(manifest)
    assert start is not None
    assert start.isoformat() == "2030-01-07T08:00:00+00:00"
    assert calendar_start({"spec": {"provisioning": {"mode": "FlexStart"}}}) is None
