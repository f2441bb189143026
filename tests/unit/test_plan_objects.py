"""`dws-operator plan --objects`: what the operator would send, as a user runs it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from dws_operator.cli.objects import PLACEHOLDER_UID
from dws_operator.naming import default_node_pool_name
from dws_operator.reconcile.booking import request_id_for
from tests.unit.test_cli import run

UID = "6f1c0a52-3b7e-4d2a-9c1e-0123456789ab"
CLUSTER = ["--project", "proj-123", "--location", "us-east5", "--cluster", "c1"]
#: The zones of the regional cluster's nodes, which the operator reads from GKE.
NODE_ZONES = ["--node-locations", "us-east5-c,us-east5-b"]
WHO = ["--name", "train", "--namespace", "ml", "--uid", UID]
PARENT = "projects/proj-123/locations/us-east5/clusters/c1"


@pytest.fixture(autouse=True)
def _no_operator_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings come from flags here, not from whatever this shell exports."""
    for env in [name for name in os.environ if name.startswith("DWS_NODE_")]:
        monkeypatch.delenv(env)
    for env in (
        "DWS_GKE_PROJECT",
        "DWS_GKE_LOCATION",
        "DWS_GKE_CLUSTER",
        "DWS_KUEUE",
        "DWS_DEFAULT_QUEUE",
        "DWS_QUEUED_QUEUE",
    ):
        monkeypatch.delenv(env, raising=False)


def objects(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, "plan", *argv, "--objects", "-o", "json")
    assert (code, err) == (0, ""), err
    document: dict[str, Any] = json.loads(out)
    return document


def request_file(tmp_path: Path, name: str, namespace: str, spec: dict[str, Any]) -> str:
    """The path of a TrainingRequest manifest named `name` in `namespace` with `spec`,
    written under `tmp_path`."""
    path = tmp_path / f"{name}.yaml"
    manifest = {
        "apiVersion": "dws-operator.dev/v1alpha1",
        "kind": "TrainingRequest",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    path.write_text(yaml.safe_dump(manifest))
    return str(path)


def kinds(step: dict[str, Any]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in step["kubernetes"]]


def test_yaml_and_json_print_the_same_document(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--tpu", "v6e", "--topology", "4x4", "--objects"]
    code, as_yaml, _ = run(capsys, *argv, "-o", "yaml")
    assert code == 0
    code, as_json, _ = run(capsys, *argv, "-o", "json")
    assert code == 0
    assert yaml.safe_load(as_yaml) == json.loads(as_json)
    # The default output of --objects is YAML too, with the placeholders said up front.
    code, default, _ = run(capsys, *argv)
    assert default == as_yaml
    header = [line for line in as_yaml.splitlines() if line.startswith("#")]
    assert any(f"metadata.uid: {PLACEHOLDER_UID}" in line for line in header), header
    assert any("cluster project: my-project" in line for line in header), header


def test_placeholders_are_named_and_given_values_are_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = objects(capsys, "--tpu", "v6e", "--topology", "4x4")
    assert set(document["placeholders"]) == {
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "cluster project",
        "cluster location",
        "cluster cluster",
    }
    document = objects(capsys, "--tpu", "v6e", "--topology", "4x4", *WHO, *CLUSTER)
    assert document["placeholders"] == {}


def test_a_tpu_multi_host_slice(capsys: pytest.CaptureFixture[str]) -> None:
    document = objects(capsys, "--tpu", "v6e", "--topology", "4x4", *WHO, *CLUSTER)
    [step] = document["steps"]
    assert (step["step"], step["mode"], step["attempt"]) == (1, "FlexStart", 0)
    [create] = step["createNodePool"]
    assert list(create) == ["parent", "nodePool"]
    assert create["parent"] == PARENT
    pool = create["nodePool"]
    assert pool["name"] == default_node_pool_name("train", UID)
    assert pool["config"]["machineType"] == "ct6e-standard-4t"
    assert pool["config"]["flexStart"] is True
    labels = pool["config"]["resourceLabels"]
    assert labels["dws-operator-dev_uid"] == UID
    assert labels["dws-operator-dev_namespace"] == "ml"
    assert labels == pool["config"]["labels"]
    assert pool["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
    # A slice lives in one zone (the first documented v6e flex-start zone of the region)
    # with per-zone limits: GKE checks the per-zone maximum against the slice size.
    assert pool["locations"] == ["us-east5-a"]
    assert pool["autoscaling"] == {"enabled": True, "locationPolicy": "ANY", "maxNodeCount": 4}
    # Proto3 JSON: what is unset (or false) is not sent, so it is not shown.
    assert "spot" not in pool["config"]
    assert "workloadPolicies" not in step
    assert kinds(step) == [("Service", "train"), ("Job", "train")]
    service, job = step["kubernetes"]
    assert service["spec"]["clusterIP"] == "None"
    assert job["metadata"]["ownerReferences"][0]["uid"] == UID
    assert (job["spec"]["completionMode"], job["spec"]["completions"]) == ("Indexed", 4)
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == "train"
    assert pod["nodeSelector"]["cloud.google.com/gke-nodepool"] == pool["name"]


def test_a_multislice_request(capsys: pytest.CaptureFixture[str]) -> None:
    document = objects(
        capsys, "--tpu", "v5p", "--topology", "2x2x2", "--slices", "2", *WHO, *CLUSTER
    )
    [step] = document["steps"]
    base = default_node_pool_name("train", UID, slices=2)
    names = [c["nodePool"]["name"] for c in step["createNodePool"]]
    assert names == [f"{base}-s0", f"{base}-s1"]
    # Multi-slice pools carry no shape label: they are never handed on to another request.
    for create in step["createNodePool"]:
        assert "dws-operator-dev_shape" not in create["nodePool"]["config"]["resourceLabels"]
    # The JobSet makes its own headless Service.
    assert kinds(step) == [("JobSet", "train")]
    [jobset] = step["kubernetes"]
    replicated = jobset["spec"]["replicatedJobs"]
    # One replicatedJob of N slices (Kueue caps a Workload's PodSets), each slice
    # placed on one of the request's pools by JobSet's exclusive topology.
    assert [(r["name"], r["replicas"]) for r in replicated] == [("s", 2)]
    pod = replicated[0]["template"]["spec"]["template"]["spec"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    [pools] = [e for e in term["matchExpressions"] if e["key"] == "cloud.google.com/gke-nodepool"]
    assert (pools["operator"], pools["values"]) == ("In", names)


def test_a_gpu_request(capsys: pytest.CaptureFixture[str]) -> None:
    document = objects(
        capsys, "--gpu", "nvidia-h100-80gb", "--nodes", "2", "--mode", "Spot", *WHO, *CLUSTER
    )
    [step] = document["steps"]
    [create] = step["createNodePool"]
    config = create["nodePool"]["config"]
    assert config["machineType"] == "a3-highgpu-8g"
    assert config["spot"] is True
    assert config["accelerators"] == [
        {
            "acceleratorCount": "8",
            "acceleratorType": "nvidia-h100-80gb",
            "gpuDriverInstallationConfig": {"gpuDriverVersion": "DEFAULT"},
        }
    ]
    assert "placementPolicy" not in create["nodePool"]
    assert kinds(step) == [("Service", "train"), ("Job", "train")]
    container = step["kubernetes"][1]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}


def test_every_step_of_a_ladder(capsys: pytest.CaptureFixture[str]) -> None:
    document = objects(
        capsys,
        "--tpu",
        "v6e",
        "--topology",
        "4x4",
        "--zone",
        "us-east5-a",
        "--max-wait-duration",
        "30m",
        "--fallback",
        "FlexStart,zone=us-east5-b,wait=30m",
        "--fallback",
        "Spot",
        *WHO,
        "--project",
        "proj-123",
        "--location",
        "us-east5",
        "--cluster",
        "c1",
        *NODE_ZONES,
    )
    steps = document["steps"]
    assert [(s["step"], s["mode"], s["attempt"]) for s in steps] == [
        (1, "FlexStart", 0),
        (2, "FlexStart", 1),
        (3, "Spot", 2),
    ]
    base = default_node_pool_name("train", UID, ladder=True)
    pools = [s["createNodePool"][0]["nodePool"] for s in steps]
    assert [p["name"] for p in pools] == [base, f"{base}-f1", f"{base}-f2"]
    assert [p["config"].get("flexStart") for p in pools] == [True, True, None]
    assert [p["config"].get("spot") for p in pools] == [None, None, True]
    # Each step's slice in one zone: the named ones, then the first node location.
    assert [p["locations"] for p in pools] == [["us-east5-a"], ["us-east5-b"], ["us-east5-b"]]
    # The Service is made once; each step's Job is a new attempt with a name of its own.
    assert [kinds(s) for s in steps] == [
        [("Service", "train"), ("Job", "train")],
        [("Job", "train-r1")],
        [("Job", "train-r2")],
    ]
    labels = [s["kubernetes"][-1]["metadata"]["labels"] for s in steps]
    assert [one["dws-operator.dev/attempt"] for one in labels] == ["0", "1", "2"]


def test_a_tpu7x_slice_and_its_workload_policy(capsys: pytest.CaptureFixture[str]) -> None:
    document = objects(capsys, "--tpu", "tpu7x", "--topology", "2x2x2", *WHO, *CLUSTER, *NODE_ZONES)
    [step] = document["steps"]
    assert step["workloadPolicies"] == [
        {
            "project": "proj-123",
            "region": "us-east5",
            "resourcePolicyResource": {
                "name": "dws-high-throughput-2x2x2",
                "description": "dws-operator: TPU slices of topology 2x2x2",
                "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x2"},
            },
        }
    ]
    [create] = step["createNodePool"]
    # Only the policy's name: no COMPACT type, no topology (GKE reads it from the policy).
    assert create["nodePool"]["placementPolicy"] == {"policyName": "dws-high-throughput-2x2x2"}
    assert "dws-operator-dev_shape" not in create["nodePool"]["config"]["resourceLabels"]


def test_operator_settings_from_its_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DWS_GKE_PROJECT", "env-proj")
    monkeypatch.setenv("DWS_GKE_LOCATION", "asia-northeast1")
    monkeypatch.setenv("DWS_GKE_CLUSTER", "env-cluster")
    monkeypatch.setenv("DWS_KUEUE", "required")
    monkeypatch.setenv("DWS_QUEUED_QUEUE", "dws-queued")
    document = objects(
        capsys, "--tpu", "v6e", "--topology", "4x4", "--mode", "QueuedProvisioning", *WHO
    )
    assert document["placeholders"] == {}
    [step] = document["steps"]
    assert step["createNodePool"][0]["parent"] == (
        "projects/env-proj/locations/asia-northeast1/clusters/env-cluster"
    )
    assert step["createNodePool"][0]["nodePool"]["locations"] == ["asia-northeast1-b"]
    assert step["createNodePool"][0]["nodePool"]["queuedProvisioning"] == {"enabled": True}
    job = step["kubernetes"][-1]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "dws-queued"
    assert job["metadata"]["annotations"]["provreq.kueue.x-k8s.io/tpu-topology"] == "4x4"
    assert job["spec"]["suspend"] is True
    # A flag wins over the variable, as for `dws-operator run`.
    document = objects(capsys, "--tpu", "v6e", "--topology", "4x4", *WHO, "--project", "flag-proj")
    assert document["steps"][0]["createNodePool"][0]["parent"].startswith("projects/flag-proj/")


def test_a_request_the_operator_would_fail(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "plan",
        "--tpu",
        "v6e",
        "--topology",
        "4x4",
        "--mode",
        "QueuedProvisioning",
        "--objects",
        "--kueue",
        "disabled",
    )
    assert (code, out) == (2, "")
    assert err.startswith("dws-operator plan: the operator would fail this request: KueueRequired")


def test_a_flex_start_slice_where_gke_documents_no_capacity(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        capsys,
        "plan",
        "--tpu",
        "v6e",
        "--topology",
        "4x4",
        "--objects",
        "--location",
        "europe-west4",
    )
    assert (code, out) == (2, "")
    assert err.startswith("dws-operator plan: spec.provisioning.zones: ")
    assert "asia-northeast1-b, us-east5-a, us-east5-b" in err
    assert "europe-west4: name a zone" in err


def test_a_bad_setting_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "plan", "--tpu", "v6e", "--topology", "4x4", "--objects", "--project", "Bad_Proj"
    )
    assert (code, out) == (2, "")
    assert "DWS_GKE_PROJECT='Bad_Proj' is not valid" in err
    assert len(err.splitlines()) == 1


def test_a_manifest_names_itself_and_its_template(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = {
        "accelerator": {"gpu": {"type": "nvidia-l4", "nodes": 1}},
        "provisioning": {"mode": "FlexStart"},
        "template": {"spec": {"containers": [{"name": "train", "image": "trainer:1"}]}},
    }
    manifest = request_file(tmp_path, "from-file", "team-a", spec)
    document = objects(capsys, "-f", manifest, "--uid", UID, *CLUSTER)
    assert document["placeholders"] == {}
    [step] = document["steps"]
    assert step["createNodePool"][0]["nodePool"]["name"] == default_node_pool_name("from-file", UID)
    # One node: no Service, a plain Job with the manifest's container.
    assert kinds(step) == [("Job", "from-file")]
    job = step["kubernetes"][0]
    assert job["metadata"]["namespace"] == "team-a"
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert (container["name"], container["image"]) == ("train", "trainer:1")


def test_an_existing_pool_is_not_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "tr.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "metadata": {"name": "on-theirs", "namespace": "team-a"},
                "spec": {
                    "accelerator": {"tpu": {"version": "v6e", "topology": "2x2"}},
                    "provisioning": {"mode": "OnDemand"},
                    "nodePool": {"name": "theirs", "existing": True},
                    "template": {"spec": {"containers": [{"name": "t", "image": "t"}]}},
                },
            }
        )
    )
    document = objects(capsys, "-f", str(manifest), "--uid", UID, *CLUSTER)
    [step] = document["steps"]
    assert step["createNodePool"] == []
    [job] = step["kubernetes"]
    assert job["spec"]["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] == (
        "theirs"
    )


def test_a_calendar_block_and_the_pool_on_its_reservation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = {
        "accelerator": {"gpu": {"type": "nvidia-h100-80gb", "nodes": 4}},
        "provisioning": {
            "mode": "Calendar",
            "zones": ["us-east5-a"],
            "calendar": {"startTime": "2030-01-07T08:00:00Z", "duration": "72h"},
        },
        "template": {"spec": {"containers": [{"name": "train", "image": "x/train:1"}]}},
    }
    path = request_file(tmp_path, "llama-block", "ml", spec)
    uid = "6f1c2a40-0000-4000-8000-00000000beef"
    document = objects(capsys, "-f", path, "--uid", uid, *CLUSTER)
    [step] = document["steps"]
    booking = step["futureReservation"]
    name = default_node_pool_name("llama-block", uid)
    assert (booking["project"], booking["zone"]) == ("proj-123", "us-east5-a")
    assert booking["requestId"] == request_id_for(uid)
    body = booking["futureReservationResource"]
    assert (body["name"], body["reservationName"]) == (name, name)
    assert body["reservationMode"] == "CALENDAR"
    assert body["specificSkuProperties"]["totalCount"] == "4"
    assert body["timeWindow"] == {
        "startTime": "2030-01-07T08:00:00Z",
        "endTime": "2030-01-10T08:00:00Z",
    }
    [create] = step["createNodePool"]
    assert create["nodePool"]["config"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [name],
    }
    [job] = [o for o in step["kubernetes"] if o["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 600


def test_plan_says_what_a_calendar_request_books(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "block.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "spec": {
                    "accelerator": {"tpu": {"version": "v6e", "topology": "4x4"}},
                    "provisioning": {
                        "mode": "Calendar",
                        "zones": ["us-east5-b"],
                        "calendar": {"startTime": "2030-01-07T08:00:00Z", "duration": "24h"},
                    },
                    "template": {"spec": {"containers": [{"name": "t", "image": "x/t:1"}]}},
                }
            }
        )
    )
    code, out, err = run(capsys, "plan", "-f", str(path))
    assert (code, err) == (0, "")
    assert "Booking     16 chips in us-east5-b, 2030-01-07T08:00:00Z to 2030-01-08T08:00:00Z" in out
    assert "stop 10m (and a minute) before the end" in out


def test_a_ladder_ordered_by_estimate_shows_every_step_as_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = {
        "accelerator": {"gpu": {"type": "nvidia-l4", "nodes": 1}},
        "provisioning": {
            "mode": "FlexStart",
            "fallbackOrder": "Estimated",
            "fallback": [{"mode": "Spot"}],
        },
        "template": {"spec": {"containers": [{"name": "train", "image": "trainer:1"}]}},
    }
    manifest = request_file(tmp_path, "estimated", "team-a", spec)
    document = objects(capsys, "-f", manifest, "--uid", UID, *CLUSTER)
    steps = document["steps"]
    assert [s["mode"] for s in steps] == ["FlexStart", "Spot"]
    assert [len(s["createNodePool"]) for s in steps] == [1, 1]
    assert [kinds(s)[-1][0] for s in steps] == ["Job", "Job"]
