"""What no watch reported is found by listing again: objects deleted while a watch was
down are forgotten (and their requests woken), objects changed meanwhile are taken in,
and what the cache learnt after the listing was taken is kept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller.assembly import build_controller
from dws_operator.controller.config import OperatorConfig
from dws_operator.controller.kube import WORKLOADS, KubeApi, connect
from dws_operator.controller.runtime import Controller
from dws_operator.workload import REQUEST_LABEL
from dws_workshop.devcluster import DevCluster
from tests.polling import eventually


def _job(namespace: str, name: str, request: str, version: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "labels": {REQUEST_LABEL: request},
        }
    }


def _relist(
    devcluster: DevCluster, config: OperatorConfig, namespace: str
) -> tuple[int, list[str], list[tuple[str, str]], bool]:
    async def main() -> tuple[int, list[str], list[tuple[str, str]], bool]:
        api = await connect(str(devcluster.kubeconfig))
        kube = KubeApi(api)
        controller = build_controller(config, api, kube, False, False)
        try:
            # What the watches would have brought in (kopf's listing fills the cache).
            async for item in kube.listing("jobs", REQUEST_LABEL, config.namespaces):
                controller.cache.put_job(item)
            kept_before = controller.cache.job(namespace, "real") is not None
            # The cache holds two Jobs the API server does not: one it knew before any
            # listing could have shown it gone (deleted unseen), one from after.
            controller.cache.put_job(_job(namespace, "gone", "req-a", "1"))
            controller.cache.put_job(_job(namespace, "future", "req-b", str(10**12)))
            forgotten = await controller.relist()
            left = sorted(
                name
                for name in ("real", "gone", "future")
                if controller.cache.job(namespace, name) is not None
            )
            woken = []
            while len(controller.queue):
                key = await controller.queue.get()
                assert key is not None
                woken.append(key)
            return forgotten, left, woken, kept_before
        finally:
            await controller.stop()

    return asyncio.run(main())


def test_a_job_deleted_unseen_is_forgotten_and_its_request_woken(
    devcluster: DevCluster,
    training_request_crd: str,
    api: k8s.ApiClient,
    namespace: str,
    operator_config: OperatorConfig,
) -> None:
    batch = k8s.BatchV1Api(api)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "real", "labels": {REQUEST_LABEL: "req-c"}},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "example/x:1"}],
                    }
                },
            },
        },
    )
    # The Job controller marks a suspended Job so, a moment after it is made: were that
    # write to land between the cache's filling and the relist, the relist would take
    # it in (rightly) and wake req-c too. Waited for, the Job no longer changes.
    eventually(
        lambda: any(
            c.type == "Suspended" and c.status == "True"
            for c in batch.read_namespaced_job("real", namespace).status.conditions or []
        ),
        what="the Job controller to mark the Job suspended",
    )
    forgotten, left, woken, kept_before = _relist(devcluster, operator_config, namespace)
    assert kept_before
    assert forgotten == 1
    assert left == ["future", "real"]
    assert woken == [(namespace, "req-a")]  # the request of the Job forgotten, alone


def _request(namespace: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRequest",
        "metadata": {"namespace": namespace, "name": name, "uid": uid, "resourceVersion": "5"},
        "spec": {},
    }


#: Kueue's word why it deactivated a Workload.
WHY = "the ProvisioningRequest was rejected"


def _deactivated_workload(namespace: str, job: str, going: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "namespace": namespace,
        "name": f"job-{job}",
        "ownerReferences": [{"kind": "Job", "name": job, "uid": f"uid-{job}"}],
    }
    if going:
        metadata["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    return {
        "metadata": metadata,
        "spec": {"active": False},
        "status": {
            "conditions": [
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "DeactivatedDueToAdmissionCheck",
                    "message": WHY,
                }
            ]
        },
    }


def _events(
    devcluster: DevCluster, config: OperatorConfig, feed: Callable[[Controller], None]
) -> Controller:
    """A controller (not started) that has taken in the events `feed` gives it."""

    async def main() -> Controller:
        api = await connect(str(devcluster.kubeconfig))
        kube = KubeApi(api)
        controller = build_controller(config, api, kube, True, False)
        try:
            feed(controller)
            return controller
        finally:
            await controller.stop()

    return asyncio.run(main())


def test_the_delete_of_an_older_object_of_a_name_leaves_the_newer_one(
    devcluster: DevCluster, training_request_crd: str, operator_config: OperatorConfig
) -> None:
    """kopf holds a delete back until its first listings are in: by then a new object of
    the same name may be in the cache."""
    ns = "held-back"

    def feed(controller: Controller) -> None:
        controller.on_event("jobs", False, _job(ns, "j", "req", "7"))
        controller.cache.put_job(
            {"metadata": {**_job(ns, "j", "req", "8")["metadata"], "uid": "uid-new"}}
        )
        controller.on_event(PLURAL, False, _request(ns, "r", "uid-new"))
        # The deletes of the older objects (uid-j, uid-old) come now.
        controller.on_event("jobs", True, _job(ns, "j", "req", "9"))
        controller.on_event(PLURAL, True, _request(ns, "r", "uid-old"))

    controller = _events(devcluster, operator_config, feed)
    assert controller.cache.uid("jobs", (ns, "j")) == "uid-new"
    summary = controller.cache.summary((ns, "r"))
    assert summary is not None
    assert summary.uid == "uid-new"

    def feed_same(controller: Controller) -> None:
        controller.on_event("jobs", False, _job(ns, "j", "req", "7"))
        controller.on_event(PLURAL, False, _request(ns, "r", "uid-r"))
        controller.on_event("jobs", True, _job(ns, "j", "req", "9"))
        controller.on_event(PLURAL, True, _request(ns, "r", "uid-r"))

    controller = _events(devcluster, operator_config, feed_same)
    # Its own delete removes it.
    assert controller.cache.job(ns, "j") is None
    assert controller.cache.summary((ns, "r")) is None


def test_a_workload_deactivated_before_its_job_is_known_counts_once_the_job_is(
    devcluster: DevCluster, training_request_crd: str, operator_config: OperatorConfig
) -> None:
    """kopf lists the kinds side by side: a Workload may come before its Job."""
    ns = "side-by-side"

    def feed(controller: Controller) -> None:
        controller.on_event(WORKLOADS, False, _deactivated_workload(ns, "early"))
        controller.on_event("jobs", False, _job(ns, "early", "req-e", "3"))
        # One being deleted says nothing any more of its Job.
        controller.on_event("jobs", False, _job(ns, "late", "req-l", "3"))
        controller.on_event(WORKLOADS, False, _deactivated_workload(ns, "late", going=True))

    controller = _events(devcluster, operator_config, feed)
    # Kueue's word why.
    assert (
        controller.cache.deactivated("jobs", ns, "early") == "the ProvisioningRequest was rejected"
    )
    assert controller.cache.deactivated("jobs", ns, "late") is None
