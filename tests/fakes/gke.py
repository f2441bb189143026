"""GKE's ClusterManager answered in process, for the virtual tier: every method the
operator calls hands its request to the GKE emulator's own handler (its rules, quota,
faults, operations and call log), with no gRPC between. A refusal raises what the real
client raises for that status. tests/gke/test_in_process.py holds it to the served
emulator behind the real client, call by call."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc
from google.api_core import exceptions as core_exceptions

from dws_workshop.emulator import ClusterManagerEmulator

__all__ = ["InProcessGke"]

PEER = "in-process"


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class _Context:
    """The part of a gRPC servicer context the emulator's handlers use."""

    def peer(self) -> str:
        return PEER

    async def abort(self, code: grpc.StatusCode, message: str) -> NoReturn:
        raise _Aborted(code, message)


class _Transport:
    async def close(self) -> None:
        return None


def _snake(name: str) -> str:
    """CreateNodePool -> create_node_pool: the async client's name of a GKE method."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class InProcessGke:
    """The subset of `ClusterManagerAsyncClient` the operator calls (`create_node_pool`,
    `get_operation`, ...: every method the emulator serves), answered by `emulator`.
    The emulator need not be serving; its clock is whatever it was built with."""

    def __init__(self, emulator: ClusterManagerEmulator) -> None:
        self.emulator = emulator
        self.transport = _Transport()
        #: Calls begun, by GKE's method name (a call cut off by its deadline included).
        self.calls: list[str] = []
        for name, method in emulator.service_methods().items():
            setattr(self, _snake(name), self._method(name, emulator.handler(method)))

    def _method(
        self, name: str, handler: Callable[[Any, Any], Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        async def call(
            request: Any = None, *, retry: Any = None, timeout: float | None = None
        ) -> Any:
            self.calls.append(name)
            try:
                # The request as it would arrive: a copy, as serialising it makes one.
                copy = type(request).deserialize(type(request).serialize(request))
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for may swallow a
                # cancellation that comes as the call ends, and a stopping operator's
                # task would then go on.
                async with asyncio.timeout(timeout):
                    return await handler(copy, _Context())
            except _Aborted as aborted:
                raise core_exceptions.from_grpc_status(aborted.code, aborted.message) from None
            except TimeoutError:
                # The client's deadline passed first: what the real client raises then.
                raise core_exceptions.DeadlineExceeded("Deadline Exceeded") from None

        call.__name__ = _snake(name)
        return call
