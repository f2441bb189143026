"""The cluster's GKE version, as the operator reads it: GetCluster through the real client
against the emulator, once per `version_ttl`, shared by concurrent callers."""

from __future__ import annotations

import asyncio

import pytest

from dws_operator.gke import GkeError, NodePoolClient, connect
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterConfig, EmulatorConfig, MethodFaults
from dws_workshop.emulator.config import DEFAULT_VERSION
from tests.gke.harness import FAST_POLL, FAST_RETRY, MakeEmulator

OLD = "1.31.5-gke.1000"


def with_version(version: str) -> EmulatorConfig:
    return EmulatorConfig(
        operation_latency_seconds=0.05,
        clusters=[ClusterConfig(name=DEFAULT_CLUSTER, version=version)],
    )


def test_the_emulator_reports_a_current_version_by_default(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=0.05))

    async def main() -> str:
        async with connect(emulator.endpoint) as api:
            return await NodePoolClient(api, DEFAULT_CLUSTER, retry=FAST_RETRY).master_version()

    assert asyncio.run(main()) == DEFAULT_VERSION == "1.34.1-gke.1000000"


def test_read_once_and_shared_until_it_expires(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(with_version(OLD))
    now = [100.0]

    async def main() -> list[str]:
        async with connect(emulator.endpoint) as api:
            client = NodePoolClient(
                api,
                DEFAULT_CLUSTER,
                poll=FAST_POLL,
                retry=FAST_RETRY,
                version_ttl=60.0,
                clock=lambda: now[0],
            )
            # Many requests' first passes at once: one GetCluster between them.
            first = await asyncio.gather(*(client.master_version() for _ in range(5)))
            now[0] += 59.0
            cached = await client.master_version()
            now[0] += 1.0
            refreshed = await client.master_version()
            return [*first, cached, refreshed]

    assert asyncio.run(main()) == [OLD] * 7
    calls = emulator.calls_for("GetCluster")
    assert len(calls) == 2
    assert [c.request.name for c in calls] == [DEFAULT_CLUSTER, DEFAULT_CLUSTER]


def test_a_failed_read_raises_a_retryable_error_and_is_not_cached(
    make_emulator: MakeEmulator,
) -> None:
    emulator = make_emulator(with_version(OLD))
    emulator.set_faults("GetCluster", MethodFaults(error_rate=1.0, error_code="UNAVAILABLE"))

    async def main() -> str:
        async with connect(emulator.endpoint) as api:
            client = NodePoolClient(api, DEFAULT_CLUSTER, retry=FAST_RETRY)
            with pytest.raises(GkeError) as failure:
                await client.master_version()
            assert failure.value.retryable
            assert failure.value.reason == "Unavailable"
            emulator.set_faults("GetCluster", None)
            return await client.master_version()

    assert asyncio.run(main()) == OLD
    outcomes = [c.ok for c in emulator.calls_for("GetCluster")]
    # The client's own retries (4 attempts), then the successful read after the fault.
    assert outcomes == [False] * FAST_RETRY.attempts + [True]
