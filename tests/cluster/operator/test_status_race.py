"""A pass writes its status only over the version of the request it decided on: a replica
deposed mid-pass (or one whose cache is behind a user's edit) cannot overwrite a newer
status. Its decision is dropped, whole, and made again on the request as it is now."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kubernetes import client as k8s

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller.assembly import build_controller
from dws_operator.controller.config import OperatorConfig
from dws_operator.controller.kube import KubeApi, connect
from dws_operator.reconcile import AT_ONCE
from dws_workshop.devcluster import DevCluster
from tests.builders import gpu, manifest, spec_body

#: What the newer writer (the replica that took over) said.
NEWER = {"phase": "Pending", "message": "written by the replica that took over"}


def _said(request: dict[str, Any]) -> dict[str, Any]:
    """The status fields the newer writer wrote (the API server defaults others)."""
    return {k: v for k, v in (request.get("status") or {}).items() if k in NEWER}


def test_a_pass_on_an_old_copy_does_not_overwrite_a_newer_status(
    devcluster: DevCluster,
    training_request_crd: str,
    api: k8s.ApiClient,
    namespace: str,
    operator_config: OperatorConfig,
) -> None:
    objects = k8s.CustomObjectsApi(api)
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, manifest("raced", spec_body(gpu("nvidia-l4")))
    )
    key = (namespace, "raced")

    async def main() -> tuple[Any, dict[str, Any], dict[str, Any], int]:
        connection = await connect(str(devcluster.kubeconfig))
        kube = KubeApi(connection)
        controller = build_controller(operator_config, connection, kube, False, False)
        try:
            async for item in kube.listing(PLURAL, "", operator_config.namespaces):
                controller.on_event(PLURAL, False, item)
            old = copy.deepcopy(controller.cache.request(key))
            assert old is not None
            # Another writer gets there first; this replica's cache has not heard of it.
            objects.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, "raced", {"status": NEWER}
            )
            decision = await controller.reconciler.reconcile(key)
            cached = controller.cache.request(key)
            assert cached is not None
            return decision, old, cached, controller.reconciler.passes
        finally:
            await controller.stop()

    decision, old, cached, passes = asyncio.run(main())
    stored = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "raced")
    assert passes == 1
    # Nothing of the pass on the old copy was done: the newer status stands...
    assert _said(stored) == NEWER
    assert old.get("status") in (None, {})
    # ...the pass is made again at once, on the request as it is now.
    assert decision is not None
    assert (decision.requeue_after, decision.actions, decision.events) == (AT_ONCE, [], [])
    assert cached["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert _said(cached) == NEWER
