"""The running operator's background loops' keeping: each supervised (started again
after a bug ends it), and the C heap handed back to the system now and then."""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

#: Pause before a background loop that failed is started again.
RESTART_SECONDS = 5.0

#: How often memory freed after a burst is handed back to the system.
TRIM_SECONDS = 60.0


async def return_freed_heap() -> None:
    """Hand memory freed on the C heap back to the system now and then. A burst (a
    thousand requests, their JSON answers and watch events) leaves glibc's heap full of
    free holes that it keeps by default: ~8 MiB at 1,000 requests, measured. Only where
    the C library is glibc (the operator image's); elsewhere this loop only waits."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        await asyncio.Event().wait()  # nothing to do, for the operator's life
        return
    while True:
        await asyncio.sleep(TRIM_SECONDS)
        trim(0)


async def supervised(name: str, loop: Callable[[], Awaitable[None]]) -> None:
    """Run `loop` for the operator's life: a bug that ends it is logged and the loop
    starts again after a pause, rather than leaving the operator half alive."""
    while True:
        try:
            await loop()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s stopped; starting it again in %.0fs", name, RESTART_SECONDS)
        await asyncio.sleep(RESTART_SECONDS)
