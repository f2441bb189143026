"""Small builders for TrainingRequest specs in tests."""

from __future__ import annotations

from typing import Any

from dws_operator.api import TrainingRequestSpec
from dws_operator.zones import ClusterSite

CONTAINER = {"name": "train", "image": "us-docker.pkg.dev/example/train:1"}


def spec_body(accelerator: dict[str, Any], mode: str = "FlexStart", **extra: Any) -> dict[str, Any]:
    """A raw spec mapping, as a user would write it (not validated)."""
    provisioning: dict[str, Any] = {"mode": mode, **extra.pop("provisioning", {})}
    return {
        "accelerator": accelerator,
        "provisioning": provisioning,
        "template": {"spec": {"containers": [CONTAINER]}},
        **extra,
    }


def make_spec(
    accelerator: dict[str, Any], mode: str = "FlexStart", **extra: Any
) -> TrainingRequestSpec:
    return TrainingRequestSpec.model_validate(spec_body(accelerator, mode, **extra))


def manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A whole TrainingRequest object."""
    return {
        "apiVersion": "dws-operator.dev/v1alpha1",
        "kind": "TrainingRequest",
        "metadata": {"name": name},
        "spec": spec,
    }


def tpu(
    version: str, topology: str, machine_type: str | None = None, *, slices: int | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"version": version, "topology": topology}
    if machine_type:
        body["machineType"] = machine_type
    if slices is not None:
        body["slices"] = slices
    return {"tpu": body}


def gpu(
    type_: str, nodes: int = 1, machine_type: str | None = None, count: int | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type_, "nodes": nodes}
    if machine_type:
        body["machineType"] = machine_type
    if count is not None:
        body["count"] = count
    return {"gpu": body}


#: The sandbox's regional cluster (emulator/config.py's default): what the operator's
#: GKE client reports as its site, from which a TPU slice's zone is chosen.
SITE = ClusterSite("us-east5", ("us-east5-a", "us-east5-b", "us-east5-c"))
