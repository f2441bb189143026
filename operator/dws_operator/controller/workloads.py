"""Kueue's Workloads (kueue.x-k8s.io) as the operator reads them: whose they are (the Job or
JobSet that owns each) and whether Kueue itself deactivated them, parsed once, here.

Kueue deactivates a Workload (`spec.active: false`) when it gives up on it: its
ProvisioningRequest failed more often than the ProvisioningRequestConfig's
`retryStrategy.backoffLimitCount` allows (the admission check is then Rejected), its
capacity was revoked, or it was requeued more often than `requeuingStrategy` allows.
The Workload's Evicted condition then has the reason `DeactivatedDueTo<cause>` (e.g.
`DeactivatedDueToAdmissionCheck`) and Kueue's message. The Job stays suspended for good:
nothing will come of the wait. One that a person deactivated (`kubectl patch ...
spec.active=false`) has the reason `Deactivated` alone, and is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from dws_operator.multislice import JOBSET_KIND, JOBSET_PLURAL

#: The Evicted condition's reason when Kueue deactivated the Workload on its own.
BY_KUEUE = "DeactivatedDueTo"
#: The plural of the owner kinds whose Workloads concern the operator.
_OWNERS = {"Job": "jobs", JOBSET_KIND: JOBSET_PLURAL}


class WorkloadOwner(NamedTuple):
    """The Job or JobSet a Workload is Kueue's for, and whether Kueue deactivated it."""

    #: `jobs` or `jobsets`.
    kind: str
    name: str
    #: Kueue's word why it deactivated the Workload; None when it is active, or was
    #: deactivated by someone else.
    deactivated: str | None


def workload_owner(body: Mapping[str, Any]) -> WorkloadOwner | None:
    """Whose Workload `body` is (None: not a Job's or a JobSet's)."""
    metadata = body.get("metadata") or {}
    owner = next(
        (
            ref
            for ref in metadata.get("ownerReferences") or ()
            if isinstance(ref, Mapping) and ref.get("kind") in _OWNERS and ref.get("name")
        ),
        None,
    )
    if owner is None:
        return None
    return WorkloadOwner(_OWNERS[str(owner["kind"])], str(owner["name"]), _deactivated(body))


def _deactivated(body: Mapping[str, Any]) -> str | None:
    if (body.get("spec") or {}).get("active", True) is not False:
        return None
    for condition in (body.get("status") or {}).get("conditions") or ():
        if not isinstance(condition, Mapping) or condition.get("type") != "Evicted":
            continue
        reason = str(condition.get("reason") or "")
        if condition.get("status") == "True" and reason.startswith(BY_KUEUE):
            return str(condition.get("message") or reason)
    return None
