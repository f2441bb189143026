"""What the in-memory Kubernetes does that no contract test can hold it to (its record of
requests, the error hook, its refusals of what it does not serve); what it shares with
kube-apiserver is in tests/cluster/contract."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dws_operator.api import PLURAL
from dws_operator.controller import kube as kube_module
from dws_operator.controller.kube import ApiError, Invalid, KubeApi
from tests.builders import gpu, manifest, spec_body
from tests.fakes import kubernetes as fake
from tests.fakes.kubernetes import MemoryKube


def _request(name: str) -> dict[str, Any]:
    body = manifest(name, spec_body(gpu("nvidia-l4")))
    body["metadata"].update(namespace="ns", labels={"tag": name})
    return body


def test_every_request_is_recorded_and_errors_are_told() -> None:
    memory = MemoryKube()
    errors: list[int] = []
    memory.on_error = errors.append
    kube = KubeApi(memory)

    async def main() -> None:
        await kube.create(PLURAL, _request("a"))
        await kube.create(PLURAL, _request("a"))  # taken: 409
        await kube.training_request("ns", "a")
        await kube.patch_metadata("ns", "a", {"labels": {"x": "y"}})
        await kube.delete(PLURAL, "ns", "missing")  # 404

    asyncio.run(main())
    path = "/apis/dws-operator.dev/v1alpha1/namespaces/ns/trainingrequests"
    assert memory.writes() == [
        ("POST", path),
        ("POST", path),
        ("PATCH", f"{path}/a"),
        ("DELETE", f"{path}/missing"),
    ]
    assert len(memory.calls) == 5
    assert errors == [409, 404]


def test_a_continue_token_outlived_by_newer_lists_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_module, "LIST_PAGE", 1)
    monkeypatch.setattr(fake, "KEPT_SNAPSHOTS", 1)
    memory = MemoryKube()
    kube = KubeApi(memory)

    async def main() -> ApiError:
        for name in ("a", "b"):
            await kube.create(PLURAL, _request(name))
        first = kube.snapshots(PLURAL, "", ("ns",))
        await anext(first)
        # Another paged list (at a newer version) takes the one snapshot kept.
        await kube.create(PLURAL, _request("c"))
        await anext(kube.snapshots(PLURAL, "", ("ns",)))
        with pytest.raises(ApiError) as gone:
            await anext(first)
        return gone.value

    gone = asyncio.run(main())
    assert gone.status == 410


@pytest.mark.parametrize("selector", ["tag in (a,b)", "tag notin (a)", "a=b=c", "a,,b"])
def test_a_selector_it_cannot_read_is_refused(selector: str) -> None:
    kube = KubeApi(MemoryKube())

    async def main() -> None:
        await kube.call("GET", "/api/v1/services", query={"labelSelector": selector})

    with pytest.raises(Invalid) as refused:
        asyncio.run(main())
    assert refused.value.status == 400


def test_what_kube_api_does_not_use_is_not_served() -> None:
    kube = KubeApi(MemoryKube())

    async def main() -> list[int]:
        statuses = []
        for method, path, content_type in (
            ("PUT", "/api/v1/namespaces/ns/services/a", "application/json"),
            ("PATCH", "/api/v1/namespaces/ns/services/a", "application/json-patch+json"),
        ):
            try:
                await kube.call(method, path, body={}, content_type=content_type)
            except ApiError as error:
                statuses.append(error.status)
        return statuses

    assert asyncio.run(main()) == [405, 415]
