"""The watches' cache: only newer versions replace older ones (the echo of the operator's
own write is no news), Jobs and JobSets found by their request, Nodes counted by pool."""

from __future__ import annotations

from typing import Any

from dws_operator.controller.cache import KubeCache, newer

REQUEST_LABEL = "dws-operator.dev/training-request"


def obj(name: str, version: str, uid: str = "u1", **metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": version,
            **metadata,
        }
    }


def test_only_a_later_version_of_the_same_object_is_news() -> None:
    assert newer(obj("a", "10"), None)
    assert newer(obj("a", "11"), obj("a", "10"))
    assert not newer(obj("a", "10"), obj("a", "10"))  # the echo of our own write
    assert not newer(obj("a", "9"), obj("a", "10"))  # a relist older than a write
    assert newer(obj("a", "2", uid="u2"), obj("a", "10"))  # deleted and made again


def test_requests_keep_the_newest_body() -> None:
    cache = KubeCache()
    assert cache.put_request(obj("a", "5"))
    assert not cache.put_request(obj("a", "5"))
    assert not cache.put_request(obj("a", "4"))
    assert cache.put_request(obj("a", "6", labels={"x": "y"}))
    body = cache.request(("ns", "a"))
    assert body is not None
    assert body["metadata"]["resourceVersion"] == "6"
    cache.remove_request(("ns", "a"))
    assert cache.request(("ns", "a")) is None


def job(name: str, version: str, request: str, uid: str = "u1", **status: Any) -> dict[str, Any]:
    body = obj(name, version, uid, labels={REQUEST_LABEL: request}, ownerReferences=[{"uid": "r1"}])
    body["status"] = status
    return body


def test_jobs_are_found_by_request_and_kept_small() -> None:
    cache = KubeCache()
    assert cache.put_job(job("train-0", "1", "train", ready=2))
    assert cache.put_job(job("train-r1", "2", "train"))
    assert cache.put_job(job("other", "3", "other"))
    assert [j.name for j in cache.jobs_of("ns", "train")] == ["train-0", "train-r1"]
    record = cache.job("ns", "train-0")
    assert record is not None
    assert (record.ready, record.owners, record.request) == (2, ("r1",), "train")
    assert not cache.put_job(job("train-0", "1", "train"))
    cache.remove_job(("ns", "train-0"))
    assert [j.name for j in cache.jobs_of("ns", "train")] == ["train-r1"]
    cache.remove_job(("ns", "train-r1"))
    assert cache.jobs_of("ns", "train") == []


def test_a_delete_names_the_uid_the_cache_holds() -> None:
    cache = KubeCache()
    cache.put_job(job("train-0", "1", "train"))
    cache.put_service(obj("train", "2", uid="s1", labels={REQUEST_LABEL: "train"}))
    assert cache.uid("jobs", ("ns", "train-0")) == "u1"
    assert cache.uid("services", ("ns", "train")) == "s1"
    # Deleted and made again under the name: the newer one's uid.
    cache.put_job(job("train-0", "7", "train", uid="u9"))
    assert cache.uid("jobs", ("ns", "train-0")) == "u9"
    assert cache.uid("jobs", ("ns", "absent")) is None
    assert cache.uid("nodes", ("", "n1")) is None


def node(name: str, pool: str | None) -> dict[str, Any]:
    labels = {"cloud.google.com/gke-nodepool": pool} if pool else {}
    return {"metadata": {"name": name, "labels": labels}}


def test_nodes_are_counted_by_pool_and_moves_are_seen() -> None:
    cache = KubeCache()
    assert cache.put_node(node("n1", "p1")) == "p1"
    assert cache.put_node(node("n2", "p1")) == "p1"
    assert cache.put_node(node("n1", "p1")) is None  # no change
    assert cache.nodes_of(["p1", "p2"]) == {"p1": 2, "p2": 0}
    assert cache.remove_node("n1") == "p1"
    assert cache.remove_node("n1") is None
    assert cache.nodes_of(["p1"]) == {"p1": 1}


def test_a_deactivated_workload_is_forgotten_with_its_job() -> None:
    # Kueue gave up on Job `train`; the Job goes (a recovery, or its request deleted), and
    # a Workload's DELETED event comes after its owner's. A request made again under the
    # same name makes a Job `train` again: Kueue has not given up on that one.
    cache = KubeCache()
    job = obj("train", "1", uid="j1", labels={REQUEST_LABEL: "train"})
    assert cache.put_job(job)
    assert cache.put_workload("jobs", "ns", "train", "gave up")
    assert not cache.put_workload("jobs", "ns", "train", "gave up")
    assert cache.deactivated("jobs", "ns", "train") == "gave up"
    assert cache.deactivated("jobsets", "ns", "train") is None  # a JobSet of that name
    cache.remove_job(("ns", "train"))
    assert cache.put_job(obj("train", "5", uid="j2", labels={REQUEST_LABEL: "train"}))
    assert cache.deactivated("jobs", "ns", "train") is None
