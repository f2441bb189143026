"""Child processes of a local control plane that cannot outlive their parent."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


#: util-linux's `setpriv` sets the death signal and execs the program: the child then
#: runs no Python between fork and exec, so Popen can use vfork, and fork handlers of
#: libraries in this process (gRPC's, when it serves the emulator) never run in it. With
#: a `preexec_fn` they did, and a child once died there before exec ("epoll_wait error:
#: Bad file descriptor").
_SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None


def _with_death_signal(argv: Sequence[str]) -> tuple[list[str], bool]:
    """The command line that dies with its parent, and whether a `preexec_fn` is still
    needed for it (no setpriv here)."""
    if _SETPRIV is not None:
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv], False
    return list(argv), True


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: kill the child when the parent dies, even by SIGKILL.

    SIGKILL, not SIGTERM: with the parent gone nobody can escalate, and a server in a
    graceful shutdown (kube-apiserver waiting on a dead etcd) could linger for minutes.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ChildProcess:
    """One server process with its output in a log file, stopped with SIGTERM then SIGKILL."""

    def __init__(
        self, name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self._env = env
        self._log: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> None:
        """Start the process; started again (after it ended), its log goes on."""
        self._log = self.log_path.open("ab" if self._process is not None else "wb")
        argv, needs_preexec = _with_death_signal(self.argv)
        self._process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(self._env or {})},
            preexec_fn=_die_with_parent if needs_preexec else None,  # noqa: PLW1509
            start_new_session=True,
        )

    def exited(self) -> int | None:
        """The exit status if the process has ended, else None."""
        return None if self._process is None else self._process.poll()

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def kill(self, timeout: float = 10.0) -> bool:
        """SIGKILL, as a crash or an OOM kill would end it: no clean-up of any kind.
        True when a running process was killed (False: it had ended already)."""
        process = self._process
        killed = False
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
                killed = True
            process.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        return killed

    def stop(self, timeout: float = 10.0) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
