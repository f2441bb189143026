"""`dws-operator dev` on a machine where Kueue and the JobSet controller are not built
yet: it builds exactly those two (not runs without them), says so first, and with
`--without-kueue` builds nothing."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from dws_workshop.devcluster import MissingBinaries
from dws_workshop.sandbox import Sandbox, SandboxOptions


class NotBuilt:
    """A machine without the two binaries, whose build fails (no Go toolchain)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], bool]] = []

    def __call__(self, names: list[str], build: bool = True) -> dict[str, Path]:
        self.calls.append((list(names), build))
        raise MissingBinaries(f"{' '.join(names)}: no Go toolchain here")


def start(options: SandboxOptions) -> tuple[bool, str]:
    out = io.StringIO()
    sandbox = Sandbox(options, out=out)
    api: Any = None  # never reached: no binaries, no Kueue objects
    with contextlib.ExitStack() as stack:
        started = sandbox._start_kueue(stack, api, Path("/nonexistent/kubeconfig"))
    return started, out.getvalue()


def test_a_first_run_builds_kueue_and_jobset_and_says_so() -> None:
    machine = NotBuilt()
    started, said = start(SandboxOptions(binaries=machine))
    assert machine.calls == [(["kueue", "jobset"], False), (["kueue", "jobset"], True)]
    assert said.startswith("dws-operator dev: building Kueue's manager and the JobSet")
    assert "--without-kueue skips them" in said
    # A build that fails says why, and the sandbox goes on without them.
    assert not started
    assert "no Go toolchain here; running without Kueue and JobSet" in said


def test_without_kueue_nothing_is_built() -> None:
    machine = NotBuilt()
    started, said = start(SandboxOptions(binaries=machine, kueue=False))
    assert not started
    assert machine.calls == []
    assert said == "dws-operator dev: running without Kueue and JobSet (--without-kueue)\n"
