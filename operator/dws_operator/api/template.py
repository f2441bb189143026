"""The pod template a TrainingRequest carries: the user's containers, env, volumes...

Only the parts the operator relies on are modelled (a container needs a name and an
image); everything else in a core/v1 PodTemplateSpec is kept verbatim and checked by
the API server when the operator creates the Job from it.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from dws_operator.api.base import DNS_LABEL_PATTERN, ApiModel


class ContainerTemplate(ApiModel):
    """A core/v1 Container; fields beyond name and image are passed through unchanged."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(
        pattern=DNS_LABEL_PATTERN, max_length=63, description="Container name (DNS label)."
    )
    image: str = Field(min_length=1, max_length=1024, description="Container image reference.")


class PodSpecTemplate(ApiModel):
    """A core/v1 PodSpec; the operator adds node selectors, tolerations and accelerator requests."""

    model_config = ConfigDict(extra="allow")

    containers: list[ContainerTemplate] = Field(
        min_length=1,
        max_length=32,
        description=(
            "The training containers. Accelerator requests and limits are added by the operator "
            "to the first container unless a container already asks for them."
        ),
    )


class TemplateMetadata(ApiModel):
    labels: dict[str, str] | None = Field(None, description="Labels added to every pod.")
    annotations: dict[str, str] | None = Field(None, description="Annotations added to every pod.")


class PodTemplate(ApiModel):
    """A core/v1 PodTemplateSpec for the training pods (one pod per node)."""

    model_config = ConfigDict(extra="allow")

    metadata: TemplateMetadata | None = Field(None, description="Pod labels and annotations.")
    spec: PodSpecTemplate = Field(description="The pod spec: containers, env, volumes...")
