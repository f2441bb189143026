"""The simulator's checkpointing workload (`sim-work` pods) and its one clock, against a
real API server, scheduler and kwok: simulated time is moved by the test (`jump`), never
waited for, and every wait is for an autoscaler pass that saw what the test did."""

from __future__ import annotations

from datetime import timedelta

from dws_operator import rfc3339
from dws_workshop.emulator.clock import SimClock
from dws_workshop.simulator.autoscaler import Autoscaler
from dws_workshop.simulator.nodes import TERMINATION_ANNOTATION
from dws_workshop.simulator.scenario import SimScenario
from dws_workshop.simulator.workload import (
    SIM_CHECKPOINT_EVERY_ANNOTATION,
    SIM_WORK_ANNOTATION,
    Run,
    WorkloadRecord,
)
from tests.builders import gpu
from tests.cluster.sim.conftest import StartAutoscaler
from tests.cluster.sim.harness import Sim
from tests.gke.harness import rendered
from tests.polling import eventually

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CHECKPOINT_DIR = "gs://bucket/llama/ckpt"
HOUR = 3600.0
#: How far from a moment the test moved to an observation may be: real time runs on at
#: one simulated second per second between the jump and the pass that looks.
SLACK = 60.0


def training_pod(sim: Sim, name: str, pool: str, work: str, every: str = "1h") -> None:
    sim.create_pod(
        name,
        node_selector={"cloud.google.com/gke-nodepool": pool},
        resources={"nvidia.com/gpu": "8"},
        tolerations=[GPU_TOLERATION],
        annotations={SIM_WORK_ANNOTATION: work, SIM_CHECKPOINT_EVERY_ANNOTATION: every},
        env={"DWS_SEGMENT": name, "DWS_CHECKPOINT_DIR": CHECKPOINT_DIR},
    )


def seen_running(autoscaler: Autoscaler, key: tuple[str, str]) -> WorkloadRecord:
    """The key's record once a pass has seen a pod of it running."""

    def probe() -> WorkloadRecord | None:
        record = autoscaler.workloads.record(key)
        return record if record is not None and record.running_since is not None else None

    return eventually(probe, what=f"a pass seeing {key} running")


def passes_after(autoscaler: Autoscaler, moment: float) -> None:
    """Wait for a pass that began at simulated `moment` or later (two passes on)."""
    looked = autoscaler.passes
    eventually(
        lambda: autoscaler.passes >= looked + 2 and autoscaler.clock.now() >= moment,
        what=f"an autoscaler pass after simulated second {moment:.0f}",
    )


def test_a_stopped_segment_saves_its_progress_and_the_next_resumes_and_succeeds(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    clock = SimClock(1.0)
    autoscaler = start_autoscaler(SimScenario(), clock=clock)
    key = (sim.namespace, CHECKPOINT_DIR)
    sim.create_pool(rendered(gpu("nvidia-l4"), "FlexStart", name="l4-train"))
    training_pod(sim, "seg-1", "l4-train", work="3h")
    eventually(lambda: sim.phase("seg-1") == "Running", what="seg-1 running")
    first = seen_running(autoscaler, key)
    assert first.work == 3 * HOUR
    assert first.running_since is not None
    started = first.running_since

    # An hour of training, then its Job's deletion (SIGTERM): all of it saved.
    clock.jump(HOUR)
    passes_after(autoscaler, started + HOUR)
    sim.core.delete_namespaced_pod("seg-1", sim.namespace)
    [stopped] = eventually(lambda: autoscaler.workloads.runs(key), what="seg-1's run ended")
    assert stopped.ended == "stopped"
    assert stopped.start == started
    assert HOUR <= stopped.saved == stopped.end - started <= HOUR + SLACK
    saved = stopped.saved

    # The next segment, with the same checkpoint directory, resumes where it stopped.
    training_pod(sim, "seg-2", "l4-train", work="3h")
    eventually(lambda: sim.phase("seg-2") == "Running", what="seg-2 running")
    second = seen_running(autoscaler, key)
    assert second.running_since is not None
    resumed = second.running_since
    done_at = resumed + (3 * HOUR - saved)
    # A minute short of the work: still training.
    clock.jump(done_at - SLACK - clock.now())
    passes_after(autoscaler, done_at - SLACK)
    assert sim.phase("seg-2") == "Running"
    assert autoscaler.workloads.progress(key) < 3 * HOUR
    clock.jump(SLACK)
    eventually(lambda: sim.phase("seg-2") == "Succeeded", what="seg-2 succeeded")
    assert clock.now() >= done_at
    assert autoscaler.workloads.runs(key) == [stopped, Run(resumed, done_at, "finished", 3 * HOUR)]
    record = autoscaler.workloads.record(key)
    assert record is not None
    assert record.finished
    # Ended as kwok ends a pod whose duration is up: the Job controller counts it done.
    [status] = sim.pod("seg-2").status.container_statuses
    assert status.state.running is None
    terminated = status.state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    conditions = {c.type: (c.status, c.reason) for c in sim.pod("seg-2").status.conditions}
    assert conditions["Ready"] == ("False", "PodCompleted")


def test_a_flex_start_vm_ends_on_the_given_clock_and_the_work_falls_back_to_its_checkpoint(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    # The clock the operator would decide on, a day into its calendar already: the
    # termination annotation is in its time, not the wall clock's.
    clock = SimClock(1.0)
    clock.jump(24 * HOUR)
    autoscaler = start_autoscaler(SimScenario(), clock=clock)
    key = (sim.namespace, CHECKPOINT_DIR)
    pool = rendered(
        gpu("nvidia-l4"), "FlexStart", name="l4-2h", provisioning={"maxRunDuration": "2h"}
    )
    sim.create_pool(pool)
    training_pod(sim, "seg-1", "l4-2h", work="3h", every="45m")
    [node] = eventually(lambda: sim.nodes("l4-2h"), what="the flex-start node")
    created = autoscaler.fleet.created_at(node.metadata.name)
    assert created is not None
    ends = rfc3339.parse(node.metadata.annotations[TERMINATION_ANNOTATION])
    assert ends == (clock.epoch + timedelta(seconds=created + 2 * HOUR)).replace(microsecond=0)
    assert ends - clock.utc() > timedelta(hours=1, minutes=58)
    eventually(lambda: sim.phase("seg-1") == "Running", what="seg-1 running")
    first = seen_running(autoscaler, key)
    assert first.running_since is not None
    started = first.running_since

    # On to the VM's end (SIM-FLEX-MAX-RUN): the pod fails with it, and its run falls
    # back to its last checkpoint, the second, at 1h30m (it ran about 2 hours: a little
    # less from the node's creation to the pod's start, a little more to the pass that
    # took the VM).
    clock.jump(created + 2 * HOUR - clock.now())
    eventually(lambda: not sim.nodes("l4-2h"), what="the VM ended")
    assert clock.utc() >= ends
    assert sim.phase("seg-1") == "Failed"
    [lost] = eventually(lambda: autoscaler.workloads.runs(key), what="seg-1's run ended")
    assert lost.ended == "disrupted"
    assert lost.start == started
    assert created + 2 * HOUR <= lost.end <= created + 2 * HOUR + SLACK
    assert lost.saved == 1.5 * HOUR

    # The next segment gets a new VM and does the last 1h30m.
    training_pod(sim, "seg-2", "l4-2h", work="3h", every="45m")
    eventually(lambda: sim.phase("seg-2") == "Running", what="seg-2 running")
    second = seen_running(autoscaler, key)
    assert second.running_since is not None
    done_at = second.running_since + 1.5 * HOUR
    clock.jump(done_at - clock.now())
    eventually(lambda: sim.phase("seg-2") == "Succeeded", what="seg-2 succeeded")
    assert autoscaler.workloads.runs(key)[-1] == Run(
        second.running_since, done_at, "finished", 3 * HOUR
    )
