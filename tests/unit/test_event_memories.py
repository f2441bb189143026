"""kopf's per-object memories are not kept: the operator's state is its cache."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import kopf
import pytest
from kopf._core.reactor.inventory import ResourceMemories

from dws_operator.controller.config import OperatorConfig
from dws_operator.controller.handlers import EventMemories
from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.controller.runner import _reconcile


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


def test_the_override_takes_what_kopf_passes() -> None:
    """kopf's memories are not a public API: a release that changes how it calls
    `recall` must fail here, not make the operator keep (or lose) memories unseen."""
    ours = inspect.signature(EventMemories.recall).parameters
    theirs = inspect.signature(ResourceMemories.recall).parameters
    assert list(ours) == list(theirs)
    assert [p.kind for p in ours.values()] == [p.kind for p in theirs.values()]
    assert [p.default for p in ours.values()] == [p.default for p in theirs.values()]


def test_the_operator_hands_kopf_these_memories(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without them kopf keeps its own, one per object, and nothing else fails."""
    passed: dict[str, Any] = {}

    async def operator(**kwargs: Any) -> None:
        passed.update(kwargs)

    monkeypatch.setattr(kopf, "operator", operator)
    config = OperatorConfig(project="p", location="us-east5", cluster="c")
    asyncio.run(_reconcile(config, None, None, None, None, OperatorMetrics()))
    assert type(passed["memories"]) is EventMemories
