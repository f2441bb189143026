"""`dws-operator plan --objects` prints what the operator then sends: the GKE emulator's
call log holds the same CreateNodePool requests (and Compute workload policy inserts),
and the API server holds the Jobs, JobSets and Services as printed.

The plan runs as a user runs it (the CLI in a subprocess, on the manifest as written,
before the operator acts), given the uid the API server assigned and the operator's
settings.

GKE and Compute get exactly the printed request (compared whole). Kubernetes objects
are compared as sent: every field the plan prints must be in the server's object with
the same value (mappings: each printed key; lists: the same length, item by item),
while fields the server fills in (uid, status, defaults, the labels the Job controller
adds) are ignored. An empty mapping or list printed matches a field the server left
out: Kubernetes' JSON omits empty maps and lists (`omitempty`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dws_operator.controller import OperatorConfig
from dws_operator.gke.slice_pool import api_json
from dws_operator.multislice import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from dws_workshop.emulator import EmulatorConfig
from tests.builders import gpu, manifest, spec_body, tpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

ROOT = Path(__file__).resolve().parents[3]


def differences(sent: Any, held: Any, path: str = "") -> list[str]:
    """Where the server's object `held` does not hold what was `sent`."""
    if isinstance(sent, dict):
        if not isinstance(held, dict):
            return [f"{path}: sent a mapping, the server holds {held!r}"]
        found: list[str] = []
        for key, value in sent.items():
            if key not in held:
                if value not in ({}, []):
                    found.append(f"{path}.{key}: sent {value!r}, missing on the server")
                continue
            found += differences(value, held[key], f"{path}.{key}")
        return found
    if isinstance(sent, list):
        if not isinstance(held, list) or len(held) != len(sent):
            return [f"{path}: sent {sent!r}, the server holds {held!r}"]
        return [
            d
            for i, (a, b) in enumerate(zip(sent, held, strict=True))
            for d in differences(a, b, f"{path}[{i}]")
        ]
    return [] if sent == held else [f"{path}: sent {sent!r}, the server holds {held!r}"]


def test_the_comparison_finds_what_differs() -> None:
    held = {"a": {"b": 1, "c": [1, 2]}, "d": "x", "server": True}
    assert differences({"a": {"b": 1, "c": [1, 2]}, "e": {}}, held) == []
    assert differences({"a": {"b": 2}}, held) == [".a.b: sent 2, the server holds 1"]
    assert differences({"a": {"c": [1]}}, held) == [".a.c: sent [1], the server holds [1, 2]"]
    assert differences({"f": 1}, held) == [".f: sent 1, missing on the server"]


def plan_objects(
    config: OperatorConfig,
    namespace: str,
    body: dict[str, Any],
    uid: str,
    tmp_path: Path,
    node_locations: list[str],
) -> Any:
    """`dws-operator plan -f MANIFEST --objects -o json` with the operator's settings and
    the node zones GKE reports for the cluster (the operator reads them from GKE)."""
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(body))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DWS_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "operator"), str(ROOT), env.get("PYTHONPATH", "")]
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dws_operator",
            "plan",
            "-f",
            str(path),
            "--objects",
            "-o",
            "json",
            "--namespace",
            namespace,
            "--uid",
            uid,
            "--project",
            config.project,
            "--location",
            config.location,
            "--cluster",
            config.cluster,
            "--kueue",
            config.kueue.value,
            "--node-locations",
            ",".join(node_locations),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["placeholders"] == {}
    return document


def held(scenario: Scenario, sent: dict[str, Any]) -> dict[str, Any] | None:
    """The object of that kind and name as the API server holds it (raw JSON)."""
    name, namespace = sent["metadata"]["name"], scenario.namespace
    reply: Any
    try:
        if sent["kind"] == "JobSet":
            found: dict[str, Any] = scenario.objects.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name
            )
            return found
        if sent["kind"] == "Job":
            reply = scenario.batch.read_namespaced_job(name, namespace, _preload_content=False)
        else:
            reply = scenario.core.read_namespaced_service(name, namespace, _preload_content=False)
    except Exception as error:  # not made yet
        if getattr(error, "status", None) == 404:
            return None
        raise
    raw: dict[str, Any] = json.loads(reply.data)
    return raw


# JobSet's CRD before the operator starts: it serves multi-slice requests only then.
@pytest.mark.usefixtures("third_party", "operator")
@pytest.mark.parametrize(
    ("accelerator", "mode", "extra"),
    [
        (tpu("v6e", "4x4"), "FlexStart", {}),
        (tpu("tpu7x", "2x2x2"), "FlexStart", {}),
        (tpu("v5p", "2x2x2", slices=2), "FlexStart", {}),
        (gpu("nvidia-l4", nodes=2, count=1), "Spot", {}),
        (
            tpu("v6e", "2x2"),
            "FlexStart",
            {"provisioning": {"maxWaitDuration": "1h", "fallback": [{"mode": "Spot"}]}},
        ),
    ],
    ids=["tpu-multi-host", "tpu7x-workload-policy", "multislice", "gpu-spot", "ladder"],
)
def test_plan_prints_what_the_operator_sends(
    scenario: Scenario,
    operator_config: OperatorConfig,
    emulator_config: EmulatorConfig,
    tmp_path: Path,
    accelerator: dict,
    mode: str,
    extra: dict,
) -> None:
    body = manifest(scenario.name, spec_body(accelerator, mode=mode, **extra))
    body["metadata"]["namespace"] = scenario.namespace
    scenario.objects.create_namespaced_custom_object(
        "dws-operator.dev", "v1alpha1", scenario.namespace, "trainingrequests", body
    )
    uid = eventually(lambda: (scenario.get() or {}).get("metadata", {}).get("uid"), what="uid")
    [cluster] = emulator_config.clusters
    document = plan_objects(
        operator_config, scenario.namespace, body, uid, tmp_path, cluster.node_zones
    )
    # The first step is the one the operator acts on now.
    step = document["steps"][0]
    planned_pools = step["createNodePool"]
    names = {p["nodePool"]["name"] for p in planned_pools}

    def creates() -> list[dict[str, Any]]:
        calls = scenario.emulator.calls_for("CreateNodePool")
        made = [api_json(c.request) for c in calls if c.ok]
        return [m for m in made if m["nodePool"]["name"] in names]

    sent = eventually(
        lambda: len(creates()) == len(planned_pools) and creates(), what="the pools created"
    )
    by_name = {m["nodePool"]["name"]: m for m in sent}
    for planned in planned_pools:
        assert by_name[planned["nodePool"]["name"]] == planned

    inserts = [c for c in scenario.emulator.compute.calls_for("resourcePolicies.insert") if c.ok]
    expected = step.get("workloadPolicies", [])
    assert [
        {
            "project": c.params["project"],
            "region": c.params["region"],
            "resourcePolicyResource": c.body,
        }
        for c in inserts
    ] == expected

    assert step["kubernetes"], "the plan shows the workload"
    for printed in step["kubernetes"]:
        what = f"{printed['kind']} {printed['metadata']['name']}"
        made = eventually(lambda p=printed: held(scenario, p), timeout=60, what=what)
        assert differences(printed, made) == [], what
