"""Ironwood (tpu7x) multi-host slices on the virtual clock, placed by the Compute workload
policy the operator makes (Compute answered in process: tests/fakes/compute.py)."""

from __future__ import annotations

import pytest

from dws_operator.gke.compute_types import (
    InsertResourcePolicyRequest,
    ResourcePolicy,
    WorkloadPolicy,
)
from tests.builders import tpu
from tests.virtual.harness import Virtual, VirtualOperator

PROJECT, REGION = "dws-sandbox", "us-east5"
POLICY = "dws-high-throughput-2x2x2"


@pytest.fixture
def virtual() -> Virtual:
    return Virtual(compute=True)


def test_an_ironwood_slice_is_placed_by_its_workload_policy_and_runs_to_completion(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        compute = op.emulator.compute
        await op.create(tpu("tpu7x", "2x2x2"), mode="FlexStart")
        [pool] = await op.until(op.created_pools, "CreateNodePool")
        # Ironwood's multi-host pool is placed by the workload policy the operator made,
        # READY before the pool was asked for.
        assert pool.placement_policy.policy_name == POLICY
        assert not pool.placement_policy.tpu_topology
        policy = compute.policy(PROJECT, REGION, POLICY)
        assert policy is not None
        assert policy.workload_policy.accelerator_topology == "2x2x2"
        assert policy.workload_policy.type_ == "HIGH_THROUGHPUT"
        [create] = op.emulator.calls_for("CreateNodePool")
        waited = compute.calls_for("regionOperations.wait")[-1]
        assert (waited.response or {}).get("status") == "DONE"
        assert waited.started <= create.started
        job = await op.job()
        # Two VMs of four chips: the slice's 8 chips.
        assert job["spec"]["completions"] == 2
        await op.wait_phase("WaitingForCapacity")
        await op.nodes_up(op.pool_name, 2)
        await op.job_running(2)
        await op.wait_phase("Running")
        await op.job_succeeded()
        await op.wait_phase("Succeeded")
        await op.nodes_up(op.pool_name, 0)
        await op.until(lambda: op.at_zero(op.pool_name), "the pool at zero")
        # One policy made, and kept: another pool may use it.
        assert [c.status for c in compute.calls_for("resourcePolicies.insert")] == [200]
        assert compute.calls_for("resourcePolicies.delete") == []
        assert [p.name for _, _, p in compute.policies()] == [POLICY]

    virtual.run(scenario)


def test_an_operator_killed_while_its_policy_is_made_makes_no_second_one(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        compute = op.emulator.compute
        await op.create(tpu("tpu7x", "2x2x2"), mode="FlexStart")
        await op.until(lambda: compute.calls_for("resourcePolicies.insert"), "the policy's insert")
        # Killed while Compute's operation runs (20 virtual seconds here).
        await op.kill()
        await op.sleep(5)
        await op.start()
        [pool] = await op.until(op.created_pools, "CreateNodePool")
        assert pool.placement_policy.policy_name == POLICY
        # The new operator found the policy being made, and waited for it to be READY.
        [(_, _, policy)] = compute.policies()
        assert (policy.name, policy.status) == (POLICY, "READY")
        assert len(compute.calls_for("resourcePolicies.insert")) == 1
        [create] = op.emulator.calls_for("CreateNodePool")
        assert create.started >= compute.calls_for("resourcePolicies.insert")[0].started + 20
        await op.nodes_up(op.pool_name, 2)
        await op.job_running(2)
        await op.wait_phase("Running")
        assert op.starts == 2

    virtual.run(scenario)


def test_a_policy_of_that_name_that_cannot_place_the_slice_fails_the_request(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        assert op.compute is not None
        # Someone else's policy under the operator's name for 2x2x2, of another type.
        theirs = ResourcePolicy(
            name=POLICY, workload_policy=WorkloadPolicy(type_="HIGH_AVAILABILITY")
        )
        request = InsertResourcePolicyRequest(
            project=PROJECT, region=REGION, resource_policy_resource=theirs
        )
        op.compute.policies.insert(request, 10.0)
        await op.sleep(30)
        await op.create(tpu("tpu7x", "2x2x2"), mode="FlexStart")
        status = await op.wait_phase("Failed")
        completed = op.condition("Completed")
        assert completed is not None
        assert completed["reason"] == "WorkloadPolicyConflict"
        assert "its type is HIGH_AVAILABILITY, not HIGH_THROUGHPUT" in status["message"]
        # Neither a pool nor a Job, and their policy left as it was.
        assert op.emulator.calls_for("CreateNodePool") == []
        assert op.jobs() == []
        assert len(op.emulator.compute.calls_for("resourcePolicies.insert")) == 1
        [(_, _, kept)] = op.emulator.compute.policies()
        assert kept.workload_policy.type_ == "HIGH_AVAILABILITY"

    virtual.run(scenario)
