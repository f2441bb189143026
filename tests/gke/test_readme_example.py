"""The README's emulator example runs as printed, against a live emulator."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from dws_workshop.emulator import EmulatorThread
from tests.gke.harness import FAST

README = Path(__file__).resolve().parents[2] / "README.md"


def example() -> str:
    text = README.read_text()
    match = re.search(
        r"<!-- emulator-example -->\n```python\n(.*?)```\n<!-- /emulator-example -->", text, re.S
    )
    assert match, "README lost its emulator example"
    return match.group(1)


def test_readme_example_creates_a_pool() -> None:
    code = example()
    assert '"127.0.0.1:8470"' in code
    with EmulatorThread(FAST) as emulator:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code.replace("127.0.0.1:8470", emulator.endpoint), "README", "exec"), {})
        assert out.getvalue().strip() == "demo-l4 RUNNING g2-standard-4"
        assert len(emulator.calls_for("CreateNodePool")) == 1
