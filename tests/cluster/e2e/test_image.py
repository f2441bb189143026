"""The operator image as users get it: built from the Dockerfile (`hack/image.sh`, podman),
checked as a cluster would run it, and run against the sandbox to take one request through."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dws_workshop.devcluster.processes import free_port
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, sim
from tests.polling import eventually

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.image


@pytest.fixture(scope="module")
def image() -> tuple[str, str]:
    """(image, podman wrapper): built, or found in the cache."""
    built = subprocess.run(
        ["bash", str(ROOT / "hack" / "image.sh")], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr
    name, podman = built.stdout.split()
    return name, podman


def run(image: tuple[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """`podman run` of the image with `argv`, read-only root, as a cluster runs it."""
    _, podman = image
    return subprocess.run(
        [podman, "run", "--rm", "--read-only", "--network=host", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


#: Run inside the image (one container: with vfs storage each container copies the image):
#: what a cluster would see of it, one `key=value` per line.
PROBE = """
import importlib.util, os, subprocess
tools = ("dws_workshop", "kubernetes", "pytest", "ruff", "mypy", "build")
print("uid=%d" % os.getuid())
print("dev-tools=" + (",".join(m for m in tools if importlib.util.find_spec(m)) or "none"))
version = subprocess.run(["dws-operator", "--version"], capture_output=True, text=True)
print("version=" + version.stdout.strip())
try:
    open("/x", "w")
    print("root-fs=writable")
except OSError as error:
    print("root-fs=" + error.strerror)
"""


def test_the_image_is_the_product_only(image: tuple[str, str]) -> None:
    name, podman = image
    chart = yaml.safe_load((ROOT / "charts/dws-operator/Chart.yaml").read_text())
    probe = run(image, "--entrypoint", "python", name, "-c", PROBE)
    assert probe.returncode == 0, probe.stderr
    seen = dict(line.split("=", 1) for line in probe.stdout.splitlines())
    assert seen == {
        "uid": "10001",
        "dev-tools": "none",
        "version": f"dws-operator {chart['appVersion']}",
        # A read-only root filesystem (`--read-only`): the operator writes nothing to it.
        "root-fs": "Read-only file system",
    }
    # The image's own entrypoint is the operator's run command.
    config = subprocess.run(
        [podman, "image", "inspect", "--format", "{{json .Config.Entrypoint}}", name],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(config.stdout) == ["dws-operator", "run"]


def test_the_image_takes_a_request_to_succeeded(
    image: tuple[str, str], stack: Stack, tmp_path: Path
) -> None:
    name, podman = image
    scenario = stack(SimScenario(clock_factor=CLOCK), operator=False)
    config = scenario.operator_config
    # The operator runs as uid 10001: it gets a copy of the kubeconfig it may read.
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(scenario.operator_kubeconfig, kubeconfig)
    kubeconfig.chmod(0o644)
    health = free_port()
    container = f"dws-operator-{scenario.namespace}"
    argv = [podman, "run", "-d", "--rm", "--name", container, "--read-only", "--network=host"]
    argv += ["-v", f"{kubeconfig}:/etc/dws/kubeconfig:ro", "-e", "KUBECONFIG=/etc/dws/kubeconfig"]
    for key, value in {
        "DWS_GKE_PROJECT": config.project,
        "DWS_GKE_LOCATION": config.location,
        "DWS_GKE_CLUSTER": config.cluster,
        "DWS_GKE_ENDPOINT": config.gke_endpoint,
        "DWS_KUEUE": "disabled",
        "DWS_NAMESPACES": scenario.namespace,
        "DWS_METRICS_PORT": str(free_port()),
        "DWS_METRICS_ADDRESS": "127.0.0.1",
    }.items():
        argv += ["-e", f"{key}={value}"]
    argv += [name, "--liveness", f"http://127.0.0.1:{health}/healthz"]
    started = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert started.returncode == 0, started.stderr
    try:
        scenario.create(tpu("v6e", "2x2"), template=sim("5s"))
        scenario.wait_phase("Succeeded", timeout=120)
        eventually(scenario.at_zero, timeout=60, what="the pool at zero")
        assert (scenario.condition("Ready") or {}).get("status") == "True"
    finally:
        logs = subprocess.run(
            [podman, "logs", container], capture_output=True, text=True, check=False
        )
        subprocess.run([podman, "rm", "-f", container], capture_output=True, check=False)
    assert "Traceback" not in logs.stdout + logs.stderr
