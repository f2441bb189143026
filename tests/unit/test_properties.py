"""Chip math invariants over every valid (generation, topology, machine type)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dws_operator.catalog import GPU_ACCELERATORS, TPU_GENERATIONS, TpuGeneration, parse_topology
from dws_operator.errors import InvalidSpec
from dws_operator.planning import SlicePlan, plan_slice
from dws_operator.validation import spec_errors
from tests.builders import gpu, make_spec, tpu

NAMED = [
    (g.version.value, topology, host)
    for g in TPU_GENERATIONS.values()
    for topology, hosts in g.topologies.items()
    for host in hosts
]
CUBED = [g for g in TPU_GENERATIONS.values() if g.cube_rule is not None]


@st.composite
def cube_topologies(draw: st.DrawFn) -> tuple[str, str, str]:
    """A large 3-D slice built from whole 4x4x4 cubes, within the generation's limits."""
    generation: TpuGeneration = draw(st.sampled_from(CUBED))
    rule = generation.cube_rule
    assert rule is not None
    max_side = (rule.side_max or 4 * rule.max_cubes) // 4
    a = draw(st.integers(1, min(max_side, rule.max_cubes)))
    b = draw(st.integers(1, min(max_side, rule.max_cubes // a)))
    c = draw(st.integers(1, min(max_side, rule.max_cubes // (a * b))))
    sides = [4 * a, 4 * b, 4 * c]
    if rule.sorted_sides:
        sides.sort()
    return generation.version.value, "x".join(map(str, sides)), rule.machine_type


VALID_TPU = st.one_of(st.sampled_from(NAMED), cube_topologies())


def _check_invariants(plan: SlicePlan) -> None:
    assert plan.nodes >= 1
    assert plan.nodes * plan.chips_per_node == plan.total_chips
    assert plan.single_host is (plan.nodes == 1)
    assert plan.node_pool.autoscaling.min_node_count == 0
    assert plan.node_pool.autoscaling.max_node_count == plan.nodes
    assert plan.node_pool.machine_type == plan.machine_type


@given(VALID_TPU, st.sampled_from(["Spot", "OnDemand"]))
def test_tpu_nodes_times_chips_is_total(case: tuple[str, str, str], mode: str) -> None:
    version, topology, machine_type = case
    plan = plan_slice(make_spec(tpu(version, topology, machine_type), mode=mode))
    _check_invariants(plan)
    sides = parse_topology(topology)
    assert sides is not None
    assert plan.total_chips == math.prod(sides)
    multi_host = plan.node_pool.placement_policy is not None
    assert multi_host is (plan.nodes > 1)


@given(VALID_TPU)
def test_default_machine_type_is_valid_too(case: tuple[str, str, str]) -> None:
    version, topology, _ = case
    plan = plan_slice(make_spec(tpu(version, topology), mode="Spot"))
    _check_invariants(plan)
    assert plan.machine_type.endswith("-1t") is (plan.total_chips == 1)


@given(
    st.sampled_from([g.version.value for g in TPU_GENERATIONS.values()]),
    st.lists(st.integers(1, 600), min_size=2, max_size=3),
)
def test_any_topology_is_planned_or_rejected_on_the_topology_field(
    version: str, sides: list[int]
) -> None:
    topology = "x".join(map(str, sides))
    spec = make_spec(tpu(version, topology), mode="Spot")
    errors = spec_errors(spec)
    if errors:
        assert errors[0].field == "spec.accelerator.tpu.topology"
        assert topology in errors[0].message
        with pytest.raises(InvalidSpec):
            plan_slice(spec)
    else:
        plan = plan_slice(spec)
        _check_invariants(plan)
        assert plan.total_chips == math.prod(sides)


GPU_MACHINES = [
    (a.type.value, m.name, m.gpus) for a in GPU_ACCELERATORS.values() for m in a.machine_types
]


@given(st.sampled_from(GPU_MACHINES), st.integers(1, 1000))
def test_gpu_nodes_times_gpus_is_total(case: tuple[str, str, int], nodes: int) -> None:
    gpu_type, machine_type, gpus = case
    plan = plan_slice(make_spec(gpu(gpu_type, nodes, machine_type), mode="OnDemand"))
    _check_invariants(plan)
    assert (plan.nodes, plan.chips_per_node, plan.total_chips) == (nodes, gpus, nodes * gpus)
