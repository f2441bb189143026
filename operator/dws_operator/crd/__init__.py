"""Generation of the CRDs (structural schema + CEL rules) from the API models."""

from dws_operator.crd.definition import CRD_NAME, custom_resource_definition, render_crd_yaml
from dws_operator.crd.policy import (
    POLICY_CRD_NAME,
    policy_custom_resource_definition,
    render_policy_crd_yaml,
)

__all__ = [
    "CRD_NAME",
    "POLICY_CRD_NAME",
    "custom_resource_definition",
    "policy_custom_resource_definition",
    "render_crd_yaml",
    "render_policy_crd_yaml",
]
