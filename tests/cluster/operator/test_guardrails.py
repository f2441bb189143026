"""A namespace's TrainingPolicy, applied by the operator (no admission policy in this
cluster, as where the chart's is turned off or the request came before the policy): a
forbidden request fails PolicyViolation before anything is asked of GKE; one over the
in-flight limit waits PolicyLimit and goes when the request ahead ends."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from dws_operator.api import GROUP, VERSION
from dws_operator.api.policy import POLICY_PLURAL
from dws_workshop.emulator import ClusterManagerEmulator
from tests.builders import gpu, tpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually


@pytest.fixture
def team_limits(api: k8s.ApiClient, namespace: str, training_request_crd: str) -> None:
    """The namespace's policy, made before the operator starts (an operator sees a
    policy made a moment before a request only as fast as its watch: the admission
    policy is what refuses such a request at once)."""
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        POLICY_PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TrainingPolicy",
            "metadata": {"name": "team-limits"},
            "spec": {"accelerators": ["v6e"], "maxChipsInFlight": 8},
        },
    )


@pytest.mark.usefixtures("team_limits", "operator")
def test_the_operator_holds_a_namespace_to_its_policy(
    api: k8s.ApiClient, namespace: str, emulator: ClusterManagerEmulator
) -> None:
    forbidden = Scenario(api, namespace, emulator)
    forbidden.create(gpu("nvidia-h100-80gb", nodes=1))
    failed = forbidden.wait_phase("Failed")
    assert failed["message"].startswith("PolicyViolation: TrainingPolicy ")
    assert "spec.accelerator.gpu.type: nvidia-h100-80gb is not allowed" in failed["message"]
    eventually(lambda: forbidden.event_messages("Failed"), what="the Failed Event")

    first, second = Scenario(api, namespace, emulator), Scenario(api, namespace, emulator)
    first.create(tpu("v6e", "2x4"))  # 8 chips: the whole limit
    eventually(first.created_pools, what="the first request's CreateNodePool")
    second.create(tpu("v6e", "2x4"))
    held = eventually(
        lambda: (c := second.condition("Admitted")) and c["reason"] == "PolicyLimit" and c,
        what="the second request held by the in-flight limit",
    )
    assert "maxChipsInFlight is 8 chips" in held["message"]
    assert second.phase() == "Pending"
    assert second.event_messages("PolicyLimit")
    # Nothing was asked for the second one, and the first did not wait for it.
    assert {p.name for p in first.created_pools()} == {first.pool_name}
    first.job()
    first.mark_pods("Succeeded", 2)
    first.wait_phase("Succeeded")
    # The first ended: the second is admitted and asks for its pool.
    eventually(
        lambda: (c := second.condition("Admitted")) and c["status"] == "True",
        what="the second request admitted once the first ended",
    )
    # It runs (on the first one's pool, idle now and of its shape: taken over).
    second.job()
    # GKE was never asked for the forbidden request's H100s.
    made = [c.request.node_pool for c in emulator.calls_for("CreateNodePool") if c.ok]
    assert {p.config.machine_type for p in made} == {"ct6e-standard-4t"}
