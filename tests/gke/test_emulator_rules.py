"""GKE's validation, as the emulator enforces it: INVALID_ARGUMENT naming the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.cloud import container_v1
from google.protobuf.duration_pb2 import Duration

from dws_operator.gke import GkeError, NodePoolClient
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator
from tests.builders import gpu, tpu
from tests.gke.harness import UID, make_policy, queued_tpu, rendered, run

NodePool = container_v1.NodePool
Affinity = container_v1.ReservationAffinity


def flex_tpu() -> NodePool:
    return rendered(tpu("v6e", "4x4"))


def queued_gpu() -> NodePool:
    return rendered(gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning")


def queued_v6e() -> NodePool:
    return queued_tpu("v6e", "4x4")


def spot_gpu() -> NodePool:
    return rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot")


def change(base: Callable[[], NodePool], edit: Callable[[NodePool], Any]) -> Callable[[], NodePool]:
    def build() -> NodePool:
        pool = base()
        edit(pool)
        return pool

    return build


def set_(path: str, value: Any) -> Callable[[NodePool], None]:
    def edit(pool: NodePool) -> None:
        *parents, leaf = path.split(".")
        target: Any = pool
        for part in parents:
            target = getattr(target, part)
        setattr(target, leaf, value)

    return edit


def as_flex_start(pool: NodePool) -> None:
    pool.config.flex_start = True
    pool.config.reservation_affinity = Affinity(
        consume_reservation_type=Affinity.Type.NO_RESERVATION
    )


def as_queued_flex_start(pool: NodePool) -> None:
    as_flex_start(pool)
    pool.queued_provisioning = NodePool.QueuedProvisioning(enabled=True)


def as_per_zone_limits(low: int, high: int) -> Callable[[NodePool], None]:
    def edit(pool: NodePool) -> None:
        pool.autoscaling.total_min_node_count = pool.autoscaling.total_max_node_count = 0
        pool.autoscaling.min_node_count = low
        pool.autoscaling.max_node_count = high

    return edit


def as_total_limits(low: int, high: int) -> Callable[[NodePool], None]:
    def edit(pool: NodePool) -> None:
        pool.autoscaling.min_node_count = pool.autoscaling.max_node_count = 0
        pool.autoscaling.total_min_node_count = low
        pool.autoscaling.total_max_node_count = high

    return edit


SPECIFIC = Affinity(
    consume_reservation_type=Affinity.Type.SPECIFIC_RESERVATION,
    key="compute.googleapis.com/reservation-name",
    values=["res-a"],
)

RULES = [
    pytest.param(
        change(flex_tpu, set_("autoscaling.enabled", False)),
        "node_pool.autoscaling",
        "autoscaling enabled with min_node_count 0",
        id="flex-start-needs-autoscaling",
    ),
    pytest.param(
        change(flex_tpu, set_("autoscaling.min_node_count", 1)),
        "node_pool.autoscaling",
        "min_node_count 0",
        id="flex-start-needs-min-zero",
    ),
    pytest.param(
        change(flex_tpu, as_per_zone_limits(low=1, high=4)),
        "node_pool.autoscaling",
        "min_node_count 0",
        id="flex-start-needs-per-zone-min-zero",
    ),
    pytest.param(
        change(flex_tpu, set_("config.reservation_affinity", SPECIFIC)),
        "node_pool.config.reservation_affinity.consume_reservation_type",
        "set NO_RESERVATION",
        id="flex-start-no-reservation",
    ),
    pytest.param(
        change(flex_tpu, set_("config.reservation_affinity", Affinity())),
        "node_pool.config.reservation_affinity.consume_reservation_type",
        "cannot consume reservations",
        id="flex-start-needs-explicit-no-reservation",
    ),
    pytest.param(
        change(flex_tpu, set_("config.spot", True)),
        "node_pool.config.spot",
        "cannot use Spot VMs",
        id="flex-start-not-spot",
    ),
    pytest.param(
        change(lambda: rendered(tpu("v4", "2x2x2"), "OnDemand"), as_flex_start),
        "node_pool.config.machine_type",
        "flex-start does not support TPU v3 or v4 (ct4p-hightpu-4t)",
        id="flex-start-rejects-tpu-v4",
    ),
    pytest.param(
        change(lambda: rendered(gpu("nvidia-gb200"), "OnDemand"), as_flex_start),
        "node_pool.config.machine_type",
        "flex-start does not support machine type a4x-highgpu-4g (nvidia-gb200)",
        id="flex-start-rejects-a4x",
    ),
    pytest.param(
        change(lambda: rendered(gpu("nvidia-gb200", nodes=2), "OnDemand"), as_queued_flex_start),
        "node_pool.config.machine_type",
        "flex-start with queued provisioning does not support machine type a4x-highgpu-4g",
        id="queued-provisioning-rejects-a4x",
    ),
    pytest.param(
        change(flex_tpu, set_("config.max_run_duration", Duration(seconds=8 * 86400))),
        "node_pool.config.max_run_duration",
        "7 days",
        id="flex-start-max-run-duration",
    ),
    pytest.param(
        change(queued_gpu, set_("config.flex_start", False)),
        "node_pool.config.flex_start",
        "queued provisioning node pools must use flex-start",
        id="queued-provisioning-needs-flex-start",
    ),
    pytest.param(
        change(queued_v6e, set_("config.flex_start", False)),
        "node_pool.config.flex_start",
        "queued provisioning node pools must use flex-start",
        id="queued-provisioning-tpu-needs-flex-start",
    ),
    pytest.param(
        change(queued_gpu, set_("autoscaling.enabled", False)),
        "node_pool.autoscaling.enabled",
        "queued provisioning node pools need autoscaling",
        id="queued-provisioning-needs-autoscaling",
    ),
    pytest.param(
        change(queued_v6e, as_per_zone_limits(low=1, high=4)),
        "node_pool.autoscaling.min_node_count",
        "scale from zero: must be 0, got 1",
        id="queued-provisioning-min-zero",
    ),
    pytest.param(
        change(queued_gpu, as_total_limits(low=1, high=2)),
        "node_pool.autoscaling.total_min_node_count",
        "scale from zero: must be 0, got 1",
        id="queued-provisioning-total-min-zero",
    ),
    pytest.param(
        change(queued_gpu, set_("initial_node_count", 2)),
        "node_pool.initial_node_count",
        "start empty",
        id="queued-provisioning-starts-empty",
    ),
    pytest.param(
        change(queued_v6e, set_("initial_node_count", 4)),
        "node_pool.initial_node_count",
        "start empty",
        id="queued-provisioning-tpu-starts-empty",
    ),
    pytest.param(
        change(queued_gpu, set_("config.reservation_affinity", SPECIFIC)),
        "node_pool.config.reservation_affinity.consume_reservation_type",
        "queued provisioning node pools cannot consume reservations",
        id="queued-provisioning-no-reservation",
    ),
    pytest.param(
        change(lambda: rendered(tpu("v4", "2x2x2"), "OnDemand"), as_queued_flex_start),
        "node_pool.config.machine_type",
        "flex-start does not support TPU v3 or v4 (ct4p-hightpu-4t)",
        id="queued-provisioning-rejects-tpu-v4",
    ),
    pytest.param(
        change(flex_tpu, set_("config.machine_type", "ct6e-standard-8t")),
        "node_pool.placement_policy.tpu_topology",
        "topology 4x4 (16 chips) does not fit machine type ct6e-standard-8t",
        id="topology-machine-type-from-catalog",
    ),
    pytest.param(
        change(flex_tpu, set_("placement_policy.tpu_topology", "1x1")),
        "node_pool.placement_policy.tpu_topology",
        "(1 chips) does not fit machine type ct6e-standard-4t (4 chips per VM)",
        id="topology-chips-must-divide",
    ),
    pytest.param(
        change(flex_tpu, set_("placement_policy.tpu_topology", "2x2x4")),
        "node_pool.placement_policy.tpu_topology",
        "is not a 2-D topology of TPU v6e",
        id="topology-dimensions",
    ),
    pytest.param(
        change(
            spot_gpu,
            set_("placement_policy", NodePool.PlacementPolicy(type_=1, tpu_topology="2x2")),
        ),
        "node_pool.placement_policy.tpu_topology",
        "'a3-highgpu-8g' is not a TPU machine type",
        id="topology-needs-tpu",
    ),
    pytest.param(
        change(spot_gpu, set_("name", "Dws-Pool")),
        "node_pool.name",
        "'Dws-Pool' is not a valid node pool name",
        id="name-lowercase",
    ),
    pytest.param(
        change(spot_gpu, set_("name", "1-pool")),
        "node_pool.name",
        "starting with a letter",
        id="name-leading-letter",
    ),
    pytest.param(
        change(spot_gpu, set_("name", "d" * 41)),
        "node_pool.name",
        "at most 40",
        id="name-length",
    ),
    pytest.param(
        change(spot_gpu, set_("name", "dws_pool")),
        "node_pool.name",
        "lowercase letters, digits and hyphens",
        id="name-characters",
    ),
    pytest.param(
        change(spot_gpu, set_("name", "dws-pool-")),
        "node_pool.name",
        "ending with a letter or digit",
        id="name-trailing-hyphen",
    ),
    pytest.param(
        change(
            lambda: rendered(gpu("nvidia-b200"), "Reservation", provisioning={"reservation": "r"}),
            set_("config.reservation_affinity.key", "reservation"),
        ),
        "node_pool.config.reservation_affinity.key",
        "compute.googleapis.com/reservation-name",
        id="reservation-key",
    ),
    pytest.param(
        change(
            lambda: rendered(gpu("nvidia-b200"), "Reservation", provisioning={"reservation": "r"}),
            set_("config.reservation_affinity.values", []),
        ),
        "node_pool.config.reservation_affinity.values",
        "exactly one reservation name",
        id="reservation-name",
    ),
    pytest.param(
        change(spot_gpu, set_("locations", ["us-east5-a", "europe-west4-a"])),
        "node_pool.locations[1]",
        "'europe-west4-a' is not a zone of cluster",
        id="zone-in-region",
    ),
    pytest.param(
        change(
            spot_gpu,
            set_(
                "config.accelerators",
                [container_v1.AcceleratorConfig(accelerator_count=4, accelerator_type="nvidia-l4")],
            ),
        ),
        "node_pool.config.accelerators[0]",
        "a3-highgpu-8g carries 8 nvidia-h100-80gb; got 4 nvidia-l4",
        id="gpu-matches-machine-type",
    ),
    pytest.param(
        change(
            spot_gpu,
            lambda pool: (
                set_("autoscaling.min_node_count", 3)(pool),
                set_("autoscaling.max_node_count", 2)(pool),
            ),
        ),
        "node_pool.autoscaling.max_node_count",
        "must be >= min_node_count (3)",
        id="autoscaling-bounds",
    ),
    pytest.param(
        change(spot_gpu, set_("autoscaling.max_node_count", 4)),
        "node_pool.autoscaling",
        "node_pool_autoscaling.max_node_count and node_pool_autoscaling.total_max_node_count "
        "cannot be both greater than zero",
        id="autoscaling-per-zone-or-total",
    ),
    pytest.param(
        change(spot_gpu, set_("autoscaling.total_max_node_count", 0)),
        "node_pool.autoscaling",
        "Node_pool_autoscaling.max_node_count and node_pool_autoscaling.total_max_node_count "
        "cannot be both set to zero.",
        id="autoscaling-needs-a-maximum",
    ),
]


@pytest.mark.parametrize(("build", "field", "phrase"), RULES)
def test_invalid_pool_is_rejected(
    emulator: ClusterManagerEmulator, build: Callable[[], NodePool], field: str, phrase: str
) -> None:
    pool = build()

    async def scenario(client: NodePoolClient) -> None:
        await client.create(pool, UID)

    with pytest.raises(GkeError) as caught:
        run(emulator, scenario)
    error = caught.value
    assert not error.retryable
    assert error.reason == "InvalidArgument"
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.message.startswith(f"{field}: "), error.message
    assert phrase in error.message
    [call] = emulator.calls_for("CreateNodePool")
    assert call.code == grpc.StatusCode.INVALID_ARGUMENT
    assert emulator.node_pool(f"{DEFAULT_CLUSTER}/nodePools/{pool.name}") is None
    assert emulator.operations() == []


#: TPU pools flex-start with queued provisioning serves: (version, topology, nodes per slice).
QUEUED_TPUS = [
    pytest.param("v5e", "2x2", 1, id="v5e-single-host"),
    # v5e multi-host: GKE documents flex-start v5e only in us-west4-a, outside the
    # sandbox's region (tests/unit/test_zones.py covers the refusal).
    pytest.param("v5p", "2x2x1", 1, id="v5p-single-host"),
    pytest.param("v5p", "2x2x2", 2, id="v5p-multi-host"),
    pytest.param("v6e", "2x2", 1, id="v6e-single-host"),
    pytest.param("v6e", "4x4", 4, id="v6e-multi-host"),
    pytest.param("tpu7x", "2x2x1", 1, id="tpu7x-single-host"),
    pytest.param("tpu7x", "2x2x2", 2, id="tpu7x-multi-host"),
]


def create_and_get(emulator: ClusterManagerEmulator, pool: NodePool) -> NodePool:
    """Create `pool` through the operator's client, wait for it, and read it back."""

    async def scenario(client: NodePoolClient) -> NodePool | None:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)
        return await client.get(pool.name)

    served = run(emulator, scenario)
    assert served is not None
    return served


@pytest.mark.parametrize(("version", "topology", "nodes"), QUEUED_TPUS)
def test_queued_tpu_pool_is_created_empty(
    emulator: ClusterManagerEmulator, version: str, topology: str, nodes: int
) -> None:
    policy = None
    if version == "tpu7x" and nodes > 1:
        # Ironwood's multi-host slices are placed by a workload policy, queued or not.
        policy = "dws-high-throughput-2x2x2"
        make_policy(emulator, policy)
    pool = queued_tpu(version, topology, workload_policy=policy)
    path = f"{DEFAULT_CLUSTER}/nodePools/{pool.name}"

    served = create_and_get(emulator, pool)
    assert served.status == NodePool.Status.RUNNING
    assert served.queued_provisioning.enabled
    assert served.config.flex_start
    scaling = served.autoscaling
    # A slice pool lives in one zone, with per-zone limits (GKE checks the slice against
    # them); a single-host pool keeps whole-pool limits.
    if nodes > 1:
        assert list(served.locations) == ["us-east5-a"]
        assert (scaling.min_node_count, scaling.max_node_count) == (0, nodes)
        assert (scaling.total_min_node_count, scaling.total_max_node_count) == (0, 0)
    else:
        assert (scaling.total_min_node_count, scaling.total_max_node_count) == (0, nodes)
        assert (scaling.min_node_count, scaling.max_node_count) == (0, 0)
    assert served.placement_policy.tpu_topology == (topology if nodes > 1 else "")
    assert emulator.node_count(path) == 0
    [call] = emulator.calls_for("CreateNodePool")
    assert call.code == grpc.StatusCode.OK


def test_autoscaling_changes_are_validated(emulator: ClusterManagerEmulator) -> None:
    pool = flex_tpu()
    path = f"{DEFAULT_CLUSTER}/nodePools/{pool.name}"

    async def scenario(client: NodePoolClient) -> list[GkeError]:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)
        errors = []
        for request in (
            container_v1.SetNodePoolAutoscalingRequest(
                name=path, autoscaling=container_v1.NodePoolAutoscaling(enabled=False)
            ),
            container_v1.SetNodePoolAutoscalingRequest(
                name=path,
                autoscaling=container_v1.NodePoolAutoscaling(
                    enabled=True, min_node_count=2, max_node_count=4
                ),
            ),
            container_v1.SetNodePoolAutoscalingRequest(
                name=path,
                autoscaling=container_v1.NodePoolAutoscaling(
                    enabled=True, max_node_count=4, total_max_node_count=4
                ),
            ),
        ):
            with pytest.raises(GkeError) as caught:
                await client.call(client.api.set_node_pool_autoscaling, request)
            errors.append(caught.value)
        with pytest.raises(GkeError) as caught:
            await client.call(
                client.api.set_node_pool_size,
                container_v1.SetNodePoolSizeRequest(name=path, node_count=-1),
            )
        errors.append(caught.value)
        return errors

    errors = run(emulator, scenario)
    assert [e.message.split(":")[0] for e in errors] == [
        "autoscaling.enabled",
        "autoscaling.min_node_count",
        "autoscaling",
        "node_count",
    ]
    assert errors[2].message.endswith("total_max_node_count cannot be both greater than zero")
    assert all(e.reason == "InvalidArgument" and not e.retryable for e in errors)


def test_a_pool_may_live_in_any_zone_of_the_region(emulator: ClusterManagerEmulator) -> None:
    # us-east5-d is not one of the sandbox cluster's node locations (a, b, c): GKE places
    # a pool in any zone of its cluster's region.
    pool = spot_gpu()
    pool.locations = ["us-east5-d"]

    served = create_and_get(emulator, pool)
    assert list(served.locations) == ["us-east5-d"]


def test_unknown_pool_is_not_found(emulator: ClusterManagerEmulator) -> None:
    path = f"{DEFAULT_CLUSTER}/nodePools/dws-nowhere"

    async def scenario(client: NodePoolClient) -> GkeError:
        with pytest.raises(GkeError) as caught:
            await client.call(
                client.api.set_node_pool_size,
                container_v1.SetNodePoolSizeRequest(name=path, node_count=0),
            )
        return caught.value

    error = run(emulator, scenario)
    assert error.reason == "NodePoolNotFound"
    assert error.message == f"Not found: {path}."
    assert not error.retryable


def test_malformed_names_are_invalid(emulator: ClusterManagerEmulator) -> None:
    async def scenario(client: NodePoolClient) -> GkeError:
        with pytest.raises(GkeError) as caught:
            await client.call(
                client.api.get_node_pool, container_v1.GetNodePoolRequest(name="pool-only")
            )
        return caught.value

    error = run(emulator, scenario)
    assert error.reason == "InvalidArgument"
    assert error.message.startswith("name: 'pool-only' is not of the form")


Driver = container_v1.GPUDriverInstallationConfig.GPUDriverVersion


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("Default", Driver.DEFAULT),
        ("Latest", Driver.LATEST),
        ("Disabled", Driver.INSTALLATION_DISABLED),
    ],
)
def test_gpu_driver_installation_is_recorded(
    emulator: ClusterManagerEmulator, driver: str, expected: int
) -> None:
    accelerator = {"gpu": {"type": "nvidia-l4", "nodes": 2, "count": 1, "driver": driver}}
    pool = rendered(accelerator, "Spot")

    served = create_and_get(emulator, pool)
    [gpus] = served.config.accelerators
    assert (gpus.accelerator_type, gpus.accelerator_count) == ("nvidia-l4", 1)
    assert gpus.gpu_driver_installation_config.gpu_driver_version == expected


def test_a4x_is_served_from_a_reservation(emulator: ClusterManagerEmulator) -> None:
    """Flex-start refuses A4X; a pool consuming a reservation of it is created."""
    pool = rendered(gpu("nvidia-gb200", nodes=2), "Reservation", provisioning={"reservation": "r"})

    served = create_and_get(emulator, pool)
    assert served.status == NodePool.Status.RUNNING
    assert served.config.machine_type == "a4x-highgpu-4g"
    assert not served.config.flex_start
