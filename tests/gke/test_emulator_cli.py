"""`dws-operator emulator`: serves in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest
import requests

from dws_operator.gke import connect
from dws_workshop.cli import emulator as emulator_cli
from dws_workshop.emulator import DEFAULT_CLUSTER, EmulatorConfig, EmulatorThread

# The command is registered in dws_operator.cli by module name; this drives the module the
# same way `dws-operator emulator ...` will, through its own register() and run().
SCRIPT = """
import argparse, sys
from dws_workshop.cli import emulator
parser = argparse.ArgumentParser(prog="dws-operator")
emulator.register(parser.add_subparsers(dest="command", required=True))
args = parser.parse_args(["emulator", *sys.argv[1:]])
sys.exit(args.run(args))
"""


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dws-operator")
    emulator_cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["emulator", *argv])


class Lines:
    """The process's stdout, line by line, each read bounded in time."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        stream = process.stdout
        assert stream is not None
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)

    def next(self, timeout: float = 120.0) -> str:
        # A hang guard: under a loaded CI run, a fresh interpreter took over 30 s to print.
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output from the emulator within {timeout}s") from None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serves_until_signalled(tmp_path: Path, signum: signal.Signals) -> None:
    config = tmp_path / "emulator.yaml"
    config.write_text("operation_latency_seconds: 0.01\n")
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "--port", "0", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        lines = Lines(process)
        first = lines.next()
        assert first.startswith("serving google.container.v1.ClusterManager on 127.0.0.1:")
        endpoint = first.split(" on ")[1].strip()
        second = lines.next()
        assert second.startswith("serving Compute Engine resource policies on http://127.0.0.1:")
        compute_endpoint = second.split(" on ")[1].strip()
        assert lines.next().strip() == f"cluster {DEFAULT_CLUSTER}"
        assert lines.next().strip() == f"export DWS_GKE_ENDPOINT={endpoint}"
        assert lines.next().strip() == f"export DWS_COMPUTE_ENDPOINT={compute_endpoint}"

        async def ask() -> str:
            async with connect(endpoint) as api:
                cluster = await api.get_cluster(name=DEFAULT_CLUSTER)
            return cluster.name

        assert asyncio.run(ask()) == "sandbox"
        assert listed_policies(compute_endpoint) == []
        process.send_signal(signum)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_serve_stops_on_its_event(capsys: pytest.CaptureFixture[str]) -> None:
    async def main() -> tuple[int, float]:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, stop.set)
        started = time.monotonic()
        status = await emulator_cli.serve(EmulatorConfig(), stop=stop)
        return status, time.monotonic() - started

    status, took = asyncio.run(main())
    assert status == 0
    assert 0.2 <= took < 10
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("serving google.container.v1.ClusterManager on 127.0.0.1:")
    assert out[1].startswith("serving Compute Engine resource policies on http://127.0.0.1:")
    assert out[-2].startswith("export DWS_GKE_ENDPOINT=127.0.0.1:")
    assert out[-1].startswith("export DWS_COMPUTE_ENDPOINT=http://127.0.0.1:")


def test_arguments() -> None:
    args = parse("--port", "8470", "--compute-port", "8471", "--config", "faults.yaml")
    assert (args.port, args.compute_port, args.host, args.config) == (
        8470,
        8471,
        "127.0.0.1",
        Path("faults.yaml"),
    )
    assert args.run is emulator_cli.run
    assert (parse().port, parse().compute_port) == (0, 0)


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        (None, "No such file"),
        ("faults: [unclosed", "while parsing"),
        ("faults:\n  CreateNodePool:\n    error_rate: 2\n", "error_rate"),
    ],
)
def test_bad_config_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, complaint: str
) -> None:
    config = tmp_path / "emulator.yaml"
    if content is not None:
        config.write_text(content)
    assert emulator_cli.run(parse("--config", str(config))) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"dws-operator emulator: --config ({config}: ")
    assert complaint in lines[0]


def test_taken_port_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with EmulatorThread() as running:
        status = emulator_cli.run(parse("--port", str(running.port)))
    assert status == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"dws-operator emulator: --port (cannot bind 127.0.0.1:{running.port}")


def test_taken_compute_port_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with EmulatorThread() as running:
        taken = running.compute.port
        status = emulator_cli.run(parse("--compute-port", str(taken)))
        # The first emulator is untouched: its Compute API still answers.
        assert listed_policies(running.compute_endpoint) == []
    assert status == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"dws-operator emulator: --compute-port (cannot bind 127.0.0.1:{taken}")


def listed_policies(compute_endpoint: str) -> list[object]:
    """The resource policies the Compute API at `compute_endpoint` lists in the sandbox's
    region (resourcePolicies.list, which the operator does not call)."""
    url = f"{compute_endpoint}/compute/v1/projects/dws-sandbox/regions/us-east5/resourcePolicies"
    answer = requests.get(url, timeout=10)
    assert answer.status_code == 200, answer.text
    items: list[object] = answer.json()["items"]
    return items
