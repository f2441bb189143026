"""DWS Calendar mode end to end: a TPU block booked through the emulated Compute (a future
reservation in calendar mode), Google's review, the slice pool on the delivered
reservation, pods running on the autoscaler's VMs, and the block's end: the Job deleted
`stopBefore` (and a minute) ahead of it, its pods given that long to checkpoint (their
grace period, as the real Job controller and kubelet see them), and the VMs gone only
by the end. The
emulator's clock, which the operator decides on too, runs days in seconds; around the
stop before the end the test slows it down and skips ahead (`SimClock.jump`), so the
stop is looked at closely without days of waiting.

The rest of Calendar mode runs on the virtual clock, with Compute answered in process,
in tests/virtual/test_calendar.py: a GPU block shown, approved, booked once, delivered
and run on; this block's stop before its end on the operator's side; an operator killed
after its insert booking once; a declined booking failing the request and making
nothing; the calendar sample booking its block and running on it; a block started where
Compute's advice finds room.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kubernetes import client as k8s

from dws_operator import rfc3339
from dws_operator.reconcile import STOP_LEAD_SECONDS
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import SETTLE, forever
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

#: A day of the emulator's in about 40 real seconds.
FAST = 2000.0
#: Slow enough around the stop that the operator's pass is seconds of simulated time.
CLOSE = 10.0
#: How far ahead a block starts: the test skips to it once the booking is approved.
AHEAD = timedelta(days=10)
AUTOSCALER = SimScenario(clock_factor=60.0)


def block(scenario: Scenario, starts_in: timedelta, **fields: Any) -> dict[str, Any]:
    start = scenario.emulator.sim_clock.utc() + starts_in
    return {"startTime": rfc3339.seconds(start), "duration": "24h", **fields}


def calendar(zone: str, block_: dict[str, Any]) -> dict[str, Any]:
    return {"zones": [zone], "calendar": block_}


def booking(scenario: Scenario) -> dict[str, Any]:
    found: dict[str, Any] = scenario.status().get("booking") or {}
    return found


def state(scenario: Scenario) -> str | None:
    return booking(scenario).get("state")


def pool_nodes(scenario: Scenario) -> list[k8s.V1Node]:
    selector = f"cloud.google.com/gke-nodepool={scenario.pool_name}"
    return list(scenario.core.list_node(label_selector=selector).items)


def skip_to_the_start(scenario: Scenario) -> None:
    """Once the booking is approved: on to ten simulated minutes before its block starts."""
    eventually(lambda: state(scenario) == "Approved", timeout=SETTLE, what="the booking approved")
    clock = scenario.emulator.sim_clock
    start = rfc3339.parse(booking(scenario)["startTime"])
    clock.jump(max((start - clock.utc()).total_seconds() - 600, 0))


def test_a_tpu_block_ends_with_its_workload_stopped_before_the_vms_go(stack: Stack) -> None:
    scenario = stack(AUTOSCALER, emulator_clock=FAST)
    clock = scenario.emulator.sim_clock
    scenario.create(
        tpu("v6e", "4x4"),
        mode="Calendar",
        provisioning=calendar("us-east5-a", block(scenario, AHEAD, stopBefore="30m")),
        template=forever(),
        approveBooking=True,
    )
    skip_to_the_start(scenario)
    running = eventually(
        lambda: (
            len([p for p in scenario.pods() if p.status.phase == "Running"]) == 4
            and scenario.pods()
        ),
        timeout=SETTLE,
        what="four pods running on the delivered slice",
    )
    grace = {p.spec.termination_grace_period_seconds for p in running}
    assert grace == {1800}
    assert booking(scenario)["unit"] == "chips"
    end = rfc3339.parse(booking(scenario)["endTime"])
    stop_at = end - timedelta(minutes=30, seconds=STOP_LEAD_SECONDS)
    scenario.wait_phase("Running", timeout=SETTLE)
    # On to two simulated minutes before the stop, slowed down to look at it closely.
    clock.set_factor(CLOSE)
    clock.jump(max((stop_at - clock.utc()).total_seconds() - 120, 0))
    assert scenario.phase() == "Running"
    failed = scenario.wait_phase("Failed", timeout=SETTLE)
    stopped = rfc3339.parse(failed["finishedAt"])
    assert "BlockEnded" in failed["message"]
    # Told to stop (its Job deleted, so its pods get SIGTERM) at least the pods' grace
    # period before the block's end, and not before the stop was due ...
    assert stop_at <= stopped <= end - timedelta(minutes=30)
    assert all(j.metadata.deletion_timestamp for j in scenario.jobs())
    # ... while the slice's VMs stay until the end (paid for anyway): the pods have
    # their whole grace period on them.
    assert len(pool_nodes(scenario)) == 4
    assert clock.utc() < end
    clock.set_factor(FAST)
    # Gone by the end at the latest (idle, the autoscaler may take them ten minutes sooner).
    eventually(lambda: pool_nodes(scenario) == [], timeout=SETTLE, what="the slice's VMs gone")
