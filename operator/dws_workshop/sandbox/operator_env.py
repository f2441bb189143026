"""The interpreter the benchmark, the chaos run and the tests start the operator with:
one from a virtualenv holding only the operator's runtime dependencies (`hack/python-env.sh
operator`, made on first use), so the operator runs, and is measured, as its image has
it. The workshop runs from a checkout, so the script is found beside it."""

from __future__ import annotations

import subprocess
from pathlib import Path

#: The checkout this workshop is part of.
CHECKOUT = Path(__file__).resolve().parents[3]


def operator_python() -> str:
    venv = subprocess.run(
        ["bash", str(CHECKOUT / "hack" / "python-env.sh"), "operator"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return str(Path(venv) / "bin" / "python")
