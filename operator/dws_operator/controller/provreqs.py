"""ProvisioningRequests (autoscaling.x-k8s.io/v1) as the operator reads them: the one
Kueue made for a queued request's workload, its Accepted, Provisioned and Failed
conditions parsed once, here, into `ProvisioningRequestView`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dws_operator import rfc3339
from dws_operator.reconcile import ProvisioningRequestView

PROVREQ_GROUP = "autoscaling.x-k8s.io"


def provisioning_request_view(body: Mapping[str, Any]) -> ProvisioningRequestView:
    conditions = {
        str(c.get("type")): c
        for c in (body.get("status") or {}).get("conditions") or []
        if isinstance(c, Mapping)
    }

    def true(kind: str) -> Mapping[str, Any] | None:
        found = conditions.get(kind)
        return found if found is not None and found.get("status") == "True" else None

    accepted = true("Accepted")
    accepted_at = None
    if accepted is not None and accepted.get("lastTransitionTime"):
        try:
            accepted_at = rfc3339.parse(str(accepted["lastTransitionTime"]))
        except ValueError:
            accepted_at = None
    return ProvisioningRequestView(
        name=str((body.get("metadata") or {}).get("name", "")),
        accepted_at=accepted_at,
        provisioned=true("Provisioned") is not None,
        failed=true("Failed") is not None,
    )
