"""The pure parts of the load benchmark (hack/bench.py): percentiles, GKE's lower bounds,
/proc parsing, the request shapes, and how GKE's state is judged."""

from __future__ import annotations

import pytest

from dws_operator.api import TrainingRequestSpec
from dws_operator.planning import plan_slice
from dws_operator.zones import ClusterSite
from dws_workshop.devcluster.stages import SIM_DURATION_ANNOTATION
from dws_workshop.sandbox.figures import mixed_bound, percentile, queue_latencies, quota_bound
from dws_workshop.sandbox.gke_view import GkeSnapshot, OperationTimes, PoolNow, wall_seconds
from dws_workshop.sandbox.load import RequestRecord
from dws_workshop.sandbox.process_usage import cpu_seconds, memory_bytes
from dws_workshop.sandbox.shapes import SHAPES, Shape, request_manifest, shape_for
from dws_workshop.sandbox.testbed import GkeLimits, emulator_config

# Percentiles ------------------------------------------------------------------


def test_percentile_interpolates_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 100.0


def test_percentile_ignores_order_and_handles_one_value() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([7.5], 99) == 7.5


def test_percentile_of_nothing_is_none() -> None:
    assert percentile([], 99) is None


def test_percentile_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not within 0\.\.100"):
        percentile([1.0], 101)


# GKE's bounds -----------------------------------------------------------------


def test_quota_bound_counts_rounds_of_the_quota() -> None:
    # The arithmetic: 1,000 creates, 5 at a time, 40 s each: 8,000 s (~2 h).
    assert quota_bound(1000, 5, 40.0) == 8000.0
    assert quota_bound(5, 5, 4.0) == 4.0
    assert quota_bound(6, 5, 4.0) == 8.0
    assert quota_bound(0, 5, 4.0) == 0.0


def test_quota_bound_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        quota_bound(1, 0, 4.0)


def test_mixed_bound_with_creates_only_is_the_quota_bound() -> None:
    assert mixed_bound(23, 0, 5, 4.0, 1.0) == quota_bound(23, 5, 4.0)


def test_mixed_bound_with_updates_only_is_their_rounds() -> None:
    assert mixed_bound(0, 12, 5, 4.0, 1.0) == 3.0


def test_mixed_bound_takes_the_total_work_when_it_is_larger() -> None:
    # Creates alone: 1 round of 4 s; updates alone: 2 rounds of 1 s; together 22 s of
    # work over 5 slots: 4.4 s.
    assert mixed_bound(3, 10, 5, 4.0, 1.0) == pytest.approx(4.4)


def test_queue_latencies_of_a_burst_fill_the_slots_round_by_round() -> None:
    latencies = queue_latencies([0.0] * 12, quota=5, duration=1.0)
    assert sorted(latencies) == [1.0] * 5 + [2.0] * 5 + [3.0] * 2
    assert max(latencies) == quota_bound(12, 5, 1.0)


def test_queue_latencies_of_spread_arrivals_never_wait() -> None:
    assert queue_latencies([0.0, 2.0, 4.0, 6.0], quota=1, duration=2.0) == [2.0] * 4


def test_queue_latencies_wait_for_the_first_free_slot() -> None:
    # Two slots busy until 3 and 4: the third arrival (at 1) starts at 3.
    assert queue_latencies([1.0, 0.0, 0.0], quota=2, duration=3.0) == [3.0, 3.0, 5.0]


# /proc ------------------------------------------------------------------------

STAT = (
    "4242 (python (dws) run) S 1 4242 4242 0 -1 4194560 51234 0 12 0 "
    "1234 567 0 0 20 0 9 0 123456 987654321 54321 18446744073709551615 0 0 0 0 0 0 0"
)


def test_cpu_seconds_reads_utime_and_stime_after_the_command_name() -> None:
    assert cpu_seconds(STAT, ticks_per_second=100) == pytest.approx(18.01)


def test_memory_bytes_reads_a_kb_line() -> None:
    status = "Name:\tpython\nVmHWM:\t  250000 kB\nVmRSS:\t  131072 kB\nThreads:\t9\n"
    assert memory_bytes(status) == 131072 * 1024
    assert memory_bytes(status, "VmHWM") == 250000 * 1024


def test_memory_bytes_without_the_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="VmRSS not in"):
        memory_bytes("Name:\tpython\n")


# Shapes -----------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_every_shape_is_a_valid_request(shape: Shape) -> None:
    manifest = request_manifest("load-w1-00000", "default", shape, "2s")
    spec = TrainingRequestSpec.model_validate(manifest["spec"])
    assert spec.provisioning.mode.value in ("FlexStart", "Spot")
    # The operator can place it on the load run's regional cluster (a multi-host TPU
    # slice needs a zone it can justify there).
    [cluster] = emulator_config(GkeLimits()).clusters
    site = ClusterSite(cluster.location, tuple(cluster.node_zones))
    plan = plan_slice(spec, pool_name="load", site=site)
    assert plan.nodes == shape.nodes()
    assert manifest["spec"]["template"]["metadata"]["annotations"] == {
        SIM_DURATION_ANNOTATION: "2s"
    }


def test_shapes_mix_tpu_and_gpu_flex_start_and_spot() -> None:
    assert len(SHAPES) == 10
    assert len({s.name for s in SHAPES}) == len(SHAPES)
    kinds = {next(iter(s.accelerator)) for s in SHAPES}
    assert kinds == {"tpu", "gpu"}
    assert {s.mode for s in SHAPES} == {"FlexStart", "Spot"}
    # Small slices: a thousand requests stay cheap for kwok once capacity arrives.
    assert {s.nodes() for s in SHAPES} == {1, 2}


def test_shapes_go_round_robin() -> None:
    assert [shape_for(i) for i in range(len(SHAPES))] == list(SHAPES)
    assert shape_for(len(SHAPES) + 3) == SHAPES[3]


# The emulator's limits --------------------------------------------------------


def test_emulator_config_runs_each_operation_for_its_scaled_duration() -> None:
    limits = GkeLimits(clock_factor=10.0, concurrent_operations=5)
    config = emulator_config(limits)
    assert config.clusters[0].concurrent_operations_quota == 5
    assert config.clock_factor == 10.0
    assert config.operation_durations["CreateNodePool"] == 40.0
    assert config.operation_durations["DeleteNodePool"] == 20.0
    assert config.operation_durations["SetNodePoolAutoscaling"] == 10.0
    assert config.operation_durations["SetNodePoolSize"] == 10.0
    assert config.operation_seconds("CreateNodePool") == 4.0  # real seconds at 10x
    # Durations only: no call fails and no operation ends in error.
    assert config.faults == {}


# Judging GKE's state ------------------------------------------------------------


def test_wall_seconds_reads_the_emulators_rfc3339() -> None:
    assert wall_seconds("1970-01-01T00:01:40.250Z") == pytest.approx(100.25)
    assert wall_seconds("") is None


def record(**fields: object) -> RequestRecord:
    base: dict[str, object] = {"name": "r", "shape": SHAPES[0], "wave": 1, "pools": ("p",)}
    return RequestRecord(**(base | fields))  # type: ignore[arg-type]


def gke(pool: PoolNow | None, *operations: tuple[float, float | None]) -> GkeSnapshot:
    return GkeSnapshot(
        pools={"p": pool} if pool else {},
        operations={"p": [OperationTimes("p", s, e) for s, e in operations]},
    )


READY = PoolNow(running=True, max_nodes=1, nodes=0)


def test_capacity_requested_when_the_pool_is_made_and_the_job_exists() -> None:
    state = gke(READY, (10.0, 14.5))
    assert state.capacity_requested_at(record(job_seen_at=15.0), 1, since=9.0) == 15.0
    # The Job seen first (a design that creates it early): the pool's operation decides.
    assert state.capacity_requested_at(record(job_seen_at=12.0), 1, since=9.0) == 14.5


def test_capacity_not_requested_without_job_pool_or_room() -> None:
    assert gke(READY, (10.0, 14.5)).capacity_requested_at(record(), 1, 9.0) is None
    assert gke(None).capacity_requested_at(record(job_seen_at=15.0), 1, 9.0) is None
    small = PoolNow(running=True, max_nodes=1, nodes=0)
    assert gke(small).capacity_requested_at(record(job_seen_at=15.0), 2, 9.0) is None
    busy = gke(READY, (10.0, 14.5), (14.6, None))
    assert busy.capacity_requested_at(record(job_seen_at=15.0), 1, 9.0) is None


def test_capacity_requested_counts_only_this_waves_operations() -> None:
    # A reused pool: its scale-down of the earlier wave (before `since`) does not count;
    # the update that readied it for this request does.
    state = gke(READY, (1.0, 2.0), (20.0, 21.0))
    assert state.capacity_requested_at(record(job_seen_at=19.0), 1, since=18.0) == 21.0


def test_pool_at_zero_after_its_last_operation() -> None:
    zero = PoolNow(running=True, max_nodes=0, nodes=0)
    state = gke(zero, (30.0, 31.0), (31.1, 32.0))
    assert state.at_zero_at(record(), since=29.0, now=40.0) == 32.0
    # Deleted counts as zero too.
    assert gke(None, (30.0, 33.0)).at_zero_at(record(), since=29.0, now=40.0) == 33.0


def test_pool_not_at_zero_while_it_may_have_nodes() -> None:
    capped_with_nodes = PoolNow(running=True, max_nodes=0, nodes=1)
    assert gke(capped_with_nodes).at_zero_at(record(), since=0.0, now=1.0) is None
    assert gke(READY).at_zero_at(record(), since=0.0, now=1.0) is None
    zero = PoolNow(running=True, max_nodes=0, nodes=0)
    assert gke(zero, (30.0, None)).at_zero_at(record(), since=29.0, now=40.0) is None


def test_a_slice_pool_is_at_zero_with_no_node_and_its_maximum_kept() -> None:
    resized = PoolNow(running=True, max_nodes=2, nodes=0, holds_slice=True)
    assert gke(resized, (30.0, 31.0)).at_zero_at(record(), since=29.0, now=40.0) == 31.0
    still_up = PoolNow(running=True, max_nodes=2, nodes=1, holds_slice=True)
    assert gke(still_up).at_zero_at(record(), since=0.0, now=1.0) is None
