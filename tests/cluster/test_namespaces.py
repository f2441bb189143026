"""A test's namespace is free to go when the test ends, even with a TrainingRequest left
in it that still carries the operator's finalizer (its operator is stopped by then): one
stuck Terminating is retried by the namespace controller for the rest of the session."""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller.finalizers import FINALIZER
from tests.builders import gpu, manifest, spec_body
from tests.cluster.namespaces import fresh_namespace


def _holds(objects: k8s.CustomObjectsApi, namespace: str) -> list[str]:
    """Finalizers still on the request (none when it is gone already)."""
    try:
        held = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    except ApiException as error:
        if error.status == 404:
            return []
        raise
    return list(held["metadata"].get("finalizers") or [])


def test_a_namespace_with_a_held_request_goes(
    api: k8s.ApiClient, training_request_crd: str
) -> None:
    objects = k8s.CustomObjectsApi(api)
    with fresh_namespace(api, "held") as namespace:
        body = manifest("held", spec_body(gpu("nvidia-l4")))
        body["metadata"]["finalizers"] = [FINALIZER]
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        assert _holds(objects, namespace) == [FINALIZER]
    # Nothing in it holds the namespace's deletion up any more (the namespace controller
    # removes it in its own time: tens of seconds on a busy test server).
    assert _holds(objects, namespace) == []
    assert _phase(api, namespace) in ("Terminating", None)  # None: gone already


def _phase(api: k8s.ApiClient, namespace: str) -> str | None:
    try:
        phase: str = k8s.CoreV1Api(api).read_namespace(namespace).status.phase
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return phase
