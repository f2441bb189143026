"""The long-run benchmark: many runs of several segments at once, and their rollovers.

Each run is a flex-start GPU request of `windows` windows of work (the simulated
checkpointing workload, `simulator.workload`), on a devcluster with the GKE emulator, its
autoscaler and the operator in this process, all on the emulator's clock: a simulated
minute a real second, moved on past each segment's quiet hours (`pacing`). Per
rollover it reports, in simulated seconds:

- the gap: the old segment stopped (its workload deleted) to the next one's running;
- the new capacity's provisioning time: the next segment's capacity asked for (its pool
  made) to its VM created (the VM's end as GKE annotates it, less maxRunDuration);
- how far ahead of the old window's end the new capacity was asked for.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from dws_operator import rfc3339
from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller import OperatorThread
from dws_operator.durations import parse_duration
from dws_workshop.devcluster import DevCluster, DevClusterOptions
from dws_workshop.devcluster.crds import install_training_request_crd
from dws_workshop.devcluster.stages import kwok_config
from dws_workshop.emulator import ClusterConfig, EmulatorConfig, EmulatorThread
from dws_workshop.emulator.clock import SimClock
from dws_workshop.emulator.config import DEFAULT_CLUSTER
from dws_workshop.sandbox.emulated_operator import emulated_config, on_emulator_clock
from dws_workshop.sandbox.pacing import finish_of, rollover_due
from dws_workshop.simulator.autoscaler import Autoscaler
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from dws_workshop.simulator.workload import SIM_WORK_ANNOTATION

NAMESPACE = "default"
WINDOW = "10h"


@dataclass(frozen=True)
class RolloverOptions:
    runs: int = 10
    #: Work per run, in windows (2.5: three segments).
    windows: float = 2.5
    #: Simulated seconds a flex-start VM takes to come once asked for.
    capacity_seconds: float = 300.0
    clock_factor: float = 60.0
    timeout: float = 900.0


@dataclass(frozen=True)
class Rollover:
    gap: float
    provisioning: float
    ahead: float


def request(name: str, options: RolloverOptions) -> dict[str, Any]:
    hours = parse_duration(WINDOW).total_seconds() / 3600
    work = f"{math.ceil(hours * options.windows * 60)}m"
    budget = f"{math.ceil(hours * (options.windows + 0.5) * 60)}m"
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRequest",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "accelerator": {"gpu": {"type": "nvidia-h100-80gb", "nodes": 1}},
            "provisioning": {"mode": "FlexStart", "maxRunDuration": WINDOW},
            "run": {"duration": budget, "stopBefore": "10m", "requestAhead": "20m"},
            "checkpointDir": f"gs://bench/{name}",
            "template": {
                "metadata": {"annotations": {SIM_WORK_ANNOTATION: work}},
                "spec": {"containers": [{"name": "train", "image": "example/train:1"}]},
            },
        },
    }


def rollovers(status: dict[str, Any], window: timedelta) -> list[Rollover]:
    """Each rollover of a run, from its status (`window`: its maxRunDuration)."""
    segments = status.get("segments") or []
    found = []
    for before, after in itertools.pairwise(segments):
        if before.get("outcome") != "RolledOver" or not after.get("endsAt"):
            continue
        stopped = rfc3339.parse(before["stoppedAt"])
        asked = rfc3339.parse(after["requestedAt"])
        vm_made = rfc3339.parse(after["endsAt"]) - window
        found.append(
            Rollover(
                gap=(rfc3339.parse(after["startedAt"]) - stopped).total_seconds(),
                provisioning=max((vm_made - asked).total_seconds(), 0.0),
                ahead=(rfc3339.parse(before["endsAt"]) - asked).total_seconds(),
            )
        )
    return found


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


@contextlib.contextmanager
def _stack(
    options: RolloverOptions, workdir: Path
) -> Iterator[tuple[k8s.ApiClient, SimClock, Autoscaler]]:
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            DevCluster(
                DevClusterOptions(
                    controllers=True,
                    kwok=True,
                    stages=kwok_config(),
                    kubeconfig=workdir / "kubeconfig",
                )
            )
        )
        api = cluster.api_client()
        stack.callback(api.close)
        install_training_request_crd(api)
        emulator = stack.enter_context(
            EmulatorThread(
                EmulatorConfig(
                    operation_latency_seconds=0.5,
                    clusters=[ClusterConfig(name=DEFAULT_CLUSTER)],
                    clock_factor=options.clock_factor,
                )
            )
        )
        clock = emulator.sim_clock
        capacity = [CapacityRule(after_seconds=options.capacity_seconds)]
        autoscaler = stack.enter_context(
            Autoscaler(emulator, cluster.kubeconfig, SimScenario(capacity=capacity), clock=clock)
        )
        config = emulated_config(
            emulator,
            DEFAULT_CLUSTER,
            metrics_port=0,
            metrics_address="127.0.0.1",
            time=on_emulator_clock(emulator),
        )
        stack.enter_context(OperatorThread(config, kubeconfig=cluster.kubeconfig))
        yield api, clock, autoscaler


def run(options: RolloverOptions, workdir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Run the benchmark; its figures."""
    began = time.monotonic()
    with _stack(options, workdir) as (api, clock, autoscaler):
        objects = k8s.CustomObjectsApi(api)
        names = [f"long-{i:03d}" for i in range(options.runs)]
        for name in names:
            body = request(name, options)
            objects.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
        say(f"{len(names)} long runs created")
        deadline = time.monotonic() + options.timeout
        while True:
            listed = objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
            assert isinstance(listed, dict)
            items: list[dict[str, Any]] = listed["items"]
            done = [
                i for i in items if (i.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            ]
            if len(done) == len(names):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(done)} of {len(names)} runs ended in {options.timeout}s")
            dues = [
                due
                for i in items
                if (
                    due := rollover_due(
                        i["spec"], i.get("status") or {}, finish_of(autoscaler, clock, i)
                    )
                )
                is not None
            ]
            running = [i for i in items if (i.get("status") or {}).get("phase") == "Running"]
            # Skip only while every run not ended is running with a rollover ahead.
            if dues and len(dues) == len(running) == len(items) - len(done):
                skip = (min(dues) - clock.utc()).total_seconds()
                if skip > 0:
                    clock.jump(skip)
            time.sleep(0.2)
        statuses = [i.get("status") or {} for i in items]
    found = [r for s in statuses for r in rollovers(s, parse_duration(WINDOW))]
    failed = [s.get("message") for s in statuses if s.get("phase") != "Succeeded"]
    gaps = [r.gap for r in found]
    provisioning = [r.provisioning for r in found]
    return {
        "runs": options.runs,
        "succeeded": options.runs - len(failed),
        "failed": failed,
        "rollovers": len(found),
        "gap_p50_s": statistics.median(gaps) if gaps else None,
        "gap_p99_s": percentile(gaps, 0.99) if gaps else None,
        "provisioning_p50_s": statistics.median(provisioning) if provisioning else None,
        "gap_p99_over_provisioning_p50": (
            percentile(gaps, 0.99) / statistics.median(provisioning)
            if gaps and provisioning and statistics.median(provisioning) > 0
            else None
        ),
        "asked_ahead_min_s": min((r.ahead for r in found), default=None),
        "segments": [len(s.get("segments") or []) for s in statuses],
        "trained_h": [round(float(s.get("trainedSeconds") or 0) / 3600, 2) for s in statuses],
        "clock_factor": options.clock_factor,
        "capacity_seconds": options.capacity_seconds,
        "wall_s": round(time.monotonic() - began, 1),
        "window": WINDOW,
        "stop_before_s": timedelta(minutes=10).total_seconds(),
    }
