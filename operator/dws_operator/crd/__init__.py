"""Generation of the TrainingRequest CRD (structural schema + CEL rules) from the API models."""

from dws_operator.crd.definition import CRD_NAME, custom_resource_definition, render_crd_yaml

__all__ = ["CRD_NAME", "custom_resource_definition", "render_crd_yaml"]
