"""Every sample manifest is accepted by the API server, applied with the real kubectl."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.conftest import Kubectl

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "manifests" / "samples").glob("*.yaml"))

pytestmark = pytest.mark.usefixtures("training_request_crd")


def test_there_are_samples() -> None:
    assert len(SAMPLES) >= 2


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_sample_is_accepted(kubectl: Kubectl, namespace: str, sample: Path) -> None:
    result = kubectl("apply", "-n", namespace, "-f", str(sample))
    assert result.returncode == 0, result.stderr
    assert "created" in result.stdout
    shown = kubectl("get", "-n", namespace, "-f", str(sample), "-o", "name")
    assert shown.stdout.strip().startswith("trainingrequest.dws-operator.dev/")
