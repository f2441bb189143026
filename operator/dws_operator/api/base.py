"""Shared model configuration and API coordinates of the TrainingRequest resource."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

GROUP = "dws-operator.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainingRequest"
PLURAL = "trainingrequests"
SINGULAR = "trainingrequest"
SHORT_NAMES = ("tr", "treq")

#: Names GKE accepts for node pools: lowercase, starts with a letter, at most 40 characters.
NODE_POOL_NAME_PATTERN = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
#: RFC 1123 label, as Kubernetes requires for container and queue names.
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python.

    Unknown fields are ignored rather than rejected: the API server already prunes
    them, and an operator older than its CRD must still read newer objects.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_enum_values=False,
    )
