"""The finalizer added before a pool operation: a request written meanwhile (its own
passes write its status, each a new version) is read again and held, a few times over."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dws_operator.controller.cache import KubeCache
from dws_operator.controller.finalizers import FINALIZER, HOLD_TRIES, Finalizers
from dws_operator.controller.kube import Conflict
from dws_operator.controller.pool_operation import CalledOff

KEY = ("team", "req")


def _request(version: int, finalizers: list[str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "namespace": KEY[0],
        "name": KEY[1],
        "uid": "uid-req",
        "resourceVersion": str(version),
    }
    if finalizers is not None:
        metadata["finalizers"] = finalizers
    return {"apiVersion": "dws-operator.dev/v1alpha1", "metadata": metadata, "spec": {}}


class WrittenMeanwhile:
    """An API server on which the request changes `conflicts` times under each patch."""

    def __init__(self, conflicts: int, gone: bool = False) -> None:
        self.conflicts = conflicts
        self.gone = gone
        self.version = 1
        self.patches: list[str | None] = []

    async def patch_metadata(
        self, namespace: str, name: str, metadata: dict[str, Any]
    ) -> dict[str, Any]:
        self.patches.append(metadata.get("resourceVersion"))
        if self.conflicts:
            self.conflicts -= 1
            self.version += 1
            raise Conflict(409, "Conflict", "the object has been modified")
        self.version += 1
        return _request(self.version, metadata["finalizers"])

    async def training_request(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None if self.gone else _request(self.version)


def _hold(kube: WrittenMeanwhile) -> KubeCache:
    cache = KubeCache()
    cache.put_request(_request(1))
    asyncio.run(Finalizers(kube, cache).holding(KEY)())  # type: ignore[arg-type]
    return cache


def test_a_request_written_between_reads_is_read_again_and_held() -> None:
    kube = WrittenMeanwhile(conflicts=HOLD_TRIES - 1)
    cache = _hold(kube)
    # Each try over the version just read: never over one not seen.
    assert kube.patches == [str(v) for v in range(1, HOLD_TRIES + 1)]
    held = cache.request(KEY)
    assert held is not None
    assert held["metadata"]["finalizers"] == [FINALIZER]


def test_a_request_that_keeps_changing_fails_the_preparation_after_the_last_try() -> None:
    kube = WrittenMeanwhile(conflicts=HOLD_TRIES)
    with pytest.raises(Conflict):
        _hold(kube)
    assert len(kube.patches) == HOLD_TRIES


def test_a_request_gone_when_read_again_calls_the_operation_off() -> None:
    with pytest.raises(CalledOff, match="is gone"):
        _hold(WrittenMeanwhile(conflicts=1, gone=True))
