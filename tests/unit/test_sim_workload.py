"""The simulator's checkpointing training workload (`simulator.workload`): progress per
checkpoint directory in simulated seconds, saved on SIGTERM, back to the last periodic
checkpoint when the VM is taken. Pure: pods are plain mappings, time is given."""

from __future__ import annotations

from typing import Any

import pytest

from dws_workshop.devcluster.stages import stage_objects
from dws_workshop.simulator.workload import (
    SIM_CHECKPOINT_EVERY_ANNOTATION,
    SIM_WORK_ANNOTATION,
    Run,
    Workloads,
    completed_status,
    key_of,
)

NS = "team"
CKPT = "gs://bucket/llama/ckpt"
KEY = (NS, CKPT)
HOUR = 3600.0


def pod(
    name: str,
    *,
    work: str | None = "10h",
    every: str | None = None,
    phase: str = "Running",
    node: str | None = "gke-sandbox-pool-1",
    checkpoint_dir: str | None = CKPT,
    job: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    annotations = {}
    if work is not None:
        annotations[SIM_WORK_ANNOTATION] = work
    if every is not None:
        annotations[SIM_CHECKPOINT_EVERY_ANNOTATION] = every
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "annotations": annotations,
    }
    if job is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job, "controller": True}
        ]
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-28T10:00:00Z"
    env = [{"name": "DWS_SEGMENT", "value": "2"}]
    if checkpoint_dir is not None:
        env.append({"name": "DWS_CHECKPOINT_DIR", "value": checkpoint_dir})
    spec: dict[str, Any] = {"containers": [{"name": "train", "image": "train:1", "env": env}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase, "startTime": "2026-11-28T09:00:00Z"},
    }


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_progress_grows_while_running_and_a_graceful_stop_saves_it_all() -> None:
    workloads = Workloads()
    assert workloads.observe(0.0, [pod("a")]) == []
    assert workloads.observe(2.5 * HOUR, [pod("a")]) == []
    assert workloads.progress(KEY) == 2.5 * HOUR
    assert workloads.progress(KEY, now=3 * HOUR) == 3 * HOUR
    # Its Job deleted: the pod is being deleted, then gone. Saved up to the last pass
    # that saw it running (not to the pass that saw it go), and not rounded down to an
    # hourly checkpoint: the code checkpoints on SIGTERM.
    workloads.observe(2.8 * HOUR, [pod("a", deleting=True)])
    workloads.observe(3.0 * HOUR, [])
    record = workloads.record(KEY)
    assert record is not None
    assert record.saved == 2.5 * HOUR
    assert record.running_since is None
    assert workloads.runs(KEY) == [Run(0.0, 2.5 * HOUR, "stopped", 2.5 * HOUR)]
    assert workloads.progress(KEY, now=9 * HOUR) == 2.5 * HOUR


def test_a_disrupted_run_falls_back_to_its_last_periodic_checkpoint() -> None:
    workloads = Workloads()
    workloads.observe(0.0, [pod("a", every="2h")])
    workloads.observe(4 * HOUR, [pod("a", every="2h")])
    workloads.observe(4.1 * HOUR, [])  # deleted: 4h saved
    workloads.observe(10 * HOUR, [pod("b", every="2h")])  # resumed at 4h of work
    workloads.observe(13 * HOUR, [pod("b", every="2h")])
    # The VM taken at 15.5h: 5.5h into this run, whose checkpoints were at 2h and 4h.
    workloads.disrupted(pod("b", every="2h"), 15.5 * HOUR)
    # The next pass sees the pod Failed: the run is over already, nothing more is lost.
    workloads.observe(15.6 * HOUR, [pod("b", every="2h", phase="Failed")])
    assert workloads.runs(KEY) == [
        Run(0.0, 4 * HOUR, "stopped", 4 * HOUR),
        Run(10 * HOUR, 15.5 * HOUR, "disrupted", 8 * HOUR),
    ]
    assert workloads.progress(KEY) == 8 * HOUR


def test_the_default_checkpoint_period_is_an_hour_and_zero_means_only_on_sigterm() -> None:
    workloads = Workloads()
    workloads.observe(0.0, [pod("a")])
    workloads.disrupted(pod("a"), 2.9 * HOUR)
    assert workloads.progress(KEY) == 2 * HOUR
    other = (NS, "gs://other")
    workloads.observe(0.0, [pod("c", every="0s", checkpoint_dir="gs://other")])
    workloads.disrupted(pod("c", every="0s", checkpoint_dir="gs://other"), 2.9 * HOUR)
    assert workloads.progress(other) == 0.0


def test_a_pod_that_fails_on_its_own_is_a_crash_back_to_its_checkpoint() -> None:
    workloads = Workloads()
    workloads.observe(0.0, [pod("a")])
    workloads.observe(1.5 * HOUR, [pod("a")])
    workloads.observe(1.6 * HOUR, [pod("a", phase="Failed")])
    assert workloads.runs(KEY) == [Run(0.0, 1.5 * HOUR, "disrupted", HOUR)]


def test_the_work_done_ends_the_running_pods_at_the_moment_it_was_reached() -> None:
    workloads = Workloads()
    workloads.observe(0.0, [pod("a", work="3h")])
    workloads.observe(2 * HOUR, [pod("a", work="3h")])
    workloads.observe(2.1 * HOUR, [])  # stopped at 2h
    assert workloads.observe(5 * HOUR, [pod("b", work="3h")]) == []
    # The pass after the hour of work left: done, at 6h (not at the pass's 6.2h).
    done = workloads.observe(6.2 * HOUR, [pod("b", work="3h"), pod("other", work=None)])
    assert names(done) == ["b"]
    record = workloads.record(KEY)
    assert record is not None
    assert record.finished
    assert record.runs[-1] == Run(5 * HOUR, 6 * HOUR, "finished", 3 * HOUR)
    assert workloads.progress(KEY, now=7 * HOUR) == 3 * HOUR


def test_pods_of_one_key_share_one_checkpoint_and_all_end_together() -> None:
    workloads = Workloads()
    workers = [pod(f"w{i}", work="1h", node=f"gke-sandbox-pool-{i}") for i in range(4)]
    workloads.observe(0.0, workers)
    # However many pods run, the key moves on once per simulated second.
    assert workloads.observe(0.5 * HOUR, workers) == []
    assert workloads.progress(KEY) == 0.5 * HOUR
    # One worker gone (rescheduled), the others go on: the run goes on too.
    assert workloads.observe(0.7 * HOUR, workers[1:]) == []
    done = workloads.observe(HOUR, workers)
    assert names(done) == ["w0", "w1", "w2", "w3"]
    assert workloads.runs(KEY) == [Run(0.0, HOUR, "finished", HOUR)]


def test_a_pod_of_a_finished_key_finishes_at_once() -> None:
    workloads = Workloads()
    workloads.observe(0.0, [pod("a", work="1h")])
    assert names(workloads.observe(HOUR, [pod("a", work="1h")])) == ["a"]
    assert names(workloads.observe(5 * HOUR, [pod("late", work="1h")])) == ["late"]
    assert len(workloads.runs(KEY)) == 1, "no run for a pod that had nothing left to do"
    workloads.disrupted(pod("late", work="1h"), 5.5 * HOUR)
    assert workloads.progress(KEY) == HOUR


def test_pods_without_sim_work_or_not_running_are_left_alone() -> None:
    workloads = Workloads()
    pending = pod("pending", phase="Pending", node=None)
    unbound = pod("unbound", node=None)
    plain = pod("plain", work=None)
    assert workloads.observe(0.0, [pending, unbound, plain]) == []
    assert workloads.keys() == []
    workloads.disrupted(plain, 1.0)
    assert workloads.record(KEY) is None
    assert workloads.progress(KEY) == 0.0
    assert workloads.runs(KEY) == []


def test_an_annotation_that_is_no_duration_leaves_the_pod_alone() -> None:
    workloads = Workloads()
    assert workloads.observe(0.0, [pod("a", work="a week")]) == []
    assert workloads.observe(0.0, [pod("b", every="soon")]) == []
    assert workloads.keys() == []


def test_a_key_is_the_checkpoint_dir_else_the_job_else_the_pod() -> None:
    assert key_of(pod("a", job="train-seg-1")) == KEY
    assert key_of(pod("a", job="train-seg-1", checkpoint_dir=None)) == (NS, "train-seg-1")
    assert key_of(pod("a", checkpoint_dir=None)) == (NS, "uid-a")
    from_config_map = pod("a", checkpoint_dir=None, job="j")
    from_config_map["spec"]["containers"][0]["env"].append(
        {"name": "DWS_CHECKPOINT_DIR", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
    )
    assert key_of(from_config_map) == (NS, "j")


def test_two_keys_move_on_apart() -> None:
    workloads = Workloads()
    other = (NS, "gs://other")
    workloads.observe(0.0, [pod("a"), pod("b", checkpoint_dir="gs://other")])
    workloads.observe(HOUR, [pod("a")])
    workloads.observe(2 * HOUR, [pod("a")])
    assert workloads.keys() == sorted([KEY, other])
    assert workloads.progress(KEY) == 2 * HOUR
    assert workloads.progress(other) == 0.0


def test_the_completed_status_is_the_one_kwok_writes() -> None:
    status = completed_status(pod("a"), "2026-11-28T10:00:00Z")
    assert status["phase"] == "Succeeded"
    [container] = status["containerStatuses"]
    assert container["name"] == "train"
    assert container["state"]["terminated"] == {
        "exitCode": 0,
        "reason": "Completed",
        "finishedAt": "2026-11-28T10:00:00Z",
        "startedAt": "2026-11-28T09:00:00Z",
    }
    # The same fields as kwok's pod-succeed stage, which the tests of plain pods read.
    [kwok] = [
        s["spec"]["next"]["statusTemplate"]
        for s in stage_objects()
        if s["metadata"]["name"] == "pod-succeed"
    ]
    for line in ("phase: Succeeded", "reason: PodCompleted", "exitCode: 0", "reason: Completed"):
        assert line in kwok
    for line in ("type: ContainersReady", "restartCount: 0", "started: false", "ready: false"):
        assert line in kwok
    assert {c["reason"] for c in status["conditions"]} == {"PodCompleted"}
    assert {c["type"] for c in status["conditions"]} == {"Ready", "ContainersReady"}
    assert (container["ready"], container["started"], container["restartCount"]) == (
        False,
        False,
        0,
    )


@pytest.mark.parametrize(("work", "seconds"), [("420h", 420 * HOUR), ("1h30m", 5400.0)])
def test_work_is_read_as_a_duration(work: str, seconds: float) -> None:
    workloads = Workloads()
    workloads.observe(0.0, [pod("a", work=work)])
    record = workloads.record(KEY)
    assert record is not None
    assert (record.work, record.checkpoint_every) == (seconds, HOUR)
