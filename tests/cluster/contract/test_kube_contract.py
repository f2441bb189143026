"""The in-memory Kubernetes (tests/fakes/kubernetes.py) held to kube-apiserver: every test
runs through the operator's own client, `KubeApi`, once against `MemoryKube` and once
against the devcluster's API server, with the same assertions. A test that fails only
on "apiserver" shows the fake saying something the real server does not.

`-k memory` runs the fake's side alone, in well under a second, with no server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import pytest

from dws_operator import rfc3339
from dws_operator.api import GROUP, KIND, PLURAL, VERSION
from dws_operator.controller import kube as kube_module
from dws_operator.controller.finalizers import FINALIZER
from dws_operator.controller.kube import (
    ApiError,
    Conflict,
    Invalid,
    KubeApi,
    Listed,
    NotFound,
    connect,
)
from dws_operator.kubekit.transport import Requests
from dws_workshop.devcluster import DevCluster
from tests.builders import CONTAINER, gpu, manifest, spec_body
from tests.fakes.kubernetes import MemoryKube
from tests.polling import HANG_GUARD

T = TypeVar("T")

#: Labels of the objects these tests make.
TAG = "contract.dws-operator.dev/tag"
RUN = "contract.dws-operator.dev/run"

MERGE = "application/merge-patch+json"
#: When an Event the contract posts happened, as the operator's clock said.
TOLD_AT = datetime(2026, 11, 28, 9, 30, tzinfo=UTC)


class Server(Requests, Protocol):
    async def close(self) -> None: ...


@dataclass
class Backend:
    """One API server the contract is checked against, and a namespace of the test's own
    in it. `run` opens a connection in a fresh event loop for `body`, and closes it."""

    name: str
    namespace: str
    opened: Callable[[], Awaitable[Server]]

    def run(self, body: Callable[[KubeApi], Awaitable[T]]) -> T:
        async def main() -> T:
            server = await self.opened()
            try:
                return await body(KubeApi(server))
            finally:
                await server.close()

        return asyncio.run(main())


@pytest.fixture(params=["memory", "apiserver"])
def kube(request: pytest.FixtureRequest) -> Backend:
    """The fake needs nothing; only the API server's side asks for the devcluster, the
    CRDs and a fresh namespace."""
    if request.param == "memory":
        memory = MemoryKube()

        async def in_memory() -> Server:
            return memory

        return Backend("memory", "contract", in_memory)
    devcluster: DevCluster = request.getfixturevalue("devcluster")
    request.getfixturevalue("training_request_crd")
    namespace: str = request.getfixturevalue("namespace")
    kubeconfig = str(devcluster.kubeconfig)

    async def connected() -> Server:
        return await connect(kubeconfig)

    return Backend("apiserver", namespace, connected)


def _request(namespace: str, name: str, **metadata: Any) -> dict[str, Any]:
    body = manifest(name, spec_body(gpu("nvidia-l4")))
    body["metadata"].update(namespace=namespace, **metadata)
    return body


def _path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def _collection(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def _version(body: dict[str, Any] | None) -> int:
    assert body is not None
    return int(body["metadata"]["resourceVersion"])


async def _raised(call: Awaitable[Any]) -> ApiError:
    try:
        await call
    except ApiError as error:
        return error
    raise AssertionError("the call succeeded")


def test_create_answers_the_stored_object_and_none_for_a_taken_name(kube: Backend) -> None:
    ns = kube.namespace

    async def body(api: KubeApi) -> tuple[Any, ...]:
        sent = _request(ns, "made")
        sent["status"] = {"phase": "Running", "message": "set at create"}
        made = await api.create(PLURAL, sent)
        read = await api.training_request(ns, "made")
        again = await api.create(PLURAL, _request(ns, "made", labels={"second": "yes"}))
        return made, read, again, await api.training_request(ns, "made")

    made, read, again, after = kube.run(body)
    assert made is not None
    metadata = made["metadata"]
    assert (metadata["name"], metadata["namespace"]) == ("made", ns)
    assert metadata["uid"]
    assert metadata["resourceVersion"].isdigit()
    assert rfc3339.parse(metadata["creationTimestamp"]).tzinfo is not None
    assert (made["apiVersion"], made["kind"]) == (f"{GROUP}/{VERSION}", KIND)
    assert made["spec"]["accelerator"]["gpu"]["type"] == "nvidia-l4"
    # A create cannot set the status of a kind with a /status subresource.
    assert "status" not in made
    assert read == made
    # The name is taken: None, and the object stays as it was (no labels of the second).
    assert again is None
    assert after == made


def test_a_service_is_made_once_and_deleted_only_by_its_uid(kube: Backend) -> None:
    ns = kube.namespace

    async def body(api: KubeApi) -> tuple[Any, ...]:
        owner = await api.create(PLURAL, _request(ns, "owner"))
        assert owner is not None
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "svc",
                "namespace": ns,
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": KIND,
                        "name": "owner",
                        "uid": owner["metadata"]["uid"],
                    }
                ],
            },
            "spec": {"clusterIP": "None", "selector": {"app": "svc"}, "ports": [{"port": 8080}]},
        }
        made = await api.create("services", service)
        assert made is not None
        again = await api.create("services", service)
        owners = await api.service_owners(ns, "svc")
        wrong = await api.delete("services", ns, "svc", "0e0e0e0e-0000-0000-0000-000000000000")
        refused = await _raised(
            api.call(
                "DELETE",
                f"/api/v1/namespaces/{ns}/services/svc",
                body={"preconditions": {"uid": "wrong"}},
            )
        )
        kept = await api.service_owners(ns, "svc")
        right = await api.delete("services", ns, "svc", made["metadata"]["uid"])
        gone = await api.service_owners(ns, "svc")
        twice = await api.delete("services", ns, "svc")
        return owner, made, again, owners, wrong, refused, kept, right, gone, twice

    owner, made, again, owners, wrong, refused, kept, right, gone, twice = kube.run(body)
    assert (made["apiVersion"], made["kind"]) == ("v1", "Service")
    assert again is None
    assert owners == [owner["metadata"]["uid"]]
    # A uid precondition that does not hold: not deleted (False, as if gone)...
    assert wrong is False
    assert isinstance(refused, Conflict)
    assert refused.message == (
        'Operation cannot be fulfilled on Service "svc": the UID in the precondition (wrong) '
        f"does not match the UID in record ({made['metadata']['uid']}). The object might "
        "have been deleted and then recreated"
    )
    # ...and the Service is still there.
    assert kept == owners
    assert right is True
    assert gone is None
    assert twice is False


def test_a_metadata_patch_over_a_stale_version_conflicts(kube: Backend) -> None:
    ns = kube.namespace

    async def body(api: KubeApi) -> tuple[Any, ...]:
        made = await api.create(PLURAL, _request(ns, "patched"))
        assert made is not None
        at = made["metadata"]["resourceVersion"]
        first = await api.patch_metadata(
            ns, "patched", {"labels": {"a": "1"}, "resourceVersion": at}
        )
        stale = await _raised(
            api.patch_metadata(ns, "patched", {"labels": {"a": "2"}, "resourceVersion": at})
        )
        kept = await api.training_request(ns, "patched")
        unconditional = await api.patch_metadata(ns, "patched", {"labels": {"b": "3"}})
        same = await api.patch_metadata(ns, "patched", {"labels": {"b": "3"}})
        removed = await api.patch_metadata(ns, "patched", {"labels": {"a": None}})
        return made, first, stale, kept, unconditional, same, removed

    made, first, stale, kept, unconditional, same, removed = kube.run(body)
    assert first["metadata"]["labels"] == {"a": "1"}
    assert _version(first) > _version(made)
    assert isinstance(stale, Conflict)
    assert stale.message == (
        f'Operation cannot be fulfilled on {PLURAL}.{GROUP} "patched": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    assert kept == first
    # Without a version the patch applies to whatever is stored.
    assert unconditional["metadata"]["labels"] == {"a": "1", "b": "3"}
    assert _version(unconditional) > _version(first)
    # A patch that changes nothing writes nothing: the version stays.
    assert same == unconditional
    # null removes a key (JSON merge patch).
    assert removed["metadata"]["labels"] == {"b": "3"}
    assert _version(removed) > _version(same)


def test_the_status_is_written_through_status_only(kube: Backend) -> None:
    ns = kube.namespace

    def said(body: dict[str, Any]) -> dict[str, Any]:
        # Only what the test wrote: the real server adds the CRD's defaults.
        return {k: v for k, v in body.get("status", {}).items() if k in ("phase", "message")}

    async def body(api: KubeApi) -> tuple[Any, ...]:
        made = await api.create(PLURAL, _request(ns, "status", labels={"kept": "yes"}))
        assert made is not None
        at = made["metadata"]["resourceVersion"]
        first = await api.patch_status(ns, "status", {"phase": "Pending", "message": "one"}, at)
        # A write to /status that says more: only the status is taken.
        second = await api.call(
            "PATCH",
            _path(ns, "status") + "/status",
            body={
                "metadata": {"labels": {"kept": "no"}},
                "spec": {"accelerator": {"gpu": {"nodes": 2}}},
                "status": {"message": "two"},
            },
            content_type=MERGE,
        )
        # A write to the object itself cannot change its status.
        plain = await api.call(
            "PATCH",
            _path(ns, "status"),
            body={"metadata": {"labels": {"extra": "1"}}, "status": {"message": "ignored"}},
            content_type=MERGE,
        )
        cleared = await api.patch_status(ns, "status", {"message": None})
        stale = await _raised(api.patch_status(ns, "status", {"message": "late"}, at))
        return made, first, second, plain, cleared, stale

    made, first, second, plain, cleared, stale = kube.run(body)
    assert said(first) == {"phase": "Pending", "message": "one"}
    assert _version(first) > _version(made)
    assert said(second) == {"phase": "Pending", "message": "two"}
    for written in (first, second):
        assert written["spec"] == made["spec"]
        assert written["metadata"]["labels"] == {"kept": "yes"}
    assert plain["metadata"]["labels"] == {"kept": "yes", "extra": "1"}
    assert said(plain) == {"phase": "Pending", "message": "two"}
    assert said(cleared) == {"phase": "Pending"}
    assert isinstance(stale, Conflict)
    assert "the object has been modified" in stale.message


def test_a_request_with_a_finalizer_stays_deleting_until_it_is_taken_off(kube: Backend) -> None:
    ns = kube.namespace

    async def body(api: KubeApi) -> tuple[Any, ...]:
        made = await api.create(PLURAL, _request(ns, "held", finalizers=[FINALIZER]))
        assert made is not None
        deleted = await api.delete(PLURAL, ns, "held", made["metadata"]["uid"])
        deleting = await api.training_request(ns, "held")
        again = await api.delete(PLURAL, ns, "held")
        still = await api.training_request(ns, "held")
        assert still is not None
        released = await api.patch_metadata(
            ns, "held", {"finalizers": [], "resourceVersion": still["metadata"]["resourceVersion"]}
        )
        gone = await api.training_request(ns, "held")
        return (
            made,
            deleted,
            deleting,
            again,
            still,
            released,
            gone,
            await api.delete(PLURAL, ns, "held"),
        )

    made, deleted, deleting, again, still, released, gone, after = kube.run(body)
    assert made["metadata"]["finalizers"] == [FINALIZER]
    assert "deletionTimestamp" not in made["metadata"]
    assert deleted is True
    metadata = deleting["metadata"]
    assert metadata["finalizers"] == [FINALIZER]
    assert rfc3339.parse(metadata["deletionTimestamp"]).tzinfo is not None
    assert metadata["deletionGracePeriodSeconds"] == 0
    assert _version(deleting) > _version(made)
    # Deleting it again: there, nothing written.
    assert again is True
    assert still == deleting
    # The last finalizer off: the answer is the object as the patch left it, and it goes.
    assert released is not None
    assert "finalizers" not in released["metadata"]
    assert released["metadata"]["deletionTimestamp"] == metadata["deletionTimestamp"]
    assert gone is None
    assert after is False


def test_a_request_has_a_new_generation_for_a_spec_change_and_its_deletion(
    kube: Backend,
) -> None:
    ns = kube.namespace

    def generation(body: dict[str, Any] | None) -> int:
        assert body is not None
        return int(body["metadata"]["generation"])

    async def body(api: KubeApi) -> list[int]:
        made = await api.create(PLURAL, _request(ns, "gen", finalizers=[FINALIZER]))
        status = await api.patch_status(ns, "gen", {"phase": "Pending"})
        labelled = await api.call(
            "PATCH",
            _path(ns, "gen"),
            body={"metadata": {"labels": {"team": "a"}}},
            content_type=MERGE,
        )
        respec = await api.call(
            "PATCH",
            _path(ns, "gen"),
            body={"spec": {"nodePool": {"cleanup": "Keep"}}},  # a field that may change
            content_type=MERGE,
        )
        await api.delete(PLURAL, ns, "gen")
        deleting = await api.training_request(ns, "gen")
        await api.delete(PLURAL, ns, "gen")
        again = await api.training_request(ns, "gen")
        await api.patch_metadata(ns, "gen", {"finalizers": []})
        return [generation(b) for b in (made, status, labelled, respec, deleting, again)]

    # Created: 1; the status and the labels: the same; the spec: 2; marked deleting: 3,
    # and deleted again: still 3.
    assert kube.run(body) == [1, 1, 1, 2, 3, 3]


def test_no_finalizer_is_added_to_a_request_being_deleted(kube: Backend) -> None:
    ns = kube.namespace
    late = "contract.dws-operator.dev/late"

    async def body(api: KubeApi) -> tuple[Any, ...]:
        made = await api.create(PLURAL, _request(ns, "closing", finalizers=[FINALIZER]))
        assert made is not None
        await api.delete(PLURAL, ns, "closing")
        try:
            refused = await _raised(
                api.patch_metadata(ns, "closing", {"finalizers": [FINALIZER, late]})
            )
            kept = await api.training_request(ns, "closing")
        finally:
            await api.patch_metadata(ns, "closing", {"finalizers": []})
        return refused, kept, await api.training_request(ns, "closing")

    refused, kept, gone = kube.run(body)
    assert isinstance(refused, Invalid)
    assert refused.status == 422
    assert refused.message == (
        f'{KIND}.{GROUP} "closing" is invalid: metadata.finalizers: Forbidden: no new '
        "finalizers can be added if the object is being deleted, found new finalizers "
        f'[]string{{"{late}"}}'
    )
    assert kept["metadata"]["finalizers"] == [FINALIZER]
    assert gone is None


def test_lists_by_label_a_page_at_a_time_at_one_version(
    kube: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = kube.namespace
    monkeypatch.setattr(kube_module, "LIST_PAGE", 2)

    def pages(listed: list[Listed]) -> list[list[str]]:
        return [[item["metadata"]["name"] for item in page.items] for page in listed]

    async def body(api: KubeApi) -> tuple[Any, ...]:
        made = []
        for name, tag in (("a", "first"), ("b", "first"), ("c", None), ("d", "rest"),
                          ("e", "rest"), ("f", "rest"), ("z", None)):  # fmt: skip
            labels = {RUN: ns} | ({TAG: tag} if tag else {})
            made.append(await api.create(PLURAL, _request(ns, name, labels=labels)))
        tagged = [listed async for listed in api.snapshots(PLURAL, TAG, (ns,))]
        first = [listed async for listed in api.snapshots(PLURAL, f"{TAG}=first", (ns,))]
        every = [listed async for listed in api.snapshots(PLURAL, "", (ns,))]
        # All namespaces (confined to this test's objects by a label on each): `,` is and.
        anywhere = [
            item["metadata"]["name"] async for item in api.listing(PLURAL, f"{RUN}={ns},{TAG}")
        ]
        # Written between one page and the next: not in that list, which is read at the
        # version of its first page; in the next.
        during: list[Listed] = []
        async for listed in api.snapshots(PLURAL, TAG, (ns,)):
            during.append(listed)
            if len(during) == 1:
                await api.create(PLURAL, _request(ns, "d2", labels={RUN: ns, TAG: "rest"}))
                assert await api.delete(PLURAL, ns, "f")
        after = [item["metadata"]["name"] async for item in api.listing(PLURAL, TAG, (ns,))]
        # The raw answers: a CRD's list and a compiled-in kind's differ in shape.
        raw = {
            "first": await api.call("GET", _collection(ns), query={"limit": "2"}),
            "last": await api.call("GET", _collection(ns)),
            "tagged": await api.call(
                "GET", _collection(ns), query={"limit": "2", "labelSelector": TAG}
            ),
            "jobs": await api.call("GET", f"/apis/batch/v1/namespaces/{ns}/jobs"),
        }
        return made, tagged, first, every, anywhere, during, after, raw

    made, tagged, first, every, anywhere, during, after, raw = kube.run(body)
    assert pages(tagged) == [["a", "b"], ["d", "e"], ["f"]]
    # The page is cut at the limit while more objects follow, matching or not: the
    # next page may be empty.
    assert pages(first) == [["a", "b"], []]
    assert pages(every) == [["a", "b"], ["c", "d"], ["e", "f"], ["z"]]
    assert anywhere == ["a", "b", "d", "e", "f"]
    assert pages(during) == [["a", "b"], ["d", "e"], ["f"]]
    assert after == ["a", "b", "d", "d2", "e"]
    # Counted only without a selector; a CRD's last page says continue "", a Job list
    # nothing; a CRD's items name their kind, a typed list's do not.
    assert raw["first"]["metadata"]["remainingItemCount"] == 5
    assert "remainingItemCount" not in raw["tagged"]["metadata"]
    assert raw["last"]["metadata"]["continue"] == ""
    assert raw["last"]["items"][0]["kind"] == KIND
    assert "continue" not in raw["jobs"]["metadata"]
    newest = max(_version(body) for body in made)
    for listed in (tagged, first, every, during):
        versions = {page.version for page in listed}
        assert len(versions) == 1
        (version,) = versions
        assert version is not None
        assert version >= newest


def test_what_is_not_there_is_not_found(kube: Backend) -> None:
    ns = kube.namespace

    async def body(api: KubeApi) -> tuple[Any, ...]:
        answers = (
            await api.training_request(ns, "missing"),
            await api.patch_metadata(ns, "missing", {"labels": {"a": "b"}}),
            await api.patch_status(ns, "missing", {"message": "x"}),
            await api.delete(PLURAL, ns, "missing"),
            await api.delete("jobs", ns, "missing", "0e0e0e0e-0000-0000-0000-000000000000"),
            await api.service_owners(ns, "missing"),
        )
        request = await _raised(api.call("GET", _path(ns, "missing")))
        job = await _raised(api.call("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/missing"))
        group = await _raised(api.call("GET", f"/apis/contract.invalid/v1/namespaces/{ns}/things"))
        unnamed = await _raised(api.call("GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}/missing"))
        core = await _raised(api.call("GET", f"/api/v1/namespaces/{ns}/things"))
        return answers, request, job, group, unnamed, core

    answers, request, job, group, unnamed, core = kube.run(body)
    assert answers == (None, None, None, False, False, None)
    assert isinstance(request, NotFound)
    assert request.message == f'{PLURAL}.{GROUP} "missing" not found'
    assert isinstance(job, NotFound)
    assert job.message == 'jobs.batch "missing" not found'
    # Where nothing is served (a group no one serves; a CRD's object named outside its
    # namespace), the server's catch-all answers plain text, not a Status.
    for unserved in (group, unnamed):
        assert isinstance(unserved, NotFound)
        assert unserved.body == "404 page not found\n"
        assert unserved.message == "Not Found"
    # A compiled-in group version answers a Status for a resource it does not have.
    assert isinstance(core, NotFound)
    assert core.message == "the server could not find the requested resource"


def test_an_event_is_posted_about_a_request(kube: Backend) -> None:
    ns = kube.namespace

    async def body(api: KubeApi) -> tuple[Any, ...]:
        made = await api.create(PLURAL, _request(ns, "told"))
        assert made is not None
        # post_event swallows a refusal (logged): the Event is read back to know.
        await api.post_event(made, "Normal", "ContractTest", "x" * 2000, at=TOLD_AT)
        listed = await api.call("GET", f"/api/v1/namespaces/{ns}/events")
        return made, [e for e in listed["items"] if e.get("reason") == "ContractTest"]

    made, events = kube.run(body)
    assert len(events) == 1
    (event,) = events
    assert event["involvedObject"]["uid"] == made["metadata"]["uid"]
    assert event["involvedObject"]["kind"] == KIND
    assert event["message"] == "x" * 1024
    assert event["type"] == "Normal"
    # The time it happened on the operator's clock, not when it was sent.
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-11-28T09:30:00Z"


def test_discovery_names_the_served_versions(kube: Backend) -> None:
    async def body(api: KubeApi) -> tuple[Any, ...]:
        return (
            await api.served_versions(GROUP),
            await api.served_versions("batch"),
            await api.served_versions("contract.invalid"),
        )

    ours, batch, none = kube.run(body)
    assert ours == (VERSION,)
    assert "v1" in batch
    assert none == ()


def test_a_job_deleted_in_the_foreground_or_background_goes(kube: Backend) -> None:
    ns = kube.namespace

    def job(name: str) -> dict[str, Any]:
        # Suspended: the Job controller makes no pods for it.
        template = {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"suspend": True, "template": template},
        }

    async def gone(api: KubeApi, name: str) -> bool:
        # Foreground: the garbage collector takes its finalizer off once the dependents
        # are gone (at once in the fake, which has no dependents).
        deadline = time.monotonic() + HANG_GUARD
        while time.monotonic() < deadline:
            try:
                await api.call("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")
            except NotFound:
                return True
            await asyncio.sleep(0.1)
        return False

    async def body(api: KubeApi) -> tuple[Any, ...]:
        front = await api.create("jobs", job("front"))
        back = await api.create("jobs", job("back"))
        assert front is not None
        assert back is not None
        again = await api.create("jobs", job("front"))
        deleted = (
            await api.delete("jobs", ns, "front", front["metadata"]["uid"], foreground=True),
            await api.delete("jobs", ns, "back", back["metadata"]["uid"]),
        )
        await api.create("jobs", job("raw"))
        # The answer to a foreground delete: the Job, deleting, held by the collector.
        answer = await api.call(
            "DELETE",
            f"/apis/batch/v1/namespaces/{ns}/jobs/raw",
            body={"propagationPolicy": "Foreground"},
        )
        return (
            front,
            again,
            deleted,
            answer,
            [await gone(api, name) for name in ("front", "back", "raw")],
        )

    front, again, deleted, answer, gone_after = kube.run(body)
    assert (front["apiVersion"], front["kind"]) == ("batch/v1", "Job")
    assert again is None
    assert deleted == (True, True)
    assert answer["kind"] == "Job"
    assert answer["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 0
    assert rfc3339.parse(answer["metadata"]["deletionTimestamp"]).tzinfo is not None
    assert gone_after == [True, True, True]
