"""Labels that tie a GKE node pool to the TrainingRequest that owns it.

GKE copies `NodeConfig.resource_labels` onto the VMs as GCE labels and
`NodeConfig.labels` onto the Kubernetes nodes. A key and a value that satisfy GCE's
rules (lowercase letters, digits, `_` and `-`, at most 63 characters) and also
Kubernetes' (alphanumeric at both ends) are valid in both places, so one set serves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from google.cloud import container_v1

from dws_operator.identity import OPERATOR_NAME

#: GCE label keys cannot contain `.` or `/`, so the API group becomes a prefix.
LABEL_PREFIX = "dws-operator-dev_"
NAMESPACE_LABEL = f"{LABEL_PREFIX}namespace"
NAME_LABEL = f"{LABEL_PREFIX}name"
#: The owner's uid: `owned_by` reads it to decide whether an existing pool may be adopted.
UID_LABEL = f"{LABEL_PREFIX}uid"
MANAGED_BY_LABEL = f"{LABEL_PREFIX}managed-by"
MANAGED_BY = OPERATOR_NAME

MAX_LABEL_LENGTH = 63
_INVALID = re.compile(r"[^a-z0-9_-]+")


def sanitize_label_value(value: str) -> str:
    """Lowercase, `[a-z0-9_-]` only, alphanumeric at both ends, at most 63 characters.

    Namespaces, names and uids are already DNS-safe, so for them this changes nothing;
    it guards against whatever else a caller passes.
    """
    cleaned = _INVALID.sub("-", value.lower())[:MAX_LABEL_LENGTH]
    return cleaned.strip("-_")


def pool_labels(namespace: str, name: str, uid: str) -> dict[str, str]:
    """The labels every pool the operator creates carries."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        NAMESPACE_LABEL: sanitize_label_value(namespace),
        NAME_LABEL: sanitize_label_value(name),
        UID_LABEL: sanitize_label_value(uid),
    }


def owned_by(pool: container_v1.NodePool, uid: str) -> bool:
    """Whether `pool` was created for the TrainingRequest with this uid.

    Only the GCE resource labels count: they are what the operator wrote at creation,
    while Kubernetes node labels can be edited by anyone with access to the nodes.
    """
    owner = pool.config.resource_labels.get(UID_LABEL)
    return bool(uid) and owner == sanitize_label_value(uid)


def merge_labels(own: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The operator's labels with configured extra ones. A clash is an error, never
    an override: the operator reads its own labels back (owner, shape), and the
    settings refuse its `LABEL_PREFIX` at start, so a clash here is a bug."""
    clash = sorted(set(own) & set(extra))
    if clash:
        raise ValueError(f"extra node labels {clash} clash with the operator's own labels")
    return {**extra, **own}
