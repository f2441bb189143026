"""What a watch tells, held to kube-apiserver: each test makes a sequence of writes
through the operator's own client (`KubeApi`, and the operator's Lease and ConfigMap
writers), once against `MemoryKube`, told by `MemoryKube.watch`, and once against the
devcluster's API server, told by a real watch (`?watch=1` from the version of a list made
before the writes, read in a thread). Both must tell the same events: their types,
names, what each object looked like, and which write's answer each event's
resourceVersion is (the values themselves differ).

Every sequence ends with the create of an object named `END`: its ADDED event is the
last awaited, so an event told that should not be (a write that changed nothing) shows
up before it, and no test waits for a fixed time.

`-k memory` runs the fake's side alone, without a server.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import pytest
from kubernetes import client as k8s

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller.finalizers import FINALIZER
from dws_operator.controller.history import FLUSH_SECONDS, CapacityHistory
from dws_operator.controller.kube import ApiError, Conflict, Invalid, KubeApi, NotFound, connect
from dws_operator.estimate import Wait
from dws_operator.kubekit.leader import LeaderElector, LeaseSettings
from dws_operator.kubekit.transport import Requests
from dws_workshop.devcluster import DevCluster
from tests.builders import gpu, manifest, spec_body
from tests.fakes.kubernetes import EventType, MemoryKube
from tests.polling import HANG_GUARD, until

T = TypeVar("T")

#: The name of the object each sequence ends with.
END = "zz-end"
#: A second finalizer, of no controller: only the test takes it off.
HELD = "contract.dws-operator.dev/held"
MERGE = "application/merge-patch+json"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{}/leases"
CONFIGMAPS = "/api/v1/namespaces/{}/configmaps"
KEY = "nvidia-l4.8_GPUs.x1.FlexStart.any"
T0 = datetime(2026, 11, 1, tzinfo=UTC)
OTHER_UID = "0e0e0e0e-0000-0000-0000-000000000000"
#: Made in every namespace by the cluster's controllers (kube-controller-manager's root
#: CA publisher), maybe after the watch's list: not the test's.
CLUSTER_MADE = {"kube-root-ca.crt"}


class Server(Requests, Protocol):
    async def close(self) -> None: ...


@dataclass(frozen=True)
class Seen:
    """One watch event."""

    type: str
    object: dict[str, Any]

    @property
    def body(self) -> dict[str, Any]:
        return self.object

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def version(self) -> int:
        return int(self.body["metadata"]["resourceVersion"])

    @property
    def finalizers(self) -> tuple[str, ...]:
        return tuple(self.body["metadata"].get("finalizers") or ())

    @property
    def deleting(self) -> bool:
        return "deletionTimestamp" in self.body["metadata"]

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.body["metadata"].get("labels") or {})

    @property
    def message(self) -> str | None:
        # Only what the tests write: the real server adds the CRD's status defaults.
        return (self.body.get("status") or {}).get("message")


def _ended(seen: list[Seen]) -> bool:
    return any(event.name == END for event in seen)


class ServerWatch(threading.Thread):
    """A watch of one collection on the API server, from the version of a list made
    first, read in a thread until the END object's event (or the server ends it after
    the hang guard)."""

    def __init__(self, api: k8s.ApiClient, collection: str) -> None:
        super().__init__(daemon=True)
        self.api, self.collection = api, collection
        self.seen: list[Seen] = []
        self.error: BaseException | None = None
        listed = json.loads(self._get(collection).read())
        self.version = str(listed["metadata"]["resourceVersion"])

    def _get(self, path: str, *query: tuple[str, str]) -> Any:
        method, url, headers, body, _ = self.api.param_serialize(
            "GET",
            path,
            query_params=list(query),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        return self.api.call_api(method, url, headers, body)

    def run(self) -> None:
        try:
            answer = self._get(
                self.collection,
                ("watch", "1"),
                ("resourceVersion", self.version),
                ("timeoutSeconds", str(int(HANG_GUARD))),
            ).response
            try:
                pending = b""
                for chunk in answer.stream(decode_content=True):
                    pending += chunk
                    while b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        if line.strip():
                            event = Seen(**json.loads(line))
                            if event.name not in CLUSTER_MADE:
                                self.seen.append(event)
                    if _ended(self.seen):
                        return
            finally:
                answer.close()
        except BaseException as error:  # told to the test's thread
            self.error = error


@dataclass
class Side:
    """One API server, a namespace of the test's own in it, and a way to watch it."""

    name: str
    namespace: str
    opened: Callable[[], Awaitable[Server]]
    memory: MemoryKube | None = None
    api: k8s.ApiClient | None = None

    def run(
        self, collection: str, end: dict[str, Any], body: Callable[[KubeApi], Awaitable[T]]
    ) -> tuple[T, list[Seen]]:
        """What `body` answers, and the events of `collection` from before it up to the
        create of `end` (an object named END of the collection's kind) after it."""

        async def main() -> T:
            server = await self.opened()
            try:
                api = KubeApi(server)
                answer = await body(api)
                await api.call("POST", collection, body=end)
                return answer
            finally:
                await server.close()

        plural = collection.rstrip("/").rsplit("/", 1)[-1]
        if self.memory is not None:
            seen: list[Seen] = []

            def told(told_plural: str, type_: EventType, obj: dict[str, Any]) -> None:
                if told_plural == plural and obj["metadata"].get("namespace") == self.namespace:
                    seen.append(Seen(type_, obj))

            unwatch = self.memory.watch(told)
            try:
                answer = asyncio.run(main())
            finally:
                unwatch()
            return answer, seen
        assert self.api is not None
        watch = ServerWatch(self.api, collection)
        watch.start()
        answer = asyncio.run(main())
        watch.join(HANG_GUARD)
        assert watch.error is None, watch.error
        assert not watch.is_alive(), f"no event of {END} in {HANG_GUARD:.0f}s: {watch.seen}"
        assert _ended(watch.seen), f"the watch ended before {END}'s event: {watch.seen}"
        return answer, watch.seen


@pytest.fixture(params=["memory", "apiserver"])
def side(request: pytest.FixtureRequest) -> Side:
    """The fake needs nothing; only the API server's side asks for the devcluster, the
    CRDs and a fresh namespace."""
    if request.param == "memory":
        memory = MemoryKube()

        async def in_memory() -> Server:
            return memory

        return Side("memory", "contract", in_memory, memory=memory)
    devcluster: DevCluster = request.getfixturevalue("devcluster")
    request.getfixturevalue("training_request_crd")
    namespace: str = request.getfixturevalue("namespace")
    api: k8s.ApiClient = request.getfixturevalue("api")
    kubeconfig = str(devcluster.kubeconfig)

    async def connected() -> Server:
        return await connect(kubeconfig)

    return Side("apiserver", namespace, connected, api=api)


def _request(namespace: str, name: str, **metadata: Any) -> dict[str, Any]:
    body = manifest(name, spec_body(gpu("nvidia-l4")))
    body["metadata"].update(namespace=namespace, **metadata)
    return body


def _collection(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def _path(namespace: str, name: str) -> str:
    return f"{_collection(namespace)}/{name}"


def _version(body: dict[str, Any] | None) -> int:
    assert body is not None
    return int(body["metadata"]["resourceVersion"])


def _at(seen: list[Seen], answers: dict[str, Any]) -> dict[str, int | None]:
    """For each write's answer, the event at its resourceVersion (its index), if any."""
    index = {event.version: at for at, event in enumerate(seen)}
    return {label: index.get(_version(answer)) for label, answer in answers.items()}


def _in_order(seen: list[Seen]) -> bool:
    versions = [event.version for event in seen]
    return versions == sorted(set(versions))


async def _raised(call: Awaitable[Any]) -> ApiError:
    try:
        await call
    except ApiError as error:
        return error
    raise AssertionError("the call succeeded")


async def _gone(api: KubeApi, path: str) -> bool:
    try:
        await api.call("GET", path)
    except NotFound:
        return True
    return False


def test_a_request_is_added_modified_and_deleted(side: Side) -> None:
    ns = side.namespace

    async def body(api: KubeApi) -> dict[str, Any]:
        made = await api.create(PLURAL, _request(ns, "a"))
        labelled = await api.patch_metadata(ns, "a", {"labels": {"x": "1"}})
        same = await api.patch_metadata(ns, "a", {"labels": {"x": "1"}})
        status = await api.patch_status(ns, "a", {"message": "m"})
        same_status = await api.patch_status(ns, "a", {"message": "m"})
        assert await api.delete(PLURAL, ns, "a")
        return {
            "made": made,
            "labelled": labelled,
            "same": same,
            "status": status,
            "same status": same_status,
        }

    answers, seen = side.run(_collection(ns), _request(ns, END), body)
    assert [(e.type, e.name, e.labels, e.message) for e in seen] == [
        ("ADDED", "a", {}, None),
        ("MODIFIED", "a", {"x": "1"}, None),
        ("MODIFIED", "a", {"x": "1"}, "m"),
        # The object as last stored...
        ("DELETED", "a", {"x": "1"}, "m"),
        ("ADDED", END, {}, None),
    ]
    # ...at a version of its own, newer than any it was stored at. Patches that change
    # nothing tell nothing (and answer the version they found).
    assert _in_order(seen)
    assert _at(seen, answers) == {
        "made": 0,
        "labelled": 1,
        "same": 1,
        "status": 2,
        "same status": 2,
    }


def test_a_delete_held_by_finalizers_is_a_modification_until_the_last_comes_off(
    side: Side,
) -> None:
    ns = side.namespace

    async def body(api: KubeApi) -> dict[str, Any]:
        made = await api.create(PLURAL, _request(ns, "held", finalizers=[FINALIZER, HELD]))
        deleting = await api.call("DELETE", _path(ns, "held"))
        again = await api.call("DELETE", _path(ns, "held"))
        one_off = await api.patch_metadata(ns, "held", {"finalizers": [HELD]})
        last_off = await api.patch_metadata(ns, "held", {"finalizers": []})
        assert await _gone(api, _path(ns, "held"))
        return {
            "made": made,
            "deleting": deleting,
            "again": again,
            "one off": one_off,
            "last off": last_off,
        }

    answers, seen = side.run(_collection(ns), _request(ns, END), body)
    assert [(e.type, e.name, e.finalizers, e.deleting) for e in seen] == [
        ("ADDED", "held", (FINALIZER, HELD), False),
        ("MODIFIED", "held", (FINALIZER, HELD), True),
        ("MODIFIED", "held", (HELD,), True),
        # As last stored: the patch that took the last finalizer off is never stored.
        ("DELETED", "held", (HELD,), True),
        ("ADDED", END, (), False),
    ]
    assert _in_order(seen)
    # The answer to the last finalizer's removal is at the version it found.
    assert _at(seen, answers) == {
        "made": 0,
        "deleting": 1,
        "again": 1,
        "one off": 2,
        "last off": 2,
    }
    assert answers["last off"]["metadata"].get("finalizers") is None


def test_the_garbage_collectors_finalizers_are_told_as_they_come_off(side: Side) -> None:
    # ConfigMaps: the collector knows a compiled-in kind from its start, and learns a CRD
    # only at its next look at the served resources (every 30 s), so a CRD made moments
    # before is collected up to 30 s later.
    ns = side.namespace
    configmaps = CONFIGMAPS.format(ns)

    async def body(api: KubeApi) -> dict[str, Any]:
        front = await api.call("POST", configmaps, body={"metadata": {"name": "front"}})
        front_deleting = await api.call(
            "DELETE", f"{configmaps}/front", body={"propagationPolicy": "Foreground"}
        )
        # The collector takes its finalizer off (the fake's at once; the real one once it
        # has seen the delete): waited for, so that the events' order is the same.
        await until(lambda: _gone(api, f"{configmaps}/front"), what="front gone")
        orphan = await api.call(
            "POST", configmaps, body={"metadata": {"name": "orphan", "finalizers": [HELD]}}
        )
        orphan_deleting = await api.call(
            "DELETE", f"{configmaps}/orphan", body={"propagationPolicy": "Orphan"}
        )

        async def let_go() -> dict[str, Any] | None:
            found: dict[str, Any] = await api.call("GET", f"{configmaps}/orphan")
            return found if found["metadata"]["finalizers"] == [HELD] else None

        orphaned = await until(let_go, what="the orphan finalizer off")
        await api.call(
            "PATCH",
            f"{configmaps}/orphan",
            body={"metadata": {"finalizers": None}},
            content_type=MERGE,
        )
        return {
            "front": front,
            "front deleting": front_deleting,
            "orphan": orphan,
            "orphan deleting": orphan_deleting,
            "orphaned": orphaned,
        }

    answers, seen = side.run(configmaps, {"metadata": {"name": END}}, body)
    assert [(e.type, e.name, e.finalizers, e.deleting) for e in seen] == [
        ("ADDED", "front", (), False),
        ("MODIFIED", "front", ("foregroundDeletion",), True),
        ("DELETED", "front", ("foregroundDeletion",), True),
        ("ADDED", "orphan", (HELD,), False),
        ("MODIFIED", "orphan", (HELD, "orphan"), True),
        ("MODIFIED", "orphan", (HELD,), True),
        ("DELETED", "orphan", (HELD,), True),
        ("ADDED", END, (), False),
    ]
    assert _in_order(seen)
    assert _at(seen, answers) == {
        "front": 0,
        "front deleting": 1,
        "orphan": 3,
        "orphan deleting": 4,
        "orphaned": 5,
    }


def test_a_foreground_delete_again_of_an_object_held_by_another_finalizer_writes_again(
    side: Side,
) -> None:
    """Once the collector has taken its finalizer off an object another finalizer still
    holds, each foreground delete of it puts the collector's finalizer on again, and the
    collector takes it off again: two writes, two events, every time."""
    ns = side.namespace
    configmaps = CONFIGMAPS.format(ns)
    path = f"{configmaps}/held"

    async def body(api: KubeApi) -> dict[str, Any]:
        made = await api.call(
            "POST", configmaps, body={"metadata": {"name": "held", "finalizers": [HELD]}}
        )

        async def collected() -> dict[str, Any] | None:
            found: dict[str, Any] = await api.call("GET", path)
            return found if found["metadata"]["finalizers"] == [HELD] else None

        answers: dict[str, Any] = {"made": made}
        for delete in ("deleting", "again"):
            answers[delete] = await api.call(
                "DELETE", path, body={"propagationPolicy": "Foreground"}
            )
            answers[f"{delete} collected"] = await until(collected, what="the collector done")
        await api.call("PATCH", path, body={"metadata": {"finalizers": None}}, content_type=MERGE)
        return answers

    answers, seen = side.run(configmaps, {"metadata": {"name": END}}, body)
    assert [(e.type, e.name, e.finalizers, e.deleting) for e in seen] == [
        ("ADDED", "held", (HELD,), False),
        ("MODIFIED", "held", (HELD, "foregroundDeletion"), True),
        ("MODIFIED", "held", (HELD,), True),
        ("MODIFIED", "held", (HELD, "foregroundDeletion"), True),
        ("MODIFIED", "held", (HELD,), True),
        ("DELETED", "held", (HELD,), True),
        ("ADDED", END, (), False),
    ]
    assert _in_order(seen)
    assert _at(seen, answers) == {
        "made": 0,
        "deleting": 1,
        "deleting collected": 2,
        "again": 3,
        "again collected": 4,
    }


def test_a_request_replaced_by_put(side: Side) -> None:
    ns = side.namespace

    async def body(api: KubeApi) -> dict[str, Any]:
        made = await api.create(PLURAL, _request(ns, "put", finalizers=[FINALIZER]))
        assert made is not None
        unversioned = {**made, "metadata": dict(made["metadata"])}
        del unversioned["metadata"]["resourceVersion"]
        refused = await _raised(api.call("PUT", _path(ns, "put"), body=unversioned))
        # The status in a PUT of the object itself is not taken.
        sent = {
            **made,
            "metadata": {**made["metadata"], "labels": {"x": "1"}},
            "status": {"message": "not taken"},
        }
        replaced = await api.call("PUT", _path(ns, "put"), body=sent)
        same = await api.call(
            "PUT", _path(ns, "put"), body={**replaced, "status": {"message": "no"}}
        )
        stale = await _raised(api.call("PUT", _path(ns, "put"), body=sent))
        # A uid in the body is a precondition, checked before the version.
        other_uid = {**sent, "metadata": {**sent["metadata"], "uid": OTHER_UID}}
        uid = await _raised(api.call("PUT", _path(ns, "put"), body=other_uid))
        # /status takes the status only.
        status = await api.call(
            "PUT",
            _path(ns, "put") + "/status",
            body={
                **replaced,
                "metadata": {**replaced["metadata"], "labels": {"x": "2"}},
                "status": {"message": "taken"},
            },
        )
        deleting = await api.call("DELETE", _path(ns, "put"))
        released = await api.call(
            "PUT",
            _path(ns, "put"),
            body={**deleting, "metadata": {**deleting["metadata"], "finalizers": []}},
        )
        missing = await _raised(api.call("PUT", _path(ns, "missing"), body=_request(ns, "missing")))
        return {
            "made": made,
            "replaced": replaced,
            "same": same,
            "status": status,
            "deleting": deleting,
            "released": released,
        }, (refused, stale, uid, missing)

    (answers, (refused, stale, uid, missing)), seen = side.run(
        _collection(ns), _request(ns, END), body
    )
    assert [(e.type, e.name, e.labels, e.message, e.deleting) for e in seen] == [
        ("ADDED", "put", {}, None, False),
        ("MODIFIED", "put", {"x": "1"}, None, False),
        ("MODIFIED", "put", {"x": "1"}, "taken", False),
        ("MODIFIED", "put", {"x": "1"}, "taken", True),
        ("DELETED", "put", {"x": "1"}, "taken", True),
        ("ADDED", END, {}, None, False),
    ]
    assert _in_order(seen)
    assert _at(seen, answers) == {
        "made": 0,
        "replaced": 1,
        "same": 1,
        "status": 2,
        "deleting": 3,
        "released": 3,
    }
    # A CRD's object is replaced only over a version named.
    assert isinstance(refused, Invalid)
    assert refused.status == 422
    assert refused.message == (
        f'{PLURAL}.{GROUP} "put" is invalid: metadata.resourceVersion: Invalid value: 0: must '
        "be specified for an update"
    )
    assert isinstance(stale, Conflict)
    assert stale.message == (
        f'Operation cannot be fulfilled on {PLURAL}.{GROUP} "put": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    assert isinstance(uid, Conflict)
    assert uid.message == (
        f'Operation cannot be fulfilled on {PLURAL}.{GROUP} "put": StorageError: invalid '
        f"object, Code: 4, Key: /registry/{GROUP}/{PLURAL}/{ns}/put, ResourceVersion: 0, "
        f"AdditionalErrorMsg: Precondition failed: UID in precondition: {OTHER_UID}, UID in "
        f"object meta: {answers['made']['metadata']['uid']}"
    )
    # Nor is one made by a PUT.
    assert isinstance(missing, NotFound)
    assert missing.message == f'{PLURAL}.{GROUP} "missing" not found'


def test_the_capacity_history_configmap_and_its_racing_writers(side: Side) -> None:
    ns = side.namespace
    configmaps = CONFIGMAPS.format(ns)
    clock = [0.0]

    def wait(minutes: int) -> Wait:
        return Wait(60.0 * minutes, False, T0 + timedelta(minutes=minutes))

    async def body(api: KubeApi) -> tuple[Any, ...]:
        one = CapacityHistory(api, ns, "waits", lambda: clock[0])
        other = CapacityHistory(api, ns, "waits", lambda: clock[0])
        await one.add([(KEY, wait(1))])  # the first write goes at once
        await other.estimate(KEY)  # read now: stale after `one` writes again
        clock[0] += FLUSH_SECONDS
        await one.add([(KEY, wait(2))])
        # The other writer's version is old: its write conflicts, and is merged.
        await other.add([(KEY, wait(3))])
        stored = await api.call("GET", f"{configmaps}/waits")
        old = {**stored, "metadata": {**stored["metadata"], "resourceVersion": "1"}}
        stale = await _raised(api.call("PUT", f"{configmaps}/waits", body=old))
        # A ConfigMap is replaced without a version too (over whatever is stored)...
        unversioned = {"metadata": {"name": "waits"}, "data": {"a": "1"}}
        replaced = await api.call("PUT", f"{configmaps}/waits", body=unversioned)
        same = await api.call("PUT", f"{configmaps}/waits", body=unversioned)
        # ...but not made by one, and not over another uid.
        missing = await _raised(
            api.call("PUT", f"{configmaps}/missing", body={"metadata": {"name": "missing"}})
        )
        uid = await _raised(
            api.call(
                "PUT",
                f"{configmaps}/waits",
                body={"metadata": {"name": "waits", "uid": OTHER_UID}, "data": {}},
            )
        )
        return stored, replaced, same, stale, missing, uid

    (stored, replaced, same, stale, missing, uid), seen = side.run(
        configmaps, {"metadata": {"name": END}}, body
    )

    def counted(event: Seen) -> int:
        return len(json.loads((event.body.get("data") or {}).get(KEY, "[]")))

    assert [(e.type, e.name, counted(e)) for e in seen] == [
        ("ADDED", "waits", 1),
        ("MODIFIED", "waits", 2),
        ("MODIFIED", "waits", 3),
        ("MODIFIED", "waits", 0),
        ("ADDED", END, 0),
    ]
    assert _in_order(seen)
    assert _at(seen, {"stored": stored, "replaced": replaced, "same": same}) == {
        "stored": 2,
        "replaced": 3,
        "same": 3,
    }
    assert (replaced["kind"], replaced["apiVersion"]) == ("ConfigMap", "v1")
    assert isinstance(stale, Conflict)
    assert stale.message == (
        'Operation cannot be fulfilled on configmaps "waits": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert isinstance(missing, NotFound)
    assert missing.message == 'configmaps "missing" not found'
    assert isinstance(uid, Conflict)
    assert uid.message == (
        'Operation cannot be fulfilled on configmaps "waits": StorageError: invalid object, '
        f"Code: 4, Key: /registry/configmaps/{ns}/waits, ResourceVersion: 0, "
        f"AdditionalErrorMsg: Precondition failed: UID in precondition: {OTHER_UID}, UID in "
        f"object meta: {replaced['metadata']['uid']}"
    )


def test_the_leader_lease_taken_renewed_released_and_taken_over(side: Side) -> None:
    ns = side.namespace
    leases = LEASES.format(ns)

    def settings(identity: str) -> LeaseSettings:
        return LeaseSettings(namespace=ns, identity=identity, name="lead")

    async def body(api: KubeApi) -> tuple[Any, ...]:
        first, second = LeaderElector(api, settings("one")), LeaderElector(api, settings("two"))
        taken = await first.try_acquire_or_renew()  # made (POST)
        renewed = await first.try_acquire_or_renew()  # replaced (PUT)
        refused = await second.try_acquire_or_renew()  # held: nothing written
        await first.release()
        lease = await api.call("GET", f"{leases}/lead")
        stale = await _raised(
            api.call(
                "PUT",
                f"{leases}/lead",
                body={**lease, "metadata": {**lease["metadata"], "resourceVersion": "1"}},
            )
        )
        # A Lease is made by a PUT to a name not there, whatever version it names.
        made = await api.call(
            "PUT",
            f"{leases}/made",
            body={"metadata": {"name": "made", "resourceVersion": "1"}, "spec": lease["spec"]},
        )
        took_over = await second.try_acquire_or_renew()
        return (taken, renewed, refused, took_over), lease, made, stale

    (results, lease, made, stale), seen = side.run(leases, {"metadata": {"name": END}}, body)
    assert results == (True, True, False, True)

    def holder(event: Seen) -> str:
        return str((event.body.get("spec") or {}).get("holderIdentity") or "")

    assert [(e.type, e.name, holder(e)) for e in seen] == [
        ("ADDED", "lead", "one"),
        ("MODIFIED", "lead", "one"),
        ("MODIFIED", "lead", ""),
        ("ADDED", "made", ""),
        ("MODIFIED", "lead", "two"),
        ("ADDED", END, ""),
    ]
    assert _in_order(seen)
    assert _at(seen, {"lease": lease, "made": made}) == {"lease": 2, "made": 3}
    assert seen[-2].body["spec"]["leaseTransitions"] == 1
    assert isinstance(stale, Conflict)
    assert stale.message == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "lead": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )


def test_a_put_names_its_object_as_its_path_does(side: Side) -> None:
    ns = side.namespace
    configmaps = CONFIGMAPS.format(ns)

    async def body(api: KubeApi) -> list[ApiError]:
        made = await api.call("POST", configmaps, body={"metadata": {"name": "named"}})
        sent = {"data": {"a": "1"}}
        return [
            await _raised(api.call("PUT", f"{configmaps}/named", body={**sent, **metadata}))
            for metadata in (
                {"metadata": {"name": "other"}},
                {"metadata": {}},
                {},
                {"metadata": {"name": "named", "namespace": f"{ns}-other"}},
                # Checked before the version.
                {"metadata": {"name": "other", "resourceVersion": "1"}},
                {"metadata": {**made["metadata"], "name": "other"}},
            )
        ]

    refused, seen = side.run(configmaps, {"metadata": {"name": END}}, body)
    # Nothing written: the create and the END only.
    assert [(e.type, e.name) for e in seen] == [("ADDED", "named"), ("ADDED", END)]
    assert all(isinstance(error, Invalid) and error.status == 400 for error in refused)
    mismatch = "the name of the object (other) does not match the name on the URL (named)"
    unnamed = (
        "the name of the object (named based on URL) was undeterminable: name must be provided"
    )
    assert [error.message for error in refused] == [
        mismatch,
        unnamed,
        unnamed,
        "the namespace of the provided object does not match the namespace sent on the request",
        mismatch,
        mismatch,
    ]
