"""A real Prometheus server (the pinned `prometheus` binary, built from its Go module)
that scrapes given targets on 127.0.0.1, and its HTTP query API.

    with PrometheusServer([f"127.0.0.1:{port}"], work_dir) as prometheus:
        prometheus.wait_for("up == 1")
        result = prometheus.query("sum by (phase) (dws_requests)")
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from dws_workshop.devcluster.binaries import find_binaries
from dws_workshop.devcluster.processes import ChildProcess, free_port


class PrometheusError(RuntimeError):
    pass


class PrometheusServer:
    """Prometheus scraping `targets` (host:port, path /metrics) every `interval`."""

    def __init__(
        self, targets: Sequence[str], work_dir: Path, interval: str = "1s", job: str = "dws"
    ) -> None:
        self.work_dir = work_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
        }
        work_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = work_dir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        binary = find_binaries(["prometheus"])["prometheus"]
        self.process = ChildProcess(
            "prometheus",
            [
                str(binary),
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={work_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            work_dir,
        )

    def __enter__(self) -> PrometheusServer:
        self.process.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.exited() is not None:
                raise PrometheusError(f"prometheus exited:\n{self.process.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.process.stop()
        raise PrometheusError(f"prometheus not ready in 60s:\n{self.process.log_tail()}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.process.stop()

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (PromQL errors raise `PrometheusError`)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = json.loads(answer.read())
        except urllib.error.HTTPError as error:
            raise PrometheusError(f"{expr}: {error.read().decode(errors='replace')}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{expr}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The result of `expr` once it is not empty."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result or time.monotonic() > deadline:
                if not result:
                    raise PrometheusError(f"no data for {expr} within {timeout:.0f}s")
                return result
            time.sleep(0.5)
