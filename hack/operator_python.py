"""The interpreter the benchmark and the chaos run start the operator with: one from a
virtualenv holding only the operator's runtime dependencies (`hack/python-env.sh
operator`), so the operator runs, and is measured, as its image has it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def operator_python() -> str:
    venv = subprocess.run(
        ["bash", str(ROOT / "hack" / "python-env.sh"), "operator"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return str(Path(venv) / "bin" / "python")
