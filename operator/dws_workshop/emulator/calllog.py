"""The call log both emulators keep (GKE's gRPC API and Compute's REST API): every
request as the emulator answered it, in order, read and written under its lock."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Generic, Protocol, TypeVar


class _Call(Protocol):
    @property
    def method(self) -> str: ...


C = TypeVar("C", bound=_Call)


class CallLog(Generic[C]):
    """The emulator's calls; its methods take the emulator's (reentrant) lock."""

    def __init__(self, lock: threading.RLock) -> None:
        self._log_lock = lock
        self._calls: list[C] = []

    def record(self, call: C) -> None:
        with self._log_lock:
            self._calls.append(call)

    @property
    def calls(self) -> list[C]:
        with self._log_lock:
            return list(self._calls)

    def calls_for(self, method: str) -> list[C]:
        with self._log_lock:
            return [c for c in self._calls if c.method == method]

    def call_counts(self) -> Counter[str]:
        with self._log_lock:
            return Counter(c.method for c in self._calls)

    def clear_calls(self) -> None:
        with self._log_lock:
            self._calls.clear()
