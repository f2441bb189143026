"""`dws-operator dev`: the whole product on one machine, with one command.

A real control plane (with kwok playing the kubelet), the GKE emulator with its
autoscaler (GKE's minutes run as seconds), and the operator; then one TrainingRequest
applied and followed on the terminal until its pool is back at zero.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import yaml
from kubernetes import client as k8s

from dws_operator import rfc3339
from dws_operator.api import GROUP, PLURAL, TERMINAL_PHASES, VERSION
from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.controller import KueueMode, OperatorThread
from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.durations import parse_duration
from dws_operator.kueue_objects import LOCAL_QUEUE as QUEUE
from dws_operator.kueue_objects import QUEUED_LOCAL_QUEUE as QUEUED_QUEUE
from dws_operator.kueue_objects import dws_objects
from dws_operator.reconcile import BLOCK_ENDED, step_provisioning, written_step
from dws_operator.zones import region_of
from dws_workshop.devcluster import DevCluster, DevClusterOptions, MissingBinaries, find_binaries
from dws_workshop.devcluster.crds import install_third_party_crds, install_training_request_crd
from dws_workshop.devcluster.jobset import JobSetManager
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.devcluster.stages import kwok_config
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterConfig, EmulatorConfig, EmulatorThread
from dws_workshop.emulator.clock import SimClock
from dws_workshop.sandbox.emulated_operator import emulated_config, on_emulator_clock
from dws_workshop.sandbox.pacing import finish_of, skip_to_the_rollover
from dws_workshop.sandbox.progress import ProgressLog, Snapshot, StepView
from dws_workshop.simulator.autoscaler import Autoscaler
from dws_workshop.simulator.scenario import CapacityRule, SimScenario, load_scenario

NAMESPACE = "default"
#: Simulated seconds per real second in a sandbox for a calendar block: an hour a second.
CALENDAR_CLOCK = 3600.0
#: How long before a calendar block the sandbox's calendar starts.
CALENDAR_LEAD = timedelta(hours=2)
#: Booking states of a booking Compute has (reviewed, approved, delivered or ended).
BOOKING_SEEN = frozenset({"UnderReview", "Approved", "Delivered", "Ended", "Declined"})
#: GKE's minutes as seconds: capacity after 5 simulated minutes arrives after 5 s.
#: Simulated seconds per real second for a long run: a minute a second, while the
#: sandbox skips each segment's quiet days (`pacing`).
LONG_RUN_CLOCK = 60.0
DEFAULT_SCENARIO = SimScenario(clock_factor=60.0, capacity=[CapacityRule(after_seconds=300.0)])


@dataclass(frozen=True)
class SandboxOptions:
    manifest: Path | None = None
    kubeconfig: Path | None = None
    scenario: Path | None = None
    exit_when_done: bool = False
    #: Give up following the request after this long (the sandbox itself keeps running).
    follow_timeout: float = 600.0
    #: Run Kueue and the JobSet controller, building them on first use (`--without-kueue`:
    #: not, the request then runs without queueing).
    kueue: bool = True
    #: Finds (and with `build`, builds) the named binaries: `find_binaries`.
    binaries: Callable[..., dict[str, Path]] = find_binaries


def default_manifest() -> dict[str, Any]:
    text = resources.files("dws_workshop.sandbox").joinpath("sample.yaml").read_text()
    document: dict[str, Any] = yaml.safe_load(text)
    return document


def sandbox_cluster(manifest: dict[str, Any]) -> str:
    """The emulated GKE cluster for `manifest`: a regional cluster in the region of the
    zones it names (every step of a capacity ladder), so its pools may use them; else
    the default, in us-east5."""
    provisioning = (manifest.get("spec") or {}).get("provisioning") or {}
    steps = [provisioning, *(provisioning.get("fallback") or [])]
    zones = [z for step in steps for z in step.get("zones") or [] if isinstance(z, str)]
    if not zones:
        return DEFAULT_CLUSTER
    region = region_of(zones[0])
    return DEFAULT_CLUSTER.replace("/locations/us-east5/", f"/locations/{region}/")


def _load(path: Path | None) -> dict[str, Any]:
    if path is None:
        return default_manifest()
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    requests: list[dict[str, Any]] = [d for d in documents if d.get("kind") == "TrainingRequest"]
    if len(requests) != 1:
        raise ValueError(f"{path} must hold exactly one TrainingRequest, not {len(requests)}")
    return requests[0]


class Sandbox:
    def __init__(self, options: SandboxOptions, out: TextIO = sys.stdout) -> None:
        self.options = options
        self.out = out
        self.stop = threading.Event()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def run(self) -> int:
        manifest = _load(self.options.manifest)
        scenario = (
            load_scenario(self.options.scenario) if self.options.scenario else DEFAULT_SCENARIO
        )
        kubeconfig = self.options.kubeconfig or (
            Path(tempfile.gettempdir()) / "dws-sandbox" / "kubeconfig"
        )
        began = time.monotonic()
        with contextlib.ExitStack() as stack:
            self.say("dws-operator dev: starting etcd, kube-apiserver, controllers and kwok ...")
            cluster = stack.enter_context(
                DevCluster(
                    DevClusterOptions(
                        controllers=True, kwok=True, stages=kwok_config(), kubeconfig=kubeconfig
                    )
                )
            )
            api = cluster.api_client()
            stack.callback(api.close)
            install_training_request_crd(api)
            kueue = self._start_kueue(stack, api, cluster.kubeconfig)
            gke_cluster = sandbox_cluster(manifest)
            start = calendar_start(manifest)
            long_run = is_long_run(manifest)
            emulator = stack.enter_context(
                EmulatorThread(
                    EmulatorConfig(
                        operation_latency_seconds=1.0,
                        clusters=[ClusterConfig(name=gke_cluster)],
                        # A calendar block: the simulated calendar starts two hours
                        # before it (and runs an hour a second once the request is
                        # applied, so a day's block takes 24 s).
                        calendar_epoch=start - CALENDAR_LEAD if start else None,
                        clock_factor=LONG_RUN_CLOCK if long_run else 1.0,
                    )
                )
            )
            autoscaler = stack.enter_context(
                Autoscaler(
                    emulator,
                    cluster.kubeconfig,
                    scenario,
                    cluster=gke_cluster,
                    # A long run: the autoscaler, its VMs' ends and the simulated
                    # workload on the operator's clock, which the sandbox moves on.
                    clock=emulator.sim_clock if long_run else None,
                )
            )
            config = emulated_config(
                emulator,
                gke_cluster,
                kueue=KueueMode.REQUIRED if kueue else KueueMode.DISABLED,
                default_queue=QUEUE if kueue else None,
                queued_queue=QUEUED_QUEUE if kueue else None,
                metrics_port=0,
                metrics_address="127.0.0.1",
            )
            clock = emulator.sim_clock
            if start is not None or long_run:
                config = replace(config, time=on_emulator_clock(emulator))
            if long_run:
                self.say(
                    "dws-operator dev: a long run: the sandbox's clock runs a simulated minute "
                    "a second and skips the quiet days of each segment, to a little before "
                    "its rollover"
                )
            if start is not None:
                # Nothing is billed here: the sandbox books without spec.approveBooking.
                config = replace(config, book_without_approval=True)
                self.say(
                    "dws-operator dev: a calendar block: the sandbox's calendar starts two "
                    f"hours before it ({rfc3339.seconds(clock.utc())}) and runs an hour a "
                    "second; it books without spec.approveBooking (nothing is billed here)"
                )
            operator = stack.enter_context(OperatorThread(config, kubeconfig=cluster.kubeconfig))
            self.say(
                f"dws-operator dev: sandbox ready in {time.monotonic() - began:.1f}s "
                f"(GKE emulator at {emulator.endpoint}, clock x{scenario.clock_factor:g}; "
                f"metrics at http://127.0.0.1:{operator.metrics.port}/metrics)"
            )
            # A calendar block: the calendar runs an hour a second once Compute has the
            # booking (in real time until then, so a slow submit cannot miss the start).
            seen = (
                (lambda: emulator.sim_clock.set_factor(CALENDAR_CLOCK))
                if start is not None
                else None
            )
            pace = (
                (lambda status: self._pace(clock, autoscaler, manifest, status))
                if long_run
                else None
            )
            status = self._follow(api, manifest, on_booking_seen=seen, pace=pace)
            if long_run:
                self.say(long_run_summary(status))
            for line in metrics_summary(operator.metrics):
                self.say(line)
            self._usage(cluster.kubeconfig)
            if self.options.exit_when_done:
                return 0 if _as_hoped(status) else 1
            self.stop.wait()
        return 0

    def _start_kueue(
        self, stack: contextlib.ExitStack, api: k8s.ApiClient, kubeconfig: Path
    ) -> bool:
        """Kueue and the JobSet controller, when their binaries are built: two queues,
        `dws-queue` for everything and `dws-queued` (ProvisioningRequest admission check)
        for queued provisioning; JobSets (multi-slice TPU) run through either."""
        if not self.options.kueue:
            self.say("dws-operator dev: running without Kueue and JobSet (--without-kueue)")
            return False
        find = self.options.binaries
        try:
            find(["kueue", "jobset"], build=False)
        except MissingBinaries:
            # The product queues through Kueue: a first run builds them rather than show
            # the request running without it.
            self.say(
                "dws-operator dev: building Kueue's manager and the JobSet controller from the "
                "Go modules pinned in hack/versions.env (first run only: about 11 minutes on "
                "2 cores; --without-kueue skips them)"
            )
            try:
                find(["kueue", "jobset"], build=True)
            except MissingBinaries as error:
                self.say(f"dws-operator dev: {error}; running without Kueue and JobSet")
                return False
        # Kueue sets up its JobSet integration and the ProvisioningRequest check only for
        # APIs served when it starts: every CRD first.
        install_third_party_crds(api)
        stack.enter_context(JobSetManager(kubeconfig))
        stack.enter_context(KueueManager(kubeconfig))
        apply_kueue_objects(api, dws_objects([NAMESPACE]))
        self.say(
            f"dws-operator dev: Kueue admits the Jobs and JobSets (LocalQueues {QUEUE}, "
            f"{QUEUED_QUEUE})"
        )
        return True

    def _follow(
        self,
        api: k8s.ApiClient,
        manifest: dict[str, Any],
        on_booking_seen: Callable[[], None] | None = None,
        pace: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Print the request's progress until it has ended and scaled down;
        `on_booking_seen` is called once, when its booking is first seen in Compute;
        `pace` with each status seen."""
        objects = k8s.CustomObjectsApi(api)
        name = manifest["metadata"]["name"]
        objects.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, manifest)
        self.say(f"dws-operator dev: applied TrainingRequest {NAMESPACE}/{name}")
        log, start = ProgressLog(), time.monotonic()
        tty = self.out.isatty()
        phase: str | None = None
        status: dict[str, Any] = {}
        while time.monotonic() - start < self.options.follow_timeout and not self.stop.is_set():
            body: Any = objects.get_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, name
            )
            status = body.get("status") or {}
            plan = status.get("plan") or {}
            # Every slice's pool (several for Multislice), else the one pool.
            pools = [s["nodePool"] for s in status.get("slices") or []] or [
                p for p in [(status.get("nodePool") or {}).get("name")] if p
            ]
            nodes = 0
            if pools:
                selector = f"{NODE_POOL_LABEL_KEY} in ({','.join(pools)})"
                nodes = len(k8s.CoreV1Api(api).list_node(label_selector=selector).items)
            phase = status.get("phase")
            snapshot = Snapshot(
                at=time.monotonic() - start,
                phase=phase,
                message=status.get("message") or "",
                nodes=nodes,
                planned_nodes=plan.get("totalNodes") or plan.get("nodes"),
                max_wait_seconds=_seconds(_step_wait(body["spec"]["provisioning"], status)),
                restarts=status.get("restarts", 0),
                booking=(status.get("booking") or {}).get("state"),
                booked=_booked(status.get("booking") or {}),
                steps=tuple(
                    StepView(
                        step=a["step"],
                        mode=a["mode"],
                        zones=tuple(a.get("zones") or ()),
                        outcome=a.get("outcome"),
                        message=a.get("message") or "",
                    )
                    for a in status.get("attempts") or ()
                ),
            )
            if pace is not None:
                pace(status)
            if on_booking_seen is not None and snapshot.booking in BOOKING_SEEN:
                on_booking_seen()
                on_booking_seen = None
            lines = log.update(snapshot)
            if tty:
                bar = log.bar(snapshot)
                print("\r\033[K", end="", file=self.out)
                for line in lines:
                    print(line, file=self.out)
                if bar:
                    print(bar, end="", file=self.out, flush=True)
            else:
                for line in lines:
                    self.say(line)
            if phase in TERMINAL_PHASES and status.get("scaledDownAt") and nodes == 0:
                break
            if (
                phase == "Failed"
                and nodes == 0
                and time.monotonic() - (start + (log.finished_at or 0)) > 5
            ):
                break
            time.sleep(0.25)
        if tty:
            print("\r\033[K", end="", file=self.out)
        for line in log.summary():
            self.say(line)
        return status

    def _pace(
        self,
        clock: SimClock,
        autoscaler: Autoscaler,
        manifest: dict[str, Any],
        status: dict[str, Any],
    ) -> None:
        """A long run's quiet days skipped, said."""
        item = {"metadata": {"namespace": NAMESPACE}, "spec": manifest["spec"]}
        skipped = skip_to_the_rollover(
            clock, manifest["spec"], status, finish_of(autoscaler, clock, item)
        )
        if skipped > 0:
            self.say(
                f"dws-operator dev: segment {status.get('segment', 1)} runs; skipped "
                f"{skipped / 3600:.1f} simulated hours to {rfc3339.seconds(clock.utc())}"
            )

    def _usage(self, kubeconfig: Path) -> None:
        self.say(
            f"\nkubeconfig: {kubeconfig}\n"
            f"  kubectl --kubeconfig {kubeconfig} get trainingrequests -o wide\n"
            f"  kubectl --kubeconfig {kubeconfig} get jobs,pods,nodes\n"
            f"  kubectl --kubeconfig {kubeconfig} apply -f manifests/samples/"
        )
        if not self.options.exit_when_done:
            self.say("The sandbox keeps running; Ctrl-C stops it and removes everything.")


def is_long_run(manifest: dict[str, Any]) -> bool:
    """The request runs longer than one window, in segments (`spec.run.duration`)."""
    run = (manifest.get("spec") or {}).get("run") or {}
    return bool(run.get("duration"))


def long_run_summary(status: dict[str, Any]) -> str:
    """A long run's segments in one line."""
    segments = status.get("segments") or []
    outcomes = ", ".join(f"{s['segment']} {s.get('outcome') or 'running'}" for s in segments)
    trained = float(status.get("trainedSeconds") or 0) / 3600
    between = float(status.get("rolloverSeconds") or 0) / 60
    return (
        f"dws-operator dev: segments {outcomes}; trained {trained:.1f} simulated hours, "
        f"{between:.1f} simulated minutes between segments"
    )


def calendar_start(manifest: dict[str, Any]) -> datetime | None:
    """The start of the calendar block a Calendar-mode request books; None for others."""
    provisioning = (manifest.get("spec") or {}).get("provisioning") or {}
    block = provisioning.get("calendar") if provisioning.get("mode") == "Calendar" else None
    start = block.get("startTime") if isinstance(block, dict) else None
    if isinstance(start, datetime):
        return start if start.tzinfo else start.replace(tzinfo=UTC)
    return rfc3339.parse(str(start)) if start else None


def _as_hoped(status: dict[str, Any]) -> bool:
    """The run ended as it should: Succeeded, or a calendar block's end stopped it."""
    if status.get("phase") == "Succeeded":
        return True
    completed = [c for c in status.get("conditions") or [] if c.get("type") == "Completed"]
    return status.get("phase") == "Failed" and [c.get("reason") for c in completed] == [BLOCK_ENDED]


def _seconds(text: str | None) -> int | None:
    return int(parse_duration(text).total_seconds()) if text else None


def _step_wait(provisioning: dict[str, Any], status: dict[str, Any]) -> str | None:
    """The maxWaitDuration of the ladder step the request is on (a step without its own
    waits as long as the first)."""
    steps = 1 + len(provisioning.get("fallback") or ())
    written = written_step(status.get("ladderOrder"), int(status.get("step") or 1), steps)
    step = step_provisioning({"provisioning": provisioning}, written)
    wait = step.get("maxWaitDuration") or provisioning.get("maxWaitDuration")
    return str(wait) if wait is not None else None


def metrics_summary(metrics: OperatorMetrics) -> list[str]:
    """What the operator's own metrics say of the run: time to capacity and the idle
    node time its scale-down spared, against GKE's autoscaler (10 minutes, wall time:
    the sandbox's simulated autoscaler would have taken 10 simulated minutes)."""
    waited = total(metrics, "dws_time_to_capacity_seconds_sum")
    count = total(metrics, "dws_time_to_capacity_seconds_count")
    spared = total(metrics, "dws_idle_node_seconds_avoided_total")
    lines = []
    if count:
        lines.append(f"time to capacity (operator metrics): {waited / count:.1f}s")
    if spared:
        lines.append(
            f"idle node time avoided against GKE's 10-minute scale-down: {spared:.0f} node-seconds"
        )
    return lines


def total(metrics: OperatorMetrics, sample: str) -> float:
    """The sum of a sample over all its label sets."""
    return sum(
        s.value for family in metrics.registry.collect() for s in family.samples if s.name == sample
    )


def _booked(booking: dict[str, Any]) -> str | None:
    """A booking seen approved, in words; None before (or without one)."""
    if not booking.get("approvedAt"):
        return None
    return (
        f"Booked {booking.get('count')} {booking.get('unit')} of {booking.get('machineType')} "
        f"in {booking.get('zone')} from {booking.get('startTime')} to {booking.get('endTime')}"
    )
