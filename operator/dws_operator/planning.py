"""Chip math: from a TrainingRequest spec to the slice GKE must provide.

`plan_slice` is pure. It raises `InvalidSpec` (every broken rule, each naming its
field) and otherwise returns a `SlicePlan`: machine type, node count, the labels
pods select, the taints they tolerate, and the node pool settings of the mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict, Field

from dws_operator.api import AcceleratorSpec, ApiModel, PlanSummary, TrainingRequestSpec
from dws_operator.catalog import (
    GPU_ACCELERATOR_LABEL_KEY,
    GPU_ACCELERATORS,
    GPU_DRIVER_VERSIONS,
    GPU_RESOURCE,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    MODE_SETTINGS,
    NODE_POOL_LABEL_KEY,
    TPU_ACCELERATOR_LABEL_KEY,
    TPU_GENERATIONS,
    TPU_RESOURCE,
    TPU_TAINT_KEY,
    TPU_TAINT_VALUE,
    TPU_TOPOLOGY_LABEL_KEY,
    ModeSettings,
    ProvisioningMode,
    ReservationAffinity,
    Toleration,
    default_machine_type,
    topology_chips,
)
from dws_operator.catalog.modes import RESERVATION_NAME_KEY
from dws_operator.durations import parse_duration
from dws_operator.errors import InvalidSpec, SpecError
from dws_operator.kube_types import TaintEffect
from dws_operator.naming import slice_pool_names
from dws_operator.validation import spec_errors
from dws_operator.zones import ZONES_FIELD, ClusterSite, slice_zone


class PlanModel(ApiModel):
    model_config = ConfigDict(frozen=True)


class TolerationPlan(PlanModel):
    key: str
    operator: Literal["Equal", "Exists"]
    value: str
    effect: TaintEffect

    @classmethod
    def of(cls, toleration: Toleration) -> TolerationPlan:
        return cls(
            key=toleration.key,
            operator=toleration.operator,
            value=toleration.value,
            effect=toleration.effect,
        )


class AutoscalingPlan(PlanModel):
    enabled: bool = True
    min_node_count: int = 0
    max_node_count: int
    location_policy: str | None = None
    total: bool = Field(
        True,
        description=(
            "The limits bound the whole pool (GKE's total_*_node_count), not each zone: "
            "per-zone limits would let a pool over N zones grow to N times the request. "
            "False for a pool given exactly one zone, where the two agree, and for a "
            "multi-host TPU slice (GKE checks the slice against the per-zone maximum)."
        ),
    )


class ReservationAffinityPlan(PlanModel):
    consume_reservation_type: ReservationAffinity
    key: str | None = None
    values: tuple[str, ...] = ()


class PlacementPlan(PlanModel):
    """Where a multi-host slice's VMs go: COMPACT with `tpu_topology`, or (tpu7x) a
    Compute workload policy of that topology, which the shell makes or reuses before it
    creates the pool and names as the pool's placement policy."""

    type: Literal["COMPACT", "WORKLOAD_POLICY"] = "COMPACT"
    tpu_topology: str


class NodePoolSettings(PlanModel):
    """What the node pool must look like for this slice and mode."""

    mode: ProvisioningMode
    name: str | None = None
    machine_type: str
    flex_start: bool
    queued_provisioning: bool
    spot: bool
    #: Pools start empty and scale with demand, so nothing runs before the work does.
    initial_node_count: int = 0
    autoscaling: AutoscalingPlan
    reservation_affinity: ReservationAffinityPlan | None = None
    auto_repair: bool | None = None
    placement_policy: PlacementPlan | None = None
    max_run_duration_seconds: int | None = None
    needs_provisioning_request: bool = False
    zones: tuple[str, ...] = ()
    accelerator_type: str | None = Field(None, description="GPU type attached to each VM.")
    accelerator_count: int | None = None
    gpu_driver_version: str | None = Field(
        None,
        description=(
            "GKE's GPU driver installation: DEFAULT, LATEST or INSTALLATION_DISABLED "
            "(GPU pools only)."
        ),
    )


class SlicePlan(PlanModel):
    """One slice (`nodes` VMs), `slices` times over: each slice has its own pool."""

    kind: Literal["tpu", "gpu"]
    accelerator: str
    accelerator_label: str
    topology: str | None = None
    machine_type: str
    chips_per_node: int
    nodes: int
    total_chips: int
    single_host: bool
    resource_name: str
    node_selector: dict[str, str]
    tolerations: tuple[TolerationPlan, ...]
    node_pool: NodePoolSettings
    max_restarts: int
    max_wait_seconds: int = Field(description="0 waits for capacity forever.")
    max_run_seconds: int
    slices: int = 1
    #: The node pool of each slice (empty while the pool name is not known).
    pool_names: tuple[str, ...] = ()

    @property
    def total_nodes(self) -> int:
        return self.nodes * self.slices

    @property
    def multi_slice(self) -> bool:
        return self.slices > 1

    @property
    def shape(self) -> str:
        return self.topology if self.topology else f"{self.total_chips} GPUs"

    def summary(self) -> PlanSummary:
        return PlanSummary(
            accelerator=self.accelerator,
            accelerator_label=self.accelerator_label,
            shape=self.shape,
            machine_type=self.machine_type,
            nodes=self.nodes,
            slices=self.slices,
            total_nodes=self.total_nodes,
            chips_per_node=self.chips_per_node,
            total_chips=self.total_chips,
            single_host=self.single_host,
            resource_name=self.resource_name,
            node_selector=dict(self.node_selector),
        )


@dataclass(frozen=True)
class _Shape:
    kind: Literal["tpu", "gpu"]
    accelerator: str
    label_key: str
    label: str
    machine_type: str
    chips_per_node: int
    nodes: int
    resource_name: str
    taint: Toleration
    topology: str | None = None
    gpu_type: str | None = None
    gpu_driver_version: str | None = None
    slices: int = 1
    workload_policy: bool = False
    #: Where a multi-host TPU slice's pool lives (`zones.slice_zone`); None otherwise.
    zone: str | None = None

    @property
    def multi_host_tpu(self) -> bool:
        return self.kind == "tpu" and self.nodes > 1 and self.topology is not None


@dataclass(frozen=True)
class Machines:
    """The VMs of one slice: their machine type, chips (TPU chips or GPUs) on each,
    and how many; the same on every step of a ladder (the accelerator is the spec's)."""

    machine_type: str
    chips_per_node: int
    nodes: int


def machines_of(accelerator: AcceleratorSpec) -> Machines | None:
    """The chip math of `accelerator` alone; None when its machine type does not fit it
    (an invalid spec, which says so elsewhere)."""
    tpu, gpu = accelerator.tpu, accelerator.gpu
    if tpu is not None:
        generation = TPU_GENERATIONS[tpu.version]
        if not generation.machine_types_for(tpu.topology):
            return None  # not a topology of this generation
        machine_type = tpu.machine_type or default_machine_type(generation, tpu.topology)
        tpu_machine = generation.machine_type(machine_type)
        if tpu_machine is None:
            return None
        chips = tpu_machine.chips
        return Machines(tpu_machine.name, chips, topology_chips(tpu.topology) // chips)
    assert gpu is not None  # AcceleratorSpec guarantees exactly one
    kind = GPU_ACCELERATORS[gpu.type]
    chosen = gpu.machine_type or (kind.machine_type_for_count(gpu.count) if gpu.count else None)
    gpu_machine = kind.machine_type(chosen or kind.default_machine_type)
    if gpu_machine is None:
        return None
    return Machines(gpu_machine.name, gpu_machine.gpus, gpu.nodes)


def _shape(spec: TrainingRequestSpec, site: ClusterSite | None, zones_field: str) -> _Shape:
    tpu, gpu = spec.accelerator.tpu, spec.accelerator.gpu
    machines = machines_of(spec.accelerator)
    assert machines is not None  # spec_errors checked it
    if tpu is not None:
        generation = TPU_GENERATIONS[tpu.version]
        nodes = machines.nodes
        zone = None
        if nodes > 1 and site is not None:
            named = tuple(spec.provisioning.zones or ())
            try:
                zone = slice_zone(named, generation, spec.provisioning.mode, site, zones_field)
            except SpecError as error:
                raise InvalidSpec([error]) from None
        return _Shape(
            kind="tpu",
            accelerator=f"tpu-{tpu.version}",
            label_key=TPU_ACCELERATOR_LABEL_KEY,
            label=generation.accelerator_label,
            machine_type=machines.machine_type,
            chips_per_node=machines.chips_per_node,
            nodes=nodes,
            resource_name=TPU_RESOURCE,
            taint=Toleration(TPU_TAINT_KEY, TPU_TAINT_VALUE),
            topology=tpu.topology,
            slices=tpu.slices,
            workload_policy=generation.workload_policy,
            zone=zone,
        )
    assert gpu is not None  # AcceleratorSpec guarantees exactly one
    return _Shape(
        kind="gpu",
        accelerator=gpu.type.value,
        label_key=GPU_ACCELERATOR_LABEL_KEY,
        label=gpu.type.value,
        machine_type=machines.machine_type,
        chips_per_node=machines.chips_per_node,
        nodes=machines.nodes,
        resource_name=GPU_RESOURCE,
        taint=Toleration(GPU_TAINT_KEY, GPU_TAINT_VALUE),
        gpu_type=gpu.type.value,
        gpu_driver_version=GPU_DRIVER_VERSIONS[gpu.driver],
    )


def _node_pool(
    spec: TrainingRequestSpec,
    shape: _Shape,
    mode: ModeSettings,
    pool_name: str | None,
    calendar_reservation: str | None,
) -> NodePoolSettings:
    provisioning = spec.provisioning
    affinity = None
    if mode.reservation_affinity == ReservationAffinity.SPECIFIC_RESERVATION:
        reservation = provisioning.reservation
        if mode.mode == ProvisioningMode.CALENDAR:
            # A calendar block's reservation is the one its booking delivers (named as
            # the booking, `RequestFacts.booking_name`).
            reservation = calendar_reservation
        affinity = ReservationAffinityPlan(
            consume_reservation_type=mode.reservation_affinity,
            key=RESERVATION_NAME_KEY,
            values=(reservation or "",),
        )
    elif mode.reservation_affinity is not None:
        affinity = ReservationAffinityPlan(consume_reservation_type=mode.reservation_affinity)
    multi_host_tpu = shape.multi_host_tpu
    zones = (shape.zone,) if shape.zone is not None else tuple(provisioning.zones or ())
    return NodePoolSettings(
        mode=mode.mode,
        name=pool_name,
        machine_type=shape.machine_type,
        flex_start=mode.flex_start,
        queued_provisioning=mode.queued_provisioning,
        spot=mode.spot,
        autoscaling=AutoscalingPlan(
            max_node_count=shape.nodes,
            location_policy=mode.location_policy,
            # With no zones the pool takes the cluster's node locations: several, in a
            # regional cluster. GKE's queued-provisioning how-to caps the total too. A
            # TPU slice's pool has one zone and per-zone limits (zones.py).
            total=len(zones) != 1 and not multi_host_tpu,
        ),
        reservation_affinity=affinity,
        auto_repair=mode.auto_repair,
        placement_policy=PlacementPlan(
            type="WORKLOAD_POLICY" if shape.workload_policy else "COMPACT",
            tpu_topology=shape.topology or "",
        )
        if multi_host_tpu
        else None,
        max_run_duration_seconds=(
            int(parse_duration(provisioning.max_run_duration).total_seconds())
            if mode.node_max_run_duration
            else None
        ),
        needs_provisioning_request=mode.needs_provisioning_request,
        zones=zones,
        accelerator_type=shape.gpu_type,
        accelerator_count=shape.chips_per_node if shape.gpu_type else None,
        gpu_driver_version=shape.gpu_driver_version,
    )


def plan_slice(
    spec: TrainingRequestSpec,
    pool_name: str | None = None,
    site: ClusterSite | None = None,
    zones_field: str = ZONES_FIELD,
    calendar_reservation: str | None = None,
) -> SlicePlan:
    """Resolve the slice for `spec`; `pool_name` (the base name of the request's pools)
    names every slice's pool and, for a single slice, adds the node pool selector (the
    pods of a multi-slice request select their own slice's pool, see `workload`).
    `site`: where the cluster is, from which a multi-host TPU slice's zone is chosen
    when the request names none (`zones.slice_zone`). Without it (chip math alone) such
    a pool has no zone; the operator always plans with its cluster's site. `zones_field`
    names the step's zones in an error (a ladder step's are under `fallback[i]`).
    `calendar_reservation`: the reservation a Calendar step's booking delivers."""
    errors = spec_errors(spec)
    if errors:
        raise InvalidSpec(errors)
    shape = _shape(spec, site, zones_field)
    mode = MODE_SETTINGS[spec.provisioning.mode]
    selector = {shape.label_key: shape.label}
    if shape.topology is not None:
        selector[TPU_TOPOLOGY_LABEL_KEY] = shape.topology
    selector.update(mode.node_selector)
    pools = slice_pool_names(pool_name, shape.slices) if pool_name is not None else ()
    if pool_name is not None and shape.slices == 1:
        selector[NODE_POOL_LABEL_KEY] = pool_name
    tolerations = (shape.taint, *mode.tolerations)
    return SlicePlan(
        kind=shape.kind,
        accelerator=shape.accelerator,
        accelerator_label=shape.label,
        topology=shape.topology,
        machine_type=shape.machine_type,
        chips_per_node=shape.chips_per_node,
        nodes=shape.nodes,
        total_chips=shape.nodes * shape.chips_per_node,
        single_host=shape.nodes == 1,
        resource_name=shape.resource_name,
        node_selector=selector,
        tolerations=tuple(TolerationPlan.of(t) for t in tolerations),
        node_pool=_node_pool(spec, shape, mode, pool_name, calendar_reservation),
        max_restarts=(
            spec.max_restarts if spec.max_restarts is not None else mode.default_max_restarts
        ),
        # A calendar block is paid for to its end: its capacity is waited for until the
        # workload's stop before the end, whatever maxWaitDuration says (0: no timer).
        max_wait_seconds=0
        if spec.provisioning.mode == ProvisioningMode.CALENDAR
        else int(parse_duration(spec.provisioning.max_wait_duration).total_seconds()),
        max_run_seconds=int(parse_duration(spec.provisioning.max_run_duration).total_seconds()),
        slices=shape.slices,
        pool_names=pools,
    )
