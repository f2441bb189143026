"""ProvisioningRequests (autoscaling.x-k8s.io/v1) as the operator reads them: the one
Kueue made for a queued request's workload, its Accepted, Provisioned and Failed
conditions parsed once, here, into `ProvisioningRequestView`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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


def provisioning_request_of(
    items: Iterable[Mapping[str, Any]], kind: str, workload: str
) -> ProvisioningRequestView | None:
    """The newest of `items` Kueue made for the workload `workload` (a Job or JobSet):
    Kueue names a ProvisioningRequest after its Workload and admission check,
    `<workload's Workload>-<check>-<try>`, and the Workload after its owner,
    `<kind>-<name>-<5 hex digits>`; matched whole, so not another workload's whose name
    merely starts the same (`train` and `train-big`)."""
    named = re.compile(rf"^{re.escape(kind.lower())}-{re.escape(workload)}-[0-9a-f]{{5}}-")
    ours = [i for i in items if named.match(str((i.get("metadata") or {}).get("name", "")))]
    if not ours:
        return None
    newest = max(ours, key=lambda i: str((i.get("metadata") or {}).get("creationTimestamp", "")))
    return provisioning_request_view(newest)
