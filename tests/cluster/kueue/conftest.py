"""Fixtures for tests against the real Kueue manager (pinned binary) on the devcluster."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s

from dws_operator.kueue_objects import (
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    PLURALS,
    QueueSetup,
    kueue_objects,
)
from dws_workshop.devcluster.kubeerrors import NotFound, typed_errors
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects

T = TypeVar("T")

#: Upper bound for anything Kueue does in reaction to one change (it usually takes < 1 s).
KUEUE_TIMEOUT = 30.0


def wait_for(
    probe: Callable[[], T | None],
    what: str,
    manager: KueueManager | None = None,
    timeout: float = KUEUE_TIMEOUT,
) -> T:
    """Poll `probe` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            log = f"\n--- kueue log tail ---\n{manager.log_tail(30)}" if manager else ""
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{log}")
        time.sleep(0.2)


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def is_true(obj: dict[str, Any] | None, kind: str) -> bool:
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


@pytest.fixture
def apply_queue(api: k8s.ApiClient) -> Iterator[Callable[[QueueSetup], list[dict[str, Any]]]]:
    """Applies a QueueSetup's Kueue objects; deletes its cluster-scoped ones afterwards."""
    custom = k8s.CustomObjectsApi(api)
    applied: list[dict[str, Any]] = []

    def apply(setup: QueueSetup) -> list[dict[str, Any]]:
        objects = kueue_objects(setup)
        applied.extend(objects)
        return apply_kueue_objects(api, objects)

    yield apply
    for obj in reversed(applied):
        meta = obj["metadata"]
        if "namespace" in meta:
            continue  # goes with the test's namespace
        with contextlib.suppress(NotFound), typed_errors():
            custom.delete_cluster_custom_object(
                KUEUE_GROUP, KUEUE_API_VERSION, PLURALS[obj["kind"]], meta["name"]
            )
