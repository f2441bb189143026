"""Every sample manifest, and the README's first TrainingRequest, runs to Succeeded on a
regional emulated GKE cluster, through real Kueue and JobSet, with the pools GKE's rules
accept (the emulator refuses what GKE refuses: a multi-host TPU slice outside one zone,
a per-zone maximum that is not a slice, ...). They are applied as they are, with one
change: a short `dws-operator.dev/sim-duration` so kwok ends their pods."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller import KueueMode
from dws_operator.kueue_objects import (
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    LOCAL_QUEUE,
    QUEUED_LOCAL_QUEUE,
    dws_objects,
)
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.sandbox.session import sandbox_cluster
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import gpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK
from tests.cluster.operator.harness import Scenario
from tests.gke.harness import rendered
from tests.polling import eventually

ROOT = Path(__file__).resolve().parents[3]
ALL_SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))
#: A Calendar-mode sample books a block at a fixed date: it runs on its own clock
#: (tests/virtual/test_calendar.py), virtual time starting two hours before its block.
SAMPLES = [p for p in ALL_SAMPLES if "mode: Calendar" not in p.read_text()]
SIM_DURATION = "dws-operator.dev/sim-duration"


def readme_example() -> dict[str, Any]:
    """The README's first TrainingRequest (the API section's example), renamed so it
    does not meet the sample it resembles."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    first = next(b for b in blocks if "kind: TrainingRequest" in b)
    document: dict[str, Any] = yaml.safe_load(first)
    document["metadata"]["name"] = "readme-first-example"
    return document


def load(path: Path) -> dict[str, Any]:
    [document] = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return with_short_pods(document)


def with_short_pods(document: dict[str, Any]) -> dict[str, Any]:
    request: dict[str, Any] = copy.deepcopy(document)
    template = request["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})[SIM_DURATION] = "2s"
    return request


def test_every_sample_runs_on_a_regional_cluster(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    requests = [*(load(path) for path in SAMPLES), with_short_pods(readme_example())]
    assert requests[-1]["spec"]["accelerator"] == {"tpu": {"version": "v6e", "topology": "4x4"}}
    clusters = {sandbox_cluster(request) for request in requests}
    # One regional cluster holds every sample: none names a zone outside its region.
    [cluster] = clusters
    assert "/locations/us-east5/" in cluster
    scenario = stack(
        SimScenario(clock_factor=CLOCK),
        kueue=KueueMode.REQUIRED,
        queue=LOCAL_QUEUE,
        queued_queue=QUEUED_LOCAL_QUEUE,
        cluster=cluster,
    )
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    # The platform team's pool that gpu-a100-existing-pool.yaml runs on.
    team = rendered(gpu("nvidia-a100-80gb", nodes=2), "OnDemand", name="team-a100-pool")
    scenario.emulator_create(team)
    objects = k8s.CustomObjectsApi(scenario.api)
    for request in requests:
        objects.create_namespaced_custom_object(GROUP, VERSION, e2e_namespace, PLURAL, request)
    names = sorted(r["metadata"]["name"] for r in requests)

    def phases() -> dict[str, str]:
        listed: Any = objects.list_namespaced_custom_object(GROUP, VERSION, e2e_namespace, PLURAL)
        return {
            item["metadata"]["name"]: (item.get("status") or {}).get("phase", "")
            for item in listed["items"]
        }

    def all_done() -> dict[str, str] | None:
        now = phases()
        return now if all(now.get(n) in ("Succeeded", "Failed") for n in names) else None

    try:
        done = eventually(all_done, timeout=300, what="every sample ended")
    except AssertionError:
        raise AssertionError(where_it_stands(scenario, e2e_namespace)) from None
    assert done == dict.fromkeys(names, "Succeeded"), done
    # GKE accepted every pool at the first try, and each multi-host TPU slice lives in
    # one zone of the region with per-zone limits of one slice.
    creates = scenario.emulator.calls_for("CreateNodePool")
    refused = [(c.request.node_pool.name, c.message) for c in creates if not c.ok]
    assert refused == []
    slices = [
        c.request.node_pool
        for c in creates
        if c.request.node_pool.placement_policy.tpu_topology
        or c.request.node_pool.placement_policy.policy_name
    ]
    assert len(slices) >= 6  # v5p (2 slices, reservation), v6e (3), tpu7x
    for pool in slices:
        assert len(pool.locations) == 1, pool.name
        assert pool.locations[0].startswith("us-east5-"), pool.name
        assert pool.autoscaling.max_node_count > 0, pool.name
        assert pool.autoscaling.total_max_node_count == 0, pool.name
    # Nothing is left running: every pool the operator made is at zero nodes.
    made = {c.request.node_pool.name for c in creates if c.ok} - {"team-a100-pool"}
    eventually(
        lambda: all(scenario.pool_nodes(name) == 0 for name in made),
        timeout=60,
        what="every created pool at zero nodes",
    )


def conditions(status: dict[str, Any]) -> list[str]:
    """A status's conditions as `Type=Status/Reason`."""
    return [f"{c['type']}={c['status']}/{c.get('reason')}" for c in status.get("conditions") or []]


def where_it_stands(scenario: Scenario, namespace: str) -> str:
    """What a sample that has not ended waits for: each unfinished request's phase,
    message, conditions and pools; the namespace's pods, Jobs and Kueue Workloads; GKE's
    pools; and whether the simulated autoscaler is still making passes."""
    objects = scenario.objects
    listed: Any = objects.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    lines = ["not every sample ended:"]
    for item in listed["items"]:
        status = item.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        lines.append(
            f"  {item['metadata']['name']}: {status.get('phase')}: {status.get('message')}"
            f" pools={status.get('nodePools') or status.get('nodePool')} {conditions(status)}"
        )
    pod: Any
    for pod in scenario.core.list_namespaced_pod(namespace).items:
        lines.append(f"  pod {pod.metadata.name}: {pod.status.phase} on {pod.spec.node_name}")
    job: Any
    for job in scenario.batch.list_namespaced_job(namespace).items:
        lines.append(
            f"  job {job.metadata.name}: suspend={job.spec.suspend} active={job.status.active}"
            f" succeeded={job.status.succeeded} deleting={job.metadata.deletion_timestamp}"
        )
    workloads: Any = objects.list_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_API_VERSION, namespace, "workloads"
    )
    for workload in workloads["items"]:
        status = workload.get("status") or {}
        lines.append(f"  workload {workload['metadata']['name']}: {conditions(status)}")
    for pool, count in scenario.emulator.node_pools(scenario.cluster):
        lines.append(f"  GKE pool {pool.name}: {pool.status.name} nodes={count}")
    autoscaler = scenario.autoscaler
    lines.append(f"  autoscaler: {autoscaler.passes} passes, errors {autoscaler.errors[-3:]}")
    return "\n".join(lines)
