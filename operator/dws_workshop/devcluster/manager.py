"""A controller-runtime manager binary (Kueue's, JobSet's) as a child process of a devcluster.

What such managers share here: a work directory swept like the devcluster's when its
owner was killed, a throw-away serving certificate for the webhook server they start
(registered with the API server or not), health probes on a free 127.0.0.1 port, and a start
that returns once both /healthz and /readyz answer 200, or fails with the manager's log
as soon as it exits. Subclasses write their configuration and say how to run the binary.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from dws_workshop.devcluster import cluster
from dws_workshop.devcluster.certs import create_pki
from dws_workshop.devcluster.processes import ChildProcess, free_port

OWNER_FILE = cluster.OWNER_FILE


class ManagerError(RuntimeError):
    """A manager could not be started; the message carries its log."""


class ManagerProcess:
    """One manager, bound to 127.0.0.1, stopped with the context or with its parent."""

    #: The child's name: its log file, work directory and messages carry it.
    name: ClassVar[str]
    #: Raised when the manager does not come up.
    error: ClassVar[type[ManagerError]] = ManagerError

    def __init__(self, kubeconfig: Path, binary: Path, startup_timeout: float) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.binary = binary
        self.startup_timeout = startup_timeout
        cluster.remove_stale_workdirs()
        # The devcluster's prefix: its stale-directory sweep covers ours.
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{cluster.WORKDIR_PREFIX}{self.name}-"))
        (self.workdir / OWNER_FILE).write_text(str(os.getpid()))
        self.config_path = self.workdir / f"{self.name}-config.yaml"
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.webhook_port = free_port()
        self.startup_seconds = 0.0
        #: The CA of the serving certificate (`serving_certificate`), for a webhook
        #: configuration's caBundle.
        self.ca_cert: Path | None = None
        self._child: ChildProcess | None = None

    # -- what a subclass provides ----------------------------------------------------

    def _write_files(self) -> None:
        """Writes the configuration (and certificates) the manager reads at start."""
        raise NotImplementedError

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _exit_hint(self) -> str:
        """Appended to the error when the manager exits during start-up."""
        return ""

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.health_port}"

    def log_tail(self, lines: int = 40) -> str:
        return self._child.log_tail(lines) if self._child else ""

    def start(self) -> None:
        began = time.monotonic()
        try:
            self._write_files()
            self._child = ChildProcess(self.name, self._argv(), self.workdir)
            self._child.start()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began

    def stop(self) -> None:
        self._stop_child()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _stop_child(self) -> None:
        if self._child is not None:
            self._child.stop()
            self._child = None

    # -- helpers for subclasses ------------------------------------------------------

    def serving_certificate(self, directory: Path) -> Path:
        """`directory` with tls.crt and tls.key for 127.0.0.1, as controller-runtime's
        webhook and metrics servers read them."""
        pki = create_pki(self.workdir / "pki")
        self.ca_cert = pki.ca_cert
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pki.serving_cert, directory / "tls.crt")
        shutil.copyfile(pki.serving_key, directory / "tls.key")
        return directory

    # -- readiness -------------------------------------------------------------------

    def _probe(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"{self.health_url}{path}", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def ready(self) -> bool:
        """Both of the manager's probes (healthz, readyz) answer 200."""
        return self._probe("/healthz") and self._probe("/readyz")

    def _wait_ready(self) -> None:
        child = self._child
        if child is None:
            raise self.error(f"the {self.name} manager has not been started")
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            status = child.exited()
            if status is not None:
                raise self.error(
                    f"{self.name} exited with status {status} during start-up:\n"
                    f"{child.log_tail(40)}{self._exit_hint()}"
                )
            if self.ready():
                return
            time.sleep(0.1)
        raise self.error(
            f"{self.name} not ready after {self.startup_timeout:.0f}s:\n{child.log_tail(40)}"
        )
