"""Raising the operator's stop flag, and saying what a slow stop still waits for.

kopf ends by waiting up to 5 s (a fixed wait in its code) for every task created since it
started, then cancels what is left. A stop should take well under a second: one that
does not is a task nobody stopped, and the log names it rather than leaving 5 s
unexplained."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Collection

log = logging.getLogger(__name__)

#: A stop still running this long after the flag went up is reported.
SLOW_STOP_SECONDS = 2.0


class Stopping:
    """The `ending` kopf's registry calls when kopf stops: raises `flag`, and after
    `after` seconds reports the tasks still running (other than `ignored`, those that
    were there before the operator started: they run it)."""

    def __init__(
        self,
        flag: threading.Event | asyncio.Event,
        ignored: Collection[asyncio.Task[object]],
        after: float = SLOW_STOP_SECONDS,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self.flag = flag
        self.ignored = frozenset(ignored)
        self.after = after
        self._report = report or _warn
        self._timer: asyncio.TimerHandle | None = None

    def __call__(self) -> None:
        self.flag.set()
        if self._timer is None:
            # On the loop's own timer: a stop that ends in time closes the loop, and the
            # report never comes.
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.after, self._still_stopping)

    def _still_stopping(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t not in self.ignored and not t.done()]
        threads = [
            t.name
            for t in threading.enumerate()
            if not t.daemon and t is not threading.current_thread()
        ]
        if tasks or threads:
            self._report(still_running(tasks, threads, self.after))


def still_running(tasks: Collection[asyncio.Task[object]], threads: list[str], after: float) -> str:
    """One line: each task by name and where it waits (its innermost frame)."""
    waits = sorted(f"{task.get_name()} at {_where(task)}" for task in tasks)
    said = f"still stopping after {after:.0f}s: {len(waits)} tasks running"
    if waits:
        said += " (" + "; ".join(waits) + ")"
    if threads:
        said += f", threads {', '.join(sorted(threads))}"
    return said


def _where(task: asyncio.Task[object]) -> str:
    frames = task.get_stack()
    if not frames:
        return repr(task.get_coro())
    frame = frames[-1]
    return f"{frame.f_code.co_qualname} ({frame.f_code.co_filename}:{frame.f_lineno})"


def _warn(message: str) -> None:
    log.warning("%s", message)
