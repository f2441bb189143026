"""kopf's per-object memories are not kept: the operator's state is its cache."""

from __future__ import annotations

import asyncio

import kopf

from dws_operator.controller.handlers import EventMemories


def body(name: str, uid: str) -> kopf.RawBody:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"namespace": "team", "name": name, "uid": uid},
    }


def test_no_memory_is_kept_between_events() -> None:
    memories = EventMemories()
    memobase = kopf.Memo(controller="the controller")

    async def recall_twice() -> tuple[object, object, kopf.Memo]:
        first = await memories.recall(body("a", "uid-a"), memobase=memobase)
        second = await memories.recall(body("a", "uid-a"), memobase=memobase)
        return first, second, second.memo

    first, second, memo = asyncio.run(recall_twice())
    assert first is not second
    # Every event still gets the operator's memo (a copy, as kopf makes one per object).
    assert memo["controller"] == "the controller"
    assert memo is not memobase
    assert list(memories.iter_all_memories()) == []


def test_forgetting_an_object_never_seen_is_harmless() -> None:
    memories = EventMemories()
    asyncio.run(memories.forget(body("b", "uid-b")))
    assert list(memories.iter_all_memories()) == []
