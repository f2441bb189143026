"""The client retries retryable errors a bounded number of times with backoff, never
terminal ones, and a restarted operator adopts the pool it was creating."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from google.cloud import container_v1

from dws_operator.gke import GkeError, NodePoolClient, RetryPolicy, connect
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    ClusterManagerEmulator,
    EmulatorConfig,
    MethodFaults,
)
from tests.builders import gpu, tpu
from tests.gke.harness import FAST_POLL, UID, MakeEmulator, ManualClock, rendered, run

RETRY = RetryPolicy(attempts=4, initial_delay=0.02, multiplier=2.0, max_delay=0.05, jitter=0.0)


def faulty(method: str, code: str, rate: float = 1.0, seed: int = 1) -> EmulatorConfig:
    return EmulatorConfig(
        operation_latency_seconds=0.05,
        seed=seed,
        faults={method: MethodFaults(error_rate=rate, error_code=code)},
    )


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("UNAVAILABLE", "Unavailable"),
        ("DEADLINE_EXCEEDED", "DeadlineExceeded"),
        ("ABORTED", "Aborted"),
        ("INTERNAL", "InternalError"),
    ],
)
def test_retryable_errors_are_retried_a_bounded_number_of_times(
    make_emulator: MakeEmulator, code: str, reason: str
) -> None:
    emulator = make_emulator(faulty("GetNodePool", code))

    async def scenario(client: NodePoolClient) -> None:
        await client.get("dws-any")

    began = time.monotonic()
    with pytest.raises(GkeError) as caught:
        run(emulator, scenario, retry=RETRY)
    elapsed = time.monotonic() - began
    assert caught.value.retryable
    assert caught.value.reason == reason
    calls = emulator.calls_for("GetNodePool")
    assert len(calls) == RETRY.attempts
    assert all(c.code == getattr(grpc.StatusCode, code) for c in calls)
    # Backoff: 20 + 40 + 50 (capped) ms of pauses between the 4 attempts.
    assert elapsed >= sum(RETRY.delays()) == pytest.approx(0.11)


@pytest.mark.parametrize(
    "code", ["INVALID_ARGUMENT", "PERMISSION_DENIED", "UNAUTHENTICATED", "UNIMPLEMENTED"]
)
def test_terminal_errors_are_not_retried(make_emulator: MakeEmulator, code: str) -> None:
    emulator = make_emulator(faulty("CreateNodePool", code))
    pool = rendered(tpu("v6e", "4x4"))

    async def scenario(client: NodePoolClient) -> None:
        await client.create(pool, UID)

    with pytest.raises(GkeError) as caught:
        run(emulator, scenario, retry=RETRY)
    assert not caught.value.retryable
    assert len(emulator.calls_for("CreateNodePool")) == 1


def test_a_flaky_api_is_ridden_out(make_emulator: MakeEmulator) -> None:
    """Half the creates fail UNAVAILABLE; with retries every pool is created once."""
    emulator = make_emulator(faulty("CreateNodePool", "UNAVAILABLE", rate=0.5, seed=3))
    names = [f"dws-flaky-{i}" for i in range(6)]

    async def scenario(client: NodePoolClient) -> None:
        for name in names:
            await client.create(rendered(gpu("nvidia-l4"), "Spot", name=name), UID)

    run(emulator, scenario, retry=RETRY)
    assert all(emulator.node_pool(f"{DEFAULT_CLUSTER}/nodePools/{n}") for n in names)
    calls = emulator.calls_for("CreateNodePool")
    failed = [c for c in calls if c.code == grpc.StatusCode.UNAVAILABLE]
    assert failed, "the seed should inject at least one failure"
    assert len(calls) == len(names) + len(failed)
    assert len(calls) <= len(names) * RETRY.attempts


def pool_names(emulator: ClusterManagerEmulator) -> list[str]:
    async def scenario(client: NodePoolClient) -> list[str]:
        return [p.name for p in await client.list_pools()]

    return run(emulator, scenario)


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(attempts=6, initial_delay=1.0, multiplier=2.0, max_delay=8.0)
    assert policy.delays() == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert RetryPolicy(attempts=1).delays() == []


def test_creating_twice_makes_one_pool(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=0.05))
    pool = rendered(tpu("v6e", "4x4"))

    async def scenario(client: NodePoolClient) -> tuple[bool, bool]:
        first = await client.create(pool, UID)
        assert first.operation is not None
        await client.wait(first.operation)
        second = await client.create(pool, UID)
        return first.adopted, second.adopted

    assert run(emulator, scenario) == (False, True)
    assert len(emulator.calls_for("CreateNodePool")) == 2
    assert pool_names(emulator) == [pool.name]


def test_a_restarted_operator_adopts_the_pool_it_was_creating(make_emulator: MakeEmulator) -> None:
    """The operator dies after sending the create; a new process, knowing nothing of the
    operation, creates again: it must find and adopt the pool, not make a second one."""
    # The create moves only with this clock: the restarted operator surely meets it.
    clock = ManualClock()
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=0.5), clock)
    pool = rendered(tpu("v6e", "4x4"))

    async def before_the_crash() -> None:
        async with connect(emulator.endpoint) as api:
            created = await NodePoolClient(api, DEFAULT_CLUSTER, retry=RETRY).create(pool, UID)
            assert created.operation is not None  # sent, never waited for

    async def after_the_restart() -> container_v1.NodePool.Status:
        async with connect(emulator.endpoint) as api:
            client = NodePoolClient(api, DEFAULT_CLUSTER, poll=FAST_POLL, retry=RETRY)
            again = await client.create(pool, UID)
            assert again.adopted
            assert again.pool.status == container_v1.NodePool.Status.PROVISIONING
            clock.now += 1
            while True:  # the adopter follows the pool, not the operation it never saw
                current = await client.get(pool.name)
                assert current is not None
                if current.status != container_v1.NodePool.Status.PROVISIONING:
                    return current.status
                await asyncio.sleep(0.05)

    asyncio.run(before_the_crash())
    assert asyncio.run(after_the_restart()) == container_v1.NodePool.Status.RUNNING
    assert pool_names(emulator) == [pool.name]
    assert [c.code for c in emulator.calls_for("CreateNodePool")] == [
        grpc.StatusCode.OK,
        grpc.StatusCode.ALREADY_EXISTS,
    ]


def test_the_guard_is_asked_before_every_attempt(make_emulator: MakeEmulator) -> None:
    # A replica that loses its leader Lease while a call is being retried sends no
    # further attempt: the guard (the fence) raises before the next one.
    emulator = make_emulator(faulty("GetNodePool", "UNAVAILABLE"))
    asked: list[int] = []

    class Lost(Exception):
        pass

    def guard() -> None:
        asked.append(len(emulator.calls_for("GetNodePool")))
        if len(asked) == 2:
            raise Lost

    async def scenario(client: NodePoolClient) -> None:
        client.guard = guard
        await client.get("dws-any")

    with pytest.raises(Lost):
        run(emulator, scenario, retry=RETRY)
    assert asked == [0, 1]
    assert len(emulator.calls_for("GetNodePool")) == 1
