"""After creation: immutable fields, the status subresource, and printer columns."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.planning import plan_slice
from tests.builders import make_spec, manifest, spec_body, tpu
from tests.cluster.conftest import Kubectl

pytestmark = pytest.mark.usefixtures("training_request_crd")

#: The status.plan the operator writes for a v6e 4x4 slice.
PLAN = plan_slice(make_spec(tpu("v6e", "4x4"))).summary().model_dump(by_alias=True, mode="json")


@pytest.fixture
def created(api: k8s.ApiClient, namespace: str) -> dict[str, Any]:
    body = manifest(f"tr-{uuid.uuid4().hex[:8]}", spec_body(tpu("v6e", "4x4")))
    result: dict[str, Any] = k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body
    )
    return result


def _patch(api: k8s.ApiClient, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        patch,
        _content_type="application/merge-patch+json",
    )
    return result


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"accelerator": {"tpu": {"topology": "8x8"}}}, "spec.accelerator"),
        (
            {"accelerator": {"tpu": None, "gpu": {"type": "nvidia-l4", "nodes": 1}}},
            "spec.accelerator",
        ),
        ({"provisioning": {"mode": "Spot"}}, "spec.provisioning"),
        ({"provisioning": {"maxWaitDuration": "1h"}}, "spec.provisioning"),
        ({"nodePool": {"name": "other-pool"}}, "spec.nodePool"),
        ({"nodePool": {"existing": True, "name": "other-pool"}}, "spec.nodePool"),
    ],
    ids=["topology", "tpu-to-gpu", "mode", "wait", "pool-name", "existing"],
)
def test_fixed_fields_cannot_change(
    api: k8s.ApiClient, namespace: str, created: dict[str, Any], patch: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiException) as raised:
        _patch(api, namespace, created["metadata"]["name"], {"spec": patch})
    assert raised.value.status == 422
    message = json.loads(raised.value.body)["message"]
    assert f"{field}: Invalid value" in message
    assert "immutable" in message


def test_other_fields_can_change(
    api: k8s.ApiClient, namespace: str, created: dict[str, Any]
) -> None:
    name = created["metadata"]["name"]
    updated = _patch(
        api, namespace, name, {"spec": {"maxRestarts": 2, "nodePool": {"cleanup": "Keep"}}}
    )
    assert updated["spec"]["maxRestarts"] == 2
    assert updated["spec"]["nodePool"]["cleanup"] == "Keep"
    assert updated["metadata"]["generation"] == 2


def test_status_is_a_subresource(
    api: k8s.ApiClient, namespace: str, created: dict[str, Any]
) -> None:
    objects = k8s.CustomObjectsApi(api)
    name = created["metadata"]["name"]
    # Writes to the main resource do not touch status...
    ignored = _patch(api, namespace, name, {"status": {"phase": "Running"}})
    assert "status" not in ignored
    # ...writes to /status do, and do not bump the generation.
    status = {
        "status": {
            "phase": "WaitingForCapacity",
            "plan": PLAN,
        }
    }
    updated = objects.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        status,
        _content_type="application/merge-patch+json",
    )
    assert updated["status"]["phase"] == "WaitingForCapacity"
    assert updated["metadata"]["generation"] == 1


def test_status_rejects_unknown_phase(
    api: k8s.ApiClient, namespace: str, created: dict[str, Any]
) -> None:
    with pytest.raises(ApiException) as raised:
        k8s.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            created["metadata"]["name"],
            {"status": {"phase": "Exploded"}},
            _content_type="application/merge-patch+json",
        )
    assert "status.phase" in json.loads(raised.value.body)["message"]


def test_kubectl_get_shows_the_printer_columns(
    api: k8s.ApiClient, namespace: str, created: dict[str, Any], kubectl: Kubectl
) -> None:
    name = created["metadata"]["name"]
    k8s.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {
            "status": {
                "phase": "Running",
                "plan": PLAN,
            }
        },
        _content_type="application/merge-patch+json",
    )
    for resource in ("tr", "treq", "trainingrequests"):
        result = kubectl("get", resource, "-n", namespace)
        assert result.returncode == 0, result.stderr
        header, row = result.stdout.splitlines()[:2]
        assert header.split() == [
            "NAME",
            "PHASE",
            "MODE",
            "STEP",
            "ACCELERATOR",
            "SHAPE",
            "NODES",
            "AGE",
        ]
        # No capacity ladder: the Step column is empty.
        step = header.index("STEP")
        assert row[step : header.index("ACCELERATOR")].strip() == ""
        assert row.split()[:6] == [name, "Running", "FlexStart", "tpu-v6e", "4x4", "4"]
    wide = kubectl("get", "tr", "-n", namespace, "-o", "wide")
    assert wide.stdout.splitlines()[0].split()[-3:] == ["POOL", "BOOKING", "MESSAGE"]


def test_kubectl_explain_describes_the_fields(kubectl: Kubectl) -> None:
    result = kubectl("explain", "trainingrequest.spec.provisioning")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "GROUP: dws-operator.dev" in text
    for field in ("maxWaitDuration", "maxRunDuration", "mode", "reservation", "zones"):
        assert field in text
    assert "0s waits forever" in text
    assert "How capacity is obtained" in text
