"""The request shapes a load run mixes: TPU and GPU, flex-start and Spot, one slice each.

Ten shapes, each a valid TrainingRequest spec (the unit tests validate every one), small
enough (one or two VMs) that a thousand of them stay cheap for kwok once capacity
arrives. Multi-slice shapes are left out: they need the JobSet controller, and the
operator's scaling questions (operations per pool, pool reuse) are the same for one
slice. Queued provisioning is left out too: its capacity comes through
ProvisioningRequests, not through the pools' autoscaling the load run switches on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dws_operator.api import API_VERSION, KIND, TrainingRequestSpec
from dws_operator.planning import plan_slice
from dws_workshop.devcluster.stages import SIM_DURATION_ANNOTATION

IMAGE = "us-docker.pkg.dev/example/load/train:1"


@dataclass(frozen=True)
class Shape:
    """One kind of request: what it asks for and how it is provisioned."""

    name: str
    accelerator: dict[str, Any]
    mode: str

    def spec(self, sim_duration: str | None = None) -> dict[str, Any]:
        """The request's spec; pods end after `sim_duration` (kwok's clock) when given."""
        template: dict[str, Any] = {"spec": {"containers": [{"name": "train", "image": IMAGE}]}}
        if sim_duration is not None:
            template["metadata"] = {"annotations": {SIM_DURATION_ANNOTATION: sim_duration}}
        return {
            "accelerator": self.accelerator,
            "provisioning": {"mode": self.mode},
            "template": template,
        }

    def nodes(self) -> int:
        """The VMs of the request's one slice: its pool's autoscaling maximum."""
        spec = TrainingRequestSpec.model_validate(self.spec())
        return plan_slice(spec, pool_name="load").nodes


def _tpu(version: str, topology: str) -> dict[str, Any]:
    return {"tpu": {"version": version, "topology": topology}}


def _gpu(type_: str, nodes: int, count: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"type": type_, "nodes": nodes}
    if count is not None:
        body["count"] = count
    return {"gpu": body}


SHAPES: tuple[Shape, ...] = (
    Shape("v6e-2x2-flex", _tpu("v6e", "2x2"), "FlexStart"),
    Shape("v6e-2x4-spot", _tpu("v6e", "2x4"), "Spot"),
    Shape("v5e-2x2-spot", _tpu("v5e", "2x2"), "Spot"),
    Shape("v5p-2x2x1-flex", _tpu("v5p", "2x2x1"), "FlexStart"),
    # A multi-host flex-start slice where GKE documents its capacity (v5p: us-east5-a,
    # in the sandbox cluster's region; v5e's only documented zone is us-west4-a).
    Shape("v5p-2x2x2-flex", _tpu("v5p", "2x2x2"), "FlexStart"),
    Shape("h100-1-flex", _gpu("nvidia-h100-80gb", 1), "FlexStart"),
    Shape("l4-1-spot", _gpu("nvidia-l4", 1, count=1), "Spot"),
    Shape("a100-1-flex", _gpu("nvidia-a100-80gb", 1), "FlexStart"),
    Shape("l4-2-flex", _gpu("nvidia-l4", 2, count=1), "FlexStart"),
    Shape("h100-2-spot", _gpu("nvidia-h100-80gb", 2), "Spot"),
)


def shape_for(index: int) -> Shape:
    """Round-robin: the n-th request of a wave, so every wave has the same mix."""
    return SHAPES[index % len(SHAPES)]


def request_manifest(
    name: str, namespace: str, shape: Shape, sim_duration: str | None = None
) -> dict[str, Any]:
    """A whole TrainingRequest object of `shape`, labelled with the shape's name."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"dws-operator.dev/load-shape": shape.name},
        },
        "spec": shape.spec(sim_duration),
    }
