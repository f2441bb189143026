"""WorkloadPolicyClient against the emulator: the operator's Compute REST client over HTTP."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import pytest
import requests

from dws_operator.gke import (
    GkeError,
    PollPolicy,
    RetryPolicy,
    WorkloadPolicyClient,
    connect_compute,
)
from dws_operator.naming import workload_policy_name
from dws_operator.zones import region_of
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, MethodFaults
from tests.gke.harness import FAST, MakeEmulator, ManualClock, policies_url, policy_ready

T = TypeVar("T")
PROJECT, REGION = "dws-sandbox", "us-east5"
NAME = "dws-high-throughput-2x2x2"
FAST_WAIT = PollPolicy(initial_delay=0.005, max_delay=0.05, multiplier=2.0, timeout=5.0)
RETRY = RetryPolicy(attempts=4, initial_delay=0.02, multiplier=2.0, max_delay=0.05, jitter=0.0)


def run_policies(
    endpoint: str,
    scenario: Callable[[WorkloadPolicyClient], Awaitable[T]],
    *,
    poll: PollPolicy = FAST_WAIT,
    retry: RetryPolicy = RETRY,
) -> T:
    async def main() -> T:
        apis = connect_compute(endpoint)
        try:
            client = WorkloadPolicyClient(apis, PROJECT, poll=poll, retry=retry)
            return await scenario(client)
        finally:
            apis.close()

    return asyncio.run(main())


def ensure(
    emulator: ClusterManagerEmulator, topology: str = "2x2x2", region: str = REGION, **kw: Any
) -> str:
    async def scenario(client: WorkloadPolicyClient) -> str:
        return await client.ensure_workload_policy(region, topology)

    return run_policies(emulator.compute_endpoint, scenario, **kw)


def faulty(method: str, **faults: Any) -> EmulatorConfig:
    return FAST.model_copy(update={"compute_faults": {method: MethodFaults(**faults)}})


def test_creates_the_policy_and_waits_for_it(emulator: ClusterManagerEmulator) -> None:
    assert ensure(emulator) == NAME
    policy = emulator.compute.policy(PROJECT, REGION, NAME)
    assert policy is not None
    assert policy.status == "READY"
    assert (policy.workload_policy.type_, policy.workload_policy.accelerator_topology) == (
        "HIGH_THROUGHPUT",
        "2x2x2",
    )
    assert [(c.method, c.status) for c in emulator.compute.calls] == [
        ("resourcePolicies.get", 404),
        ("resourcePolicies.insert", 200),
        ("regionOperations.wait", 200),
    ]
    [insert] = emulator.compute.calls_for("resourcePolicies.insert")
    assert insert.params == {"project": PROJECT, "region": REGION}
    assert insert.body is not None
    assert insert.body["workloadPolicy"] == {
        "type": "HIGH_THROUGHPUT",
        "acceleratorTopology": "2x2x2",
    }


def test_a_second_call_finds_it_and_inserts_nothing(emulator: ClusterManagerEmulator) -> None:
    assert ensure(emulator) == ensure(emulator) == NAME
    assert emulator.compute.call_counts()["resourcePolicies.insert"] == 1
    assert [(c.method, c.status) for c in emulator.compute.calls][-1] == (
        "resourcePolicies.get",
        200,
    )


def test_one_policy_per_region_and_topology(emulator: ClusterManagerEmulator) -> None:
    names = [
        ensure(emulator, "2x2x2"),
        ensure(emulator, "2x2x4"),
        ensure(emulator, "2x2x2", region="europe-west4"),
        ensure(emulator, "2x2x4"),
    ]
    assert names == [NAME, "dws-high-throughput-2x2x4", NAME, "dws-high-throughput-2x2x4"]
    assert sorted((r, p.name) for _, r, p in emulator.compute.policies()) == [
        ("europe-west4", NAME),
        (REGION, NAME),
        (REGION, "dws-high-throughput-2x2x4"),
    ]
    assert emulator.compute.call_counts()["resourcePolicies.insert"] == 3


def test_concurrent_calls_of_one_client_insert_once(emulator: ClusterManagerEmulator) -> None:
    async def scenario(client: WorkloadPolicyClient) -> list[str]:
        calls = [client.ensure_workload_policy(REGION, "2x2x2") for _ in range(5)]
        return list(await asyncio.gather(*calls))

    assert run_policies(emulator.compute_endpoint, scenario) == [NAME] * 5
    assert emulator.compute.call_counts()["resourcePolicies.insert"] == 1


def test_two_operators_racing_end_with_one_policy(make_emulator: MakeEmulator) -> None:
    """Both find nothing; the slower insert gets 409 and adopts the winner's policy."""
    config = faulty("resourcePolicies.insert", latency_seconds=0.3).model_copy(
        update={"compute_operation_latency_seconds": 0.0}
    )
    emulator = make_emulator(config)

    async def race() -> list[str]:
        apis = [connect_compute(emulator.compute_endpoint) for _ in range(2)]
        try:
            clients = [WorkloadPolicyClient(a, PROJECT, poll=FAST_WAIT, retry=RETRY) for a in apis]
            ensures = [c.ensure_workload_policy(REGION, "2x2x2") for c in clients]
            return list(await asyncio.gather(*ensures))
        finally:
            for a in apis:
                a.close()

    assert asyncio.run(race()) == [NAME, NAME]
    inserts = emulator.compute.calls_for("resourcePolicies.insert")
    assert sorted(c.status for c in inserts) == [200, 409]
    assert len(emulator.compute.policies()) == 1


@pytest.mark.parametrize(
    ("workload", "why"),
    [
        ({"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x4"}, "topology is 2x2x4"),
        ({"type": "HIGH_AVAILABILITY"}, "type is HIGH_AVAILABILITY"),
        ({"type": "HIGH_THROUGHPUT"}, "topology is unset"),
        (
            {
                "type": "HIGH_THROUGHPUT",
                "acceleratorTopology": "2x2x2",
                "acceleratorTopologyMode": "PROVISION_ONLY",
            },
            "mode is PROVISION_ONLY",
        ),
    ],
)
def test_a_foreign_policy_of_that_name_is_a_terminal_conflict(
    emulator: ClusterManagerEmulator, workload: dict[str, str], why: str
) -> None:
    body = {"name": NAME, "workloadPolicy": workload}
    assert requests.post(policies_url(emulator), json=body, timeout=10).status_code == 200
    emulator.compute.clear_calls()
    with pytest.raises(GkeError) as caught:
        ensure(emulator)
    error = caught.value
    assert (error.retryable, error.reason, error.code) == (
        False,
        "WorkloadPolicyConflict",
        grpc.StatusCode.ALREADY_EXISTS,
    )
    assert why in error.message
    assert f"projects/{PROJECT}/regions/{REGION}/resourcePolicies/{NAME}" in error.message
    assert emulator.compute.call_counts()["resourcePolicies.insert"] == 0


def test_a_policy_still_being_created_is_retryable(make_emulator: MakeEmulator) -> None:
    # The insert moves only with this clock: the policy is surely still CREATING.
    clock = ManualClock()
    emulator = make_emulator(EmulatorConfig(compute_operation_latency_seconds=0.5), clock)
    body = {
        "name": NAME,
        "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x2"},
    }
    assert requests.post(policies_url(emulator), json=body, timeout=10).status_code == 200
    with pytest.raises(GkeError) as caught:
        ensure(emulator)
    assert (caught.value.retryable, caught.value.reason) == (True, "WorkloadPolicyNotReady")
    assert "CREATING" in caught.value.message
    clock.now += 1
    policy_ready(emulator, NAME, REGION)
    assert ensure(emulator) == NAME
    assert emulator.compute.call_counts()["resourcePolicies.insert"] == 1  # only ours above


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("UNAVAILABLE", "Unavailable"),
        ("INTERNAL", "InternalError"),
        ("RESOURCE_EXHAUSTED", "RateLimited"),
    ],
)
def test_retryable_errors_are_retried_a_bounded_number_of_times(
    make_emulator: MakeEmulator, code: str, reason: str
) -> None:
    emulator = make_emulator(faulty("resourcePolicies.insert", error_rate=1.0, error_code=code))
    began = time.monotonic()
    with pytest.raises(GkeError) as caught:
        ensure(emulator)
    assert (caught.value.retryable, caught.value.reason) == (True, reason)
    assert len(emulator.compute.calls_for("resourcePolicies.insert")) == RETRY.attempts
    assert time.monotonic() - began >= sum(RETRY.delays())
    assert emulator.compute.policies() == []


def test_a_flaky_api_is_ridden_out(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(
        faulty("resourcePolicies.insert", error_rate=0.5, error_code="UNAVAILABLE").model_copy(
            update={"seed": 3}
        )
    )
    topologies = ["2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8"]
    for topology in topologies:
        assert ensure(emulator, topology) == f"dws-high-throughput-{topology}"
    inserts = emulator.compute.calls_for("resourcePolicies.insert")
    failed = [c for c in inserts if c.status == 503]
    assert failed, "the seed should inject at least one failure"
    assert len(inserts) == len(topologies) + len(failed)
    assert len(emulator.compute.policies()) == len(topologies)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("PERMISSION_DENIED", "PermissionDenied"),
        ("INVALID_ARGUMENT", "InvalidArgument"),
        ("UNAUTHENTICATED", "Unauthenticated"),
    ],
)
def test_terminal_errors_are_not_retried(
    make_emulator: MakeEmulator, code: str, reason: str
) -> None:
    emulator = make_emulator(faulty("resourcePolicies.insert", error_rate=1.0, error_code=code))
    with pytest.raises(GkeError) as caught:
        ensure(emulator)
    assert (caught.value.retryable, caught.value.reason) == (False, reason)
    assert len(emulator.compute.calls_for("resourcePolicies.insert")) == 1


def test_a_failed_operation_is_classified_and_the_next_call_recreates(
    make_emulator: MakeEmulator,
) -> None:
    emulator = make_emulator(
        faulty(
            "resourcePolicies.insert",
            operation_error_rate=1.0,
            operation_error_code="INTERNAL",
            operation_error_message="Internal error. Please try again.",
        )
    )
    with pytest.raises(GkeError) as caught:
        ensure(emulator)
    assert (caught.value.retryable, caught.value.reason) == (True, "InternalError")
    assert caught.value.message == "Internal error. Please try again."
    assert emulator.compute.policies() == []
    emulator.compute.set_faults("resourcePolicies.insert", None)
    assert ensure(emulator) == NAME


def test_a_slow_operation_times_out_retryably_and_is_found_later(
    make_emulator: MakeEmulator,
) -> None:
    # The insert moves only with this clock: it is surely not done by the deadline.
    clock = ManualClock()
    emulator = make_emulator(EmulatorConfig(compute_operation_latency_seconds=0.6), clock)
    short = PollPolicy(initial_delay=0.01, max_delay=0.05, timeout=0.2)
    began = time.monotonic()
    with pytest.raises(GkeError) as caught:
        ensure(emulator, poll=short)
    # The wait call was cut at the deadline: Compute's own wait would answer after
    # 120 s (the bound leaves room for a slow machine, not for an uncut wait).
    assert time.monotonic() - began < 20
    assert (caught.value.retryable, caught.value.reason) == (True, "OperationTimeout")
    clock.now += 1
    policy_ready(emulator, NAME, REGION)
    assert ensure(emulator) == NAME
    assert emulator.compute.call_counts()["resourcePolicies.insert"] == 1


def test_wait_faults_are_ridden_out(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(
        faulty("regionOperations.wait", error_rate=0.5, error_code="UNAVAILABLE").model_copy(
            update={"seed": 1, "compute_operation_latency_seconds": 0.05}
        )
    )
    for topology in ("2x2x2", "2x2x4", "2x4x4"):
        assert ensure(emulator, topology) == f"dws-high-throughput-{topology}"
    waits = emulator.compute.calls_for("regionOperations.wait")
    assert any(c.status == 503 for c in waits)
    assert emulator.compute.call_counts()["resourcePolicies.insert"] == 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_no_server_at_all_is_retryable() -> None:
    with pytest.raises(GkeError) as caught:
        ensure_at(f"http://127.0.0.1:{free_port()}")
    assert (caught.value.retryable, caught.value.reason) == (True, "Unavailable")


def ensure_at(endpoint: str) -> str:
    async def scenario(client: WorkloadPolicyClient) -> str:
        return await client.ensure_workload_policy(REGION, "2x2x2")

    return run_policies(endpoint, scenario, retry=RetryPolicy(attempts=2, initial_delay=0.01))


def test_names_and_regions() -> None:
    assert workload_policy_name("4x4x8") == "dws-high-throughput-4x4x8"
    assert len(workload_policy_name("128x128x128")) <= 63
    with pytest.raises(ValueError, match="not a TPU topology"):
        workload_policy_name("2x2x2; drop")
    assert region_of("us-east5-a") == "us-east5"
    assert region_of("us-east5") == "us-east5"
    assert region_of("northamerica-northeast1-b") == "northamerica-northeast1"
