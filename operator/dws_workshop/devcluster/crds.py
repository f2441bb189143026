"""Installing CustomResourceDefinitions into a cluster and waiting until they serve."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from dws_operator.crd import custom_resource_definition, policy_custom_resource_definition
from dws_operator.identity import FIELD_MANAGER
from dws_workshop.devcluster.binaries import third_party_crds
from dws_workshop.devcluster.kubeerrors import Busy, NotFound, typed_errors

#: libyaml's safe loader when PyYAML was built with it (its wheels are): Kueue's, JobSet's
#: and the ProvisioningRequest CRDs are 2.4 MB of YAML, 4.7 s of CPU for the pure-Python
#: loader and 0.4 s for libyaml's, with the same documents (measured at 4470cbc), paid
#: by every sandbox, test cluster and benchmark testbed.
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_crd_files(paths: Iterable[Path]) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in paths:
        for document in yaml.load_all(path.read_text(), Loader=_SAFE_LOADER):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                documents.append(document)
    return documents


def _established(crd: Any) -> bool:
    conditions = (crd.status.conditions if crd.status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _serves(objects: k8s.CustomObjectsApi, document: dict[str, Any]) -> bool:
    """Whether the API server lists the CRD's objects yet. Established comes first; the
    resource's storage may still answer 429 "storage is (re)initializing" for a moment,
    which clients (kopf among them) would log as failed requests."""
    spec = document["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    try:
        with typed_errors():
            objects.list_cluster_custom_object(
                spec["group"], version, spec["names"]["plural"], limit=1
            )
    except (NotFound, Busy):
        return False
    return True


def apply_crds(
    api: k8s.ApiClient, documents: Iterable[dict[str, Any]], timeout: float = 60.0
) -> list[str]:
    """Create or replace each CRD, then wait until every one is Established and serving."""
    documents = list(documents)
    extensions = k8s.ApiextensionsV1Api(api)
    names: list[str] = []
    for document in documents:
        name = document["metadata"]["name"]
        names.append(name)
        # Server-side apply: idempotent, so re-running against a live cluster is safe.
        extensions.patch_custom_resource_definition(
            name,
            document,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        pending = [
            n for n in pending if not _established(extensions.read_custom_resource_definition(n))
        ]
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not Established after {timeout:.0f}s: {', '.join(pending)}")
        if pending:
            time.sleep(0.1)
    objects = k8s.CustomObjectsApi(api)
    unserved = list(documents)
    while unserved:
        unserved = [d for d in unserved if not _serves(objects, d)]
        if unserved and time.monotonic() > deadline:
            late = ", ".join(d["metadata"]["name"] for d in unserved)
            raise TimeoutError(f"CRDs not serving after {timeout:.0f}s: {late}")
        if unserved:
            time.sleep(0.1)
    return names


def install_training_request_crd(api: k8s.ApiClient) -> str:
    """The TrainingRequest CRD, and the TrainingPolicy CRD beside it (its name first)."""
    return apply_crds(api, [custom_resource_definition(), policy_custom_resource_definition()])[0]


def install_third_party_crds(
    api: k8s.ApiClient, kinds: Iterable[str] = ("provisioningrequest", "kueue", "jobset")
) -> list[str]:
    """Kueue's, JobSet's and the ProvisioningRequest CRDs, from the pinned Go modules.
    Before Kueue starts: it sets up the ProvisioningRequest admission check and its
    JobSet integration only for APIs served at its start (or, for JobSet, after a
    back-off)."""
    files = [path for kind in kinds for path in third_party_crds(kind)]
    return apply_crds(api, load_crd_files(files))
