"""The history of waits for capacity on a real API server: kept in one ConfigMap, batched,
merged when two writers race, and read back by the next operator, whose waiting request
then shows the estimate (`status.estimate`) the earlier request's wait gave."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client as k8s

from dws_operator.cli import main
from dws_operator.controller import OperatorConfig, OperatorThread
from dws_operator.controller.history import FLUSH_SECONDS, CapacityHistory
from dws_operator.controller.kube import KubeApi, connect
from dws_operator.estimate import History, Wait
from dws_workshop.devcluster import DevCluster
from tests.builders import gpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

KEY = "nvidia-l4.8_GPUs.x1.FlexStart.any"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stored(api: k8s.ApiClient, namespace: str, name: str) -> dict[str, str]:
    found = k8s.CoreV1Api(api).read_namespaced_config_map(name, namespace)
    return dict(found.data or {})


def test_waits_are_batched_into_one_configmap_and_racing_writers_merge(
    devcluster: DevCluster, api: k8s.ApiClient, namespace: str
) -> None:
    clock = Clock()

    async def main() -> tuple[int, int, int]:
        connection = await connect(str(devcluster.kubeconfig))
        try:
            one = CapacityHistory(KubeApi(connection), namespace, "waits", clock)
            other = CapacityHistory(KubeApi(connection), namespace, "waits", clock)
            await one.add([(KEY, Wait(60.0, False, T0))])  # the first write goes at once
            assert KEY in stored(api, namespace, "waits")
            await other.estimate(KEY)  # read now: stale after `one` writes again
            clock.now += 1
            await one.add([(KEY, Wait(120.0, True, T0 + timedelta(minutes=1)))])
            held_back = len(stored(api, namespace, "waits")[KEY].split("],["))
            clock.now += FLUSH_SECONDS
            await one.add([(KEY, Wait(180.0, False, T0 + timedelta(minutes=2)))])
            written = len(stored(api, namespace, "waits")[KEY].split("],["))
            # The other writer's version is old: its write conflicts, and is merged.
            await other.add([(KEY, Wait(240.0, False, T0 + timedelta(minutes=3)))])
            merged = len(stored(api, namespace, "waits")[KEY].split("],["))
            return held_back, written, merged
        finally:
            await connection.close()

    held_back, written, merged = asyncio.run(main())
    assert (held_back, written, merged) == (1, 3, 4)


def test_the_next_operator_estimates_from_the_waits_the_last_one_saw(
    devcluster: DevCluster,
    training_request_crd: str,
    api: k8s.ApiClient,
    namespace: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    config = dataclasses.replace(operator_config, capacity_history=f"waits-{namespace}")
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        # No capacity comes (no autoscaler here): the wait ends without it after 2 s.
        scenario.create(gpu("nvidia-l4"), provisioning={"maxWaitDuration": "2s"})
        failed = scenario.wait_phase("Failed")
        assert "CapacityTimeout" in failed["message"]
        first = failed.get("estimate") or {}
        assert first.get("observations") == 0
        assert first.get("message") == f"no data yet for {KEY}"
    assert KEY in stored(api, "default", f"waits-{namespace}")
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.name = "second"
        scenario.create(gpu("nvidia-l4"), provisioning={"maxWaitDuration": "1h"})
        shown = eventually(
            lambda: (
                scenario.status().get("estimate", {}).get("observations") == 1
                and scenario.status()["estimate"]
            ),
            what="the estimate from the first request's wait",
        )
    assert shown["censored"] == 1
    assert shown["message"].startswith("p50 unknown, p90 unknown from 1 earlier asks")


def test_plan_reads_the_estimate_from_the_cluster(
    devcluster: DevCluster,
    api: k8s.ApiClient,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    history = History()
    for minutes in (10, 20, 30, 40):
        history.add(KEY, Wait(minutes * 60.0, False, T0))
    history.add("nvidia-l4.8_GPUs.x1.Spot.any", Wait(60.0, True, T0))
    k8s.CoreV1Api(api).create_namespaced_config_map(
        namespace, {"metadata": {"name": "waits"}, "data": history.to_data()}
    )
    monkeypatch.setenv("KUBECONFIG", str(devcluster.kubeconfig))
    argv = ["plan", "--gpu", "nvidia-l4", "--nodes", "1", "--fallback", "Spot", "--estimate"]
    assert main([*argv, f"{namespace}/waits"]) == 0
    out = capsys.readouterr().out
    assert f"Estimate    step 1: p50 20m, p90 40m from 4 earlier asks for {KEY}" in out
    assert "step 2: p50 unknown, p90 unknown from 1 earlier asks" in out
    # A history not made yet: no data.
    assert main([*argv, f"{namespace}/none-yet"]) == 0
    assert f"step 1: no data yet for {KEY}" in capsys.readouterr().out


def test_a_ladder_ordered_by_estimate_starts_on_the_step_the_history_says_is_soonest(
    devcluster: DevCluster,
    training_request_crd: str,
    api: k8s.ApiClient,
    namespace: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    history = History()
    for minutes in (2, 3, 4):
        history.add("nvidia-l4.8_GPUs.x1.Spot.any", Wait(minutes * 60.0, False, T0))
    for hours in (2, 3, 4):
        history.add(KEY, Wait(hours * 3600.0, False, T0))
    k8s.CoreV1Api(api).create_namespaced_config_map(
        "default", {"metadata": {"name": f"order-{namespace}"}, "data": history.to_data()}
    )
    config = dataclasses.replace(operator_config, capacity_history=f"order-{namespace}")
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.create(
            gpu("nvidia-l4"),
            provisioning={
                "maxWaitDuration": "1h",
                "fallbackOrder": "Estimated",
                "fallback": [{"mode": "OnDemand"}, {"mode": "Spot"}],
            },
        )
        status = eventually(
            lambda: (scenario.status().get("attempts") or None) and scenario.status(),
            what="the first step begun",
        )
        name = status["nodePool"]["name"]
        [pool] = eventually(
            lambda: [
                p for p, _ in scenario.emulator.node_pools(scenario.cluster) if p.name == name
            ],
            what="the first step's pool",
        )
    assert status["ladderOrder"] == [3, 1, 2]
    assert [(a["step"], a["mode"]) for a in status["attempts"]] == [(1, "Spot")]
    assert pool.config.spot
    [ordered] = scenario.event_messages("LadderOrdered")
    assert ordered.startswith("steps by estimated wait: 3 (Spot, p50 3m), 1 (FlexStart")
