"""ProvisioningRequests (`autoscaling.x-k8s.io/v1`) as GKE's queued provisioning answers
them: pure helpers for their conditions and details; the autoscaler does the I/O.

Which pool serves a request: the PodTemplate of its (single) pod set is matched against
the RUNNING node pools with queued provisioning enabled. A `cloud.google.com/gke-nodepool`
node selector names the pool outright; otherwise the first pool, by name, whose nodes
carry every label of the node selector, provide the extended resources the containers
request and whose taints the pod tolerates (ignoring the accelerator and
`cloud.google.com/gke-queued` taints GKE tolerates for it). No match: the request stays
Accepted, waiting, as GKE leaves it. Of the matching pools, a TPU request takes the first
that can give it whole slices of the topology it names (`whole_slices`); if none can, it
is answered Provisioned=False (`NotProvisioned`) and gets no nodes.
"""

from __future__ import annotations

from typing import Any

from dws_operator import rfc3339

GROUP = "autoscaling.x-k8s.io"
VERSION = "v1"
PLURAL = "provisioningrequests"
MAX_RUN_PARAMETER = "maxRunDurationSeconds"
#: The slice shape a TPU request asks for (Kueue copies it from its ProvisioningRequestConfig).
TPU_TOPOLOGY_PARAMETER = "tpu-topology"

ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"
#: Provisioned=False while the nodes are not there (GKE: "a temporary state").
NOT_PROVISIONED = "NotProvisioned"


def now_rfc3339() -> str:
    """Now, as Kubernetes writes a condition's time (whole seconds)."""
    return rfc3339.seconds(rfc3339.now())


def condition(body: dict[str, Any], type_: str) -> dict[str, Any] | None:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def is_true(body: dict[str, Any], type_: str) -> bool:
    found = condition(body, type_)
    return found is not None and found.get("status") == "True"


def with_condition(
    body: dict[str, Any], type_: str, status: bool, reason: str, message: str
) -> list[dict[str, Any]]:
    """The request's conditions with `type_` set (its transition time kept if unchanged)."""
    conditions = [dict(c) for c in (body.get("status") or {}).get("conditions") or []]
    value = "True" if status else "False"
    new = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_rfc3339(),
        "observedGeneration": (body.get("metadata") or {}).get("generation", 1),
    }
    for index, existing in enumerate(conditions):
        if existing.get("type") == type_:
            if existing.get("status") == value:
                new["lastTransitionTime"] = existing.get(
                    "lastTransitionTime", new["lastTransitionTime"]
                )
            conditions[index] = new
            return conditions
    conditions.append(new)
    return conditions


def details(pool: str, resize_request: str, zone: str) -> dict[str, str]:
    """`status.provisioningClassDetails` as GKE fills it."""
    return {"NodePoolName": pool, "ResizeRequestName": resize_request, "SelectedZone": zone}


def parameter(body: dict[str, Any], name: str) -> str | None:
    """`spec.parameters[name]`, or None when absent."""
    raw = ((body.get("spec") or {}).get("parameters") or {}).get(name)
    return None if raw is None else str(raw)


def max_run_seconds(body: dict[str, Any]) -> float | None:
    """`spec.parameters.maxRunDurationSeconds`, or None when absent or malformed."""
    raw = parameter(body, MAX_RUN_PARAMETER)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None
