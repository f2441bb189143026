"""What the in-memory Kubernetes does that no contract test can hold it to (its record of
requests, the error hook, its refusals of what it does not serve, how it calls its
watchers); what it shares with kube-apiserver is in tests/cluster/contract."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from dws_operator.api import PLURAL
from dws_operator.controller import kube as kube_module
from dws_operator.controller.kube import ApiError, Invalid, KubeApi
from tests.builders import CONTAINER, gpu, manifest, spec_body
from tests.fakes import kubernetes as fake
from tests.fakes.kubernetes import EventType, MemoryKube

Told = tuple[str, EventType, str, str]

#: When the Event these tests post happened.
TOLD_AT = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


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
            ("POST", "/api/v1/namespaces/ns/services/a", "application/json"),
            ("PATCH", "/api/v1/namespaces/ns/services/a", "application/json-patch+json"),
        ):
            try:
                await kube.call(method, path, body={}, content_type=content_type)
            except ApiError as error:
                statuses.append(error.status)
        return statuses

    assert asyncio.run(main()) == [405, 415]


def _told(into: list[Told]) -> fake.Watcher:
    def watcher(plural: str, type_: EventType, body: dict[str, Any]) -> None:
        metadata = body["metadata"]
        into.append((plural, type_, metadata["name"], metadata["resourceVersion"]))

    return watcher


def test_a_watch_is_told_of_every_resource_until_it_ends() -> None:
    memory = MemoryKube()
    kube = KubeApi(memory)
    first: list[Told] = []
    second: list[Told] = []
    unwatch = memory.watch(_told(first))
    memory.watch(_told(second))

    async def main() -> None:
        made = await kube.create(PLURAL, _request("a"))
        assert made is not None
        await kube.call("POST", "/api/v1/nodes", body={"metadata": {"name": "node"}})
        await kube.post_event(made, "Normal", "Told", "about a", TOLD_AT)
        unwatch()
        unwatch()  # ended already: nothing
        await kube.patch_metadata("ns", "a", {"labels": {"b": "c"}})

    asyncio.run(main())
    assert [(plural, type_, name) for plural, type_, name, _ in first] == [
        (PLURAL, "ADDED", "a"),
        ("nodes", "ADDED", "node"),
        ("events", "ADDED", first[2][2]),
    ]
    assert second[:3] == first
    assert second[3:] == [(PLURAL, "MODIFIED", "a", str(memory.version))]
    assert [int(version) for *_, version in second] == list(range(2, memory.version + 1))


def test_watchers_are_told_after_the_request_each_with_a_copy_of_its_own() -> None:
    memory = MemoryKube()
    kube = KubeApi(memory)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}},
    }
    told: list[tuple[EventType, list[str], int]] = []
    kept: list[dict[str, Any]] = []

    def spoiler(plural: str, type_: EventType, body: dict[str, Any]) -> None:
        # Whatever a watcher does to its copy reaches neither the store nor the others.
        body["metadata"]["finalizers"] = ["spoiled"]
        body["spec"].clear()

    def watcher(plural: str, type_: EventType, body: dict[str, Any]) -> None:
        # Told once the request made all its changes: the version is the last one's.
        told.append((type_, body["metadata"].get("finalizers", []), memory.version))
        kept.append(body)

    memory.watch(spoiler)
    memory.watch(watcher)

    async def main() -> dict[str, Any]:
        await kube.create("jobs", job)
        await kube.delete("jobs", "ns", "j", foreground=True)
        return await kube.create("jobs", job) or {}

    again = asyncio.run(main())
    # The delete's two changes, the collector's finalizer on and off, are told after both.
    assert told == [
        ("ADDED", [], 2),
        ("MODIFIED", ["foregroundDeletion"], 4),
        ("DELETED", ["foregroundDeletion"], 4),
        ("ADDED", [], 5),
    ]
    assert all(body["spec"]["template"] for body in kept)
    assert "finalizers" not in again["metadata"]


def test_what_a_watcher_raises_comes_out_of_the_request_whose_change_is_made() -> None:
    memory = MemoryKube()
    kube = KubeApi(memory)

    told: list[Told] = []

    def failing(plural: str, type_: EventType, body: dict[str, Any]) -> None:
        raise RuntimeError(f"{type_} {body['metadata']['name']}")

    memory.watch(failing)
    memory.watch(_told(told))

    async def main() -> dict[str, Any] | None:
        with pytest.raises(RuntimeError, match="ADDED a"):
            await kube.create(PLURAL, _request("a"))
        return await kube.training_request("ns", "a")

    stored = asyncio.run(main())
    assert stored is not None
    # Made, and told to the other watcher all the same.
    assert told == [(PLURAL, "ADDED", "a", stored["metadata"]["resourceVersion"])]


def test_a_held_object_keeps_the_collectors_finalizer_until_let_go() -> None:
    """`hold` stands in for dependents the fake does not store (a Job's pods): a delete
    in the foreground keeps the object until `let_go`, and deleting it so again meanwhile
    writes nothing (the finalizer it would add is there). A delete in the background
    does not wait for them."""
    memory = MemoryKube()
    kube = KubeApi(memory)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}},
    }
    path = "/apis/batch/v1/namespaces/ns/jobs/j"
    told: list[Told] = []
    memory.watch(_told(told))

    async def foreground() -> tuple[dict[str, Any], int]:
        await kube.create("jobs", job)
        memory.hold("jobs", "ns", "j")
        await kube.delete("jobs", "ns", "j", foreground=True)
        version = memory.version
        await kube.delete("jobs", "ns", "j", foreground=True)
        held: dict[str, Any] = await kube.call("GET", path)
        memory.let_go("jobs", "ns", "j")
        return held, version

    held, version = asyncio.run(foreground())
    assert held["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert held["metadata"]["resourceVersion"] == str(version)
    assert [(type_, version) for _, type_, _, version in told] == [
        ("ADDED", "2"),
        ("MODIFIED", "3"),
        ("DELETED", "4"),
    ]

    async def background() -> None:
        await kube.create("jobs", job)
        memory.hold("jobs", "ns", "j")
        await kube.delete("jobs", "ns", "j")

    asyncio.run(background())
    assert [type_ for _, type_, _, _ in told[3:]] == ["ADDED", "DELETED"]
