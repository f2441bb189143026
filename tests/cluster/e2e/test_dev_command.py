"""`dws-operator dev --exit-when-done`: the README's first command, end to end."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def run_dev(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`dws-operator dev --exit-when-done` with its kubeconfig in `tmp_path`."""
    command = [sys.executable, "-m", "dws_operator", "dev", "--exit-when-done", *args]
    return subprocess.run(
        [*command, "--kubeconfig", str(tmp_path / "kubeconfig")],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_dev_runs_the_default_sample_to_completion(tmp_path: Path) -> None:
    began = time.monotonic()
    result = run_dev(tmp_path)
    elapsed = time.monotonic() - began
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
        f"kubeconfig: {tmp_path / 'kubeconfig'}",
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
    print(f"\ndws-operator dev --exit-when-done took {elapsed:.0f}s")
    assert elapsed < 180
    assert not (tmp_path / "kubeconfig").exists()  # everything removed on exit


def test_dev_routes_queued_provisioning_through_kueue(tmp_path: Path) -> None:
    """A GPU QueuedProvisioning request without queueName goes to the sandbox's queue with
    the ProvisioningRequest admission check, gets its nodes and succeeds."""
    manifest = tmp_path / "queued.yaml"
    manifest.write_text(
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
    result = run_dev(tmp_path, "-f", str(manifest))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Kueue admits the Jobs" in result.stdout, result.stdout
    out = result.stdout
    assert "node(s) appeared: 2/2 now" in out, out
    assert "Succeeded" in out, out
    assert "node(s) removed: 0/2 now" in out, out


def test_dev_runs_the_multislice_sample(tmp_path: Path) -> None:
    """The README's Multislice command: two v5p slices as one JobSet, both pools to zero."""
    sample = Path(__file__).resolve().parents[3] / "manifests/samples/tpu-v5p-multislice.yaml"
    result = run_dev(tmp_path, "-f", str(sample))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Creating node pools dws-llama-v5p-2-slices-" in out, out
    assert "node(s) appeared: 4/4 now" in out, out
    assert "Running on 2 slices of 2 x ct5p-hightpu-4t" in out, out
    assert "JobSet llama-v5p-2-slices succeeded" in out, out
    assert "node(s) removed: 0/4 now" in out, out


def test_dev_books_the_calendar_sample_and_runs_on_its_block(tmp_path: Path) -> None:
    """The sandbox's calendar starts an hour before the sample's block and runs an hour a
    second: the booking is reviewed and approved, delivered at the start, the workload
    runs on the reservation and is stopped before the block's end."""
    sample = Path(__file__).resolve().parents[3] / "manifests/samples/gpu-h100-calendar.yaml"
    result = run_dev(tmp_path, "-f", str(sample))
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
