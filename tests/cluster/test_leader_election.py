"""Leader election on a real Lease: taking it, keeping it, losing it and handing it over."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from dws_operator import rfc3339
from dws_operator.controller.fence import LeaseLost
from dws_operator.controller.kube import Conflict, KubeApi, connect
from dws_operator.controller.leader import LeaderElector, LeaseSettings
from dws_workshop.devcluster import DevCluster
from tests.polling import until

T = TypeVar("T")

# Short, with client-go's proportions (15 / 10 / 2).
DURATION, RENEW, RETRY = 1.5, 1.0, 0.2


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
) -> T:
    async def main() -> T:
        one_api = await connect(str(devcluster.kubeconfig))
        two_api = await connect(str(devcluster.kubeconfig))
        try:
            one = LeaderElector(KubeApi(one_api), _settings(namespace, "one"))
            two = LeaderElector(KubeApi(two_api), _settings(namespace, "two"))
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
    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> None:
        assert await one.acquire()
        assert not await two.try_acquire_or_renew()
        assert two.holder == "one"
        spec = await _lease(kube, namespace)
        assert spec["holderIdentity"] == "one"
        assert spec["leaseDurationSeconds"] == 2  # whole seconds, as the Lease API has them
        assert spec["leaseTransitions"] == 0
        # The holder renews: the other keeps waiting through several lease durations.
        keeping = asyncio.create_task(one.keep())
        waited = asyncio.create_task(two.acquire())
        first = rfc3339.parse(spec["renewTime"])

        async def renewed_for_three_durations() -> bool:
            renewed = rfc3339.parse((await _lease(kube, namespace))["renewTime"])
            return (renewed - first).total_seconds() >= 3 * DURATION

        await until(renewed_for_three_durations, what="renewals over three lease durations")
        assert not waited.done()
        assert not keeping.done()
        waited.cancel()
        keeping.cancel()

    _with_two(devcluster, namespace, body)


def test_a_silent_holder_is_replaced_after_the_lease_duration(
    devcluster: DevCluster, namespace: str
) -> None:
    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> float:
        assert await one.acquire()
        # `one` stops renewing (a paused or killed process): `two` waits out the lease,
        # timed from when it first saw the record, then takes it.
        began = time.monotonic()
        assert await two.acquire()
        took = time.monotonic() - began
        spec = await _lease(kube, namespace)
        assert spec["holderIdentity"] == "two"
        assert spec["leaseTransitions"] == 1
        return took

    took = _with_two(devcluster, namespace, body)
    # Not before the lease duration (the Lease's whole seconds: 2); after it, within a
    # few retry periods and a loaded machine's scheduling delays.
    assert 2.0 <= took < 2.0 + 2 * RETRY * 1.2 + 3.0, took


def test_a_paused_holder_gives_up(devcluster: DevCluster, namespace: str) -> None:
    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> None:
        assert await one.acquire()
        keeping = asyncio.create_task(one.keep())
        # `one` is paused past its lease (as a stopped process would be) ...
        keeping.cancel()
        assert await two.acquire()
        assert not one.valid()
        # ... and resumes: past its renew deadline, it gives up without another write.
        with pytest.raises(LeaseLost, match="not renewed for 1s"):
            await asyncio.wait_for(one.keep(), RENEW + 2 * RETRY)
        assert (await _lease(kube, namespace))["holderIdentity"] == "two"

    _with_two(devcluster, namespace, body)


def test_a_holder_whose_lease_was_taken_stops(devcluster: DevCluster, namespace: str) -> None:
    async def body(one: LeaderElector, two: LeaderElector, kube: KubeApi) -> None:
        assert await one.acquire()
        acquired = (await _lease(kube, namespace))["renewTime"]
        keeping = asyncio.create_task(one.keep())

        async def renewed() -> bool:
            return bool((await _lease(kube, namespace))["renewTime"] > acquired)

        await until(renewed, what="a renewal")
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
            await asyncio.wait_for(keeping, RENEW + 2 * RETRY)

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
