"""The node pool the operator asks GKE to create for one slice, as the request it sends.

Pure. The controller (controller/execute.py, when a pool's create gets its turn) and
`dws-operator plan --objects` both build the pool here, so what `plan` prints is what
the operator sends: labels first, then `slice_node_pool`, then the create request.
"""

from __future__ import annotations

from typing import Any

from google.cloud import container_v1

from dws_operator.gke.labels import pool_labels
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_operator.gke.render import render_node_pool
from dws_operator.gke.shapes import SHAPE_LABEL, shape_of
from dws_operator.planning import SlicePlan


def workload_policy_topology(plan: SlicePlan) -> str | None:
    """The TPU topology whose Compute workload policy must place the slice's pool
    (policies.py makes it before the pool is created); None when the slice is placed
    without one."""
    placement = plan.node_pool.placement_policy
    if placement is None or placement.type != "WORKLOAD_POLICY":
        return None
    return placement.tpu_topology


def handed_on_shape(plan: SlicePlan, defaults: PoolDefaults | None = None) -> str | None:
    """The shape of the pool `plan` asks for, when such a pool can be handed from one
    request to the next (one slice placed without a workload policy, whose name depends
    on the topology); None otherwise."""
    if plan.slices != 1 or workload_policy_topology(plan) is not None:
        return None
    return shape_of(render_node_pool(plan, name="", labels={}, defaults=defaults))


def slice_pool_labels(
    namespace: str, name: str, uid: str, plan: SlicePlan, defaults: PoolDefaults | None = None
) -> dict[str, str]:
    """The request's labels, and the shape of a pool it can hand on when done."""
    labels = pool_labels(namespace, name, uid)
    shape = handed_on_shape(plan, defaults)
    if shape is not None:
        labels[SHAPE_LABEL] = shape
    return labels


def slice_node_pool(
    plan: SlicePlan,
    *,
    name: str,
    labels: dict[str, str],
    workload_policy: str | None,
    defaults: PoolDefaults | None = None,
) -> container_v1.NodePool:
    """The pool created for one slice of `plan`: the one call both the controller and
    `plan` make, with the operator's node settings (`defaults`) that shape every pool."""
    return render_node_pool(
        plan, name=name, labels=labels, workload_policy=workload_policy, defaults=defaults
    )


def create_node_pool_request(parent: str, pool: container_v1.NodePool) -> Any:
    """`CreateNodePoolRequest` for the cluster `parent` (projects/P/locations/L/clusters/C)."""
    return container_v1.CreateNodePoolRequest(parent=parent, node_pool=pool)


def api_json(message: Any) -> dict[str, Any]:
    """A protobuf message (proto-plus) in the proto3 JSON form Google's REST APIs take:
    lowerCamelCase names, enums by name, fields left unset omitted. Keys are sorted:
    protobuf lists a map's entries in an order that changes from run to run, and two
    runs' output must compare line by line."""
    result: dict[str, Any] = _sorted(
        type(message).to_dict(
            message,
            use_integers_for_enums=False,
            preserving_proto_field_name=False,
            always_print_fields_with_no_presence=False,
        )
    )
    return result


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value
