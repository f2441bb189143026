"""Leader election on a real Lease: taking it, keeping it, losing it and handing it over.

Each replica times the Lease on its own clock, which here is the test's: a loaded
machine can slow each call to the API server, but never makes a holder look silent or
give up. Only the waits between tries (a fifth of a second) run on real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from dws_operator.controller.kube import Conflict, KubeApi, connect
from dws_operator.kubekit.fence import LeaseLost
from dws_operator.kubekit.leader import LeaderElector, LeaseSettings
from dws_workshop.devcluster import DevCluster
from tests.clocks import ManualClock
from tests.polling import until

T = TypeVar("T")

# Short, with client-go's proportions (15 / 10 / 2).
DURATION, RENEW, RETRY = 1.5, 1.0, 0.2
#: How long a test waits for what should follow within a few tries: a guard against a
#: hang, never a measure (the replicas' clocks do not move while the test waits).
HANG = 60.0


def _settings(namespace: str, identity: str) -> LeaseSettings:
    return LeaseSettings(
        namespace=namespace,
        identity=identity,
        name="dws-operator",
        duration=DURATION,
        renew_deadline=RENEW,
        retry_period=RETRY,
    )


def _with_two(
    devcluster: DevCluster,
    namespace: str,
    body: Callable[[LeaderElector, LeaderElector, KubeApi], Awaitable[T]],
    clocks: tuple[ManualClock, ManualClock] | None = None,
) -> T:
    one_clock, two_clock = clocks or (ManualClock(), ManualClock())

    async def main() -> T:
        one_api = await connect(str(devcluster.kubeconfig))
        two_api = await connect(str(devcluster.kubeconfig))
        try:
            one = LeaderElector(KubeApi(one_api), _settings(namespace, "one"), clock=one_clock)
            two = LeaderElector(KubeApi(two_api), _settings(namespace, "two"), clock=two_clock)
            return await body(one, two, KubeApi(one_api))
        finally:
            await one_api.close()
            await two_api.close()

    return asyncio.run(main())


async def _lease(kube: KubeApi, namespace: str) -> dict[str, Any]:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/dws-operator"
    lease: dict[str, Any] = await kube.call("GET", path)
    return lease["spec"]  # type: ignore[no-any-return]


def test_one_holds_the_other_waits(devcluster: DevCluster, namespace: str) -> None:
    clocks = ManualClock(), ManualClock()

    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> None:
        assert await one.acquire()
        assert not await two.try_acquire_or_renew()
        assert two.holder == "one"
        spec = await _lease(kube, namespace)
        assert spec["holderIdentity"] == "one"
        assert spec["leaseDurationSeconds"] == 2  # whole seconds, as the Lease API has them
        assert spec["leaseTransitions"] == 0
        # The holder renews every retry period: through three lease durations the other
        # sees a live record at every try and keeps waiting.
        first = spec["renewTime"]
        for _ in range(int(3 * DURATION / RETRY) + 1):
            for clock in clocks:
                clock.tick(RETRY)
            assert await one.try_acquire_or_renew()
            assert one.valid()
            assert not await two.try_acquire_or_renew()
            assert two.holder == "one"
        spec = await _lease(kube, namespace)
        assert spec["renewTime"] > first
        assert spec["holderIdentity"] == "one"
        assert spec["leaseTransitions"] == 0

    _with_two(devcluster, namespace, body, clocks)


def test_the_holder_keeps_renewing(devcluster: DevCluster, namespace: str) -> None:
    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> None:
        assert await one.acquire()
        seen = {(await _lease(kube, namespace))["renewTime"]}
        keeping = asyncio.create_task(one.keep())

        async def renewed_three_times() -> bool:
            seen.add((await _lease(kube, namespace))["renewTime"])
            return len(seen) > 3

        await until(renewed_three_times, what="three renewals", timeout=HANG)
        assert not keeping.done()
        assert one.valid()
        keeping.cancel()

    _with_two(devcluster, namespace, body)


def test_a_silent_holder_is_replaced_after_the_lease_duration(
    devcluster: DevCluster, namespace: str
) -> None:
    clocks = ManualClock(), ManualClock()
    _, two_clock = clocks

    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> None:
        assert await one.acquire()
        # `one` stops renewing (a paused or killed process): `two` times the record from
        # when it first saw it, and waits out the Lease's whole seconds (2), not 1.5.
        assert not await two.try_acquire_or_renew()
        two_clock.tick(1.9)
        assert not await two.try_acquire_or_renew()
        assert (await _lease(kube, namespace))["holderIdentity"] == "one"
        two_clock.tick(0.2)
        assert await two.try_acquire_or_renew()
        spec = await _lease(kube, namespace)
        assert spec["holderIdentity"] == "two"
        assert spec["leaseTransitions"] == 1

    _with_two(devcluster, namespace, body, clocks)


def test_a_paused_holder_gives_up(devcluster: DevCluster, namespace: str) -> None:
    clocks = ManualClock(), ManualClock()

    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> None:
        assert await one.acquire()
        # `one` is paused past its lease, as a stopped process would be ...
        assert not await two.try_acquire_or_renew()
        for clock in clocks:
            clock.tick(2 * DURATION)
        assert await two.try_acquire_or_renew()
        assert not one.valid()
        # ... and resumes: past its renew deadline, it gives up without another write.
        with pytest.raises(LeaseLost, match="not renewed for 1s"):
            await asyncio.wait_for(one.keep(), HANG)
        assert (await _lease(kube, namespace))["holderIdentity"] == "two"

    _with_two(devcluster, namespace, body, clocks)


def test_a_holder_whose_lease_was_taken_stops(devcluster: DevCluster, namespace: str) -> None:
    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> None:
        assert await one.acquire()
        # `one`'s clock stands still: however slow its calls, it never reaches its renew
        # deadline, so only what it reads can stop it.
        keeping = asyncio.create_task(one.keep())
        assert one.valid()
        # Someone else writes the Lease (a person, another controller's bug): the holder
        # sees it at its next renewal and stops.
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/dws-operator"
        while True:  # `one` may renew between the read and the write: read again
            lease = await kube.call("GET", path)
            lease["spec"]["holderIdentity"] = "intruder"
            try:
                await kube.call("PUT", path, body=lease)
                break
            except Conflict:
                continue
        with pytest.raises(LeaseLost, match="taken by intruder"):
            await asyncio.wait_for(keeping, HANG)
        assert (await _lease(kube, namespace))["holderIdentity"] == "intruder"

    _with_two(devcluster, namespace, body)


def test_a_clean_stop_hands_over_at_once(devcluster: DevCluster, namespace: str) -> None:
    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> int:
        assert await one.acquire()
        assert not await two.try_acquire_or_renew()  # `two` has seen one's record
        await one.release()
        spec = await _lease(kube, namespace)
        assert spec["holderIdentity"] == ""
        # Counted in tries, not seconds: a loaded machine slows each try, while a
        # lease not handed over would cost tries for its whole duration.
        tries = 0
        attempt = two.try_acquire_or_renew

        async def counted() -> bool:
            nonlocal tries
            tries += 1
            return await attempt()

        two.try_acquire_or_renew = counted  # type: ignore[method-assign]
        assert await two.acquire()
        return tries

    assert _with_two(devcluster, namespace, body) == 1


def test_two_candidates_at_once_one_wins(devcluster: DevCluster, namespace: str) -> None:
    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> None:
        won = await asyncio.gather(one.try_acquire_or_renew(), two.try_acquire_or_renew())
        assert sorted(won) == [False, True]
        holder = (await _lease(kube, namespace))["holderIdentity"]
        assert holder == ("one" if won[0] else "two")

    _with_two(devcluster, namespace, body)
