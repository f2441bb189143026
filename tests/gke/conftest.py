"""Emulators for the GKE tests, each served from a background thread and always stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, EmulatorThread
from tests.gke.harness import FAST, MakeEmulator


@pytest.fixture
def emulator() -> Iterator[ClusterManagerEmulator]:
    with EmulatorThread(FAST) as served:
        yield served


@pytest.fixture
def make_emulator() -> Iterator[MakeEmulator]:
    """For tests that need their own config; every emulator made is stopped afterwards."""
    threads: list[EmulatorThread] = []

    def make(
        config: EmulatorConfig, clock: Callable[[], float] | None = None
    ) -> ClusterManagerEmulator:
        thread = EmulatorThread(config) if clock is None else EmulatorThread(config, clock=clock)
        served = thread.__enter__()
        threads.append(thread)
        return served

    try:
        yield make
    finally:
        for thread in reversed(threads):
            thread.__exit__(None, None, None)


@pytest.fixture(autouse=True)
def no_emulator_left_running() -> Iterator[None]:
    yield
    left = [t.name for t in threading.enumerate() if t.name == "gke-emulator"]
    assert left == [], "an emulator thread outlived its test"
