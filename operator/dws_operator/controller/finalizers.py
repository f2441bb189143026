"""The operator's finalizer on a TrainingRequest: added before anything is made for the
request, so that its deletion waits for the cleanup, and taken off when the request is
released. Each write is made over the version read and written through to the cache."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dws_operator.controller.cache import Key, KubeCache
from dws_operator.controller.kube import Conflict, Invalid, KubeApi
from dws_operator.controller.pool_operation import CalledOff, Preparation

FINALIZER = "dws-operator.dev/cleanup"


#: Tries to add the finalizer to a request written meanwhile (a conflict each) before
#: the operation's preparation fails (and is tried again by the scheduler).
HOLD_TRIES = 4


class Finalizers:
    def __init__(self, kube: KubeApi, cache: KubeCache) -> None:
        self.kube = kube
        self.cache = cache

    async def hold(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """The request with our finalizer, so that its deletion waits for the cleanup.
        Added only before something is made for it (a pool, a Job): a request that
        waits in line for a GKE operation slot costs the API server no write for it, and
        one deleted while it waits simply goes."""
        metadata = body.get("metadata") or {}
        finalizers = list(metadata.get("finalizers") or [])
        if FINALIZER in finalizers or metadata.get("deletionTimestamp") is not None:
            return body
        return await self.set_finalizers(body, [*finalizers, FINALIZER])

    def holding(self, key: Key) -> Preparation:
        """The preparation of a pool operation made for a request: the finalizer, from
        the request as the cache knows it then; the operation is called off when the
        request is gone or being deleted (nothing was made for it yet)."""

        async def hold() -> None:
            body = self.cache.request(key)
            if body is None:
                raise CalledOff(f"{key[0]}/{key[1]} is gone")
            for tries_left in reversed(range(HOLD_TRIES)):
                try:
                    held = await self.hold(body)
                    break
                except Invalid as refused:
                    # "no new finalizers can be added if the object is being deleted"
                    raise CalledOff(f"{key[0]}/{key[1]}: {refused.reason}") from None
                except Conflict:
                    # Changed since it was read (the request's own passes write its
                    # status meanwhile, each write a new version): read it as it is
                    # and try again.
                    if not tries_left:
                        raise
                    fresh = await self.kube.training_request(*key)
                    if fresh is None:
                        raise CalledOff(f"{key[0]}/{key[1]} is gone") from None
                    self.cache.put_request(fresh)
                    body = fresh
            if FINALIZER not in ((held.get("metadata") or {}).get("finalizers") or []):
                raise CalledOff(f"{key[0]}/{key[1]} could not be held (gone or being deleted)")

        return hold

    async def set_finalizers(
        self, body: Mapping[str, Any], finalizers: list[str]
    ) -> Mapping[str, Any]:
        metadata = body.get("metadata") or {}
        updated = await self.kube.patch_metadata(
            str(metadata["namespace"]),
            str(metadata["name"]),
            # The resourceVersion makes the patch fail (409) rather than overwrite
            # finalizers someone added since this body was read.
            {"finalizers": finalizers, "resourceVersion": metadata.get("resourceVersion")},
        )
        if updated is None:
            return body
        self.cache.put_request(updated)
        return updated
