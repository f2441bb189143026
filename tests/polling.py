"""Waiting for a condition in tests: poll, and fail with what was awaited.

A wait's timeout is a hang guard, not a measure: a passing test waits only as long as the
condition takes, so the guard is generous (a loaded 2-core CI runner has taken over 30 s
for what takes 2 s alone). A test that measures time moves a clock of its own instead."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: How long a wait may last before the test fails as hung.
HANG_GUARD = 120.0


def eventually(probe: Callable[[], T | None], timeout: float = HANG_GUARD, what: str = "") -> T:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or probe}: {last!r}")


def never(probe: Callable[[], object], duration: float, what: str) -> None:
    """Fail as soon as `probe` returns something truthy within `duration` seconds: for
    what must not happen, where no event says the chance for it is over."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        seen = probe()
        assert not seen, f"{what}: {seen!r}"
        time.sleep(0.1)


async def until(
    probe: Callable[[], Awaitable[T | None]], timeout: float = HANG_GUARD, what: str = ""
) -> T:
    """`eventually` for a coroutine: await `probe` until it answers something truthy."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or probe}: {last!r}")
