"""Every row of the TPU and GPU tables in `tests/unit/facts.py` resolves as it says."""

from __future__ import annotations

import pytest

from dws_operator.catalog import (
    GPU_ACCELERATORS,
    TPU_GENERATIONS,
    GpuType,
    TpuVersion,
    parse_topology,
    topology_chips,
)
from dws_operator.planning import plan_slice
from tests.builders import gpu, make_spec, tpu
from tests.unit import facts


def test_catalog_has_exactly_the_sheets_generations_and_gpus() -> None:
    assert {v.value for v in TPU_GENERATIONS} == set(facts.TPU_LABELS)
    assert {t.value for t in GPU_ACCELERATORS} == set(facts.GPU_MACHINES)


@pytest.mark.parametrize(("version", "label"), sorted(facts.TPU_LABELS.items()))
def test_tpu_accelerator_label(version: str, label: str) -> None:
    assert TPU_GENERATIONS[TpuVersion(version)].accelerator_label == label


def test_tpu_machine_types_and_chips() -> None:
    catalog = {m.name: m.chips for g in TPU_GENERATIONS.values() for m in g.machine_types}
    assert catalog == facts.TPU_MACHINE_CHIPS


@pytest.mark.parametrize(
    ("version", "topology", "requested", "machine_type", "nodes"),
    facts.TPU_ROWS,
    ids=[f"{r[0]}-{r[1]}-{r[2] or 'default'}" for r in facts.TPU_ROWS],
)
def test_tpu_row(
    version: str, topology: str, requested: str | None, machine_type: str, nodes: int
) -> None:
    plan = plan_slice(make_spec(tpu(version, topology, requested), mode="Spot"))
    chips = facts.TPU_MACHINE_CHIPS[machine_type]
    assert plan.machine_type == machine_type
    assert plan.nodes == nodes
    assert plan.chips_per_node == chips
    assert plan.total_chips == nodes * chips == topology_chips(topology)
    assert plan.single_host is (nodes == 1)
    assert plan.accelerator_label == facts.TPU_LABELS[version]
    assert plan.resource_name == "google.com/tpu"


@pytest.mark.parametrize(
    ("version", "topology", "machine_type"),
    [
        ("v5e", "1x1", "ct5lp-hightpu-1t"),
        ("v6e", "1x1", "ct6e-standard-1t"),
        ("v5e", "2x2", "ct5lp-hightpu-4t"),
        ("v6e", "2x2", "ct6e-standard-4t"),
        ("v4", "2x2x1", "ct4p-hightpu-4t"),
        ("v5p", "2x2x1", "ct5p-hightpu-4t"),
        ("tpu7x", "2x2x1", "tpu7x-standard-4t"),
        ("tpu7x", "1x1x1", "tpu7x-standard-1t"),
        ("v5e", "2x4", "ct5lp-hightpu-8t"),
        ("v6e", "2x4", "ct6e-standard-8t"),
    ],
)
def test_single_host_slices(version: str, topology: str, machine_type: str) -> None:
    plan = plan_slice(make_spec(tpu(version, topology, machine_type), mode="OnDemand"))
    assert plan.nodes == 1
    assert plan.single_host
    # A single VM is not a multi-host slice: no COMPACT placement, no topology flag.
    assert plan.node_pool.placement_policy is None
    assert plan.node_pool.autoscaling.max_node_count == 1


@pytest.mark.parametrize("version", ["v5e", "v6e"])
def test_largest_two_d_slice_is_64_nodes(version: str) -> None:
    plan = plan_slice(make_spec(tpu(version, "16x16"), mode="Spot"))
    assert (plan.nodes, plan.chips_per_node, plan.total_chips) == (64, 4, 256)
    assert plan.node_pool.autoscaling.max_node_count == 64
    assert plan.node_pool.placement_policy is not None
    assert plan.node_pool.placement_policy.tpu_topology == "16x16"


def test_two_by_four_defaults_to_two_vms_as_xpk() -> None:
    plan = plan_slice(make_spec(tpu("v6e", "2x4")))
    assert (plan.machine_type, plan.nodes) == ("ct6e-standard-4t", 2)
    assert not plan.single_host


@pytest.mark.parametrize(
    ("topology", "sides"),
    [
        ("4x4", (4, 4)),
        ("2x2x1", (2, 2, 1)),
        ("16x16", (16, 16)),
        ("4x", None),
        ("0x4", None),
        ("4x4x4x4", None),
        ("04x4", None),
        ("", None),
        ("4X4", None),
        ("-4x4", None),
    ],
)
def test_parse_topology(topology: str, sides: tuple[int, ...] | None) -> None:
    assert parse_topology(topology) == sides


@pytest.mark.parametrize(
    ("gpu_type", "machine_type", "gpus"),
    [(t, m, n) for t, machines in facts.GPU_MACHINES.items() for m, n in machines.items()],
)
def test_gpu_row(gpu_type: str, machine_type: str, gpus: int) -> None:
    plan = plan_slice(make_spec(gpu(gpu_type, nodes=3, machine_type=machine_type), mode="Spot"))
    assert plan.machine_type == machine_type
    assert plan.chips_per_node == gpus
    assert plan.nodes == 3
    assert plan.total_chips == 3 * gpus
    assert plan.accelerator_label == gpu_type
    assert plan.resource_name == "nvidia.com/gpu"
    assert plan.node_pool.accelerator_type == gpu_type
    assert plan.node_pool.accelerator_count == gpus


@pytest.mark.parametrize("gpu_type", list(facts.GPU_MACHINES))
def test_gpu_machine_types_match_sheet(gpu_type: str) -> None:
    accelerator = GPU_ACCELERATORS[GpuType(gpu_type)]
    assert {m.name: m.gpus for m in accelerator.machine_types} == facts.GPU_MACHINES[gpu_type]


@pytest.mark.parametrize(
    ("gpu_type", "expected"),
    [
        ("nvidia-l4", "g2-standard-96"),
        ("nvidia-tesla-a100", "a2-highgpu-8g"),
        ("nvidia-a100-80gb", "a2-ultragpu-8g"),
        ("nvidia-h100-80gb", "a3-highgpu-8g"),
        ("nvidia-h100-mega-80gb", "a3-megagpu-8g"),
        ("nvidia-h200-141gb", "a3-ultragpu-8g"),
        ("nvidia-b200", "a4-highgpu-8g"),
        ("nvidia-gb200", "a4x-highgpu-4g"),
    ],
)
def test_gpu_default_machine_type_is_the_full_host(gpu_type: str, expected: str) -> None:
    plan = plan_slice(make_spec(gpu(gpu_type, nodes=2), mode="OnDemand"))
    assert plan.machine_type == expected


@pytest.mark.parametrize(
    ("gpu_type", "count", "expected"),
    [
        ("nvidia-l4", 1, "g2-standard-4"),
        ("nvidia-l4", 2, "g2-standard-24"),
        ("nvidia-l4", 4, "g2-standard-48"),
        ("nvidia-tesla-a100", 16, "a2-megagpu-16g"),
        ("nvidia-h100-80gb", 2, "a3-highgpu-2g"),
    ],
)
def test_gpu_count_picks_the_smallest_machine_with_that_many(
    gpu_type: str, count: int, expected: str
) -> None:
    plan = plan_slice(make_spec(gpu(gpu_type, count=count), mode="Spot"))
    assert (plan.machine_type, plan.chips_per_node) == (expected, count)


@pytest.mark.parametrize("gpu_type", sorted(facts.GPU_MACHINES))
def test_flex_start_gpus_match_seed_000(gpu_type: str) -> None:
    assert GPU_ACCELERATORS[GpuType(gpu_type)].flex_start is (gpu_type in facts.FLEX_START_GPUS)
