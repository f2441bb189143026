"""A fresh namespace per test, in whichever test cluster the fixture serves."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dws_operator.api import GROUP, PLURAL, VERSION


@contextlib.contextmanager
def fresh_namespace(api: k8s.ApiClient, prefix: str) -> Iterator[str]:
    """Creates `<prefix>-<random>`, yields its name, and deletes it afterwards."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    core = k8s.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        let_go(api, name)
        core.delete_namespace(name)


def let_go(api: k8s.ApiClient, namespace: str) -> int:
    """Takes the operator's finalizer off the TrainingRequests a test leaves (the operator
    that would have removed it is stopped by then); how many it freed. A namespace whose
    content keeps a finalizer stays Terminating, and the namespace controller tries it
    again and again for the rest of the session, listing and deleting every kind each
    time: twenty such namespaces kept each test API server busy at a third of a core."""
    objects = k8s.CustomObjectsApi(api)
    try:
        listed = objects.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    except ApiException as error:
        if error.status == 404:
            return 0  # the CRD is not installed in this cluster
        raise
    freed = 0
    for item in listed["items"]:
        metadata = item["metadata"]
        if not metadata.get("finalizers"):
            continue
        patch = {"metadata": {"finalizers": None}}
        try:
            objects.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, metadata["name"], patch
            )
        except ApiException as error:
            if error.status != 404:
                raise
        freed += 1
    return freed
