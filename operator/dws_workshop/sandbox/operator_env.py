"""The interpreter the benchmark, the chaos run and the tests start the operator with:
one from a virtualenv holding only the operator's runtime dependencies (`hack/python-env.sh
operator`, made on first use), so the operator runs, and is measured, as its image has
it. The workshop runs from a checkout, so the script is found beside it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from dws_workshop.devcluster.processes import free_port

#: The checkout this workshop is part of.
CHECKOUT = Path(__file__).resolve().parents[3]


def metrics_env() -> dict[str, str]:
    """Settings for an operator process started beside others on this machine: its
    /metrics on a free port of 127.0.0.1 (the default, 8081 on every interface, would
    be taken by the first of them)."""
    return {"DWS_METRICS_PORT": str(free_port()), "DWS_METRICS_ADDRESS": "127.0.0.1"}


def operator_python() -> str:
    venv = subprocess.run(
        ["bash", str(CHECKOUT / "hack" / "python-env.sh"), "operator"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return str(Path(venv) / "bin" / "python")
