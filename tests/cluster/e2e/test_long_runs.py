"""Long runs end to end (issue 33): a run of 2.5 flex-start windows carried over three
segments on the real API server, Kueue-less batch Jobs, the GKE emulator and its
autoscaler, with a simulated checkpointing workload (`simulator.workload`) that resumes
from `DWS_CHECKPOINT_DIR`. The emulator's clock, which the operator, the autoscaler and
the workload all read, runs a simulated minute a second and is moved on past the hours
of each segment where nothing happens (`sandbox.pacing`); the test waits on what the
cluster shows, never on wall-clock time.

What only real servers show is kept here: the holder's pending pods make the
autoscaler bring the next segment's VMs, the garbage collector holds the stopped Job
until its pods, SIGTERMed, have checkpointed and exited, and the workload resumes from
its checkpoint without its VMs ever cutting it. The operator's part of long runs (the
segments and their pools, a Spot preemption as a restart, an operator killed mid
rollover or down past a stop) is tested on the virtual clock in
tests/virtual/test_long_runs.py."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from dws_operator import rfc3339
from dws_operator.catalog import NODE_POOL_LABEL_KEY, TERMINATION_ANNOTATION
from dws_operator.workload import job_name
from dws_workshop.sandbox.pacing import finish_of, skip_to_the_rollover
from dws_workshop.sandbox.rollover_bench import rollovers
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from dws_workshop.simulator.workload import (
    SIM_CHECKPOINT_EVERY_ANNOTATION,
    SIM_WORK_ANNOTATION,
)
from tests.builders import gpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

#: A simulated minute a real second: the stop's minute of lead is a real second.
MINUTES = 60.0
CHECKPOINTS = "gs://ckpt/e2e"
#: 2.5 windows of 10h; a budget with room to spare.
WORK = "25h"
RUN = {"duration": "27h", "stopBefore": "10m", "requestAhead": "10m"}
STOP_BEFORE = timedelta(minutes=10)
REQUEST_AHEAD = timedelta(minutes=10)
#: A whole run, guarded: three segments' capacity and two rollovers, each seconds.
RUN_GUARD = 300.0


def workload() -> dict[str, Any]:
    return {
        "metadata": {
            "annotations": {SIM_WORK_ANNOTATION: WORK, SIM_CHECKPOINT_EVERY_ANNOTATION: "1h"}
        },
        "spec": {"containers": [{"name": "train", "image": "example/train:1"}]},
    }


def long_run(scenario: Scenario, mode: str = "FlexStart", nodes: int = 1) -> None:
    scenario.create(
        gpu("nvidia-h100-80gb", nodes=nodes),
        mode=mode,
        provisioning={"maxRunDuration": "10h", "maxWaitDuration": "2h"},
        run=RUN,
        checkpointDir=CHECKPOINTS,
        template=workload(),
    )


class Watch:
    """What the test sees on each look, kept: every pool's VM end as GKE annotated its
    Node, and which workloads' pods ran at the same time."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.vm_ends: dict[str, set[datetime]] = {}
        self.together: list[set[str]] = []

    def look(self) -> dict[str, Any]:
        for node in self.scenario.core.list_node().items:
            pool = (node.metadata.labels or {}).get(NODE_POOL_LABEL_KEY)
            stamp = (node.metadata.annotations or {}).get(TERMINATION_ANNOTATION)
            if pool and stamp:
                self.vm_ends.setdefault(pool, set()).add(rfc3339.parse(stamp))
        # Pods being deleted count: they are checkpointing, still their segment's.
        jobs = [
            str((p.metadata.labels or {}).get("job-name"))
            for p in self.scenario.pods()
            if p.status.phase == "Running"
        ]
        running = {job for job in jobs if "-hold-" not in job}
        self.together.append(running)
        return self.scenario.status()

    def workloads(self) -> list[str]:
        """The workloads seen running, in the order they ran."""
        seen = [job for jobs in self.together for job in sorted(jobs)]
        return list(dict.fromkeys(seen))


Until = Callable[[dict[str, Any]], bool]


def ended(status: dict[str, Any]) -> bool:
    return status.get("phase") in ("Succeeded", "Failed")


def run_to_the_end(scenario: Scenario, watch: Watch, until: Until = ended) -> dict[str, Any]:
    """Skip each segment's quiet hours, looking, until `until` holds of the status."""
    spec = scenario.get()
    assert spec is not None
    clock = scenario.emulator.sim_clock

    def done() -> dict[str, Any] | None:
        status = watch.look()
        if until(status):
            return status
        item = {"metadata": {"namespace": scenario.namespace}, "spec": spec["spec"]}
        finishes = finish_of(scenario.autoscaler, clock, item)
        skip_to_the_rollover(clock, spec["spec"], status, finishes)
        return None

    found: dict[str, Any] = eventually(done, timeout=RUN_GUARD, what="the long run's end")
    return found


def test_a_run_of_two_and_a_half_windows_finishes_in_three_segments(stack: Stack) -> None:
    # A flex-start VM comes five simulated minutes after it is asked for.
    capacity = [CapacityRule(after_seconds=300)]
    scenario = stack(SimScenario(capacity=capacity), emulator_clock=MINUTES)
    long_run(scenario)
    watch = Watch(scenario)
    status = run_to_the_end(scenario, watch)
    assert status["phase"] == "Succeeded", status.get("message")
    assert status["segment"] == 3
    assert status.get("restarts", 0) == 0
    segments = status["segments"]
    assert [s["outcome"] for s in segments] == ["RolledOver", "RolledOver", "Succeeded"]
    assert [s["segment"] for s in segments] == [1, 2, 3]
    for before, after in itertools.pairwise(segments):
        ends = rfc3339.parse(before["endsAt"])
        # The window's end is the VMs' as GKE annotated their Node.
        assert watch.vm_ends[before["nodePool"]] == {ends}
        # SIGTERM (the workload deleted) came at least stopBefore before the VMs end.
        assert ends - rfc3339.parse(before["stoppedAt"]) >= STOP_BEFORE
        # The next segment's capacity was asked for at least requestAhead before it.
        assert ends - rfc3339.parse(after["requestedAt"]) >= REQUEST_AHEAD
        assert after["nodePool"] != before["nodePool"]
    # The workload: three Jobs, one after the other, never cut by its VMs (it
    # checkpointed on SIGTERM), finished in the third with exactly its work done. (A
    # rollover quicker than the simulator's pass is one run of the checkpoint to it.)
    assert watch.workloads() == [job_name(scenario.name, s["attempt"]) for s in segments]
    assert all(len(jobs) <= 1 for jobs in watch.together)
    autoscaler = scenario.autoscaler
    key = (scenario.namespace, CHECKPOINTS)
    runs = autoscaler.workloads.runs(key)
    assert "disrupted" not in [r.ended for r in runs]
    assert runs[-1].ended == "finished"
    record = autoscaler.workloads.record(key)
    assert record is not None
    assert record.finished
    assert record.saved == 25 * 3600.0
    # The operator's count of the workload's running time (from each segment seen
    # running to its stop) is the work, to the minutes its passes take.
    trained = status["trainedSeconds"]
    assert 24.5 * 3600.0 <= trained <= 25.5 * 3600.0
    # The next segment's VMs were there when the last one stopped (its holder asked for
    # them): the gap is the workload's start, well within twice the VMs' provisioning.
    found = rollovers(status, timedelta(hours=10))
    assert len(found) == 2
    for rollover in found:
        assert rollover.gap <= 2 * rollover.provisioning, rollover
        assert rollover.ahead >= REQUEST_AHEAD.total_seconds()
    assert status["rolloverSeconds"] == pytest.approx(sum(r.gap for r in found), abs=0.01)
    # Nothing left: the first two segments' pools deleted, the last one's at zero, no
    # holder, no node.
    pools = {s["nodePool"] for s in segments}
    eventually(
        lambda: (
            not any(
                (n.metadata.labels or {}).get(NODE_POOL_LABEL_KEY) in pools
                for n in scenario.core.list_node().items
            )
        ),
        timeout=120,
        what="every segment's nodes gone",
    )
    eventually(
        lambda: scenario.pool_names() & pools == {segments[-1]["nodePool"]},
        timeout=120,
        what="the first segments' pools deleted",
    )
    assert not [j for j in scenario.jobs() if "-hold-" in (j.metadata.name or "")]
