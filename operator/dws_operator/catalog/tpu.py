"""TPU generations, machine types and slice topologies, as data.

Source: GKE's TPU documentation. Everything else (the planner, the CEL rules in the
CRD, the table in the README) is derived from these rows, so a new generation or
topology is one edit here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

TPU_RESOURCE = "google.com/tpu"
TPU_ACCELERATOR_LABEL_KEY = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL_KEY = "cloud.google.com/gke-tpu-topology"
TPU_TAINT_KEY = "google.com/tpu"
TPU_TAINT_VALUE = "present"

#: Syntax of a topology string: 2 or 3 positive sides without leading zeros.
#: Semantic checks (which shapes a generation accepts) come from the catalog.
TOPOLOGY_PATTERN = r"^[1-9][0-9]{0,3}(x[1-9][0-9]{0,3}){1,2}$"
_TOPOLOGY_RE = re.compile(TOPOLOGY_PATTERN)


class TpuVersion(StrEnum):
    V4 = "v4"
    V5E = "v5e"
    V5P = "v5p"
    V6E = "v6e"
    TPU7X = "tpu7x"


@dataclass(frozen=True)
class TpuMachineType:
    name: str
    chips: int


@dataclass(frozen=True)
class CubeRule:
    """Large 3-D slices: every side a multiple of `side_step`, built from 4x4x4 cubes."""

    side_step: int
    side_min: int
    side_max: int | None
    max_cubes: int
    sorted_sides: bool
    machine_type: str

    def describe(self) -> str:
        bounds = f" from {self.side_min} to {self.side_max}" if self.side_max else ""
        order = ", A<=B<=C" if self.sorted_sides else ""
        return (
            f"AxBxC with every side a multiple of {self.side_step}{bounds}{order}, "
            f"at most {self.max_cubes} cubes of 4x4x4"
        )

    def accepts(self, sides: tuple[int, ...]) -> bool:
        if len(sides) != 3:
            return False
        if any(s % self.side_step or s < self.side_min for s in sides):
            return False
        if self.side_max is not None and any(s > self.side_max for s in sides):
            return False
        if self.sorted_sides and list(sides) != sorted(sides):
            return False
        return math.prod(sides) // 64 <= self.max_cubes


@dataclass(frozen=True)
class TpuGeneration:
    version: TpuVersion
    accelerator_label: str
    machine_types: tuple[TpuMachineType, ...]
    #: Named topologies with the machine types that can host them.
    topologies: dict[str, tuple[str, ...]]
    dimensions: int
    cube_rule: CubeRule | None = None
    #: Flex-start (and so flex-start with queued provisioning) serves this generation.
    #: GKE: TPU v3 and v4 are not supported with flex-start.
    flex_start: bool = True
    #: Multi-host pools are placed by a Compute workload policy (HIGH_THROUGHPUT with the
    #: slice's accelerator topology) named as the pool's placement policy, instead of a
    #: COMPACT placement with `tpu_topology`: GKE's rule for Ironwood (tpu7x).
    workload_policy: bool = False
    #: Zones where GKE documents flex-start capacity for this generation (GKE's
    #: "About GPU and TPU provisioning with flex-start" page, read 2026-11-27). Empty:
    #: no documented list, so the operator never picks a zone for it on its own.
    flex_start_zones: tuple[str, ...] = ()
    #: The only boot disk types its TPU VMs take (Cloud TPU's table "TPU support for
    #: Hyperdisk and Persistent Disk"). Empty: none documented, any is sent.
    boot_disk_types: tuple[str, ...] = ()
    #: Compute's VM family of the generation's calendar-mode (DWS Calendar) blocks
    #: (`aggregateReservation.vmFamily`); None: calendar mode does not serve it.
    calendar_family: str | None = None
    #: Zones where calendar mode serves the generation for training (workload type
    #: BATCH), as Cloud TPU's calendar-mode page lists them (updated 2025-12-18, read
    #: 2026-11-27; tpu7x's, in preview, not served here yet).
    calendar_zones: tuple[str, ...] = ()

    def machine_type(self, name: str) -> TpuMachineType | None:
        return next((m for m in self.machine_types if m.name == name), None)

    @property
    def machine_type_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.machine_types)

    def machine_types_for(self, topology: str) -> tuple[str, ...]:
        """Machine types that can host `topology`; empty if the topology is not valid."""
        if topology in self.topologies:
            return self.topologies[topology]
        sides = parse_topology(topology)
        if sides is not None and self.cube_rule is not None and self.cube_rule.accepts(sides):
            return (self.cube_rule.machine_type,)
        return ()

    def describe_topologies(self) -> str:
        named = ", ".join(self.topologies)
        return f"{named} or {self.cube_rule.describe()}" if self.cube_rule else named


def parse_topology(topology: str) -> tuple[int, ...] | None:
    if not _TOPOLOGY_RE.match(topology):
        return None
    return tuple(int(side) for side in topology.split("x"))


def topology_chips(topology: str) -> int:
    sides = parse_topology(topology)
    if sides is None:
        raise ValueError(f"malformed topology {topology!r}")
    return math.prod(sides)


def _two_d(prefix: str) -> dict[str, tuple[str, ...]]:
    t1, t4, t8 = f"{prefix}-1t", f"{prefix}-4t", f"{prefix}-8t"
    return {
        "1x1": (t1,),
        "2x2": (t4,),
        "2x4": (t4, t8),  # 8t: one VM; 4t: two VMs (the default, as xpk does)
        "4x4": (t4,),
        "4x8": (t4,),
        "8x8": (t4,),
        "8x16": (t4,),
        "16x16": (t4,),
    }


_SMALL_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")

TPU_GENERATIONS: dict[TpuVersion, TpuGeneration] = {
    g.version: g
    for g in (
        TpuGeneration(
            version=TpuVersion.V4,
            accelerator_label="tpu-v4-podslice",
            machine_types=(TpuMachineType("ct4p-hightpu-4t", 4),),
            topologies=dict.fromkeys(_SMALL_3D, ("ct4p-hightpu-4t",)),
            dimensions=3,
            cube_rule=CubeRule(
                side_step=4,
                side_min=4,
                side_max=256,
                max_cubes=64,
                sorted_sides=False,
                machine_type="ct4p-hightpu-4t",
            ),
            flex_start=False,
            boot_disk_types=("pd-balanced",),
        ),
        TpuGeneration(
            version=TpuVersion.V5E,
            accelerator_label="tpu-v5-lite-podslice",
            machine_types=(
                TpuMachineType("ct5lp-hightpu-1t", 1),
                TpuMachineType("ct5lp-hightpu-4t", 4),
                TpuMachineType("ct5lp-hightpu-8t", 8),
            ),
            topologies=_two_d("ct5lp-hightpu"),
            dimensions=2,
            flex_start_zones=("us-west4-a",),
            boot_disk_types=("pd-balanced",),
            calendar_family="VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT5LP",
            calendar_zones=("europe-west4-b", "us-west4-b"),
        ),
        TpuGeneration(
            version=TpuVersion.V5P,
            accelerator_label="tpu-v5p-slice",
            machine_types=(TpuMachineType("ct5p-hightpu-4t", 4),),
            topologies=dict.fromkeys(_SMALL_3D, ("ct5p-hightpu-4t",)),
            dimensions=3,
            cube_rule=CubeRule(
                side_step=4,
                side_min=4,
                side_max=None,
                max_cubes=140,
                sorted_sides=True,
                machine_type="ct5p-hightpu-4t",
            ),
            flex_start_zones=("us-east5-a",),
            boot_disk_types=("pd-balanced",),
            calendar_family="VM_FAMILY_CLOUD_TPU_POD_SLICE_CT5P",
            calendar_zones=("us-east5-a",),
        ),
        TpuGeneration(
            version=TpuVersion.V6E,
            accelerator_label="tpu-v6e-slice",
            machine_types=(
                TpuMachineType("ct6e-standard-1t", 1),
                TpuMachineType("ct6e-standard-4t", 4),
                TpuMachineType("ct6e-standard-8t", 8),
            ),
            topologies=_two_d("ct6e-standard"),
            dimensions=2,
            flex_start_zones=("asia-northeast1-b", "us-east5-a", "us-east5-b"),
            boot_disk_types=("hyperdisk-balanced",),
            calendar_family="VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E",
            calendar_zones=("asia-northeast1-b", "europe-west4-a", "us-east5-a", "us-east5-b"),
        ),
        TpuGeneration(
            version=TpuVersion.TPU7X,
            accelerator_label="tpu7x",
            machine_types=(
                TpuMachineType("tpu7x-standard-1t", 1),
                TpuMachineType("tpu7x-standard-4t", 4),
            ),
            topologies={
                "1x1x1": ("tpu7x-standard-1t",),
                **dict.fromkeys(_SMALL_3D, ("tpu7x-standard-4t",)),
            },
            dimensions=3,
            cube_rule=CubeRule(
                side_step=4,
                side_min=4,
                side_max=None,
                max_cubes=144,
                # xpk generates tpu7x systems with sides A<=B<=C only (as for v5p; only
                # v4 takes unsorted sides there): 4x4x8 exists, 8x4x4 does not.
                sorted_sides=True,
                machine_type="tpu7x-standard-4t",
            ),
            workload_policy=True,
        ),
    )
}


def default_machine_type(generation: TpuGeneration, topology: str) -> str:
    """The 1t type for a single chip, otherwise the 4t type; 8t only when asked for."""
    candidates = generation.machine_types_for(topology)
    chips = topology_chips(topology)
    by_chips = {m.name: m.chips for m in generation.machine_types}
    wanted = 1 if chips == 1 else 4
    for name in candidates:
        if by_chips[name] == wanted:
            return name
    return candidates[0]


def boot_disk_types(machine_type: str) -> tuple[str, ...]:
    """The boot disk types a TPU machine type takes; empty when any may be sent (not a
    TPU machine type, or none documented)."""
    for generation in TPU_GENERATIONS.values():
        if generation.machine_type(machine_type) is not None:
            return generation.boot_disk_types
    return ()
