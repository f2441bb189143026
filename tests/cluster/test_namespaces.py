"""A test's namespace goes when the test ends, even with a TrainingRequest left in it
that still carries the operator's finalizer (its operator is stopped by then)."""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller.reconciler import FINALIZER
from tests.builders import gpu, manifest, spec_body
from tests.cluster.namespaces import fresh_namespace
from tests.polling import eventually


def _gone(core: k8s.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespace(name)
    except ApiException as error:
        return error.status == 404
    return False


def test_a_namespace_with_a_held_request_goes(
    api: k8s.ApiClient, training_request_crd: str
) -> None:
    objects = k8s.CustomObjectsApi(api)
    with fresh_namespace(api, "held") as namespace:
        body = manifest("held", spec_body(gpu("nvidia-l4")))
        body["metadata"]["finalizers"] = [FINALIZER]
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    eventually(lambda: _gone(k8s.CoreV1Api(api), namespace), what=f"namespace {namespace} gone")
