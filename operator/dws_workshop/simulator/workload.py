"""A checkpointing training workload, in simulated time: a model of the user's code.

kwok plays the kubelet, and a pod it runs does nothing; its `sim-duration` ends it after
wall-clock time (`devcluster.stages`). A long run split into segments (the operator
stops one before its flex-start VM ends and starts the next on new capacity) needs a pod
that behaves like training code that checkpoints, on the autoscaler's simulated clock:

- A pod opts in with `dws-operator.dev/sim-work` (a duration: the simulated training
  time the whole run needs) and optionally `dws-operator.dev/sim-checkpoint-every`
  (default 1h; `0s`: never, only on SIGTERM).
- Progress is kept per key: (namespace, the `DWS_CHECKPOINT_DIR` of the pod's first
  container), the checkpoint/resume contract the operator gives its pods; without it,
  the pod's owner Job, else the pod itself.
- While at least one pod of a key runs (Running, bound, not being deleted), the key's
  progress grows with simulated time: once however many pods, as the hosts of one
  multi-host Job write one checkpoint.
- Pods deleted (their Job deleted: Kubernetes sends SIGTERM and waits the grace period)
  save their progress up to the last pass that saw them running: the code checkpoints
  on SIGTERM. A run that ends `stopped`.
- Pods whose VM the simulator takes (`Fleet.remove`: preemption, flex-start max run,
  calendar block end) fall back to the last periodic checkpoint: saved plus whole
  checkpoint periods of this run. GKE's graceful node shutdown gives pods SIGTERM too,
  but only 15 s of a 30 s shutdown: taken as no time to write a large model's
  checkpoint. A run that ends `disrupted`; so does one whose pods end Failed in any
  other way (a crash).
- When the progress reaches the work, every running pod of the key ends Succeeded
  (containers terminated, exit code 0, reason `Completed`, as kwok's `pod-succeed`
  stage leaves them), so its Job completes. A pod of a finished key that starts later
  finishes at once (no run is recorded for it).

Pods without `sim-work` are left alone. What is modelled is user code, not GKE (rule
SIM-WORKLOAD-CHECKPOINT says so). `Workloads` is pure and thread-safe: the autoscaler's
thread feeds it each pass's pods and the pods it disrupts; tests read `record`,
`progress` and `runs` from theirs.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from dws_operator.durations import parse_duration
from dws_operator.workload import CHECKPOINT_ENV
from dws_workshop.emulator.ruleids import behaviour
from dws_workshop.simulator.autoscaler_view import Obj, phase_of

log = logging.getLogger(__name__)

SIM_WORK_ANNOTATION = "dws-operator.dev/sim-work"
SIM_CHECKPOINT_EVERY_ANNOTATION = "dws-operator.dev/sim-checkpoint-every"
#: Simulated seconds between periodic checkpoints when the pod does not say.
DEFAULT_CHECKPOINT_EVERY = 3600.0

#: (namespace, checkpoint directory | owner Job's name | pod uid).
Key = tuple[str, str]
Ending = Literal["stopped", "disrupted", "finished"]


@dataclass(frozen=True)
class Run:
    """One stretch of simulated time in which pods of a key ran."""

    start: float
    end: float
    ended: Ending
    #: The key's saved progress once this run ended (simulated seconds of work).
    saved: float


@dataclass(frozen=True)
class WorkloadRecord:
    """What a key did so far (a copy: it does not change under the reader)."""

    key: Key
    work: float
    checkpoint_every: float
    saved: float
    runs: tuple[Run, ...]
    #: When the run going on now began; None while no pod of the key runs.
    running_since: float | None
    #: The last pass that saw the run going on now.
    last_seen: float | None

    @property
    def finished(self) -> bool:
        return self.saved >= self.work


# Reading pods ---------------------------------------------------------------


def sim_work(pod: Obj) -> tuple[float, float] | None:
    """(work, checkpoint period) in simulated seconds, or None for a pod without
    `sim-work`; ValueError when an annotation is not a duration."""
    notes: dict[str, str] = pod["metadata"].get("annotations") or {}
    work = notes.get(SIM_WORK_ANNOTATION)
    if work is None:
        return None
    every = notes.get(SIM_CHECKPOINT_EVERY_ANNOTATION)
    period = DEFAULT_CHECKPOINT_EVERY
    if every is not None:
        period = parse_duration(every).total_seconds()
    return parse_duration(work).total_seconds(), period


def key_of(pod: Obj) -> Key:
    """Which run the pod's progress belongs to (see the module docstring)."""
    meta = pod["metadata"]
    namespace = str(meta.get("namespace", ""))
    containers: list[Obj] = pod.get("spec", {}).get("containers") or []
    if containers:
        for env in containers[0].get("env") or []:
            # A value from a ConfigMap or the downward API is not readable here: skipped.
            if env.get("name") == CHECKPOINT_ENV and env.get("value"):
                return namespace, str(env["value"])
    owners: list[Obj] = meta.get("ownerReferences") or []
    jobs = [o for o in owners if o.get("kind") == "Job"]
    jobs.sort(key=lambda o: not o.get("controller"))
    if jobs:
        return namespace, str(jobs[0]["name"])
    return namespace, str(meta.get("uid", meta.get("name", "")))


def is_running(pod: Obj) -> bool:
    """Running on a node and not being deleted (a deleted pod has had its SIGTERM)."""
    return (
        phase_of(pod) == "Running"
        and bool(pod.get("spec", {}).get("nodeName"))
        and not pod["metadata"].get("deletionTimestamp")
    )


def completed_status(pod: Obj, stamp: str) -> dict[str, Any]:
    """The status kwok's `pod-succeed` stage writes (see `devcluster.stages`): Succeeded,
    not ready, every container terminated with exit code 0, reason `Completed`."""
    started = (pod.get("status") or {}).get("startTime") or stamp
    statuses = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "finishedAt": stamp,
                    "startedAt": started,
                }
            },
        }
        for c in pod.get("spec", {}).get("containers") or []
    ]
    conditions = [
        {"type": kind, "status": "False", "reason": "PodCompleted", "lastTransitionTime": stamp}
        for kind in ("Ready", "ContainersReady")
    ]
    return {"phase": "Succeeded", "conditions": conditions, "containerStatuses": statuses}


# The model ------------------------------------------------------------------


@dataclass
class _Track:
    """One key's progress; every change goes through `Workloads`, under its lock."""

    work: float
    every: float
    saved: float = 0.0
    runs: list[Run] = field(default_factory=list)
    since: float | None = None
    seen: float | None = None
    #: The uids of the pods seen running in the run going on now.
    pods: set[str] = field(default_factory=set)

    @property
    def finished(self) -> bool:
        return self.saved >= self.work

    def _end(self, end: float, ended: Ending, saved: float) -> None:
        assert self.since is not None
        self.saved = min(max(saved, self.saved), self.work)
        self.runs.append(Run(self.since, end, ended, self.saved))
        self.since = self.seen = None
        self.pods = set()

    def run(self, now: float, work: float, every: float, uids: set[str]) -> bool:
        """Pods of the key run at `now`; whether the key is finished."""
        if self.finished:
            return True
        self.work, self.every = work, every
        if self.since is None:
            self.since = now
        self.seen = now
        self.pods |= uids
        done_at = self.since + (self.work - self.saved)
        if now >= done_at:
            # Done between two passes: the run ends when the work did, not at the pass.
            self._end(done_at, "finished", self.work)
            return True
        return False

    def stop(self) -> None:
        """Stopped on SIGTERM: everything up to the last pass seen running is saved."""
        if self.since is not None and self.seen is not None:
            self._end(self.seen, "stopped", self.saved + (self.seen - self.since))

    def disrupt(self, now: float) -> None:
        """Lost with its VM: back to the last periodic checkpoint of this run."""
        if self.since is None:
            return
        elapsed = max(now - self.since, 0.0)
        kept = math.floor(elapsed / self.every) * self.every if self.every > 0 else 0.0
        self._end(now, "disrupted", self.saved + kept)

    def record(self, key: Key) -> WorkloadRecord:
        return WorkloadRecord(
            key, self.work, self.every, self.saved, tuple(self.runs), self.since, self.seen
        )


class Workloads:
    """The progress of every key seen, fed by the autoscaler's passes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracks: dict[Key, _Track] = {}
        #: Pods whose annotations are not durations, told once each (not every pass).
        self._told: set[str] = set()

    def _work_of(self, pod: Obj) -> tuple[float, float] | None:
        try:
            return sim_work(pod)
        except ValueError as error:
            uid = str(pod["metadata"].get("uid", ""))
            with self._lock:
                told = uid in self._told
                self._told.add(uid)
            if not told:
                log.warning("pod %s: %s; it runs as without it", pod["metadata"]["name"], error)
            return None

    @behaviour("SIM-WORKLOAD-CHECKPOINT")
    def observe(self, now: float, pods: list[Obj]) -> list[Obj]:
        """One pass's pods at simulated second `now`: runs go on, start or end; answers
        the running pods whose key has finished (to be marked Succeeded)."""
        running: dict[Key, list[Obj]] = {}
        works: dict[Key, tuple[float, float]] = {}
        failed: set[str] = set()
        for pod in pods:
            wanted = self._work_of(pod)
            if wanted is None:
                continue
            key = key_of(pod)
            if is_running(pod):
                running.setdefault(key, []).append(pod)
                works[key] = wanted
            elif phase_of(pod) == "Failed":
                failed.add(str(pod["metadata"].get("uid", "")))
        done: list[Obj] = []
        with self._lock:
            for key, track in self._tracks.items():
                if track.since is None or key in running:
                    continue
                if track.pods & failed and track.seen is not None:
                    track.disrupt(track.seen)  # crashed, or lost in a way not told
                else:
                    track.stop()
            for key, found in running.items():
                work, every = works[key]
                track = self._tracks.setdefault(key, _Track(work, every))
                uids = {str(p["metadata"].get("uid", "")) for p in found}
                if track.run(now, work, every, uids):
                    done.extend(found)
        return done

    @behaviour("SIM-WORKLOAD-CHECKPOINT")
    def disrupted(self, pod: Obj, now: float) -> None:
        """The simulator took the VM under `pod` at `now` (it marked the pod Failed)."""
        if self._work_of(pod) is None:
            return
        with self._lock:
            track = self._tracks.get(key_of(pod))
            if track is not None:
                track.disrupt(now)

    # Reading ----------------------------------------------------------------

    def keys(self) -> list[Key]:
        with self._lock:
            return sorted(self._tracks)

    def record(self, key: Key) -> WorkloadRecord | None:
        with self._lock:
            track = self._tracks.get(key)
            return None if track is None else track.record(key)

    def runs(self, key: Key) -> list[Run]:
        record = self.record(key)
        return [] if record is None else list(record.runs)

    def progress(self, key: Key, now: float | None = None) -> float:
        """The key's progress: saved, plus the run going on now up to `now` (by default
        up to the last pass that saw it); 0 for a key never seen."""
        record = self.record(key)
        if record is None:
            return 0.0
        progress = record.saved
        if record.running_since is not None:
            until = record.last_seen if now is None else now
            progress += max((until or record.running_since) - record.running_since, 0.0)
        return min(progress, record.work)
