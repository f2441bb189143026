"""Shared builders of the reconcile decision's tests: a request, what a pass observes,
the status an earlier pass left, and `run`, which checks the invariants every decision
keeps."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from dws_operator.api import (
    Condition,
    NodePoolStatus,
    ObjectReference,
    Phase,
    TrainingRequestSpec,
    TrainingRequestStatus,
)
from dws_operator.naming import default_node_pool_name
from dws_operator.planning import SlicePlan, plan_slice
from dws_operator.reconcile import (
    Decision,
    JobView,
    Observed,
    PoolState,
    PoolView,
    ReconcileConfig,
    RequestView,
    decide,
    pool_name_for,
)
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.facts import read_spec
from dws_operator.workload import (
    RequestRef,
)
from tests.builders import gpu, spec_body, tpu

NAME = "llama"
NAMESPACE = "ml"
UID = "6f1c2a40-0000-4000-8000-00000000beef"
POOL = default_node_pool_name(NAME, UID)
REF = RequestRef(NAME, NAMESPACE, UID)
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
CONFIG = ReconcileConfig(location="us-east5")
KUEUE = ReconcileConfig(kueue=True, location="us-east5")

MULTI = spec_body(tpu("v6e", "4x4"))  # 4 x ct6e-standard-4t
SINGLE = spec_body(tpu("v6e", "2x2"))  # 1 x ct6e-standard-4t
GPU_ONE = spec_body(gpu("nvidia-h100-80gb"))  # 1 x a3-highgpu-8g
GPU_TWO = spec_body(gpu("nvidia-h100-80gb", nodes=2))  # 2 x a3-highgpu-8g
QUEUED = spec_body(gpu("nvidia-h100-80gb", nodes=2), mode="QueuedProvisioning")
BODIES = {"multi-tpu": MULTI, "single-tpu": SINGLE, "gpu-1": GPU_ONE, "gpu-2": GPU_TWO}
SHARED = "shared-pool"

A = TypeVar("A")


# -- builders ---------------------------------------------------------------------------


def with_(body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """`body` with top-level fields replaced (`provisioning` is merged)."""
    out = dict(body)
    for key, value in extra.items():
        out[key] = {**out.get(key, {}), **value} if key == "provisioning" else value
    return out


def existing(body: dict[str, Any], cleanup: str = "ScaleToZero") -> dict[str, Any]:
    return with_(body, nodePool={"name": SHARED, "existing": True, "cleanup": cleanup})


def cleanup(body: dict[str, Any], policy: str) -> dict[str, Any]:
    return with_(body, nodePool={"cleanup": policy})


def plan_of(body: dict[str, Any], pool: str = POOL) -> SlicePlan:
    return plan_slice(TrainingRequestSpec.model_validate(body), pool_name=pool)


def request(
    body: dict[str, Any],
    status: TrainingRequestStatus | None = None,
    *,
    generation: int = 1,
    deleting: bool = False,
) -> RequestView:
    return RequestView(
        name=NAME,
        namespace=NAMESPACE,
        uid=UID,
        generation=generation,
        deleting=deleting,
        facts=read_spec(NAME, UID, body),
        status=status if status is not None else TrainingRequestStatus(),
    )


def observed(
    body: dict[str, Any],
    status: TrainingRequestStatus | None = None,
    *,
    pool: PoolView | None = None,
    job: JobView | None = None,
    service: bool = False,
    service_taken: bool = False,
    now: datetime = T0,
    used: int = 0,
    generation: int = 1,
    deleting: bool = False,
) -> Observed:
    return Observed(
        request=request(body, status, generation=generation, deleting=deleting),
        now=now,
        pool=pool,
        job=job,
        service_exists=service,
        service_taken=service_taken,
        nodes_used_by_others=used,
    )


def pool_for(
    body: dict[str, Any],
    state: PoolState = PoolState.RUNNING,
    *,
    ours: bool = True,
    max_nodes: int | None = None,
    name: str = POOL,
    machine_type: str | None = None,
    accelerator_type: str | None = None,
    message: str = "",
) -> PoolView:
    """The pool as the plan of `body` would have it created (max = nodes of the slice)."""
    plan = plan_of(body, name)
    return PoolView(
        name=name,
        state=state,
        ours=ours,
        max_nodes=plan.nodes if max_nodes is None else max_nodes,
        machine_type=machine_type or plan.machine_type,
        accelerator_type=accelerator_type,
        message=message,
    )


def job_view(name: str = NAME, **fields: Any) -> JobView:
    return JobView(name=name, **{"ours": True, **fields})


def only(actions: list[Any], kind: type[A]) -> list[A]:
    return [a for a in actions if isinstance(a, kind)]


def kinds(decision: Decision) -> list[str]:
    return [type(a).__name__ for a in decision.actions]


def condition(decision: Decision | TrainingRequestStatus, type_: str) -> Condition:
    status = decision.status if isinstance(decision, Decision) else decision
    found = cond.condition(status.conditions, type_)
    assert found is not None, f"no {type_} condition in {status.conditions}"
    return found


def cond_tuple(decision: Decision, type_: str) -> tuple[str, str]:
    c = condition(decision, type_)
    return (c.status, c.reason)


def event_reasons(decision: Decision) -> list[str]:
    return [e.reason for e in decision.events]


def status_at(
    phase: Phase,
    body: dict[str, Any] = MULTI,
    *,
    requested: datetime | None = T0,
    started: datetime | None = None,
    job: str | None = NAME,
    **fields: Any,
) -> TrainingRequestStatus:
    """A status as an earlier pass of `decide` would have left it."""
    spec = TrainingRequestSpec.model_validate(body)
    pool_name = pool_name_for(request(body))
    return TrainingRequestStatus(
        phase=phase,
        plan=plan_of(body, pool_name).summary(),
        node_pool=NodePoolStatus(
            name=pool_name, managed=not spec.node_pool.existing, location="us-east5"
        ),
        job=ObjectReference(name=job) if job else None,
        requested_at=requested,
        started_at=started,
        provisioned_at=started,
        observed_generation=1,
        **fields,
    )


def run(obs: Observed, config: ReconcileConfig = CONFIG) -> Decision:
    """`decide`, checking the invariants every decision keeps."""
    before = obs.request.status.model_dump()
    decision = decide(obs, config)
    assert obs.request.status.model_dump() == before, "decide mutated the observed status"
    assert decision.status is not obs.request.status
    assert decision.status.observed_generation == obs.request.generation
    assert len({c.type for c in decision.status.conditions}) == len(decision.status.conditions)
    for event in decision.events:
        assert event.type in ("Normal", "Warning")
    if not obs.request.deleting:
        assert decision.released is False
    return decision


#: Specs the operator cannot plan, each with the field its error names.
INVALID = [
    pytest.param(
        spec_body(tpu("v4", "2x2x2"), mode="QueuedProvisioning"),
        "spec.provisioning.mode",
        id="v4-queued",
    ),
    pytest.param(spec_body(tpu("v6e", "4x")), "spec.accelerator.tpu.topology", id="malformed"),
    pytest.param(spec_body(tpu("v6e", "3x3")), "spec.accelerator.tpu.topology", id="bad-topology"),
    pytest.param(spec_body(tpu("v9", "2x2")), "spec.accelerator.tpu.version", id="bad-version"),
    pytest.param(spec_body(tpu("v4", "2x2x2")), "spec.provisioning.mode", id="v4-flex"),
    pytest.param(
        spec_body({**tpu("v6e", "2x2"), **gpu("nvidia-l4")}), "spec.accelerator", id="both"
    ),
    pytest.param(
        {"accelerator": tpu("v6e", "2x2"), "provisioning": {"mode": "FlexStart"}},
        "spec.template",
        id="no-template",
    ),
    pytest.param(
        spec_body(tpu("v6e", "2x2"), mode="Reservation"),
        "spec.provisioning.reservation",
        id="no-reservation",
    ),
    pytest.param(
        spec_body(tpu("v6e", "2x2"), nodePool={"existing": True}),
        "spec.nodePool.name",
        id="existing-unnamed",
    ),
    pytest.param(
        spec_body(
            tpu("v6e", "2x2"), nodePool={"name": SHARED, "existing": True, "cleanup": "Delete"}
        ),
        "spec.nodePool.cleanup",
        id="existing-delete",
    ),
    pytest.param(
        spec_body(tpu("v6e", "2x2"), provisioning={"maxRunDuration": "200h"}),
        "spec.provisioning.maxRunDuration",
        id="run-too-long",
    ),
    pytest.param(
        spec_body(gpu("nvidia-l4", machine_type="a3-highgpu-8g")),
        "spec.accelerator.gpu.machineType",
        id="gpu-machine",
    ),
    pytest.param(spec_body(gpu("nvidia-l4", nodes=0)), "spec.accelerator.gpu.nodes", id="0-nodes"),
    pytest.param({}, "spec.accelerator", id="empty"),
]


def failed(observed: Observed, reason: str, message: str) -> Decision:
    """The decision for `observed` with an action refused for good since its last pass."""
    return decide(dataclasses.replace(observed, refusal=(reason, message)), ReconcileConfig())
