"""The node settings of a new pool (identity, boot disk, tags, image streaming): the
emulator keeps them as GKE does and refuses what GKE refuses (node_config_rules.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.cloud import container_v1

from dws_operator.gke import GkeError, NodePoolClient, render_node_pool
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_operator.planning import plan_slice
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator, EmulatorConfig
from dws_workshop.emulator.config import ClusterConfig
from tests.builders import gpu, make_spec, tpu
from tests.gke.harness import LABELS, UID, MakeEmulator, run

NodePool = container_v1.NodePool
Mode = container_v1.WorkloadMetadataConfig.Mode
SA = "dws-nodes@dws-sandbox.iam.gserviceaccount.com"
FULL = PoolDefaults(
    service_account=SA,
    oauth_scopes=("https://www.googleapis.com/auth/cloud-platform",),
    workload_metadata="GKE_METADATA",
    labels=(("cost-center", "research"), ("team", "ml")),
    tags=("dws-nodes", "allow-egress"),
    disk_type="pd-ssd",
    disk_size_gb=200,
    image_streaming=True,
)


def pool_of(
    accelerator: dict[str, Any], mode: str = "Spot", defaults: PoolDefaults | None = FULL
) -> NodePool:
    plan = plan_slice(make_spec(accelerator, mode), pool_name="dws-pool")
    return render_node_pool(plan, name="dws-pool", labels=LABELS, defaults=defaults)


def l4(defaults: PoolDefaults | None = FULL) -> NodePool:
    return pool_of(gpu("nvidia-l4", nodes=1, count=1), defaults=defaults)


def edited(edit: Callable[[NodePool], Any], base: Callable[[], NodePool] = l4) -> NodePool:
    pool = base()
    edit(pool)
    return pool


def create_and_get(emulator: ClusterManagerEmulator, pool: NodePool) -> NodePool | None:
    async def scenario(client: NodePoolClient) -> NodePool | None:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)
        return await client.get(pool.name)

    return run(emulator, scenario)


def refused(emulator: ClusterManagerEmulator, pool: NodePool) -> GkeError:
    async def scenario(client: NodePoolClient) -> None:
        await client.create(pool, UID)

    with pytest.raises(GkeError) as caught:
        run(emulator, scenario)
    [call] = emulator.calls_for("CreateNodePool")
    assert call.code == grpc.StatusCode.INVALID_ARGUMENT
    assert emulator.node_pool(f"{DEFAULT_CLUSTER}/nodePools/{pool.name}") is None
    assert not caught.value.retryable
    return caught.value


def test_the_pool_keeps_its_node_settings(emulator: ClusterManagerEmulator) -> None:
    served = create_and_get(emulator, l4())
    assert served is not None
    config = served.config
    assert config.service_account == SA
    assert list(config.oauth_scopes) == ["https://www.googleapis.com/auth/cloud-platform"]
    assert config.workload_metadata_config.mode == Mode.GKE_METADATA
    assert list(config.tags) == ["dws-nodes", "allow-egress"]
    assert (config.disk_type, config.disk_size_gb) == ("pd-ssd", 200)
    assert config.gcfs_config.enabled
    for labels in (config.labels, config.resource_labels):
        assert dict(labels) == {**LABELS, "cost-center": "research", "team": "ml"}


def test_get_cluster_reports_workload_identity(emulator: ClusterManagerEmulator) -> None:
    async def scenario(client: NodePoolClient) -> container_v1.Cluster:
        return await client.api.get_cluster(name=DEFAULT_CLUSTER)

    cluster = run(emulator, scenario)
    assert cluster.workload_identity_config.workload_pool == "dws-sandbox.svc.id.goog"


def no_workload_identity(make_emulator: MakeEmulator) -> ClusterManagerEmulator:
    cluster = ClusterConfig(name=DEFAULT_CLUSTER, workload_identity=False)
    return make_emulator(EmulatorConfig(operation_latency_seconds=0.05, clusters=[cluster]))


def test_gke_metadata_needs_workload_identity_on_the_cluster(make_emulator: MakeEmulator) -> None:
    emulator = no_workload_identity(make_emulator)
    error = refused(emulator, l4())
    assert error.message.startswith("node_pool.config.workload_metadata_config.mode: ")
    assert "Workload Identity" in error.message

    async def workload_pool(client: NodePoolClient) -> str:
        return str(
            (
                await client.api.get_cluster(name=DEFAULT_CLUSTER)
            ).workload_identity_config.workload_pool
        )

    assert run(emulator, workload_pool) == ""


def test_gce_metadata_needs_no_workload_identity(make_emulator: MakeEmulator) -> None:
    emulator = no_workload_identity(make_emulator)
    served = create_and_get(emulator, l4(PoolDefaults(workload_metadata="GCE_METADATA")))
    assert served is not None
    assert served.config.workload_metadata_config.mode == Mode.GCE_METADATA


def set_config(field: str, value: Any) -> Callable[[NodePool], None]:
    def edit(pool: NodePool) -> None:
        setattr(pool.config, field, value)

    return edit


def with_disk(accelerator: dict[str, Any], disk_type: str) -> Callable[[], NodePool]:
    """A TPU pool sent with `disk_type` as its boot disk (the operator itself leaves a
    type off a series that does not boot from it: this is what GKE is asked otherwise)."""

    def make() -> NodePool:
        pool = pool_of(accelerator, "FlexStart", PoolDefaults())
        pool.config.disk_type = disk_type
        return pool

    return make


def v6e(disk_type: str) -> Callable[[], NodePool]:
    return with_disk(tpu("v6e", "2x2"), disk_type)


def v5e(disk_type: str) -> Callable[[], NodePool]:
    return with_disk(tpu("v5e", "2x2"), disk_type)


REFUSALS = [
    pytest.param(
        lambda: edited(set_config("service_account", "dws-nodes")),
        "node_pool.config.service_account",
        "not a service account email",
        id="service-account-not-an-email",
    ),
    pytest.param(
        lambda: edited(set_config("disk_size_gb", 9)),
        "node_pool.config.disk_size_gb",
        "smallest allowed disk size is 10GB",
        id="disk-below-10-gb",
    ),
    pytest.param(
        lambda: edited(set_config("disk_type", "pd-extreme")),
        "node_pool.config.disk_type",
        "not a boot disk type",
        id="disk-type-not-a-boot-disk",
    ),
    pytest.param(
        v6e("pd-balanced"),
        "node_pool.config.disk_type",
        "ct6e-standard-4t does not support boot disk type pd-balanced; use hyperdisk-balanced",
        id="v6e-boots-from-hyperdisk-only",
    ),
    pytest.param(
        v5e("hyperdisk-balanced"),
        "node_pool.config.disk_type",
        "does not support boot disk type hyperdisk-balanced; use pd-balanced",
        id="v5e-boots-from-pd-balanced-only",
    ),
    pytest.param(
        lambda: edited(set_config("tags", ["web", "Not_RFC1035"])),
        "node_pool.config.tags[1]",
        "RFC1035",
        id="tag-not-rfc1035",
    ),
    pytest.param(
        lambda: edited(set_config("image_type", "UBUNTU_CONTAINERD")),
        "node_pool.config.gcfs_config.enabled",
        "image streaming needs image type COS_CONTAINERD",
        id="image-streaming-needs-cos-containerd",
    ),
]


@pytest.mark.parametrize(("build", "field", "phrase"), REFUSALS)
def test_gke_refuses_bad_node_settings(
    emulator: ClusterManagerEmulator, build: Callable[[], NodePool], field: str, phrase: str
) -> None:
    error = refused(emulator, build())
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.message.startswith(f"{field}: "), error.message
    assert phrase in error.message


ACCEPTED = [
    pytest.param(v6e("hyperdisk-balanced"), id="v6e-hyperdisk"),
    pytest.param(v5e("pd-balanced"), id="v5e-pd-balanced"),
    pytest.param(lambda: edited(set_config("image_type", "cos_containerd")), id="cos-lowercase"),
    pytest.param(lambda: edited(set_config("service_account", "default")), id="sa-default"),
    pytest.param(lambda: l4(None), id="no-node-settings"),
]


@pytest.mark.parametrize("build", ACCEPTED)
def test_gke_accepts_good_node_settings(
    emulator: ClusterManagerEmulator, build: Callable[[], NodePool]
) -> None:
    served = create_and_get(emulator, build())
    assert served is not None
    assert served.status == NodePool.Status.RUNNING
