"""`dws-operator dev --exit-when-done`: the README's first command, end to end.

Each test looks at one run of the command, a whole sandbox of its own (control plane,
Kueue, JobSet, the GKE emulator, the operator). The runs mostly wait on their simulated
clocks, so the module starts every selected test's run at once, as soon as the first of
them is asked for, and each test waits for its own: the file takes about as long as its
longest run rather than the sum of all four. (`hack/test.sh` gives a file's tests to one
worker, `--dist loadfile`.)
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: A run's hang guard, from its start.
TIMEOUT = 180.0

QUEUED = (
    "apiVersion: dws-operator.dev/v1alpha1\n"
    "kind: TrainingRequest\n"
    "metadata: {name: sandbox-h100-queued}\n"
    "spec:\n"
    "  accelerator: {gpu: {type: nvidia-h100-80gb, nodes: 2}}\n"
    "  provisioning: {mode: QueuedProvisioning, maxRunDuration: 2h}\n"
    "  template:\n"
    "    metadata: {annotations: {dws-operator.dev/sim-duration: 10s}}\n"
    "    spec: {containers: [{name: train, image: example/train:1}]}\n"
)


def queued_manifest(directory: Path) -> list[str]:
    manifest = directory / "queued.yaml"
    manifest.write_text(QUEUED)
    return ["-f", str(manifest)]


def sample(name: str) -> Callable[[Path], list[str]]:
    return lambda directory: ["-f", str(ROOT / "manifests/samples" / name)]


#: Each test's run: its `dws-operator dev` arguments, given the run's own directory.
RUNS: dict[str, Callable[[Path], list[str]]] = {
    "test_dev_runs_the_default_sample_to_completion": lambda directory: [],
    "test_dev_routes_queued_provisioning_through_kueue": queued_manifest,
    "test_dev_runs_the_multislice_sample": sample("tpu-v5p-multislice.yaml"),
    "test_dev_books_the_calendar_sample_and_runs_on_its_block": sample("gpu-h100-calendar.yaml"),
}


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    #: Seconds from its start to its exit.
    elapsed: float
    kubeconfig: Path


class Run:
    """`dws-operator dev --exit-when-done` with its kubeconfig and output in `directory`
    (files, not pipes: nobody reads a run's output while it runs)."""

    def __init__(self, directory: Path, args: list[str]) -> None:
        self.kubeconfig = directory / "kubeconfig"
        self.stdout, self.stderr = directory / "stdout", directory / "stderr"
        command = [sys.executable, "-m", "dws_operator", "dev", "--exit-when-done", *args]
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.began = time.monotonic()
            self.process = subprocess.Popen(
                [*command, "--kubeconfig", str(self.kubeconfig)], stdout=out, stderr=err, text=True
            )

    def wait(self) -> Finished:
        left = self.began + TIMEOUT - time.monotonic()
        try:
            self.process.wait(timeout=max(left, 0.0))
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(
                f"dws-operator dev still running after {TIMEOUT:.0f}s:\n"
                f"{self.stdout.read_text()}{self.stderr.read_text()}"
            ) from None
        elapsed = time.monotonic() - self.began
        return Finished(
            self.process.returncode,
            self.stdout.read_text(),
            self.stderr.read_text(),
            elapsed,
            self.kubeconfig,
        )

    def stop(self) -> None:
        """SIGTERM (the sandbox then removes everything), SIGKILL if that takes long."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class DevRuns:
    """The module's runs, started together on the first `finished` of any."""

    def __init__(self, directory: Path, names: list[str]) -> None:
        self.directory = directory
        self.names = names
        self.runs: dict[str, Run] = {}

    def finished(self, name: str) -> Finished:
        for each in dict.fromkeys([name, *self.names]):
            if each not in self.runs:
                directory = self.directory / each
                directory.mkdir()
                self.runs[each] = Run(directory, RUNS[each](directory))
        return self.runs[name].wait()

    def stop(self) -> None:
        for run in self.runs.values():
            run.stop()


@pytest.fixture(scope="module")
def dev_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevRuns]:
    here = Path(__file__).resolve()
    selected = [item.name for item in request.session.items if item.path == here]
    runs = DevRuns(tmp_path_factory.mktemp("dev"), [n for n in selected if n in RUNS])
    yield runs
    runs.stop()


def test_dev_runs_the_default_sample_to_completion(dev_runs: DevRuns) -> None:
    result = dev_runs.finished("test_dev_runs_the_default_sample_to_completion")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # The emulator creates a slice's Nodes one API call at a time, so the 0.25 s poll may
    # report them in steps ("1 node(s) appeared: 1/4 now", ...); the end states are what count.
    assert "node(s) appeared: 4/4 now" in out, out
    assert "node(s) removed: 0/4 now" in out, out
    for words in (
        "Provisioning",
        "WaitingForCapacity",
        "Running",
        "Succeeded",
        "idle node time after the work ended",
        f"kubeconfig: {result.kubeconfig}",
    ):
        assert words in out, out
    # A newcomer's first run is not greeted by noise: kopf's note that a thread takes no OS
    # signals (the sandbox runs it in one on purpose), or its retries of a CRD whose
    # storage was still initializing (the sandbox waits until it serves).
    assert "OS signals are ignored" not in result.stderr, result.stderr
    assert "storage is (re)initializing" not in result.stderr, result.stderr
    # The queueing the product is built around is there from the first run, and kopf has
    # every CRD it watches (no "Unresolved resources cannot be served").
    assert "Kueue admits the Jobs" in out, out
    assert "without Kueue" not in out, out
    assert "Unresolved resources" not in result.stderr, result.stderr
    print(f"\ndws-operator dev --exit-when-done took {result.elapsed:.0f}s")
    assert result.elapsed < TIMEOUT
    assert not result.kubeconfig.exists()  # everything removed on exit


def test_dev_routes_queued_provisioning_through_kueue(dev_runs: DevRuns) -> None:
    """A GPU QueuedProvisioning request without queueName goes to the sandbox's queue with
    the ProvisioningRequest admission check, gets its nodes and succeeds."""
    result = dev_runs.finished("test_dev_routes_queued_provisioning_through_kueue")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Kueue admits the Jobs" in result.stdout, result.stdout
    out = result.stdout
    assert "node(s) appeared: 2/2 now" in out, out
    assert "Succeeded" in out, out
    assert "node(s) removed: 0/2 now" in out, out


def test_dev_runs_the_multislice_sample(dev_runs: DevRuns) -> None:
    """The README's Multislice command: two v5p slices as one JobSet, both pools to zero."""
    result = dev_runs.finished("test_dev_runs_the_multislice_sample")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Creating node pools dws-llama-v5p-2-slices-" in out, out
    assert "node(s) appeared: 4/4 now" in out, out
    assert "Running on 2 slices of 2 x ct5p-hightpu-4t" in out, out
    assert "JobSet llama-v5p-2-slices succeeded" in out, out
    assert "node(s) removed: 0/4 now" in out, out


def test_dev_books_the_calendar_sample_and_runs_on_its_block(dev_runs: DevRuns) -> None:
    """The sandbox's calendar starts an hour before the sample's block and runs an hour a
    second: the booking is reviewed and approved, delivered at the start, the workload
    runs on the reservation and is stopped before the block's end."""
    result = dev_runs.finished("test_dev_books_the_calendar_sample_and_runs_on_its_block")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for words in (
        "books without spec.approveBooking",
        "booking Approved    Booked 2 VMs of a3-highgpu-8g in us-east5-a",
        "booking Delivered",
        "node(s) appeared: 2/2 now",
        "Running",
        "BlockEnded",
        "node(s) removed: 0/2 now",
    ):
        assert words in out, out
    # Time to capacity counts from the block's delivery, not from the booking.
    waited = float(out.split("time to capacity (operator metrics): ")[1].split("s")[0])
    assert waited < 24 * 3600
