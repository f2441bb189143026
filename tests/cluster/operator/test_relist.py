"""What no watch reported is found by listing again: objects deleted while a watch was
down are forgotten (and their requests woken), objects changed meanwhile are taken in,
and what the cache learnt after the listing was taken is kept."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes import client as k8s

from dws_operator.controller.assembly import build_controller
from dws_operator.controller.config import OperatorConfig
from dws_operator.controller.kube import KubeApi, connect
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
    # write to land between the start-up listing and the relist, the relist would take
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
