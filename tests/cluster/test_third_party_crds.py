"""Kueue's, JobSet's and the ProvisioningRequest CRDs, taken from the pinned Go modules, serve."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s


def test_crds_are_established(third_party: list[str]) -> None:
    assert "provisioningrequests.autoscaling.x-k8s.io" in third_party
    assert "jobsets.jobset.x-k8s.io" in third_party
    for name in (
        "workloads",
        "clusterqueues",
        "localqueues",
        "resourceflavors",
        "admissionchecks",
        "provisioningrequestconfigs",
    ):
        assert f"{name}.kueue.x-k8s.io" in third_party


def _dry_run(
    api: k8s.ApiClient,
    group: str,
    version: str,
    plural: str,
    body: dict[str, Any],
    namespace: str | None = None,
) -> dict[str, Any]:
    objects = k8s.CustomObjectsApi(api)
    if namespace is None:
        result: dict[str, Any] = objects.create_cluster_custom_object(
            group, version, plural, body, dry_run="All"
        )
    else:
        result = objects.create_namespaced_custom_object(
            group, version, namespace, plural, body, dry_run="All"
        )
    return result


def test_provisioning_request_is_served(
    api: k8s.ApiClient, namespace: str, third_party: list[str]
) -> None:
    body = {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": "pr"},
        "spec": {
            "provisioningClassName": "queued-provisioning.gke.io",
            "podSets": [{"podTemplateRef": {"name": "tmpl"}, "count": 2}],
            "parameters": {"maxRunDurationSeconds": "3600"},
        },
    }
    created = _dry_run(api, "autoscaling.x-k8s.io", "v1", "provisioningrequests", body, namespace)
    assert created["spec"]["podSets"][0]["count"] == 2


def test_kueue_objects_are_served(
    api: k8s.ApiClient, namespace: str, third_party: list[str]
) -> None:
    groups = k8s.ApisApi(api).get_api_versions().groups
    kueue = next(g for g in groups if g.name == "kueue.x-k8s.io")
    assert kueue.preferred_version is not None
    version = kueue.preferred_version.version
    group = "kueue.x-k8s.io"
    flavor = _dry_run(
        api,
        group,
        version,
        "resourceflavors",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "ResourceFlavor",
            "metadata": {"name": "tpu-v6e"},
            "spec": {"nodeLabels": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}},
        },
    )
    assert flavor["spec"]["nodeLabels"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
    queue = _dry_run(
        api,
        group,
        version,
        "clusterqueues",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "ClusterQueue",
            "metadata": {"name": "dws"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["google.com/tpu"],
                        "flavors": [
                            {
                                "name": "tpu-v6e",
                                "resources": [{"name": "google.com/tpu", "nominalQuota": 16}],
                            }
                        ],
                    }
                ],
            },
        },
    )
    assert queue["spec"]["resourceGroups"][0]["coveredResources"] == ["google.com/tpu"]
    local = _dry_run(
        api,
        group,
        version,
        "localqueues",
        {
            "apiVersion": f"{group}/{version}",
            "kind": "LocalQueue",
            "metadata": {"name": "dws-queue"},
            "spec": {"clusterQueue": "dws"},
        },
        namespace,
    )
    assert local["spec"]["clusterQueue"] == "dws"
