"""The operator loads only the operator: `dws-operator run` and its controller import
none of the workshop (control plane launcher, GKE emulator, cluster simulator, sandbox)."""

from __future__ import annotations

import json
import subprocess
import sys

#: The dev tooling's packages.
WORKSHOP = ("dws_operator.devcluster", "dws_operator.emulator", "dws_operator.sandbox")

#: What `dws-operator run` loads before it starts: its parser and its controller.
LOAD_RUN = """
import json, sys
from dws_operator.cli import build_parser
build_parser("run")
import dws_operator.cli.run, dws_operator.controller.handlers, dws_operator.controller.runtime
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by_run() -> list[str]:
    # A fresh interpreter: this test process has the workshop loaded by other tests.
    result = subprocess.run(
        [sys.executable, "-c", LOAD_RUN], capture_output=True, text=True, check=True
    )
    modules: list[str] = json.loads(result.stdout)
    return modules


def test_run_loads_no_workshop_module() -> None:
    modules = loaded_by_run()
    assert "dws_operator.controller.runtime" in modules  # it did load the operator
    assert [m for m in modules if m.startswith(WORKSHOP)] == []
    # Nor the other subcommands (each is loaded only when asked for).
    assert [m for m in modules if m.startswith("dws_operator.cli.")] == ["dws_operator.cli.run"]
