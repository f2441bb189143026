"""What a module under test asks `asyncio.sleep` for: recorded, or answered by the test.

The module's `asyncio` is swapped for a copy whose `sleep` is the test's, so nothing
else sleeping in the process (the test's own loop, other modules) is touched."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import ModuleType, SimpleNamespace

import pytest


def replace_sleep(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, sleep: Callable[[float], Awaitable[None]]
) -> None:
    """`module`'s `asyncio.sleep` is `sleep` for the rest of the test."""
    monkeypatch.setattr(module, "asyncio", SimpleNamespace(**{**vars(asyncio), "sleep": sleep}))


def recorded_sleeps(
    monkeypatch: pytest.MonkeyPatch,
    module: ModuleType,
    then: Callable[[list[float]], None] | None = None,
) -> list[float]:
    """The pauses `module` asks for (each still taken), in order; `then` is called with
    them after each is asked for."""
    pauses: list[float] = []
    real = asyncio.sleep

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if then is not None:
            then(pauses)
        await real(seconds)

    replace_sleep(monkeypatch, module, sleep)
    return pauses
