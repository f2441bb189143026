"""Helpers shared by the GKE tests: fast timings and a real client on a real channel.

Tests are plain functions that call `run(emulator, scenario)` (asyncio.run inside):
no async test plugin is needed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import requests
from google.cloud import container_v1

from dws_operator.gke import (
    NodePoolClient,
    PollPolicy,
    RetryPolicy,
    connect,
    pool_labels,
    render_node_pool,
)
from dws_operator.planning import plan_slice
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator, EmulatorConfig
from tests.builders import SITE, make_spec, tpu
from tests.clocks import ManualClock
from tests.polling import eventually

T = TypeVar("T")


class MakeEmulator(Protocol):
    """The `make_emulator` fixture: an emulator served from a thread, on `clock` when
    given (a `ManualClock` moves its operations only when the test says so)."""

    def __call__(
        self, config: EmulatorConfig, clock: Callable[[], float] | None = None
    ) -> ClusterManagerEmulator: ...


Api = container_v1.ClusterManagerAsyncClient

#: Operations finish in 50 ms and the client polls every few ms: suites stay fast.
FAST = EmulatorConfig(operation_latency_seconds=0.05)
FAST_POLL = PollPolicy(initial_delay=0.005, max_delay=0.05, multiplier=2.0, timeout=5.0)
FAST_RETRY = RetryPolicy(attempts=4, initial_delay=0.005, multiplier=2.0, max_delay=0.02)

UID = "6f1c2a9e-3b7d-4c55-9a8e-0d2f4b6c8e1a"
LABELS = pool_labels("team-a", "llama", UID)


def run(
    emulator: ClusterManagerEmulator,
    scenario: Callable[[NodePoolClient], Awaitable[T]],
    *,
    cluster: str = DEFAULT_CLUSTER,
    poll: PollPolicy = FAST_POLL,
    retry: RetryPolicy = FAST_RETRY,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run `scenario` with the real google-cloud-container client against `emulator`
    (the client pausing with `sleep`)."""

    async def main() -> T:
        async with connect(emulator.endpoint) as api:
            client = NodePoolClient(api, cluster, poll=poll, retry=retry, sleep=sleep)
            return await scenario(client)

    return asyncio.run(main())


class HeldClock:
    """An emulator's clock stopped until released, then running as real time: what is
    under way stays so for as long as the test looks at it, however slow the machine,
    and the rest of the test runs as usual."""

    def __init__(self) -> None:
        self._held = 100.0
        self._since: float | None = None

    def __call__(self) -> float:
        return self._held if self._since is None else self._held + time.monotonic() - self._since

    def release(self) -> None:
        if self._since is None:  # once: a second release would turn it back
            self._since = time.monotonic()


def serve(
    config: EmulatorConfig,
    scenario: Callable[[ClusterManagerEmulator, Api, ManualClock], Awaitable[T]],
) -> T:
    """Run `scenario` with an emulator on a hand-driven clock and a raw client of it."""
    clock = ManualClock()

    async def main() -> T:
        async with (
            ClusterManagerEmulator(config, clock=clock) as emulator,
            connect(emulator.endpoint) as api,
        ):
            return await scenario(emulator, api, clock)

    return asyncio.run(main())


def policies_url(
    emulator: ClusterManagerEmulator,
    name: str = "",
    *,
    project: str = "dws-sandbox",
    region: str = "us-east5",
) -> str:
    """The Compute emulator's URL of a region's resource policies, or of one of them."""
    base = f"{emulator.compute_endpoint}/compute/v1/projects/{project}/regions/{region}"
    return f"{base}/resourcePolicies" + (f"/{name}" if name else "")


def make_policy(
    emulator: ClusterManagerEmulator,
    name: str,
    workload: dict[str, Any] | None = None,
    *,
    region: str = "us-east5",
    ready: bool = True,
) -> None:
    """Insert a resource policy straight into the Compute emulator (default: 2x2x2)."""
    body: dict[str, Any] = {"name": name}
    if workload is None:
        workload = {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x2"}
    body["workloadPolicy" if "type" in workload else "groupPlacementPolicy"] = workload
    answer = requests.post(policies_url(emulator, region=region), json=body, timeout=10)
    assert answer.status_code == 200, answer.text
    if not ready:
        return
    policy_ready(emulator, name, region)


def policy_ready(emulator: ClusterManagerEmulator, name: str, region: str) -> None:
    """Until the workload policy `name` is READY (its insert operation done)."""

    def ready() -> bool:
        policy = emulator.compute.policy("dws-sandbox", region, name)
        return policy is not None and policy.status == "READY"

    eventually(ready, timeout=10, what=f"{name} READY")


def rendered(
    accelerator: dict[str, Any],
    mode: str = "FlexStart",
    name: str = "dws-pool",
    *,
    workload_policy: str | None = None,
    **extra: Any,
) -> container_v1.NodePool:
    plan = plan_slice(make_spec(accelerator, mode, **extra), pool_name=name, site=SITE)
    return render_node_pool(plan, name=name, labels=LABELS, workload_policy=workload_policy)


def queued_tpu(
    version: str,
    topology: str,
    name: str = "dws-pool",
    machine_type: str | None = None,
    *,
    workload_policy: str | None = None,
) -> container_v1.NodePool:
    """A TPU pool with flex-start and queued provisioning, as the planner renders it (and
    as Cluster Toolkit's dws-flex-start-queued-provisioning blueprints create it)."""
    return rendered(
        tpu(version, topology, machine_type),
        "QueuedProvisioning",
        name=name,
        workload_policy=workload_policy,
    )
