"""The operator is only the operator: its distribution carries none of the workshop
(control plane launcher, GKE emulator, cluster simulator, sandbox) nor its libraries, and
`dws-operator run` and its controller import none of it."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The dev tooling's package.
WORKSHOP = ("dws_workshop",)

#: The workshop's own libraries: the operator must not need them.
WORKSHOP_LIBRARIES = ("kubernetes", "cryptography")

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


def test_the_wheel_carries_the_operator_and_not_the_workshop(tmp_path: Path) -> None:
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*build, "--wheel-dir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("dws_operator-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        requires = Parser().parsestr(archive.read(metadata).decode()).get_all("Requires-Dist")
    packages = {name.split("/", 1)[0] for name in names if name.endswith(".py")}
    assert packages == {"dws_operator"}
    assert "dws_operator/controller/runtime.py" in names
    # The workshop's libraries only with the extra that asks for them.
    for library in WORKSHOP_LIBRARIES:
        needs = [r for r in requires or [] if r.split(">")[0].split("=")[0].strip() == library]
        assert needs != [], library
        assert all('extra == "workshop"' in r for r in needs), needs


def test_workshop_commands_say_where_they_run_when_the_workshop_is_absent() -> None:
    # An interpreter that cannot import the workshop, as the operator's image.
    def without_workshop(*argv: str) -> subprocess.CompletedProcess[str]:
        hide = "import sys; sys.modules['dws_workshop'] = None; "
        call = f"from dws_operator.cli import main; main({list(argv)!r})"
        return subprocess.run(
            [sys.executable, "-c", hide + call], capture_output=True, text=True, check=False
        )

    result = without_workshop("dev")
    assert result.returncode == 2
    assert "dev is a workshop command" in result.stderr
    assert "bash hack/run.sh dev" in result.stderr
    listed = without_workshop("--help")
    assert listed.returncode == 0
    assert "{plan,crd,run}" in listed.stdout
