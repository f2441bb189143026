"""GKE's ClusterManager answered in process, for the virtual tier: every method the
operator calls hands its request to the GKE emulator's own handler (its rules, quota,
faults, operations and call log), with no gRPC between. A refusal raises what the real
client raises for that status. tests/gke/test_in_process.py holds it to the served
emulator behind the real client, call by call."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
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


def _copy(message: Any) -> Any:
    """`message` as the other end of a channel gets it: serialised and read back."""
    return type(message).deserialize(type(message).serialize(message))


def _rpc_error(code: grpc.StatusCode, message: str) -> grpc.aio.AioRpcError:
    """The gRPC error the real client's channel raises for a call ended with `code`;
    the client raises `from_grpc_error` of it, from it (its `response` and `errors`)."""
    return grpc.aio.AioRpcError(
        code,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details=message,
        debug_error_string=f"{code.name}:{message}",
    )


def _snake(name: str) -> str:
    """CreateNodePool -> create_node_pool: the async client's name of a GKE method."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class InProcessGke:
    """The subset of `ClusterManagerAsyncClient` the operator calls (`create_node_pool`,
    `get_operation`, ...: every method the emulator serves), answered by `emulator`.
    The emulator need not be serving; its clock is whatever it was built with.

    A request is taken as the real client takes it (message, dict or field keywords),
    and an answer or error is what it would read off the channel. `retry` is ignored:
    the operator passes None; the library's default retries of reads are not copied.
    """

    def __init__(self, emulator: ClusterManagerEmulator) -> None:
        self.emulator = emulator
        self.transport = _Transport()
        #: Calls begun, by GKE's method name (a call cut off by its deadline included).
        self.calls: list[str] = []
        for name, method in emulator.service_methods().items():
            setattr(
                self,
                _snake(name),
                self._method(name, method.request_type, emulator.handler(method)),
            )

    def _method(
        self,
        name: str,
        request_type: Any,
        handler: Callable[[Any, Any], Awaitable[Any]],
    ) -> Callable[..., Awaitable[Any]]:
        async def call(
            request: Any = None,
            *,
            retry: Any = None,
            timeout: float | None = None,
            metadata: Sequence[tuple[str, str | bytes]] = (),
            **fields: Any,
        ) -> Any:
            # As the real client takes a request: the message, a dict of its fields or
            # the fields as keywords (not both); a copy arrives, as serialising makes one.
            if request is not None and fields:
                raise ValueError(
                    "If the `request` argument is set, then none of "
                    "the individual field arguments should be set."
                )
            if not isinstance(request, request_type):
                request = request_type(request)
            copy = _copy(request)
            for field, value in fields.items():
                setattr(copy, field, value)
            self.calls.append(name)
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for may swallow a
                # cancellation that comes as the call ends, and a stopping operator's
                # task would then go on.
                async with asyncio.timeout(timeout):
                    response = await handler(copy, _Context())
            except _Aborted as aborted:
                failed = _rpc_error(aborted.code, aborted.message)
                raise core_exceptions.from_grpc_error(failed) from failed
            except TimeoutError:
                # The client's deadline passed first: what the real client raises then.
                failed = _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
                raise core_exceptions.from_grpc_error(failed) from failed
            # The caller's own copy, as read off a channel: not the object the
            # emulator's call log holds.
            return _copy(response)

        call.__name__ = _snake(name)
        return call
