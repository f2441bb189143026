"""Who the operator is when it writes to Kubernetes: one name for the field manager of its
applies and patches, the source of its Events, and the managed-by label of what it makes."""

from __future__ import annotations

OPERATOR_NAME = "dws-operator"
#: Server-side apply and patches: the owner of the fields the operator sets.
FIELD_MANAGER = OPERATOR_NAME
#: On every Kubernetes object the operator (or its tooling) makes.
MANAGED_BY = {"app.kubernetes.io/managed-by": OPERATOR_NAME}
