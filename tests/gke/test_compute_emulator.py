"""The Compute resource-policies emulator, over real HTTP: Compute's paths, bodies, errors.

Raw requests check the wire (status, JSON error shape); the unmodified compute_v1
clients check that Google's own library reads what the emulator writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from google.api_core import exceptions as core_exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, MethodFaults
from tests.gke.harness import FAST, MakeEmulator, ManualClock, policies_url

PROJECT, REGION = "dws-sandbox", "us-east5"
Status = compute_v1.Operation.Status


@dataclass
class Apis:
    policies: compute_v1.ResourcePoliciesClient
    operations: compute_v1.RegionOperationsClient


@pytest.fixture
def apis(emulator: ClusterManagerEmulator) -> Iterator[Apis]:
    """Google's own clients, pointed at the emulator's http:// endpoint, anonymously."""
    options = ClientOptions(api_endpoint=emulator.compute_endpoint)
    credentials = AnonymousCredentials()
    clients = Apis(
        compute_v1.ResourcePoliciesClient(credentials=credentials, client_options=options),
        compute_v1.RegionOperationsClient(credentials=credentials, client_options=options),
    )
    yield clients
    clients.policies.transport.close()
    clients.operations.transport.close()


def workload(name: str = "wp", **fields: Any) -> dict[str, Any]:
    return {"name": name, "workloadPolicy": {"type": "HIGH_THROUGHPUT", **fields}}


def insert(emulator: ClusterManagerEmulator, body: Any, region: str = REGION) -> requests.Response:
    return requests.post(policies_url(emulator, region=region), json=body, timeout=10)


def wait_done(emulator: ClusterManagerEmulator, operation: dict[str, Any]) -> dict[str, Any]:
    url = f"{emulator.compute_endpoint}/compute/v1/projects/{PROJECT}/regions/{REGION}"
    answer = requests.post(f"{url}/operations/{operation['name']}/wait", timeout=30)
    assert answer.status_code == 200
    done: dict[str, Any] = answer.json()
    assert done["status"] == "DONE"
    return done


def error_of(response: requests.Response) -> tuple[int, str, str]:
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "errors"}
    [detail] = error["errors"]
    assert detail == {"message": error["message"], "domain": "global", "reason": detail["reason"]}
    assert error["code"] == response.status_code
    return response.status_code, detail["reason"], error["message"]


# Validation ------------------------------------------------------------------

INVALID = [
    pytest.param(
        {"workloadPolicy": {"type": "HIGH_THROUGHPUT"}},
        "required",
        "resource.name",
        id="name-missing",
    ),
    pytest.param(workload("Bad_Name"), "invalid", "Must be a match of regex", id="name-rfc1035"),
    pytest.param(workload("w" * 64), "invalid", "'resource.name'", id="name-too-long"),
    pytest.param(workload("wp-"), "invalid", "'resource.name'", id="name-trailing-hyphen"),
    pytest.param({"name": "wp"}, "invalid", "exactly one of workloadPolicy", id="no-kind"),
    pytest.param(
        {**workload(), "groupPlacementPolicy": {"collocation": "COLLOCATED"}},
        "invalid",
        "got 2",
        id="two-kinds",
    ),
    pytest.param(
        {"name": "wp", "workloadPolicy": {}}, "required", "workloadPolicy.type", id="type-missing"
    ),
    pytest.param(
        {"name": "wp", "workloadPolicy": {"type": "COMPACT"}},
        "invalid",
        "Must be one of HIGH_AVAILABILITY, HIGH_THROUGHPUT",
        id="type-unknown",
    ),
    pytest.param(
        workload(acceleratorTopology="2x2x2", maxTopologyDistance="BLOCK"),
        "invalid",
        "cannot both be set",
        id="topology-and-distance",
    ),
    pytest.param(
        workload(acceleratorTopology="2x2x"), "invalid", "acceleratorTopology", id="topology-format"
    ),
    pytest.param(
        workload(acceleratorTopology="0x2x2"), "invalid", "positive integers", id="topology-zero"
    ),
    pytest.param(
        workload(acceleratorTopology="2x2x2x2"), "invalid", "two or three", id="topology-4d"
    ),
    pytest.param(
        {
            "name": "wp",
            "workloadPolicy": {"type": "HIGH_AVAILABILITY", "acceleratorTopology": "2x2x2"},
        },
        "invalid",
        "needs type HIGH_THROUGHPUT",
        id="topology-needs-high-throughput",
    ),
    pytest.param(
        workload(acceleratorTopology="2x2x2", acceleratorTopologyMode="SOMETIMES"),
        "invalid",
        "AUTO_CONNECT, PROVISION_ONLY",
        id="mode-unknown",
    ),
    pytest.param(
        workload(acceleratorTopologyMode="PROVISION_ONLY"),
        "invalid",
        "Needs an acceleratorTopology",
        id="mode-needs-topology",
    ),
    pytest.param(
        workload(maxTopologyDistance="RACK"),
        "invalid",
        "BLOCK, CLUSTER, SUBBLOCK",
        id="distance-unknown",
    ),
    pytest.param(
        {**workload(), "bogus": 1}, "invalid", "Invalid JSON payload received", id="unknown-field"
    ),
    pytest.param(
        {"name": "wp", "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": 7}},
        "invalid",
        "Invalid JSON payload received",
        id="wrong-json-type",
    ),
]


@pytest.mark.parametrize(("body", "reason", "text"), INVALID)
def test_invalid_inserts_are_refused_with_400(
    emulator: ClusterManagerEmulator, body: dict[str, Any], reason: str, text: str
) -> None:
    status, got_reason, message = error_of(insert(emulator, body))
    assert (status, got_reason) == (400, reason)
    assert text in message
    assert emulator.compute.policies() == []
    [call] = emulator.compute.calls_for("resourcePolicies.insert")
    assert (call.status, call.reason, call.body) == (400, reason, body)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(workload(), id="high-throughput"),
        pytest.param(workload(acceleratorTopology="4x4x8"), id="tpu-topology"),
        pytest.param(workload(acceleratorTopology="1x72"), id="gpu-nvlink-topology"),
        pytest.param(
            workload(acceleratorTopology="4x4x4", acceleratorTopologyMode="PROVISION_ONLY"),
            id="provision-only",
        ),
        pytest.param(workload(maxTopologyDistance="SUBBLOCK"), id="max-distance"),
        pytest.param(
            {"name": "wp", "workloadPolicy": {"type": "HIGH_AVAILABILITY"}}, id="high-availability"
        ),
    ],
)
def test_valid_inserts_are_accepted(emulator: ClusterManagerEmulator, body: dict[str, Any]) -> None:
    answer = insert(emulator, body)
    assert answer.status_code == 200
    wait_done(emulator, answer.json())
    policy = emulator.compute.policy(PROJECT, REGION, "wp")
    assert policy is not None
    assert policy.status == "READY"
    assert (
        compute_v1.ResourcePolicy.to_dict(policy, preserving_proto_field_name=False)[
            "workloadPolicy"
        ]
        == body["workloadPolicy"]
    )


@pytest.mark.parametrize(
    ("project", "region", "field"),
    [
        ("Dws-Sandbox", REGION, "'project'"),
        (PROJECT, "us-east5-a", "'region'"),
        (PROJECT, "mars", "'region'"),
    ],
)
def test_bad_project_or_region_in_the_path(
    emulator: ClusterManagerEmulator, project: str, region: str, field: str
) -> None:
    url = policies_url(emulator, project=project, region=region)
    status, reason, message = error_of(requests.get(url, timeout=10))
    assert (status, reason) == (400, "invalid")
    assert field in message


def test_an_unknown_path_is_a_json_404(emulator: ClusterManagerEmulator) -> None:
    answer = requests.get(
        f"{emulator.compute_endpoint}/compute/v1/projects/p/zones/z/disks", timeout=10
    )
    assert error_of(answer)[:2] == (404, "notFound")


# Lifecycle -------------------------------------------------------------------


def test_insert_runs_an_operation_and_the_policy_turns_ready(
    make_emulator: MakeEmulator,
) -> None:
    # The operation moves only with this clock: the policy is read while surely CREATING.
    clock = ManualClock()
    emulator = make_emulator(EmulatorConfig(compute_operation_latency_seconds=0.3), clock)
    answer = insert(emulator, workload(acceleratorTopology="2x2x2"))
    operation = answer.json()
    assert operation["status"] == "PENDING"
    assert operation["operationType"] == "insert"
    assert operation["kind"] == "compute#operation"
    assert operation["targetLink"].endswith(
        f"/projects/{PROJECT}/regions/{REGION}/resourcePolicies/wp"
    )
    assert operation["selfLink"].endswith(f"/regions/{REGION}/operations/{operation['name']}")
    creating = emulator.compute.policy(PROJECT, REGION, "wp")
    assert creating is not None
    assert creating.status == "CREATING"
    began = time.monotonic()
    moving = threading.Timer(0.2, lambda: setattr(clock, "now", clock.now + 1))
    moving.start()
    try:
        done = wait_done(emulator, operation)
    finally:
        moving.cancel()
    # DONE only once the clock moved: the wait answered after it, not at once.
    assert time.monotonic() - began >= 0.2
    assert done["progress"] == 100
    assert "error" not in done
    got = requests.get(policies_url(emulator, "wp"), timeout=10).json()
    assert got["status"] == "READY"
    assert got["kind"] == "compute#resourcePolicy"
    assert got["selfLink"] == operation["targetLink"]
    assert got["region"].endswith(f"/projects/{PROJECT}/regions/{REGION}")
    assert got["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x2"}


def test_a_duplicate_name_is_409_already_exists(emulator: ClusterManagerEmulator) -> None:
    assert insert(emulator, workload()).status_code == 200
    status, reason, message = error_of(insert(emulator, workload(acceleratorTopology="2x2x4")))
    assert (status, reason) == (409, "alreadyExists")
    assert message == (
        f"The resource 'projects/{PROJECT}/regions/{REGION}/resourcePolicies/wp' already exists"
    )


def test_the_same_name_in_another_region_is_another_policy(
    emulator: ClusterManagerEmulator,
) -> None:
    assert insert(emulator, workload()).status_code == 200
    assert insert(emulator, workload(), region="europe-west4").status_code == 200
    assert {(p, r) for p, r, _ in emulator.compute.policies()} == {
        (PROJECT, REGION),
        (PROJECT, "europe-west4"),
    }


def test_get_of_a_missing_policy_is_404(emulator: ClusterManagerEmulator) -> None:
    status, reason, message = error_of(requests.get(policies_url(emulator, "nope"), timeout=10))
    assert (status, reason) == (404, "notFound")
    assert (
        message
        == f"The resource 'projects/{PROJECT}/regions/{REGION}/resourcePolicies/nope' was not found"
    )


def test_the_library_reads_what_the_emulator_writes(
    emulator: ClusterManagerEmulator, apis: Apis
) -> None:
    policy = compute_v1.ResourcePolicy(
        name="wp",
        workload_policy=compute_v1.ResourcePolicyWorkloadPolicy(
            type_="HIGH_THROUGHPUT", accelerator_topology="2x2x2"
        ),
    )
    operation = apis.policies.insert_unary(
        project=PROJECT, region=REGION, resource_policy_resource=policy
    )
    assert operation.status == Status.PENDING
    done = apis.operations.wait(project=PROJECT, region=REGION, operation=operation.name)
    assert done.status == Status.DONE
    assert apis.operations.get(project=PROJECT, region=REGION, operation=operation.name) == done
    got = apis.policies.get(project=PROJECT, region=REGION, resource_policy="wp")
    assert (got.status, got.workload_policy) == ("READY", policy.workload_policy)
    with pytest.raises(core_exceptions.Conflict) as conflict:
        apis.policies.insert_unary(project=PROJECT, region=REGION, resource_policy_resource=policy)
    assert [e["reason"] for e in conflict.value.errors] == ["alreadyExists"]
    with pytest.raises(core_exceptions.NotFound):
        apis.policies.get(project=PROJECT, region=REGION, resource_policy="other")
    with pytest.raises(core_exceptions.NotFound):
        apis.operations.get(project=PROJECT, region=REGION, operation="operation-0-nope")


def test_list_pages_through_the_region(emulator: ClusterManagerEmulator, apis: Apis) -> None:
    names = [f"wp-{i}" for i in range(5)]
    for name in names:
        assert insert(emulator, workload(name)).status_code == 200
    assert insert(emulator, workload("elsewhere"), region="europe-west4").status_code == 200
    first = requests.get(policies_url(emulator), params={"maxResults": 2}, timeout=10).json()
    assert first["kind"] == "compute#resourcePolicyList"
    assert [p["name"] for p in first["items"]] == names[:2]
    assert first["nextPageToken"] == "2"
    # The library's pager follows nextPageToken to the end.
    listed = apis.policies.list(
        request=compute_v1.ListResourcePoliciesRequest(
            project=PROJECT, region=REGION, max_results=2
        )
    )
    assert [p.name for p in listed] == names
    assert len(emulator.compute.calls_for("resourcePolicies.list")) == 1 + 3


def test_delete_runs_an_operation(make_emulator: MakeEmulator) -> None:
    # The operations move only with this clock: the policy is read while surely DELETING.
    clock = ManualClock()
    emulator = make_emulator(EmulatorConfig(compute_operation_latency_seconds=0.2), clock)
    inserted = insert(emulator, workload()).json()
    clock.now += 1
    wait_done(emulator, inserted)
    answer = requests.delete(policies_url(emulator, "wp"), timeout=10)
    assert answer.status_code == 200
    operation = answer.json()
    assert operation["operationType"] == "delete"
    deleting = emulator.compute.policy(PROJECT, REGION, "wp")
    assert deleting is not None
    assert deleting.status == "DELETING"
    status, reason, _ = error_of(requests.delete(policies_url(emulator, "wp"), timeout=10))
    assert (status, reason) == (400, "resourceNotReady")
    clock.now += 1
    wait_done(emulator, operation)
    assert emulator.compute.policy(PROJECT, REGION, "wp") is None
    assert error_of(requests.delete(policies_url(emulator, "wp"), timeout=10))[:2] == (
        404,
        "notFound",
    )


# Faults ------------------------------------------------------------------------


def faulty(method: str, **faults: Any) -> EmulatorConfig:
    return FAST.model_copy(update={"compute_faults": {method: MethodFaults(**faults)}})


@pytest.mark.parametrize(
    ("code", "status", "reason"),
    [
        ("UNAVAILABLE", 503, "backendError"),
        ("INTERNAL", 500, "backendError"),
        ("RESOURCE_EXHAUSTED", 429, "rateLimitExceeded"),
        ("PERMISSION_DENIED", 403, "forbidden"),
        ("DEADLINE_EXCEEDED", 504, "deadlineExceeded"),
    ],
)
def test_injected_errors_use_compute_status_and_reason(
    make_emulator: MakeEmulator, code: str, status: int, reason: str
) -> None:
    emulator = make_emulator(faulty("resourcePolicies.insert", error_rate=1.0, error_code=code))
    got = error_of(insert(emulator, workload()))
    assert got == (status, reason, f"resourcePolicies.insert: {code} injected by the emulator")
    assert emulator.compute.policies() == []


def test_errors_are_drawn_from_the_seed(make_emulator: MakeEmulator) -> None:
    def statuses(seed: int) -> list[int]:
        config = faulty("resourcePolicies.get", error_rate=0.5).model_copy(update={"seed": seed})
        emulator = make_emulator(config)
        return [
            requests.get(policies_url(emulator, "x"), timeout=10).status_code for _ in range(12)
        ]

    first = statuses(4)
    assert first == statuses(4)
    assert set(first) == {404, 503}


def test_latency_is_added(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(faulty("resourcePolicies.get", latency_seconds=0.2))
    began = time.monotonic()
    requests.get(policies_url(emulator, "x"), timeout=10)
    assert time.monotonic() - began >= 0.2
    [call] = emulator.compute.calls_for("resourcePolicies.get")
    assert call.duration >= 0.2


def test_a_failing_operation_leaves_no_policy(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(
        faulty(
            "resourcePolicies.insert",
            operation_error_rate=1.0,
            operation_error_code="INTERNAL",
            operation_error_message="Internal error. Please try again.",
        )
    )
    answer = insert(emulator, workload())
    assert answer.status_code == 200  # accepted; the operation fails
    done = wait_done(emulator, answer.json())
    assert done["error"] == {
        "errors": [{"code": "INTERNAL_ERROR", "message": "Internal error. Please try again."}]
    }
    assert done["httpErrorStatusCode"] == 500
    assert emulator.compute.policy(PROJECT, REGION, "wp") is None


def test_set_faults_at_run_time(emulator: ClusterManagerEmulator) -> None:
    emulator.compute.set_faults(
        "resourcePolicies.get", MethodFaults(error_rate=1.0, error_code="UNAVAILABLE")
    )
    assert requests.get(policies_url(emulator, "x"), timeout=10).status_code == 503
    emulator.compute.set_faults("resourcePolicies.get", None)
    assert requests.get(policies_url(emulator, "x"), timeout=10).status_code == 404
    assert [c.status for c in emulator.compute.calls] == [503, 404]
    assert emulator.compute.call_counts() == {"resourcePolicies.get": 2}
    emulator.compute.clear_calls()
    assert emulator.compute.calls == []


def test_the_config_file_names_compute_faults() -> None:
    config = EmulatorConfig.model_validate(
        {
            "compute_operation_latency_seconds": 0.1,
            "compute_faults": {"regionOperations.wait": {"error_rate": 0.5}},
        }
    )
    assert config.compute_faults["regionOperations.wait"].error_rate == 0.5
    with pytest.raises(ValueError, match="compute_faults"):
        EmulatorConfig.model_validate({"compute_faults": {"resourcePolicies.patch": {}}})
