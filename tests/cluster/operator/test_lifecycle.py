"""An Ironwood (TPU7x) multi-host slice from creation to its pool at zero, placed by the
Compute workload policy the operator makes: the virtual tier answers GKE in process but
has no Compute, so this one runs here, against the served GKE and Compute emulators.

Every other mode's run (the pool, Job and Service each makes, a pool at zero after),
an existing pool left alone, maxWaitDuration's expiry and the deletion of a running
request are tested on the virtual clock in tests/virtual/test_lifecycle.py; the real
API server's acceptance of the Jobs and Services the operator sends, in
tests/cluster/operator/test_plan_objects.py.
"""

from __future__ import annotations

import pytest

from tests.builders import tpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

pytestmark = pytest.mark.usefixtures("operator")


def test_an_ironwood_slice_is_placed_by_its_workload_policy_and_runs_to_completion(
    scenario: Scenario,
) -> None:
    scenario.create(tpu("tpu7x", "2x2x2"), mode="FlexStart")
    [pool] = eventually(scenario.created_pools, what="CreateNodePool")
    job = scenario.job()
    # Ironwood's multi-host pool is placed by the workload policy the operator made.
    assert pool.placement_policy.policy_name == "dws-high-throughput-2x2x2"
    assert not pool.placement_policy.tpu_topology
    compute = scenario.emulator.compute
    policy = compute.policy("dws-sandbox", "us-east5", "dws-high-throughput-2x2x2")
    assert policy is not None
    assert policy.workload_policy.accelerator_topology == "2x2x2"
    assert policy.workload_policy.type_ == "HIGH_THROUGHPUT"
    scenario.mark_pods("Succeeded", job.spec.parallelism)
    scenario.wait_phase("Succeeded")
    eventually(scenario.at_zero, timeout=10, what="the pool at zero")
